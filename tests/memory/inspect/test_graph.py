"""The session DAG's layout: one row per turn, a column per branch, cheap for long sessions."""

from __future__ import annotations

import re

from memory.inspect._graph import draw_session, lay_out
from memory.inspect._state import Turn
from store import Node


def _node(node_id: str, seq: int, predecessor: str | None, **metadata: object) -> Node:
    caller = str(metadata.pop("caller", ""))
    return Node(node_id, float(seq), seq, "user", output=f"text {node_id}",
                predecessor=predecessor, caller=caller, metadata=dict(metadata))


def test_a_chain_is_one_column_and_one_line_even_at_100000_turns() -> None:
    nodes = [_node(f"n{i}", i, f"n{i - 1}" if i else "ROOT") for i in range(100_000)]
    layout = lay_out(nodes)
    assert layout.columns == 1
    assert layout.runs == ((0, 0, 99_999),)
    assert layout.elbows == ()
    assert layout.cells["n99999"] == (99_999, 0)


def test_a_fork_opens_a_column_and_a_spawn_hangs_under_its_caller() -> None:
    nodes = [
        _node("a", 0, "ROOT"), _node("b", 1, "a"), _node("c", 2, "b"),
        _node("b2", 3, "a"),  # a retry of b: a second branch from a
        _node("s", 4, None, spawn_branch_root=True, caller="b"), _node("s2", 5, "s"),
    ]
    layout = lay_out(nodes)
    assert layout.order == ("a", "b", "c", "s", "s2", "b2")  # depth first, like session show
    assert layout.cells["b2"][1] != layout.cells["b"][1]
    kinds = {(layout.order[row], layout.order[child]): kind
             for row, _, child, _, kind in layout.elbows}
    assert kinds == {("a", "b2"): "fork", ("b", "s"): "spawn"}
    assert layout.columns == 3


def test_a_predecessor_loop_is_left_out_not_drawn_forever() -> None:
    nodes = [_node("a", 0, "ROOT"), _node("x", 1, "y"), _node("y", 2, "x")]
    assert lay_out(nodes).order == ("a",)


def test_every_text_of_the_drawing_is_escaped() -> None:
    node = Node('"><script>x</script>', 0.0, 0, "user", output="<b onclick=alert(1)>&",
                metadata={"speaker_display": "<i>Eve</i>"})
    svg, _ = draw_session("s<1>", [Turn(node, "owed", "<why>")], node.id, [node.id])
    assert "<script>" not in svg and "<b " not in svg and "<i>" not in svg
    assert "&lt;b onclick=alert(1)&gt;&amp;" in svg and "&lt;why&gt;" in svg
    assert re.findall(r'href="([^"]*)"', svg) == [
        "/session/s%3C1%3E/turn/%22%3E%3Cscript%3Ex%3C%2Fscript%3E"]
