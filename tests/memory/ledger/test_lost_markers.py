"""The lost-marker rule: written turns stranded behind an own marker, and nothing else."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from memory.ledger._ledger import records_from_branch, unwritten_turns
from memory.ledger._lost_markers import lost_markers, stranded_records, written_to_memory
from memory.ledger._records import MARKER_KEY, SourceMeta, SourceRecord

WID = "w-aa116220"
OTHER = "w-00000000"
PENDING = SourceMeta(None, "guest/1", "guest", "pending")


@dataclasses.dataclass(frozen=True)
class Turn:
    marker: str | None
    trusted: bool
    archived: bool
    cited: bool


turns = st.lists(
    st.builds(Turn, st.sampled_from([WID, WID, OTHER, None]), st.booleans(), st.booleans(),
              st.booleans()),
    max_size=30,
)


def facts(branch: list[Turn]) -> tuple[list[SourceRecord], set[str], set[str]]:
    records = [
        SourceRecord("s", f"n{i}", "user", f"said {i}", 0.0, "user",
                     meta=None if t.trusted else PENDING, marker=t.marker)
        for i, t in enumerate(branch)
    ]
    archived = {r.source_id for r, t in zip(records, branch, strict=True) if t.archived}
    cited = {r.source_id for r, t in zip(records, branch, strict=True) if t.cited}
    return records, archived, cited


def marked(records: list[SourceRecord], nodes: list[str]) -> list[SourceRecord]:
    return [dataclasses.replace(r, marker=WID) if r.message_id in nodes else r for r in records]


@given(turns)
def test_exactly_the_written_records_behind_the_newest_own_marker(branch: list[Turn]) -> None:
    records, archived, cited = facts(branch)
    own = [i for i, t in enumerate(branch) if t.marker == WID]
    newest = own[-1] if own else -1
    expected = [
        f"n{i}" for i, t in enumerate(branch)
        if i < newest and t.marker != WID and t.archived and (t.cited or not t.trusted)
    ]
    assert lost_markers(records, WID, archived, cited) == expected


@given(turns)
def test_a_repair_never_changes_what_is_owed_and_is_done_once(branch: list[Turn]) -> None:
    records, archived, cited = facts(branch)
    lost = lost_markers(records, WID, archived, cited)
    repaired = marked(records, lost)
    # The owed tail is after the newest own marker: re-marking behind it never moves it.
    assert unwritten_turns(repaired, WID) == unwritten_turns(records, WID)
    assert lost_markers(repaired, WID, archived, cited) == []
    # What stays stranded is exactly what is not in memory (owed a write, never a marker).
    left = stranded_records(repaired, WID)
    assert not any(written_to_memory(r, archived.__contains__, cited.__contains__) for r in left)


@given(turns)
def test_nothing_outside_memory_is_ever_marked(branch: list[Turn]) -> None:
    records, archived, cited = facts(branch)
    for node in lost_markers(records, WID, archived, cited):
        turn = branch[int(node[1:])]
        assert turn.archived and turn.marker != WID
        assert turn.cited or not turn.trusted  # pending sources are never cited


def test_the_unmarked_tail_is_owed_even_when_it_is_in_memory() -> None:
    """A crash between install and mark: the write cycle delivers it again, not this rule."""
    records, archived, cited = facts([Turn(WID, True, True, True), Turn(None, True, True, True)])
    assert lost_markers(records, WID, archived, cited) == []
    records, archived, cited = facts([Turn(None, True, True, True)] * 3)
    assert lost_markers(records, WID, archived, cited) == []  # no own marker: all owed


def test_another_workspaces_marker_is_no_marker() -> None:
    records, archived, cited = facts([Turn(OTHER, True, True, True), Turn(WID, True, True, True)])
    assert lost_markers(records, WID, archived, cited) == ["n0"]


def message(node: str, role: str = "user", marker: str | None = None,
            **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": node, "role": role, "content": f"said {node}", **extra}
    if marker is not None:
        out[MARKER_KEY] = marker
    return out


def test_only_records_are_candidates() -> None:
    """SPEC §6.1: tool nodes, runtime turns and empty turns are never marked, lost or not."""
    branch = [
        message("u0"),
        message("t0", role="tool"),
        message("r0", role="assistant", display="runtime"),
        message("j0", role="assistant", source="job_followup"),
        {"id": "e0", "role": "user", "content": "  "},
        message("a0", role="assistant"),
        message("u1", marker=WID),
    ]
    records = records_from_branch("s", branch)
    everything = {f"openprogram/s/{m['id']}" for m in branch}
    assert lost_markers(records, WID, everything, everything) == ["u0", "a0"]
