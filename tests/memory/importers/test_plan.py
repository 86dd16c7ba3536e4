"""The shared plan rules: the id rule is reversible and yields citable ids; parents come first."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memory.importers import Entry, agent_id, node_id
from memory.importers._plan import build_plan
from store.lowlevel import citable_id_problem, validate_id


@given(st.text(min_size=1, max_size=30))
def test_the_id_rule_is_reversible_and_citable(raw: str) -> None:
    stored = node_id(raw)
    assert agent_id(stored) == raw
    if len(stored) <= 128:
        validate_id(stored)
        assert citable_id_problem(stored) is None


def test_ids_that_fit_are_kept_and_others_escaped() -> None:
    assert node_id("83a7cabd-3642-45d6-ba73-9b9f843b9ab1") == "83a7cabd-3642-45d6-ba73-9b9f843b9ab1"
    assert node_id("a/b c") == "%61%2Fb%20c"
    assert node_id("50%") == "%350%25"


def test_the_store_prefix_of_summaries_and_root_are_never_an_agents_turn_id() -> None:
    assert node_id("summary_x") != "summary_x" and agent_id(node_id("summary_x")) == "summary_x"
    assert node_id("ROOT") != "ROOT" and agent_id(node_id("ROOT")) == "ROOT"


def _turn(key: str, parent: str | None, line: int) -> Entry:
    return Entry(key=key, parent=parent, kind="turn", line=line, file="f", content=key)


def test_a_child_logged_before_its_parent_is_planned_after_it() -> None:
    plan = build_plan("x", "s", "t", ["f"], [_turn("c", "b", 1), _turn("a", None, 2),
                                             _turn("b", "a", 3)])
    assert [(t.id, t.predecessor) for t in plan.turns] == [("a", "ROOT"), ("b", "a"), ("c", "b")]
    assert plan.head == "c"


def test_a_second_root_follows_the_turn_before_it_and_keeps_the_missing_parent() -> None:
    plan = build_plan("x", "s", "t", ["f"], [_turn("a", None, 1), _turn("b", "gone", 2)])
    assert [(t.id, t.predecessor) for t in plan.turns] == [("a", "ROOT"), ("b", "a")]
    assert plan.turns[1].metadata["parent_missing"] == "gone"


def test_a_cycle_of_parent_links_is_broken_where_it_is_entered() -> None:
    plan = build_plan("x", "s", "t", ["f"], [_turn("a", None, 1), _turn("b", "c", 2),
                                             _turn("c", "b", 3)])
    assert [(t.id, t.predecessor) for t in plan.turns] == [("a", "ROOT"), ("c", "a"), ("b", "c")]


def test_a_log_of_sub_agent_lines_alone_has_one_first_turn() -> None:
    entries = [Entry(key=k, parent=None, kind="turn", line=n, file="f", main=False)
               for n, k in enumerate(("x", "y"), start=1)]
    plan = build_plan("x", "s", "t", ["f"], entries)
    assert [(t.id, t.predecessor) for t in plan.turns] == [("x", "ROOT"), ("y", "x")]
