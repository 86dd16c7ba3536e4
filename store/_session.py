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

This module owns the index, the meta.json cache, the rules of each
mutation and the order of the steps above; the journal's side of steps 2
and 4 and of the checkpoint (its stamps, adoption, bounds) is
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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ._durable import TEMP_SUFFIX, DurableFiles
from ._errors import (
    AppendConflictError,
    CorruptFileError,
    FutureTimestampError,
    HeadFieldError,
    InvalidNodeError,
    NodeFileError,
    NodeNotFoundError,
    SessionExistsError,
    SessionNotFoundError,
    StoreError,
    SummaryHeadError,
)
from ._format import (
    check_value,
    decode_meta,
    decode_node,
    encode_meta,
    encode_node,
    encode_with_metadata,
    node_filename,
)
from ._git_exclude import keep_out_of_git
from ._ids import validate_id, validate_name, validate_new_id
from ._index import HISTORY, META, Fingerprint, SessionIndex, load_index, read_capped
from ._journal import ABSENT, JournalEntry, digest
from ._links import refuse_session_alias
from ._lock import SessionLock
from ._message import append_conflicts, check_metadata_keys, message_to_node, node_to_message
from ._node import ROOT, Node
from ._options import SessionOptions
from ._runtime_log import RuntimeLog, dead_sessions, discard_dead
from ._session_journal import JournalConflict, LoggedJournal, SessionJournal
from ._sessions import SESSIONS, missing_meta
from ._walk import (
    absorbed_covers,
    branch,
    check_new_node,
    list_tips,
    rewind_ids,
    trunk_tip,
    visible_back_from,
)

__all__ = [
    "CLOCK_SKEW",
    "AppendedTurn",
    "SessionCore",
    "SessionStatistics",
]


# How far ahead of this clock a turn's own time may be: another machine's
# clock that exports the conversation may run ahead by seconds, not by hours.
# The options of a session opened without any (a frozen value: safe to share).
DEFAULTS = SessionOptions()

CLOCK_SKEW = 60.0


@dataclass(frozen=True)
class AppendedTurn:
    """What an append did: the turn's message view, and whether this call created it.

    ``created`` is False when the message's own id was already the same turn
    in the session (a retry, or a redelivery after a crash): nothing was written.
    """

    message: dict[str, Any]
    created: bool


@dataclass(frozen=True)
class SessionStatistics:
    session: str
    nodes: int
    head: str | None
    index_rebuilds: int  # loads from disk: the first, then one per outside write seen
    journal_records: int  # own records not yet checkpointed
    journal_files: int  # files whose durability still rests on the journal
    skipped_files: int


