"""What a session's owner knows of its directory: the index, meta.json, and every read.

:class:`~store._session.SessionCore` is the one owner of a session
(see :mod:`store._session` for the contract of its mutations). Reads need
none of the lock or the journal: this part holds what the owner caches
(the index of node files, meta.json's contents and bytes, the stat
fingerprint they were read at) and answers every read from it, after
checking the fingerprint without the lock (two ``stat`` calls) and
rebuilding once when another process wrote. The mutations
(:mod:`store._session`) and the ownership beneath them
(:mod:`store._session_owner`) keep this cache current as they write.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ._durable import DurableFiles
from ._errors import (
    CorruptFileError,
    HeadFieldError,
    NodeFileError,
    NodeNotFoundError,
    SessionNotFoundError,
)
from ._format import decode_meta, decode_node
from ._ids import validate_id
from ._index import HISTORY, META, Fingerprint, SessionIndex, load_index, read_capped
from ._lock import SessionLock
from ._message import node_to_message
from ._node import Node
from ._options import SessionOptions
from ._session_journal import JournalConflict, LoggedJournal, SessionJournal
from ._sessions import SESSIONS
from ._walk import branch, list_tips, trunk_tip, visible_back_from

__all__ = [
    "DEFAULTS",
    "SessionReads",
    "SessionStatistics",
]

# The options of a session opened without any (a frozen value: safe to share).
DEFAULTS = SessionOptions()


@dataclass(frozen=True)
class SessionStatistics:
    session: str
    nodes: int
    head: str | None
    index_rebuilds: int  # loads from disk: the first, then one per outside write seen
    journal_records: int  # own records not yet checkpointed
    journal_files: int  # files whose durability still rests on the journal
    skipped_files: int


class SessionReads:
    """A session directory's cached index and meta, and every read over them.

    The base of :class:`~store._session.SessionCore`; not used alone.
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
        self._history_dir = os.path.join(self.directory, HISTORY)  # the fingerprint's two paths
        self._meta_file = os.path.join(self.directory, META)
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
        return self._fingerprint_now() != self._fingerprint

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

    @property
    def journal_records(self) -> int:
        """Own journal records not yet checkpointed (the owner asks after every append)."""
        return self._journal.records

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

    # -- the cache -------------------------------------------------------------

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

    def _forget_index(self) -> None:
        """Another owner wrote (or this one failed): reload whatever the timestamps say.

        history/ and meta.json may look unchanged when the other write fell
        in the same timestamp tick; the journal never does.
        """
        self._fingerprint = None

    def _refresh(self, *, force: bool = False) -> None:
        """Rebuild the index and meta once when the fingerprint moved.

        Inside :meth:`trusting_index` reads skip the check (the owner made it at
        the start of the message); a mutation under the lock always checks.
        """
        if self._checked and not force:
            return
        fingerprint = self._fingerprint_now()
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
            self._index.stamps = index.stamps
        else:
            self._index = index
        self._fingerprint = fingerprint
        self._rebuilds += 1

    def _fingerprint_now(self) -> Fingerprint:
        return Fingerprint.of_paths(self._history_dir, self._meta_file)

    def _mark_synced(self) -> None:
        self._fingerprint = self._fingerprint_now()

    def _read_node(self, rel: str) -> tuple[bytes, Node]:
        path = f"{self._rel}/{rel}"
        try:
            data = read_capped(self._path(rel), path, self._cap)
        except OSError as exc:
            raise NodeFileError(path, f"unreadable ({exc.strerror})") from None
        return data, decode_node(data, path, self._cap)
