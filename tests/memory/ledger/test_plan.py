"""The session planner as pure functions (memory/ledger/_plan.py): a view, ``now`` -> a plan."""

from __future__ import annotations

from collections.abc import Collection

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.ledger._ledger import WritePolicy
from memory.ledger._plan import (
    Hold,
    SessionView,
    after_failure,
    boundary_branches,
    covered,
    hold,
    marker_chunks,
    next_batch,
    not_busy,
    span,
)
from memory.ledger._records import MARKER_KEY, SourceRecord

WS = "w-aa116220"
POLICY = WritePolicy(threshold=8_000, idle_after=3600.0)


def records(prefix: str, count: int, *, tokens: int = 1_000, at: float = 0.0) -> list[SourceRecord]:
    return [SourceRecord("s", f"{prefix}{i}", "user", "x", at + i, "user", tokens=tokens)
            for i in range(count)]


def view(branches: dict[str, list[SourceRecord]], *, head: str | None = None,
         merged: tuple[str, ...] = (), busy: Collection[str] = (),
         asked: list[str] | None = None) -> SessionView:
    """A session whose tips owe ``branches``; ``asked`` records what the planner read."""
    log = asked if asked is not None else []

    def owed(tip: str) -> list[SourceRecord]:
        log.append(f"owed:{tip}")
        return list(branches.get(tip, []))

    def holding() -> Collection[str]:
        log.append("busy")
        return busy

    def tips() -> list[str]:
        log.append("tips")
        return [t for t in branches if t not in merged]

    return SessionView(head=head, tips=tips, merged_heads=lambda: list(merged), owed=owed,
                       busy=holding)


# -- hold ----------------------------------------------------------------------


@pytest.mark.parametrize(("flags", "expected"), [
    ({}, Hold.NONE),
    ({"marks_owed": True, "in_flight": True}, Hold.MARKS_OWED),
    ({"marks_owed": True, "in_flight": True, "quarantined": True}, Hold.MARKS_OWED),
    ({"marks_owed": True}, Hold.NONE),  # no job: nothing to merge, plan
    ({"in_flight": True}, Hold.WAITING),
    ({"retry_pending": True, "quarantined": True}, Hold.WAITING),
    ({"recheck_pending": True}, Hold.WAITING),
    ({"quarantined": True}, Hold.QUARANTINED),
])
def test_hold_names_the_first_reason_a_session_does_not_plan(
    flags: dict[str, bool], expected: Hold
) -> None:
    base = dict.fromkeys(("marks_owed", "in_flight", "retry_pending", "recheck_pending",
                          "quarantined"), False)
    assert hold(**{**base, **flags}) is expected


# -- the trigger (SPEC §6.3) ----------------------------------------------------------


def test_after_an_append_below_the_threshold_nothing_is_due_and_no_claim_is_read() -> None:
    asked: list[str] = []
    owed = records("m", 3, at=100.0)
    plan = next_batch(view({"t": owed}, head="t", asked=asked), boundary=False, now=200.0,
                      policy=POLICY)
    assert plan is None
    assert asked == ["owed:t"]  # neither the claim (busy) nor the other tips


def test_at_the_threshold_the_oldest_records_reaching_it_are_the_batch() -> None:
    owed = records("m", 12, at=100.0)
    plan = next_batch(view({"t": owed}, head="t"), boundary=False, now=200.0, policy=POLICY)
    assert plan == owed[:8]


def test_records_a_job_holds_are_never_planned_again() -> None:
    owed = records("m", 12, at=100.0)
    held = {r.message_id for r in owed[:8]}
    plan = next_batch(view({"t": owed}, head="t", busy=held), boundary=False, now=200.0,
                      policy=POLICY)
    assert plan is None  # the 4 left are below the threshold and not idle
    later = next_batch(view({"t": owed}, head="t", busy=held), boundary=False,
                       now=100.0 + 11 + POLICY.idle_after, policy=POLICY)
    assert later == owed[8:]  # idle: the rest is due, never the held ones


