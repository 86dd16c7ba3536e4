"""The baselines of issue 6: each ledger fails (or not) the way SPEC §1 says, measured.

The comparison is only worth something if it can tell ledgers apart, so
besides the headline properties (the cursor omits, the id set and the
markers do not, only the naive merge loses keys) a planted ledger that
skips one turn must show up as an omission, and the tail walk that keeps
the owed computation flat must give exactly the full rule's answer.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.ledger._ledger import records_from_branch, unwritten_turns
from memory.ledger._records import MARKER_KEY, SourceRecord
from memory.simulate.baselines._ledgers import CursorLedger, Ledger, MarkerLedger, NaiveMarkerLedger
from memory.simulate.baselines._report import (
    LEDGERS,
    compare_ledgers,
    render_baselines,
    run_baselines,
)
from memory.simulate.baselines._scaling import (
    linear_session,
    measure_owed_scaling,
    owed_from_core,
    owed_from_tip,
)
from memory.simulate.baselines._workload import Op, SessionModel, generate_workload
from store._errors import BrokenChainError
from store._index import SessionIndex
from store._message import node_to_message
from store._node import ROOT, Node
from store._session import SessionCore
from store._walk import branch

WID = "w-0b5e1111"


def _chain(model: SessionModel, start: str, rows: int, first_seq: int, tag: str) -> str:
    """Append ``rows`` alternating user/llm turns after ``start``; the head follows."""
    previous = start
    for i in range(rows):
        node = Node(id=f"{tag}{i}", created_at=float(first_seq + i), seq=first_seq + i,
                    role=("user", "llm")[i % 2], output=f"{tag} {i}", predecessor=previous)
        model.apply(Op("append", node), now=0.0)
        previous = node.id
    model.apply(Op("head", target=previous), now=0.0)
    return previous


def _ids(records: Sequence[SourceRecord]) -> list[str]:
    return [r.message_id for r in records]


@pytest.mark.parametrize("fork_rows", [5, 11])
def test_the_cursor_omits_a_fork_the_markers_deliver_whole(fork_rows: int) -> None:
    """SPEC §1's measured case: cursor at row 9, a branch forked at m3."""
    ledgers: dict[str, Ledger] = {
        "cursor": CursorLedger(), "markers": MarkerLedger(WID, seed=0, collide=0.0),
    }
    models = {name: SessionModel("s") for name in ledgers}
    for name, ledger in ledgers.items():
        model = models[name]
        tip = _chain(model, ROOT, 10, 0, "m")
        trunk = ledger.owed(model, tip)
        assert len(trunk) == 10
        ledger.record(model, trunk)  # the cursor now says "written up to row 9"
        assert ledger.owed(model, tip) == []
    fork = {name: _chain(models[name], "m3", fork_rows, 100, "f") for name in ledgers}
    cursor_owes = ledgers["cursor"].owed(models["cursor"], fork["cursor"])
    marker_owes = ledgers["markers"].owed(models["markers"], fork["markers"])
    own = [f"f{i}" for i in range(fork_rows)]
    assert _ids(marker_owes) == own
    # The fork's rows sit at ordinals 4.. of its branch; only those past 9 are "new".
    assert _ids(cursor_owes) == own[6:]
    assert len(cursor_owes) < fork_rows


def test_the_cursor_refuses_to_move_backwards() -> None:
    ledger = CursorLedger()
    model = SessionModel("s")
    tip = _chain(model, ROOT, 10, 0, "m")
    ledger.record(model, ledger.owed(model, tip))
    short = _chain(model, "m3", 2, 100, "f")
    records = records_from_branch("s", model.messages(short))
    ledger.owed(model, short)  # the fork's rows are ordinals 4 and 5
    ledger.record(model, records[-1:])
    assert ledger.refused == 1


def _ledgers(seed: int, sessions: int = 3, turns: int = 30) -> dict[str, dict[str, Any]]:
    return compare_ledgers(generate_workload(seed=seed, sessions=sessions, turns=turns))[0]


