"""The synchronous core of one session: every read and mutation over its directory.

SPEC §1: the lost-marker race comes from several components rewriting node
files unlocked. The cure is ownership: one owner per session (the session
actor) through which every append, metadata merge, head move and rewind is
serialised, plus a cross-process lock for owners in other processes. This
module is that owner's body, as plain synchronous code: the actor holds one
:class:`SessionCore` per session and calls each public method inside one
worker-thread hop (``run_durable``), so **each public mutation is one sync
call that does all of its file work**.

Contract of every mutation:

1. take ``<sid>/.lock`` (:mod:`store._lock`);
2. replay a journal another owner left, adopting its records, then re-check
   the fingerprint and rebuild the index if someone else wrote;
3. validate everything before touching anything (a refused request changes
   nothing);
4. append one journal record holding every file it changes (one flush),
   then install those files unsynced, all through
   :class:`~store._durable.DurableFiles`;
5. update the index and meta in memory, and record the new fingerprint.

This module holds the rules of each mutation (what it validates, what
it writes) and the opening of a session. The order of the steps above,
the lock and the checkpoint are :mod:`store._session_owner`'s; the index,
the meta.json cache and every read :mod:`store._session_reads`'s (the
bases of :class:`SessionCore`, in that order). The journal's side of
steps 2 and 4 and of the checkpoint (its stamps, adoption, bounds) is
:class:`~store._session_journal.SessionJournal`, its record format
:mod:`store._journal`.

Reads re-check the fingerprint (without the lock) and answer from the index.

``updated_at`` moves only on an append; a metadata merge touches only the
node files it names; node files a merge or rewind rewrites are re-read from
disk under the lock, never taken from the cache, so even a foreign write the
fingerprint missed cannot be overwritten with stale metadata.

For the owner: open with ``await run_durable(SessionCore.open, state,
sid)``, call every method (reads too: a stale index reloads from disk)
through ``run_durable`` one at a time, call :meth:`SessionCore.retire_journals`
(the checkpoint) when the mailbox is idle and :meth:`SessionCore.close` when
passivating.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._durable import DurableFiles
from ._errors import (
    AppendConflictError,
    FutureTimestampError,
    InvalidNodeError,
    NodeNotFoundError,
    SessionExistsError,
    SessionNotFoundError,
    StoreError,
    SummaryHeadError,
)
from ._format import check_value, encode_meta, encode_node, encode_with_metadata, node_filename
from ._git_exclude import keep_out_of_git
from ._ids import validate_id, validate_name, validate_new_id
from ._index import HISTORY, META
from ._journal import ABSENT, JournalEntry, digest
from ._links import refuse_session_alias
from ._log_recovery import dead_sessions, discard_dead
from ._message import append_conflicts, check_metadata_keys, message_to_node, node_to_message
from ._node import ROOT, Node
from ._options import SessionOptions
from ._runtime_log import RuntimeLog
from ._session_owner import SessionOwner
from ._session_reads import DEFAULTS, SessionStatistics
from ._sessions import SESSIONS, missing_meta
from ._walk import absorbed_covers, check_new_node, rewind_ids

__all__ = [
    "CLOCK_SKEW",
    "AppendedTurn",
    "SessionCore",
    "SessionStatistics",
    "install_staged_session",
]


# How far ahead of this clock a turn's own time may be: another machine's
# clock that exports the conversation may run ahead by seconds, not by hours.
CLOCK_SKEW = 60.0


@dataclass(frozen=True)
class AppendedTurn:
    """What an append did: the turn's message view, and whether this call created it.

    ``created`` is False when the message's own id was already the same turn
    in the session (a retry, or a redelivery after a crash): nothing was written.
    """

    message: dict[str, Any]
    created: bool


class SessionCore(SessionOwner):
    """One session directory, owned: see the module docstring for the contract.

    Not thread-safe by design: its owner (the actor) calls one method at a
    time. Create with :meth:`create` or :meth:`open`, which recover the
    directory (temp files, journals) before loading the index.
    """

    # -- opening -----------------------------------------------------------

    @classmethod
    def create(
        cls,
        state_dir: str | os.PathLike[str],
        session: str | None = None,
        *,
        title: str = "",
        options: SessionOptions = DEFAULTS,
    ) -> SessionCore:
        """Create a new, empty session and return its owner; SessionExistsError if taken."""
        sid = validate_new_id(session, "session id") if session is not None else secrets.token_hex(6)
        core = cls(state_dir, sid, options=options)
        validate_name(title, "title", core.session)
        core._files.make_dirs(os.path.join(core.directory, HISTORY))
        now = core._clock()
        meta = {"id": sid, "title": title, "created_at": now, "updated_at": now, "head_id": None}
        if os.path.exists(core._path(META)):  # before a lock its owner may hold for long
            raise SessionExistsError(sid)
        keep_out_of_git(core.directory, core.state_dir, core._files)  # before our first file
        with core._holding(), core._lock:
            if not core._files.create_exclusive(core._path(META), encode_meta(meta)):
                raise SessionExistsError(sid)
            # a dead runtime's records under this id are of a deleted namesake
            core._journal.discard_dead_owners()
            core._recover_locked()
        return core

    @classmethod
    def open(
        cls,
        state_dir: str | os.PathLike[str],
        session: str,
        *,
        options: SessionOptions = DEFAULTS,
    ) -> SessionCore:
        """Open an existing session: clean crash leftovers, replay journals, load the index.

        Every mutation waits at most ``options.lock_timeout`` seconds for
        ``<sid>/.lock`` (``SessionLockTimeoutError``; None waits forever).
        With a runtime ``options.log`` the lock is taken here and held until
        the next checkpoint (:meth:`retire_journals`, :meth:`close`), then
        again at the next mutation (see :mod:`store._runtime_log`).
        """
        core = cls(state_dir, session, options=options)
        if not os.path.isfile(core._path(META)):
            sessions_dir = os.path.join(core.state_dir, SESSIONS)
            raise missing_meta(sessions_dir, core.session) or SessionNotFoundError(
                core.session, core._rel)
        refuse_session_alias(os.path.join(core.state_dir, SESSIONS), core.session)
        keep_out_of_git(core.directory, core.state_dir, core._files)  # before our first file
        with core._holding(), core._lock:
            core._recover_locked()
        return core

    # -- mutations -------------------------------------------------------------

    def _check_writable(self) -> None:
        """New turns only in a session whose id memory can cite (see :mod:`store._ids`)."""
        if not self._citable:
            validate_new_id(self.session, "session id")
            self._citable = True

    def append(self, message: Mapping[str, Any], *,
               created_at: float | None = None) -> dict[str, Any]:
        """Append one turn (a message dict); returns its message view. SPEC §4 append.

        Idempotent by client id: see :meth:`append_turn`.
        """
        return self.append_turn(message, created_at=created_at).message

    def append_turn(self, message: Mapping[str, Any], *,
                    created_at: float | None = None) -> AppendedTurn:
        """Append one turn, or find it already there if the message's own id names it.

        ``created_at`` (seconds since the epoch) is the turn's own time, for
        history imported from elsewhere; it takes the place of the message's
        ``timestamp``, and without either the turn is stamped now. Either must
        be a finite number >= 0 at most :data:`CLOCK_SKEW` seconds ahead of this
        core's clock (:class:`~store._errors.FutureTimestampError` otherwise),
        also on a repeat: a request is valid or not whatever the session holds.
        A repeat keeps the stored time (times are not part of what makes a
        repeat the same turn).

        A message with an ``id`` the session already holds is a repeat (a
        client retry, a redelivery after a crash that came after the write):
        if it is the same turn (:data:`~store._message.APPEND_IDENTITY`:
        role, content, caller, and the predecessor when the message names
        one) the existing node's view is returned and nothing is written
        (``updated_at`` and the head stay); otherwise
        :class:`~store._errors.AppendConflictError` names the session, the
        node and the fields. Without an ``id`` a fresh one is drawn: such an
        append is new every time, so a retry of it appends again.

        Markers (``memory_written_<provider>`` keys) are never stored from a
        message: only the ledger's marker merge sets them, after the batch is
        durably in memory (SPEC §6.4); a cloned or forged one would hide the
        turn and its branch from the ledger for ever. Metadata is not part of
        the repeat comparison either, so a repeat that carries the stored
        node's markers is still the same turn.
        """
        self._check_writable()
        raw_id = message.get("id")
        node_id = validate_new_id(raw_id, "node id", self.session) if raw_id else secrets.token_hex(6)
        if created_at is not None:
            message = {**message, "timestamp": created_at}
        self._check_turn_time(message.get("timestamp"), node_id)
        with self._mutation():
            existing = self._index.nodes.get(node_id) if raw_id else None
            if existing is not None:
                requested = message_to_node(
                    message, self.session, node_id=node_id, seq=existing.seq,
                    now=existing.created_at, default_predecessor=existing.predecessor,
                )
                conflicts = append_conflicts(existing, requested)
                if conflicts:
                    raise AppendConflictError(self.session, node_id, conflicts)
                return AppendedTurn(node_to_message(existing, self.session), created=False)
            node = message_to_node(
                message, self.session, node_id=node_id, seq=self._index.max_seq + 1,
                now=self._clock(), default_predecessor=self._meta.get("head_id") or ROOT,
            )
            return AppendedTurn(node_to_message(self._append_locked(node), self.session), True)

    def _check_turn_time(self, when: object, node_id: str) -> None:
        """A turn's own time: None (now), or finite seconds >= 0 not beyond the clock's skew."""
        if when is None:
            return
        if isinstance(when, bool) or not isinstance(when, (int, float)):
            raise InvalidNodeError(self.session, node_id, "created_at is not a number")
        if not math.isfinite(when):
            raise InvalidNodeError(self.session, node_id, f"created_at {when!r} is not finite")
        if when < 0:
            raise InvalidNodeError(self.session, node_id, f"created_at {when!r} is before the "
                                   "epoch; give unix seconds (a time at or after 1970)")
        now = self._clock()
        if when > now + CLOCK_SKEW:
            raise FutureTimestampError(self.session, node_id, float(when), now, CLOCK_SKEW)

    def spawn_branch(
        self, caller_node: str, source: str, prompt: str, *, name: str | None = None
    ) -> dict[str, Any]:
        """A spawn root: user node, ``predecessor=null``, ``caller=<spawning node>``."""
        self._check_writable()
        validate_id(caller_node, "caller node id", self.session)
        if name is not None:
            validate_name(name, "branch name", self.session)
        node_id = secrets.token_hex(6)
        with self._mutation():
            if caller_node not in self._index.nodes:
                raise NodeNotFoundError(self.session, caller_node)
            now = self._clock()
            node = Node(
                id=node_id, created_at=now, seq=self._index.max_seq + 1, role="user",
                output=prompt, caller=caller_node, predecessor=None,
                metadata={"source": source, "spawn_branch_root": True},
            )
            branches = None
            if name is not None:
                branches = {node_id: {"name": name, "created_at": now, "updated_at": now}}
            return node_to_message(self._append_locked(node, branches), self.session)

    def insert_summary(self, covers_ids: list[str], text: str) -> dict[str, Any]:
        """A compaction summary spliced in before the first covered node."""
        self._check_writable()
        if not covers_ids:
            raise InvalidNodeError(self.session, "summary_", "covers_ids is empty")
        for covered in covers_ids:
            validate_id(covered, "covered node id", self.session)
        node_id = "summary_" + secrets.token_hex(5)
        with self._mutation():
            covers = absorbed_covers(self._index, self.session, covers_ids)
            first = self._index.nodes[covers_ids[0]]
            node = Node(
                id=node_id, created_at=first.created_at - 1e-6, seq=self._index.max_seq + 1,
                role="llm", name="context/summary", output=text, caller="",
                predecessor=first.predecessor,
                metadata={"type": "compactionSummary", "source": "compaction",
                          "compaction": True, "covers_ids": covers},
            )
            return node_to_message(self._append_locked(node), self.session)

    def set_head(self, node_id: str) -> None:
        """Move the head; never onto a summary. ``updated_at`` does not move."""
        validate_id(node_id, "head id", self.session)
        with self._mutation():
            node = self._index.nodes.get(node_id)
            if node is None:
                raise NodeNotFoundError(self.session, node_id)
            if node.is_summary:
                raise SummaryHeadError(self.session, node_id)
            meta = {**self._meta, "head_id": node_id}
            self._journal_locked([self._meta_entry(meta)])
            self._meta = meta
            self._mark_synced()

    def merge_heads(self, node_ids: Sequence[str]) -> None:
        """Add ``node_ids`` to meta ``merged_heads`` (a union, order kept); never a summary.

        A merged head is a branch whose work came back to its caller (a
        sub-agent's): the tips drop it and a boundary writes it completely
        (docs/decisions.md). ``updated_at`` does not move, as for ``set_head``.
        """
        if isinstance(node_ids, str):  # would be taken one character at a time
            raise TypeError(f"session {self.session!r}: merge_heads takes a list of node ids, "
                            f"not the string {node_ids!r}")
        if not node_ids:
            return  # nothing to add: no journal, no write
        for node_id in node_ids:
            validate_id(node_id, "merged head id", self.session)
        with self._mutation():
            for node_id in node_ids:
                node = self._index.nodes.get(node_id)
                if node is None:
                    raise NodeNotFoundError(self.session, node_id)
                if node.is_summary:
                    raise InvalidNodeError(self.session, node_id,
                                           "a summary (covers_ids) is never a merged head")
            existing = self._meta.get("merged_heads")
            before = [t for t in existing if isinstance(t, str)] \
                if isinstance(existing, list) else []
            merged = list(dict.fromkeys([*before, *node_ids]))
            if merged == existing:
                return  # nothing new: no journal, no write
            meta = {**self._meta, "merged_heads": merged}
            self._journal_locked([self._meta_entry(meta)])
            self._meta = meta
            self._mark_synced()

    def rewind_to(self, user_turn: str) -> list[str]:
        """Stamp ``rewound`` on the head chain back to ``user_turn``; head to its predecessor.

        Node stamps and the head move go through one journal, so a crash
        leaves either none or (after recovery) all of them.
        """
        validate_id(user_turn, "user turn id", self.session)
        with self._mutation():
            head = self._resolved_head()
            if head is None:
                raise InvalidNodeError(self.session, user_turn, "the session has no head")
            stamped = rewind_ids(self._index, self.session, head, user_turn)
            now = self._clock()
            patch = {"rewound": True, "rewound_at": now}
            predecessor = self._index.nodes[user_turn].predecessor
            new_head = predecessor if predecessor in self._index.nodes else None
            meta = {**self._meta, "head_id": new_head}
            self._rewrite_locked({i: patch for i in stamped}, meta)
            return stamped

    def merge_node_metadata_batch(self, patches: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """Merge each patch into its node's metadata; returns the ids whose file changed.

        A shallow merge (a patch value replaces the key's value). Touches only
        the named node files: never meta.json, never ``updated_at``. All
        patches are validated before any file changes; one journal makes the
        whole batch durable with two fsyncs (see :mod:`store._journal`).
        """
        for node_id, patch in patches.items():
            validate_id(node_id, "node id", self.session)
            if not isinstance(patch, Mapping):
                raise InvalidNodeError(self.session, node_id, "a metadata patch is not an object")
            check_metadata_keys(patch, self.session, node_id)
            check_value(dict(patch), self.session, node_id)
        with self._mutation():
            return self._rewrite_locked(patches, None)

    # -- internals -------------------------------------------------------------

    def _append_locked(
        self, node: Node, branches: dict[str, Any] | None = None
    ) -> Node:
        check_new_node(self._index, self.session, node, self._meta.get("head_id"))
        data = encode_node(node, self.session, self._cap)
        meta = dict(self._meta)
        meta["updated_at"] = self._clock()
        head = meta.get("head_id")
        if node.is_top_level and not node.is_summary and (
            head is None or node.predecessor == head
        ):
            meta["head_id"] = node.id
        if branches:
            known = meta.get("branches")
            meta["branches"] = {**(known if isinstance(known, dict) else {}), **branches}
        filename = f"{HISTORY}/{node_filename(node)}"
        # The node first: a reader never sees a head whose file is missing.
        self._journal_locked([JournalEntry(filename, data, ABSENT), self._meta_entry(meta)])
        self._index.add(node)
        self._meta = meta
        self._mark_synced()
        return node

    def _rewrite_locked(
        self, patches: Mapping[str, Mapping[str, Any]], meta: dict[str, Any] | None
    ) -> list[str]:
        """Merge patches into node files (re-read from disk) and maybe meta: one journal record."""
        updated: list[Node] = []
        entries: list[JournalEntry] = []
        for node_id, patch in patches.items():
            if node_id not in self._index.nodes:
                raise NodeNotFoundError(self.session, node_id)
            rel = f"{HISTORY}/{self._index.files[node_id]}"
            data, current = self._read_node(rel)
            merged = {**current.metadata, **patch}
            if merged == current.metadata and list(merged) == list(current.metadata):
                if current != self._index.nodes[node_id]:
                    self._index.replace(current)
                continue
            # the patch travels with the entry: a replay finding the agent's
            # newer version merges it instead of reverting that version
            entries.append(JournalEntry(
                rel, encode_with_metadata(data, current, merged, self.session, self._cap),
                digest(data), json.dumps(dict(patch), ensure_ascii=False).encode("utf-8")))
            updated.append(current.with_metadata(merged))
        if meta is not None:
            entries.append(self._meta_entry(meta))
        if not entries:
            return []
        differ = self._journal_locked(entries)
        if meta is not None:
            self._meta = meta
        if differ:
            # another writer's version was merged at install: the
            # index learns it from the disk
            self._fingerprint = None
            return [n.id for n in updated]
        for node in updated:
            self._index.replace(node)
        self._mark_synced()
        return [n.id for n in updated]


def recover_dead_runtimes(state_dir: str | os.PathLike[str], log: RuntimeLog) -> list[str]:
    """Recover every session that dead runtimes' logs still hold records of; returns their ids.

    Run by a runtime when it starts, so records of a session nobody opens
    again do not wait in a dead log forever. A session whose lock another
    process holds is left to it: it recovered the session when it took the
    lock (:mod:`store._runtime_log`, rule 4). A session that cannot be opened
    keeps its records for the next holder.
    """
    recovered: list[str] = []
    for session in dead_sessions(state_dir, log.files, exclude=log.owner):
        if not os.path.isdir(os.path.join(os.fspath(state_dir), SESSIONS, session)):
            discard_dead(state_dir, session, log.files)  # the session was deleted
            continue
        try:
            core = SessionCore.open(state_dir, session, options=SessionOptions(
                files=log.files, lock_timeout=0.0, log=log))
        except StoreError:
            continue
        core.close()
        recovered.append(session)
    return recovered


def install_staged_session(staged: SessionCore, state_dir: str | os.PathLike[str],
                           files: DurableFiles) -> None:
    """Move a closed session built under another state directory into ``state_dir`` whole.

    As :meth:`SessionCore.create` does, a dead runtime's records under this
    id (of a deleted namesake) are retired first: the staged core looked at
    its own state directory's logs, not these. Raises ``OSError`` (EEXIST or
    ENOTEMPTY when a session of that id appeared meanwhile).
    """
    discard_dead(state_dir, staged.session, files)
    sessions = os.path.join(os.fspath(state_dir), SESSIONS)
    files.make_dirs(sessions)
    files.install_dir(staged.directory, os.path.join(sessions, staged.session))
