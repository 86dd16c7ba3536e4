"""Drawing a session's DAG for a person (``scriptorium session show``).

A session with thousands of turns is mostly long straight runs, so the
drawing indents only where the conversation forks: a node with one child
continues on the same column, a node with several children opens a
``├─``/``└─`` fan. Spawned sub-agent branches hang under the node that
spawned them. Each line shows the turn's role, a short text, and whether
this workspace's marker is on it, which is the ledger made visible.

Pure: it takes nodes and returns lines; the walk is iterative, so a
100,000-node chain cannot exhaust the recursion limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from memory.ledger._records import MARKER_KEY
from store import Node
from store.lowlevel import drawing_tree

__all__ = ["render_session_tree"]

_ROLE = {"user": "user", "llm": "assistant", "code": "tool"}


def render_session_tree(
    nodes: Iterable[Node], *, head: str | None, workspace_id: str | None, width: int = 48,
) -> list[str]:
    """The drawing of every node a root reaches.

    Nodes on a predecessor loop (and what hangs off them) have no root to be
    drawn from: the caller names them (``store.lowlevel.predecessor_cycles``).
    """
    roots, children = drawing_tree(nodes)
    lines: list[str] = []
    stack: list[tuple[Node, str, str]] = [(root, "", "") for root in reversed(roots)]
    while stack:
        node, first, rest = stack.pop()
        lines.append(first + _describe(node, head, workspace_id, width))
        kids: Sequence[Node] = children.get(node.id, ())
        if len(kids) == 1:
            stack.append((kids[0], rest, rest))
            continue
        for index in range(len(kids) - 1, -1, -1):
            last = index == len(kids) - 1
            stack.append(
                (kids[index], rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "))
            )
    return lines


def _describe(node: Node, head: str | None, workspace_id: str | None, width: int) -> str:
    text = node.output if isinstance(node.output, str) else ""
    text = " ".join(text.split())
    if len(text) > width:
        text = text[: width - 1] + "…"
    flags: list[str] = []
    if node.id == head:
        flags.append("HEAD")
    if node.is_spawn_root:
        flags.append(f"spawned by {node.caller}")
    if node.is_summary:
        flags.append("summary")
    if node.is_attach:
        flags.append(f"attach row of {node.caller}" if node.caller else "attach row")
    if node.rewound:
        flags.append("rewound")
    if node.display == "root":
        flags.append("root")
    marker = node.metadata.get(MARKER_KEY)
    if marker is not None:
        flags.append("written" if marker == workspace_id else "foreign marker")
    suffix = f"  [{', '.join(flags)}]" if flags else ""
    return f"{node.id} {_ROLE.get(node.role, node.role)}: {text!r}{suffix}"