def test_side_by_side_each_ledger_fails_as_spec_section_1_says(tmp_path: Any) -> None:
    report = run_baselines(seed=7, sessions=3, turns=40, scaling_sizes=(100, 300), repeat=1,
                           race_nodes=8, state_dir=str(tmp_path))
    json.dumps(report)  # JSON-able, as simulate --json needs
    ledgers = report["ledgers"]
    assert set(ledgers) == set(LEDGERS)
    assert ledgers["cursor"]["omitted"] > 0
    for name in ("naive_rmw", "external_set", "markers"):
        assert ledgers[name]["omitted"] == 0, name
    assert ledgers["markers"]["duplicated"] == 0
    assert ledgers["external_set"]["duplicated"] == 0
    assert ledgers["naive_rmw"]["lost_keys"] > 0
    # A lost marker re-delivers its turn: the naive merge duplicates.
    assert ledgers["naive_rmw"]["duplicated"] > 0
    for name in ("cursor", "external_set", "markers"):
        assert ledgers[name]["lost_keys"] == 0, name
    race = report["race_on_disk"]
    assert race["naive_rmw"]["lost_keys"] == race["nodes"]  # one of two keys per node
    assert 0 < race["naive_rmw"]["lost_markers"] < race["nodes"]
    assert race["session_owner"] == {"lost_keys": 0, "lost_markers": 0}
    assert report["workload"]["kinds"]["re-asks"] > 0
    assert report["owed_scaling"]["sizes"] == [100, 300]
    # The sessions were also written as node files and read through SessionCore.
    assert "core_get_branch" in report["owed_scaling"]["ratios"]
    text = render_baselines(report)
    for label in ("position cursor", "naive read-modify-write", "external set",
                  "scriptorium markers", "owed_from_tip"):
        assert label in text


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_only_the_cursor_omits_and_only_the_naive_merge_loses_keys(seed: int) -> None:
    ledgers = _ledgers(seed)
    assert ledgers["external_set"]["omitted"] == ledgers["markers"]["omitted"] == 0
    assert ledgers["naive_rmw"]["omitted"] == 0
    assert ledgers["markers"]["duplicated"] == ledgers["external_set"]["duplicated"] == 0
    assert ledgers["markers"]["lost_keys"] == ledgers["external_set"]["lost_keys"] == 0
    assert ledgers["cursor"]["lost_keys"] == 0


def test_the_same_seed_gives_the_same_report() -> None:
    assert _ledgers(3) == _ledgers(3)


class _SkipsOneTurn(MarkerLedger):
    """A planted fault: marks one record past the batch, as a cursor-like off-by-one would."""

    name = "planted"

    def record(self, model: SessionModel, batch: Sequence[SourceRecord]) -> None:
        super().record(model, batch)
        tip = model.head
        if tip is None:
            return
        owed = self.owed(model, tip)
        if owed:
            model.merge(owed[0].message_id, {MARKER_KEY: self.workspace_id})


def test_a_ledger_that_skips_a_turn_is_caught() -> None:
    workload = generate_workload(seed=11, sessions=2, turns=30)
    results, _ = compare_ledgers(workload, ledgers=[_SkipsOneTurn(WID, 11, 0.0)])
    assert results["planted"]["omitted"] > 0


def test_with_no_collisions_the_naive_merge_loses_nothing() -> None:
    """Lost keys come from the race, not from the bookkeeping."""
    workload = generate_workload(seed=5, sessions=2, turns=30)
    results, _ = compare_ledgers(workload, ledgers=[NaiveMarkerLedger(WID, 5, 0.0)])
    assert results["naive_rmw"]["lost_keys"] == 0
    assert results["naive_rmw"]["duplicated"] == 0


# -- the tail walk ------------------------------------------------------------------


def _full(index: SessionIndex, session: str, tip: str, workspace: str) -> list[SourceRecord]:
    messages = [node_to_message(n, session) for n in branch(index, session, tip)]
    return unwritten_turns(records_from_branch(session, messages), workspace)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), marked=st.floats(0.0, 1.0))