class SessionCore:
    """One session directory, owned: see the module docstring for the contract.

    Not thread-safe by design: its owner (the actor) calls one method at a
    time. Create with :meth:`create` or :meth:`open`, which recover the
    directory (temp files, journals) before loading the index.
    """

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        session: str,
        *,
        options: SessionOptions = DEFAULTS,
    ) -> None:
        self.session = validate_id(session, "session id")
        self.state_dir = os.fspath(state_dir)
        self.directory = os.path.join(self.state_dir, SESSIONS, session)
        self._rel = f"{SESSIONS}/{session}"
        self._files = options.files if options.files is not None else DurableFiles()
        self._clock = options.clock
        self._cap = max_node_bytes = options.max_node_bytes
        self._log = log = options.log
        # With a runtime log, _hold replaces it with the lock the log hands out.
        self._lock = SessionLock(self.directory, timeout=options.lock_timeout)
        self._index = SessionIndex()
        self._meta: dict[str, Any] = {}
        self._meta_bytes: bytes | None = None  # meta.json as last read or installed
        self._fingerprint: Fingerprint | None = None
        self._journal = (
            SessionJournal(self.directory, self._rel, self._files, max_node_bytes) if log is None
            else LoggedJournal(self.directory, self._rel, self._files, max_node_bytes, log))
        self._rebuilds = 0
        self._checked = False  # see trusting_index
        self._citable = False  # the session id passed validate_new_id

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

    @contextmanager
    def _holding(self) -> Iterator[None]:
        """With a runtime log: :meth:`_hold` for the block, and let go if it fails."""
        if self._log is None:
            yield
            return
        self._hold()
        try:
            yield
        except BaseException:
            self._log.let_go(self.session, self._lock)
            raise

    def _hold(self) -> None:
        """With a runtime log: take the session's lock to keep until the next checkpoint lets go.

        The lock comes from the log, which hands over one a failed close left
        held; the journal then catches up in full at the next sync (dead
        runtimes' records, a session journal, this log's own live records).
        """
        if self._log is None or self._lock.held:
            return
        self._lock = self._log.hold(self.session, self.directory, self._lock.timeout)
        assert isinstance(self._journal, LoggedJournal)
        self._journal.rehold()

    def close(self) -> None:
        """Checkpoint the journal (the owner calls this when passivated)."""
        self.retire_journals()

    def _let_go(self) -> None:
        """With a runtime log: checkpoint, retire the session durably, then let go of its lock.

        If that fails, the lock stays held until the log closes (the next
        mutation, or the next core of this session in this process, takes it
        over and replays first).
        """
        assert self._log is not None and isinstance(self._journal, LoggedJournal)
        self._journal.closing = True
        try:
            with self._lock:
                self._sync_locked()
                if self._journal.problem is None:
                    self._checkpoint_locked()
        finally:
            self._journal.closing = False
            self._log.let_go(self.session, self._lock)

    def abandon(self) -> None:
        """The owner crashed and will not close: leave the lock to the session's next core.

        With a runtime log, a held lock is let go if nothing of the session is
        live in the log, else kept for the next core of this session in this
        process, which replays first. Without one there is nothing to do.
        """
        if self._log is not None and self._lock.held:
            self._log.let_go(self.session, self._lock)

    # -- reads ---------------------------------------------------------------

    @property
    def head(self) -> str | None:
        """The head branch's tip; :class:`MetaFileError` if meta.json's ``head_id`` is unusable.

        ``head_id`` null or absent on a session with turns means no head was
        chosen (the reference agent leaves it so): the head is the trunk tip
        (SPEC §4 list_branches, always listed), so what the trunk owes is
        never invisible. A ``head_id`` that is not a string, or names no
        readable node, is refused (docs/decisions.md, "Broken heads").
        """
        self._refresh()
        return self._resolved_head()

    def meta(self) -> dict[str, Any]:
        self._refresh()
        return dict(self._meta)

    def node(self, node_id: str) -> Node:
        self._refresh()
        found = self._index.nodes.get(node_id)
        if found is None:
            raise NodeNotFoundError(self.session, node_id)
        return found

    def nodes(self) -> list[Node]:
        """Every readable node, in seq order."""
        self._refresh()
        return list(self._index.nodes.values())

    @property
    def problems(self) -> list[CorruptFileError]:
        """Files skipped because they could not be read (node files, journals)."""
        self._refresh()
        problems: list[CorruptFileError] = list(self._index.problems)
        if self._journal.problem is not None:
            problems.append(self._journal.problem)
        return problems

    def branch_nodes(self, tip: str | None = None) -> list[Node]:
        self._refresh()
        start = tip if tip is not None else self._resolved_head()
        if start is None:
            return []
        return branch(self._index, self.session, validate_id(start, "tip", self.session))

    def get_branch(self, tip: str | None = None) -> list[dict[str, Any]]:
        """Message dicts root→tip of the branch ending at ``tip`` (default: head)."""
        return [node_to_message(n, self.session) for n in self.branch_nodes(tip)]

    def nodes_back(self, tip: str | None = None) -> Iterator[Node]:
        """The branch's visible nodes newest first, lazily (see ``visible_back_from``)."""
        self._refresh()
        start = tip if tip is not None else self._resolved_head()
        if start is None:
            return
        validate_id(start, "tip", self.session)
        yield from visible_back_from(self._index, start)

    def list_branches(self) -> list[dict[str, Any]]:
        self._refresh()
        return list_tips(self._index, self._meta)

    @property
    def index_version(self) -> int:
        """The index's version (after the freshness check): a key for what a reader derives.

        New whenever a node is added or replaced, or a rebuild finds other
        nodes than the index held; it never repeats in the process. A
        rebuild that finds exactly the nodes held (a reload of unchanged
        files) keeps it.
        """
        self._refresh()
        return self._index.version

    def added_since(self, version: int) -> list[str] | None:
        """Ids of the nodes added since the index was at ``version``, oldest first.

        None when anything else changed meanwhile (a merge, a rewind, a
        rebuild that found other nodes), or ``version`` is unknown: then
        whatever was derived at ``version`` must be derived again.
        """
        self._refresh()
        return self._index.added_since(version)

    def is_stale(self) -> bool:
        """True when another process wrote since the index was built (two stat calls)."""
        return Fingerprint.of(self.directory) != self._fingerprint

    def refresh(self) -> None:
        """Rebuild the index now if it is stale; the actor runs this in a worker thread."""
        self._refresh(force=True)

    def reload(self) -> None:
        """Rebuild the index from disk even if the fingerprint looks unchanged.

        Another process's rename in the same timestamp tick as ours leaves
        the fingerprint as it was; a reader that must see every outside
        write (the lost-marker repair) reloads instead of trusting it.
        """
        self._forget_index()
        self._refresh(force=True)

    @contextmanager
    def trusting_index(self) -> Iterator[None]:
        """Reads inside the block skip the freshness check; call it right after one.

        An actor handles one message at a time, so one check per message is
        as good as one per read (an outside write during the message is
        ordered after it) and saves two ``stat`` calls per read. Mutations
        still check under the lock.
        """
        self._checked = True
        try:
            yield
        finally:
            self._checked = False

    @property
    def outstanding_journals(self) -> list[str]:
        """Files (relative to the session) whose durability still rests on the journal."""
        return sorted(self._journal.outstanding)

    @property
    def replay_conflicts(self) -> list[JournalConflict]:
        """Files a journal replay found rewritten by another writer (the reference agent).

        Each was merged (our records' metadata keys it lacked) or left as the
        other writer made it, never reverted to a record's bytes.
        """
        return list(self._journal.conflicts)

    @property
    def rebuilds(self) -> int:
        """Index loads from disk: the first, then one per outside write seen."""
        return self._rebuilds

    def statistics(self) -> SessionStatistics:
        """A snapshot for introspection (no disk access)."""
        head = self._meta.get("head_id")
        return SessionStatistics(
            session=self.session,
            nodes=len(self._index.nodes),
            head=head if isinstance(head, str) else None,
            index_rebuilds=self._rebuilds,
            journal_records=self._journal.records,
            journal_files=len(self._journal.outstanding),
            skipped_files=len(self._index.problems) + (self._journal.problem is not None),
        )

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

    def retire_journals(self) -> None:
        """Checkpoint: make every file the journal names durable, then empty the journal.

        With a runtime log, also let go of the session's lock (:meth:`_let_go`):
        the session is held from its first mutation to its next checkpoint,
        so another process's owner waits for a burst, not for passivation.
        """
        if self._log is not None:
            if self._lock.held:
                self._let_go()
            return
        if not self._journal.records:
            return
        with self._lock:
            self._sync_locked()  # adopts what another owner (or a failed write) left
            if self._journal.problem is None:  # else the journal is evidence: untouched
                self._checkpoint_locked()

    # -- a caller's decision under the session lock -------------------------------

    @contextmanager
    def locked(self, *, catch_up: bool) -> Iterator[None]:
        """Hold ``<sid>/.lock`` for a decision about a file the caller keeps beside the session's.

        Other owners cannot write the session meanwhile. With ``catch_up``,
        first catch up with them exactly as a mutation does (adopt a journal,
        refresh the index): inside the block the index includes every write
        made before it. Memory's batch claims (``memory.runtime._claims``)
        decide here, so a claim and the index it is confirmed on see one
        consistent disk. Writes nothing itself.
        """
        self._hold()
        with self._lock:
            if catch_up:
                self._sync_locked()
            yield

    # -- internals -------------------------------------------------------------

    def _path(self, rel: str) -> str:
        return os.path.join(self.directory, rel)

    def _resolved_head(self) -> str | None:
        """See :attr:`head` (on the current index, no refresh)."""
        head = self._meta.get("head_id")
        if head is None:
            return trunk_tip(self._index)
        path = f"{self._rel}/{META}"
        if not isinstance(head, str):
            raise HeadFieldError(path, head, "is neither a node id nor null")
        if head not in self._index.nodes:
            raise HeadFieldError(
                path, head, "names no readable node of the session (a wrong id, or a node "
                "file skipped as unreadable: see its error)",
            )
        return head

    @contextmanager
    def _mutation(self) -> Iterator[None]:
        """Lock, catch up with other owners, and distrust the cache if the disk work failed.

        A refused request (a :class:`StoreError`) changed nothing. Any other
        failure (an ``OSError``, a crash) may have left a record in the
        journal and some files new: the index is reloaded on the next access
        and the journal is treated as foreign, so the next lock holder (this
        one included) replays it before anything else: the operation ends up
        whole or, if its record was torn, not at all.
        """
        self._hold()
        with self._lock:
            self._sync_locked()
            if self._journal.problem is not None:
                raise self._journal.problem
            try:
                yield
            except StoreError:
                raise
            except BaseException:
                self._fingerprint = None
                self._journal.disown()
                raise

    def _recover_locked(self) -> None:
        """Drop crash leftovers (temp files), replay the journal if one is found, checkpoint."""
        for folder in (self.directory, self._path(HISTORY)):
            try:
                names = os.listdir(folder)
            except FileNotFoundError:
                continue
            for name in names:
                if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                    self._files.unlink(os.path.join(folder, name))
        self._sync_locked()
        if self._journal.problem is None:
            self._checkpoint_locked()

    def _sync_locked(self) -> None:
        """Under the lock: recover dead runtimes' records, adopt a journal this owner did not write, refresh."""
        seen = self._journal.on_disk()
        if self._journal.recover_dead_owners() or seen != self._journal.stamp:
            self._forget_index()
            self._journal.adopt(seen)
        self._refresh(force=True)

    def _forget_index(self) -> None:
        """Another owner wrote (or this one failed): reload whatever the timestamps say.

        history/ and meta.json may look unchanged when the other write fell
        in the same timestamp tick; the journal never does.
        """
        self._fingerprint = None

    def _checkpoint_locked(self) -> None:
        """Checkpoint the journal; an index that was current stays current."""
        unchanged = Fingerprint.of(self.directory) == self._fingerprint
        self._journal.checkpoint()
        if unchanged:  # the truncation is ours: the index is as current as before
            self._mark_synced()

    def _journal_locked(self, entries: list[JournalEntry]) -> list[str]:
        """Make ``entries`` durable with one journal record, then install each unsynced.

        Every mutation's files reach the disk here and nowhere else.
        Returns the files now holding other bytes than the entry's (see
        :meth:`SessionJournal.write`).
        """
        try:
            differ = self._journal.write(entries)
        except BaseException:
            self._fingerprint = None  # some files may be installed: reload meta and index
            raise
        for entry in entries:
            if entry.rel == META:
                self._meta_bytes = entry.data
        return differ

    def _meta_entry(self, meta: dict[str, Any]) -> JournalEntry:
        """meta.json's entry: its new bytes, and the bytes it replaces as last read here."""
        return JournalEntry(META, encode_meta(meta), digest(self._meta_bytes))

    def _refresh(self, *, force: bool = False) -> None:
        """Rebuild the index and meta once when the fingerprint moved.

        Inside :meth:`trusting_index` reads skip the check (the owner made it at
        the start of the message); a mutation under the lock always checks.
        """
        if self._checked and not force:
            return
        fingerprint = Fingerprint.of(self.directory)
        if fingerprint == self._fingerprint:
            return
        try:
            with open(self._path(META), "rb") as handle:
                meta_bytes = handle.read()
        except FileNotFoundError:
            raise SessionNotFoundError(self.session, self._rel) from None
        self._meta = decode_meta(meta_bytes, f"{self._rel}/{META}")
        self._meta_bytes = meta_bytes
        # Unchanged files keep their node objects (see load_index), and an
        # index that finds exactly the nodes it held keeps its version.
        index = load_index(self.directory, self._rel, self._cap, self._index)
        if index.same_nodes(self._index):
            self._index.digests = index.digests
        else:
            self._index = index
        self._fingerprint = fingerprint
        self._rebuilds += 1

    def _mark_synced(self) -> None:
        self._fingerprint = Fingerprint.of(self.directory)

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

    def _read_node(self, rel: str) -> tuple[bytes, Node]:
        path = f"{self._rel}/{rel}"
        try:
            data = read_capped(self._path(rel), path, self._cap)
        except OSError as exc:
            raise NodeFileError(path, f"unreadable ({exc.strerror})") from None
        return data, decode_node(data, path, self._cap)


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