def test_an_idle_head_owing_anything_is_due() -> None:
    owed = records("m", 1, at=100.0)
    assert next_batch(view({"t": owed}, head="t"), boundary=False,
                      now=100.0 + POLICY.idle_after - 1, policy=POLICY) is None
    assert next_batch(view({"t": owed}, head="t"), boundary=False,
                      now=100.0 + POLICY.idle_after, policy=POLICY) == owed


def test_no_head_no_batch() -> None:
    assert next_batch(view({}, head=None), boundary=False, now=0.0, policy=POLICY) is None
    assert covered(view({}, head=None), boundary=False, now=0.0, policy=POLICY) == []


# -- the boundary (SPEC §6.6) ---------------------------------------------------------


def test_a_boundary_writes_the_head_first_then_whole_batches_of_tips_then_merged_heads() -> None:
    branches = {
        "head": records("h", 2),
        "short": records("s", 2),  # a rejected retry: not written
        "long": records("l", 9),
        "merged": records("g", 1),  # a sub-agent's work: written completely
    }
    found = list(boundary_branches(view(branches, head="head", merged=("merged",)),
                                   lambda tip: branches[tip], POLICY))
    assert [tip for tip, _ in found] == ["head", "long", "merged"]


def test_a_boundary_batch_is_the_first_batch_of_the_first_branch_owing_one() -> None:
    branches = {"head": [], "long": records("l", 9)}
    plan = next_batch(view(branches, head="head"), boundary=True, now=0.0, policy=POLICY)
    assert plan == branches["long"][:8]


def test_a_boundary_skips_what_a_job_holds_and_ends_when_nothing_else_is_owed() -> None:
    owed = records("h", 3)
    held = {r.message_id for r in owed}
    assert next_batch(view({"head": owed}, head="head", busy=held), boundary=True, now=0.0,
                      policy=POLICY) is None


def test_a_boundary_that_finds_the_head_owing_walks_no_other_tip() -> None:
    asked: list[str] = []
    branches = {"head": records("h", 2), "other": records("o", 9)}
    next_batch(view(branches, head="head", asked=asked), boundary=True, now=0.0, policy=POLICY)
    assert "tips" not in asked and "owed:other" not in asked


def test_covered_counts_jobs_in_flight_as_still_owed() -> None:
    branches = {"head": records("h", 2), "long": records("l", 9)}
    v = view(branches, head="head", busy={"h0", "h1"})
    assert covered(v, boundary=True, now=0.0, policy=POLICY) == [
        ("head", ["h0", "h1"]), ("long", [f"l{i}" for i in range(9)])]
    assert covered(v, boundary=False, now=0.0, policy=POLICY) == []  # not due yet
    assert covered(v, boundary=False, now=10.0 + POLICY.idle_after, policy=POLICY) == [
        ("head", ["h0", "h1"])]


# -- failures and marks ----------------------------------------------------------------


def test_failures_back_off_until_the_limit_quarantines() -> None:
    assert [after_failure(n, 3) for n in (1, 2, 3, 4)] == [False, False, True, True]


@given(st.integers(min_value=0, max_value=200), st.integers(min_value=1, max_value=50))
def test_marker_chunks_cover_the_batch_once_oldest_first_and_bounded(count: int,
                                                                       size: int) -> None:
    nodes = [f"n{i}" for i in range(count)]
    chunks = marker_chunks(nodes, WS, size)
    assert [node for chunk in chunks for node in chunk] == nodes
    assert all(0 < len(chunk) <= size for chunk in chunks)
    assert all(patch == {MARKER_KEY: WS} for chunk in chunks for patch in chunk.values())


def test_a_marker_chunk_holds_at_least_one_node() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        marker_chunks(["n0"], WS, 0)


def test_not_busy_and_span() -> None:
    owed = records("m", 3)
    assert not_busy(owed, {"m1"}) == [owed[0], owed[2]]
    assert not_busy(owed, ()) == owed
    assert span(("a",)) == "a" and span(("a", "b", "c")) == "a..c"