def test_the_tail_walk_equals_the_full_rule_on_every_tip(seed: int, marked: float) -> None:
    """Markers anywhere (not only a prefix), other workspaces' markers, rewinds, tool rows."""
    workload = generate_workload(seed=seed, sessions=1, turns=25)
    (session, ops), = workload.sessions.items()
    model = SessionModel(session)
    for op in ops:
        model.apply(op, now=0.0)
    rng = random.Random(seed)
    for node_id in list(model.index.nodes):
        if rng.random() < marked:
            model.merge(node_id, {MARKER_KEY: rng.choice([WID, WID, "w-0e4e4e4e"])})
    for tip in model.tips() + [node_id for node_id in model.index.nodes]:
        assert owed_from_tip(model.index, session, tip, WID) == _full(
            model.index, session, tip, WID
        )


class _CountingNodes(dict[str, Node]):
    """The index's node table, counting lookups by the walk."""

    lookups = 0

    def get(self, key: str, default: Any = None) -> Any:
        self.lookups += 1
        return super().get(key, default)


@pytest.mark.parametrize("nodes", [1_000, 10_000])
def test_the_tail_walk_visits_the_backlog_not_the_session(nodes: int) -> None:
    index, tip, _, _ = linear_session(nodes, backlog=10)
    counting = _CountingNodes(index.nodes)
    index.nodes = counting
    owed = owed_from_tip(index, "bench", tip, "w-0b5e1111")
    assert len(owed) == 20  # ten turns, a question and an answer each
    # Ten turns (two with a tool call: 4 rows) and the newest marked record.
    assert counting.lookups == 10 * 2 + 2 * 2 + 1


def test_the_tail_walk_refuses_a_broken_chain_it_has_to_cross() -> None:
    index, tip, _, _ = linear_session(60, backlog=3)
    # Break the chain inside the backlog: the walk must hand over and raise.
    backlog_node = next(n for n in reversed(list(index.nodes.values())) if n.role == "user")
    del index.nodes[backlog_node.predecessor or ""]
    with pytest.raises(BrokenChainError):
        owed_from_tip(index, "bench", tip, "w-0b5e1111")


def test_an_unmarked_branch_is_owed_whole_by_the_tail_walk() -> None:
    index, tip, _, _ = linear_session(60, backlog=3)
    records = owed_from_tip(index, "bench", tip, "w-00000000")  # nobody's markers
    assert _ids(records) == _ids(_full(index, "bench", tip, "w-00000000"))
    assert len(records) == sum(1 for n in index.nodes.values() if n.role != "code" and n.output)


def test_the_scaling_report_names_every_part() -> None:
    scaling = measure_owed_scaling((100, 300), backlog=5, repeat=1)
    json.dumps(scaling)
    assert set(scaling["ratios"]) == {  # no state_dir: nothing measured on disk
        "get_branch", "records_filter", "marker_walk", "cursor", "external_set",
        "markers_full", "markers_tail",
    }
    assert all(v > 0 for row in scaling["rows"].values() for v in row.values())


def test_the_tail_walk_through_a_session_core_equals_the_full_rule(tmp_path: Any) -> None:
    core = SessionCore.create(tmp_path, "s", title="t")
    ids = [core.append({"role": ("user", "assistant")[i % 2], "content": f"turn {i}"})["id"]
           for i in range(12)]
    fork = core.append({"role": "user", "content": "again", "predecessor": ids[5]})["id"]

    def full(tip: str | None) -> list[str]:
        return _ids(unwritten_turns(records_from_branch("s", core.get_branch(tip)), WID))

    for tip in (None, fork, ids[3]):  # nothing marked: the walk hands over to the full rule
        assert _ids(owed_from_core(core, tip, WID)) == full(tip) != []
    core.merge_node_metadata_batch({i: {MARKER_KEY: WID} for i in ids[:8]})
    for tip in (None, fork, ids[3], ids[9]):
        assert _ids(owed_from_core(core, tip, WID)) == full(tip)
    assert _ids(owed_from_core(core, None, WID)) == ids[8:]
    assert _ids(owed_from_core(core, fork, WID)) == [fork]
    empty = SessionCore.create(tmp_path, "e", title="t")
    assert owed_from_core(empty, None, WID) == []
