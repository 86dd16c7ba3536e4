"""The session planner as pure functions: a session's branches, its marks and ``now`` -> a plan.

The session actor (:mod:`memory.runtime._session_actor`) asks these after
every append, at a boundary and after a job; it reads the facts (the index,
the claim file) and carries out the answer (submit, claim, merge, wait).
Nothing here touches a file or a clock: the facts come in as a
:class:`SessionView` whose owed tails are computed lazily (a walk costs what
the tip owes, and most appends need none), and ``now`` is an argument.

What is decided here:

- :func:`hold`: whether the session may plan at all (markers still owed,
  a job in flight, a backoff or a recheck pending, a quarantine).
- :func:`next_batch`: the batch the rules call for (SPEC §6.3 after an
  append, §6.6 at a boundary), never one overlapping a job in flight.
- :func:`covered`: per tip, what the rules cover and is not marked yet.
- :func:`after_failure`: back off or quarantine (SPEC §7).
- :func:`marker_chunks`: a finished batch's markers as merges of bounded
  size, oldest first, so a large merge never holds the session's owner
  (and the appends behind it) for long, and a crash between two chunks
  leaves a marked prefix, never a lost marker (:mod:`memory.ledger._lost_markers`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

from memory.ledger._ledger import (
    WritePolicy,
    first_batch,
    may_write,
    should_write,
    should_write_at_boundary,
)
from memory.ledger._records import MARKER_KEY, SourceRecord

__all__ = [
    "MARKER_CHUNK",
    "Hold",
    "SessionView",
    "after_failure",
    "boundary_branches",
    "covered",
    "hold",
    "marker_chunks",
    "next_batch",
    "not_busy",
    "span",
]

# Nodes per marker merge: one merge installs this many node files in one
# thread hop while the session's appends wait; a batch's markers take
# several merges, each its own turn in the session's mailbox.
MARKER_CHUNK = 32


@dataclass(frozen=True)
class SessionView:
    """What the planner reads of one session, as its actor sees it now.

    ``tips()`` and ``merged_heads()`` are read at a boundary only;
    ``owed(tip)`` is the owed tail of the branch ending at ``tip`` (SPEC
    §6.2), jobs in flight included; ``busy()`` the node ids a job holds
    (this runtime's in flight, another runtime's live claim). Both are
    called only when the answer depends on them.
    """

    head: str | None
    tips: Callable[[], Sequence[str]]  # the listed branches' tips (list_branches)
    merged_heads: Callable[[], Sequence[str]]  # meta merged_heads that are nodes of the session
    owed: Callable[[str], list[SourceRecord]]
    busy: Callable[[], Collection[str]]


class Hold(enum.Enum):
    """Why a session does not plan now (:func:`hold`)."""

    NONE = "none"  # plan
    MARKS_OWED = "marks owed"  # the job in flight is written; merge its markers first
    WAITING = "waiting"  # a job in flight, or a backoff or claim recheck pending
    QUARANTINED = "quarantined"  # the session's batch is parked (SPEC §7)


def hold(*, marks_owed: bool, in_flight: bool, retry_pending: bool, recheck_pending: bool,
         quarantined: bool) -> Hold:
    """Whether the session plans now; the first reason that holds it, in this order."""
    if marks_owed and in_flight:
        return Hold.MARKS_OWED
    if in_flight or retry_pending or recheck_pending:
        return Hold.WAITING
    if quarantined:
        return Hold.QUARANTINED
    return Hold.NONE


def not_busy(owed: Sequence[SourceRecord], busy: Collection[str]) -> list[SourceRecord]:
    """``owed`` minus the records a job holds."""
    if not busy:
        return list(owed)
    return [record for record in owed if record.message_id not in busy]


def next_batch(view: SessionView, *, boundary: bool, now: float,
               policy: WritePolicy) -> list[SourceRecord] | None:
    """The batch the rules call for now, if any (SPEC §6.3, §6.6).

    Outside a boundary: the head branch's oldest owed records when the
    trigger holds for what no job holds; ``busy`` is asked only when the
    trigger can hold at all (it reads a claim file), which after most
    appends it cannot. At a boundary: the first batch of the first branch
    :func:`boundary_branches` yields.
    """
    if not boundary:
        if view.head is None:
            return None
        owed = view.owed(view.head)
        if not may_write(owed, now, policy):
            return None
        owed = not_busy(owed, view.busy())
        return first_batch(owed, policy.threshold) if should_write(owed, now, policy) else None
    busy = view.busy()
    for _, owed in boundary_branches(view, lambda tip: not_busy(view.owed(tip), busy), policy):
        return first_batch(owed, policy.threshold)
    return None


def covered(view: SessionView, *, boundary: bool, now: float,
            policy: WritePolicy) -> list[tuple[str, list[str]]]:
    """Per tip the rules cover, the node ids not marked yet (jobs in flight included).

    ``boundary``: the tips a session boundary writes; otherwise the head
    branch if the trigger calls for a write.
    """
    if boundary:
        return [(tip, [r.message_id for r in records])
                for tip, records in boundary_branches(view, view.owed, policy)]
    if view.head is None:
        return []
    records = view.owed(view.head)
    if records and should_write(records, now, policy):
        return [(view.head, [r.message_id for r in records])]
    return []


def boundary_branches(
    view: SessionView, owed: Callable[[str], list[SourceRecord]], policy: WritePolicy
) -> Iterator[tuple[str, list[SourceRecord]]]:
    """The branches a session boundary writes, in order, with what each owes (SPEC §6.6).

    The head branch completely; every other live tip only if it owes a
    whole batch (a short abandoned branch is a rejected retry); then the
    merged heads completely: a sub-agent's branch attached back is work
    someone kept, not a retry, and it is never a tip (docs/decisions.md).
    Lazy: a caller that takes the first branch walks no other.
    """
    head = view.head
    if head is not None:
        records = owed(head)
        if records:
            yield head, records
    for tip in view.tips():
        if tip == head:
            continue
        records = owed(tip)
        if should_write_at_boundary(records, head=False, policy=policy):
            yield tip, records
    for tip in view.merged_heads():
        if tip == head:
            continue
        records = owed(tip)
        if records:
            yield tip, records


def after_failure(failures: int, max_failures: int) -> bool:
    """True when ``failures`` consecutive failures quarantine the batch; else back off (SPEC §7)."""
    return failures >= max_failures


def marker_chunks(node_ids: Sequence[str], workspace_id: str,
                  size: int = MARKER_CHUNK) -> list[dict[str, dict[str, str]]]:
    """A batch's marker patches as merges of at most ``size`` nodes, oldest first.

    Oldest first: markers fill a branch from its oldest end (SPEC §2), so
    whatever chunk a crash stops at, the marked nodes are a prefix of the
    batch and the rest stays owed; newest first would leave unmarked
    records behind an own marker.
    """
    if size < 1:
        raise ValueError(f"a marker chunk holds at least one node, not {size}")
    return [{node: {MARKER_KEY: workspace_id} for node in node_ids[start:start + size]}
            for start in range(0, len(node_ids), size)]


def span(node_ids: Sequence[str]) -> str:
    """A batch's nodes for a message: ``first..last`` (or the one id)."""
    return node_ids[0] if len(node_ids) == 1 else f"{node_ids[0]}..{node_ids[-1]}"
