"""The owed tails of a session's branches, kept on its in-memory index (SPEC §6.2).

:mod:`memory.ledger._ledger` holds the rules as functions of a branch; this
module applies them to a session's index (:class:`store.SessionCore`) as the
session actor sees it, without I/O of its own: the index answers from
memory, and the actor refreshes it before each message. Kept here rather
than in the actor so the actor holds only its mailbox and its I/O, and the
caching rules are tested on a core alone (tests/memory/ledger/test_owed_tails.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from memory._errors import LedgerError
from memory.ledger._ledger import owed_tail, record_of, unwritten_turns
from memory.ledger._records import MARKER_KEY, SourceRecord
from memory.ledger._tokens import TokenCounter, estimate_tokens
from store import Node, SessionCore, StoreError, node_to_message

__all__ = ["ConsistentSince", "NodeRecords", "OwedTails", "listed_branches"]


class NodeRecords:
    """The record of each node of one session (``None``: not a record), kept per node object.

    The owed tail is computed after every append, and until a branch has an
    own marker that walk covers the whole branch: building each record again
    on every walk was a quarter of the event loop's time in a 300-session
    run. A node is immutable and a metadata merge or a reload replaces the
    object, so identity says whether a kept record is still the node's.
    """

    def __init__(self, session_id: str, *, counter: TokenCounter = estimate_tokens) -> None:
        self.session_id = session_id
        self.counter = counter
        self._kept: dict[str, tuple[Node, SourceRecord | None]] = {}

    def of(self, node: Node) -> SourceRecord | None:
        kept = self._kept.get(node.id)
        if kept is not None and kept[0] is node:
            return kept[1]
        record = record_of(self.session_id, node_to_message(node, self.session_id),
                           counter=self.counter)
        self._kept[node.id] = (node, record)
        return record

    def owed(
        self,
        newest_first: Iterable[Node],
        whole_branch: Callable[[], Iterable[Node]],
        workspace_id: str,
    ) -> list[SourceRecord]:
        """SPEC §6.2: walk back from the tip; without an own marker, the whole branch is owed.

        ``whole_branch`` gives the validated branch root to tip (it raises
        for a broken chain, which the walk back simply stops at).

        A refused node (:class:`LedgerError`) met on the walk back is the
        newest refused one; the error names the oldest on the branch
        instead, as :func:`records_from_branch` (``pending``, the audit) does,
        so every command sends the user to the same node.
        """
        try:
            owed = owed_tail(map(self.of, newest_first), workspace_id)
        except LedgerError:
            try:
                for node in whole_branch():  # root to tip: raises at the oldest refused node
                    self.of(node)
            except StoreError:  # a broken chain behind it: the walk back's error stands
                pass
            raise
        if owed is None:
            records = (self.of(node) for node in whole_branch())
            owed = unwritten_turns([r for r in records if r is not None], workspace_id)
        return owed


# SPEC §4: the predecessor of a session's first turn; a walk ends there, even
# when a display-root node is named so.
_ROOT = "ROOT"


class OwedTails:
    """What each tip of one session owes (SPEC §6.2), kept from one append to the next.

    The trigger asks after every append what the head branch owes, and until
    a branch has an own marker the answer is the whole branch: walking it
    again each time made the event loop's work per turn grow with the
    session. The tails are kept for the index version they were computed on
    (``SessionCore.index_version``). When the only changes since are added
    nodes (``SessionCore.added_since``), every kept tail still holds (a new
    node lies on no older tip's branch) and a new node's tail is its
    predecessor's plus its own record; the predecessor's is then dropped (a
    tip queried again after it grew a child is walked). Any other change
    (a merge, a rewind, a rebuild after an outside write) forgets them all.
    A tail is computed exactly as :meth:`NodeRecords.owed`.
    """

    def __init__(self, records: NodeRecords, workspace_id: str) -> None:
        self.records = records
        self.workspace_id = workspace_id
        self._version: int | None = None
        self._kept: dict[str, list[SourceRecord]] = {}

    def of(self, core: SessionCore, tip: str | None) -> list[SourceRecord]:
        """The owed tail of the branch ending at ``tip`` (default: the head), oldest first."""
        start = tip if tip is not None else core.head
        if start is None:
            return []
        version = core.index_version
        if version != self._version:
            added = core.added_since(self._version) if self._version is not None else None
            if added is None:
                self._kept.clear()
            else:
                for node_id in added:
                    self._extend(core, node_id)
            self._version = version
        found = self._kept.get(start)
        if found is None:
            found = self.records.owed(core.nodes_back(start), lambda: core.branch_nodes(start),
                                      self.workspace_id)
            if core.index_version != version:
                return found  # the index moved under the walk: keep nothing
            self._kept[start] = found
        return list(found)

    def _extend(self, core: SessionCore, node_id: str) -> None:
        """Keep the tail of ``node_id``, just added, if its predecessor's is kept."""
        node = core.node(node_id)
        previous = node.predecessor
        if previous is None or previous == _ROOT:
            return
        before = self._kept.pop(previous, None)
        if before is None:
            return
        if node.display == "root" or node.rewound:  # not on its own branch (store.branch)
            self._kept[node_id] = before
            return
        try:
            record = self.records.of(node)
        except LedgerError:
            return  # the walk raises it, naming the oldest refused node
        if record is None:
            self._kept[node_id] = before
        elif record.marker == self.workspace_id:
            self._kept[node_id] = []
        else:
            self._kept[node_id] = [*before, record]


def listed_branches(
    core: SessionCore, records: NodeRecords
) -> tuple[list[list[SourceRecord]], set[str]]:
    """The records of every listed branch that can be walked, and the ids of their nodes.

    A branch that cannot be walked is skipped (its error belongs to whoever reads it).
    """
    branches: list[list[SourceRecord]] = []
    walked: set[str] = set()
    for row in core.list_branches():
        try:
            nodes = core.branch_nodes(row["head_msg_id"])
            found = [r for r in map(records.of, nodes) if r is not None]
        except (StoreError, LedgerError):
            continue
        branches.append(found)
        walked.update(node.id for node in nodes)
    return branches, walked


class ConsistentSince:
    """A session the lost-marker repair found consistent, and what may change without a walk.

    A lost marker is an unmarked record behind an own marker on a branch.
    After a walk that found none, ``covered`` holds every node of the
    walked branches: the branch ending at any of them has none either (its
    records are a prefix of a walked branch's, and the newest own marker of
    a prefix is no newer). Adding nodes cannot create one unless a new node
    carries an own marker or continues a node outside ``covered``: an added
    node only removes tips (a child), the trunk can only move onto new
    nodes, and a tip's branch is its predecessor's plus unmarked new turns.
    Anything else since (a merge, a rewind, a rebuild that found other
    nodes, ``merged_heads`` changed, which decides which tips are listed)
    means walking again.
    """

    def __init__(self, version: int, merged: object, covered: set[str]) -> None:
        self.version = version
        self.merged = merged
        self.covered = covered

    def still(self, core: SessionCore, workspace_id: str) -> bool:
        """True if the session is still consistent; then it is kept for its current version."""
        added = core.added_since(self.version)
        if added is None or core.meta().get("merged_heads") != self.merged:
            return False
        for node_id in added:
            node = core.node(node_id)
            if node.metadata.get(MARKER_KEY) == workspace_id:
                return False
            previous = node.predecessor
            if previous is not None and previous != _ROOT and previous not in self.covered:
                return False
            self.covered.add(node_id)
        self.version = core.index_version
        return True
