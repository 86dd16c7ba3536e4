"""Branch walks and tip rules, on the reference agent's fixture and on built DAGs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from store._errors import BrokenChainError, ChainCycleError, NodeNotFoundError
from store._format import decode_node
from store._index import SessionIndex, load_index
from store._node import ROOT, Node
from store._walk import absorbed_covers, branch, chain, list_tips, rewind_ids, trunk_tip
from tests.fixture import FIXTURE


def _fixture_index() -> SessionIndex:
    index = load_index(str(FIXTURE / "sessions" / "demo"), "sessions/demo", 1 << 25)
    assert index.problems == []
    return index


def _ids(nodes: list[Node]) -> list[str]:
    return [n.id for n in nodes]


@pytest.mark.parametrize(
    ("tip", "expected"),
    [
        ("a1", ["u1", "a1"]),
        ("a2", ["u1", "a1"]),  # u2 and a2 are rewound
        ("a2b", ["u1", "a1", "a2b"]),  # u2 is rewound, the retry sibling is not
        ("sp1", ["sp1"]),  # spawn root: the walk stops there
        ("summary_cebcf71b21", ["summary_cebcf71b21"]),
    ],
)
def test_fixture_branch_for_each_tip(tip: str, expected: list[str]) -> None:
    assert _ids(branch(_fixture_index(), "demo", tip)) == expected


def test_fixture_chain_keeps_rewound_nodes() -> None:
    assert _ids(chain(_fixture_index(), "demo", "a2")) == ["u1", "a1", "u2", "a2"]


def test_fixture_tips() -> None:
    meta = json.loads((FIXTURE / "sessions" / "demo" / "meta.json").read_text())
    rows = list_tips(_fixture_index(), meta)
    assert [r["head_msg_id"] for r in rows] == ["sp1", "a2b", "a2"]
    assert rows[0] == {"head_msg_id": "sp1", "name": "probe", "created_at": 1796006370.6985521,
                       "updated_at": 1796006370.6985521, "archived": False}
    assert rows[1]["updated_at"] == 1755000003.0  # no branches entry: the node's created_at
    # sorted by updated_at, newest first: an older branches entry sorts last
    meta["branches"]["sp1"]["updated_at"] = 5.0
    assert [r["head_msg_id"] for r in list_tips(_fixture_index(), meta)] == ["a2b", "a2", "sp1"]


def test_fixture_trunk_tip_follows_first_children() -> None:
    assert trunk_tip(_fixture_index()) == "a2"


def test_merged_heads_are_dropped() -> None:
    rows = list_tips(_fixture_index(), {"merged_heads": ["a2"]})
    assert "a2" not in [r["head_msg_id"] for r in rows]


# -- built DAGs --------------------------------------------------------------------


def _index(*nodes: Node) -> SessionIndex:
    index = SessionIndex()
    for node in nodes:
        index.add(node)
    return index


def _n(node_id: str, seq: int, role: str = "user", predecessor: str | None = ROOT,
       caller: str = "", name: str = "", **metadata: Any) -> Node:
    return Node(id=node_id, created_at=float(seq), seq=seq, role=role, name=name,
                predecessor=predecessor, caller=caller, metadata=metadata)


def test_trunk_tip_is_listed_even_with_children() -> None:
    # u1 -> a1 -> u2 (-> a2), and a1 -> u2b: u2 is the trunk, a2 its tip
    index = _index(_n("u1", 0), _n("a1", 1, "llm", "u1"), _n("u2", 2, "user", "a1"),
                   _n("u2b", 3, "user", "a1"), _n("a2", 4, "llm", "u2"))
    tips = [r["head_msg_id"] for r in list_tips(index, {})]
    assert sorted(tips) == ["a2", "u2b"]


def test_function_runs_attach_rows_and_context_nodes_are_not_tips() -> None:
    index = _index(
        _n("u1", 0), _n("a1", 1, "llm", "u1"),
        _n("c1", 2, "code", "a1", caller="a1"),  # a tool call: inside a function run
        _n("l2", 3, "llm", "c1", caller="c1"),  # an llm called by code: inside a run
        _n("at", 4, "llm", "a1", caller="u1", function="attach"),
        _n("ctx", 5, "llm", "a1", name="context/notes"),
        _n("rt", 6, "llm", "a1", display="runtime"),
    )
    tips = [r["head_msg_id"] for r in list_tips(index, {})]
    # a1's children do not continue the conversation (code, attach, context,
    # runtime), so a1 is a tip; rt is a candidate with no children. l2 is no
    # candidate, but the trunk's first children (c1, then l2) end there.
    assert sorted(tips) == ["a1", "l2", "rt"]
    assert trunk_tip(index) == "l2"


def test_the_trunk_follows_attach_rows_and_lists_one_as_its_tip() -> None:
    # The reference agent's merge of a sub-agent: an attach row registered as
    # a1's first child, the conversation going on from a1 after it.
    index = _index(
        _n("u1", 0), _n("a1", 1, "llm", "u1"),
        _n("at", 2, "llm", "a1", function="attach"),
        _n("u2", 3, "user", "a1"), _n("a2", 4, "llm", "u2"),
    )
    meta = {"branches": {"at": {"name": "merge", "created_at": 50.0, "updated_at": 60.0}}}
    assert trunk_tip(index) == "at"
    rows = {r["head_msg_id"]: r for r in list_tips(index, meta)}
    assert set(rows) == {"at", "a2"}
    # the trunk tip's row takes its times from the node, not from meta branches
    assert (rows["at"]["name"], rows["at"]["created_at"], rows["at"]["updated_at"]) == (
        "merge", 2.0, 2.0)


def test_display_root_nodes_are_dropped_and_end_nothing() -> None:
    index = _index(_n(ROOT, 0, display="root"), _n("u1", 1, "user", ROOT),
                   _n("a1", 2, "llm", "u1"))
    assert _ids(branch(index, "s", "a1")) == ["u1", "a1"]
    assert [r["head_msg_id"] for r in list_tips(index, {})] == ["a1"]


def test_summary_ids_are_never_tips() -> None:
    index = _index(_n("u1", 1), _n("a1", 2, "llm", "u1"),
                   _n("summary_0123456789", 3, "llm", ROOT, name="", covers_ids=["u1"]))
    assert "summary_0123456789" not in [r["head_msg_id"] for r in list_tips(index, {})]


def test_broken_chain_and_cycle_are_typed_errors() -> None:
    broken = _index(_n("u1", 0), _n("a1", 1, "llm", "gone"))
    with pytest.raises(BrokenChainError, match="'gone' is not in the session"):
        branch(broken, "s", "a1")
    cyclic = _index(_n("x", 0, "user", "y"), _n("y", 1, "llm", "x"))
    with pytest.raises(ChainCycleError):
        branch(cyclic, "s", "y")
    orphan = _index(_n("u1", 0), _n("a1", 1, "llm", None))
    with pytest.raises(BrokenChainError, match="null"):
        branch(orphan, "s", "a1")
    with pytest.raises(NodeNotFoundError):
        branch(broken, "s", "nope")


def test_null_predecessor_is_legal_on_first_node_spawn_root_and_summary() -> None:
    index = _index(_n("u1", 0, "user", None), _n("a1", 1, "llm", "u1"),
                   _n("sp", 2, "user", None, caller="a1", spawn_branch_root=True),
                   _n("summary_x", 3, "llm", None, covers_ids=["u1"]))
    assert _ids(branch(index, "s", "a1")) == ["u1", "a1"]
    assert _ids(branch(index, "s", "sp")) == ["sp"]
    assert _ids(branch(index, "s", "summary_x")) == ["summary_x"]


def test_rewind_ids_cover_the_chain_and_sub_calls_but_not_spawns() -> None:
    index = _index(_n("u1", 0), _n("a1", 1, "llm", "u1"), _n("u2", 2, "user", "a1"),
                   _n("a2", 3, "llm", "u2"), _n("c2", 4, "code", "a2", caller="a2"),
                   _n("sp", 5, "user", None, caller="a2", spawn_branch_root=True))
    assert rewind_ids(index, "s", "a2", "u2") == ["u2", "a2", "c2"]


def test_rolling_summaries_absorb_older_covers() -> None:
    index = _index(_n("u1", 0), _n("a1", 1, "llm", "u1"), _n("u2", 2, "user", "a1"),
                   _n("summary_old", 3, "llm", ROOT, covers_ids=["u1", "a1"]))
    assert absorbed_covers(index, "s", ["summary_old", "u2"]) == [
        "u1", "a1", "summary_old", "u2"]


def test_fixture_nodes_decode_the_same_through_the_index() -> None:
    index = _fixture_index()
    for name in index.files.values():
        path = FIXTURE / "sessions" / "demo" / "history" / name
        assert decode_node(path.read_bytes(), name) == index.nodes[name.split("-", 2)[2][:-5]]
