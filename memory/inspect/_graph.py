"""A session's DAG laid out and drawn as SVG, on the server, in one pass.

The layout is the CLI's tree (``memory/cli``'s session view) turned into
coordinates: one row per turn in depth-first order, a turn with one child
continues in its column, a fork opens a new column for each further child,
and a spawned sub-agent branch hangs under the turn that spawned it. A
column is never reused, so each column's line is one vertical run and a
fork is one elbow: the drawing has about as many elements as turns, and
5,000 turns lay out in milliseconds (the walk is iterative; a 100,000-turn
chain cannot exhaust the recursion limit).

Every text in the drawing comes from a session, so every one is escaped
here (``html.escape``) and cut to a short label; ids in links are
URL-quoted too.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from memory.inspect._state import Turn
from store import Node
from store.lowlevel import drawing_tree

__all__ = ["Layout", "draw_session", "lay_out", "short_text"]

ROW = 18  # pixels per turn
COLUMN = 14  # pixels per column
PAD = 12
LABEL_CHARS = 72


@dataclass(frozen=True, slots=True)
class Layout:
    """Rows and columns of every turn a root reaches, and the lines between them.

    ``runs``: (column, first row, last row), a column's straight line;
    ``elbows``: (parent row, parent column, child row, child column, kind),
    kind ``fork`` or ``spawn``.
    """

    cells: dict[str, tuple[int, int]]  # node id -> (row, column)
    order: tuple[str, ...]  # node ids by row
    runs: tuple[tuple[int, int, int], ...]
    elbows: tuple[tuple[int, int, int, int, str], ...]
    columns: int


def lay_out(nodes: Sequence[Node]) -> Layout:
    """Pure: the layout of ``nodes`` (any order); nodes on a predecessor loop are left out."""
    roots, children = drawing_tree(nodes)
    cells: dict[str, tuple[int, int]] = {}
    order: list[str] = []
    runs: dict[int, list[int]] = {}  # column -> [first row, last row] of its open run
    closed: list[tuple[int, int, int]] = []
    elbows: list[tuple[int, int, int, int, str]] = []
    columns = 0
    stack: list[tuple[Node, int, Node | None]] = []
    for root in reversed(roots):
        stack.append((root, -1, None))
    while stack:
        node, column, parent = stack.pop()
        if node.id in cells:
            continue
        if column < 0:  # a root: a column of its own
            column, columns = columns, columns + 1
        row = len(order)
        cells[node.id] = (row, column)
        order.append(node.id)
        if parent is not None:
            prow, pcol = cells[parent.id]
            if pcol == column and prow == row - 1:
                run = runs.get(column)
                if run is not None and run[1] == prow:
                    run[1] = row
                else:
                    if run is not None:
                        closed.append((column, run[0], run[1]))
                    runs[column] = [prow, row]
            else:
                kind = "fork" if node.predecessor == parent.id else "spawn"  # under its caller
                elbows.append((prow, pcol, row, column, kind))
        kids = children.get(node.id, ())
        # The first child continues this column; each further one opens a new column.
        assigned: list[tuple[Node, int]] = []
        for index, kid in enumerate(kids):
            if index == 0:
                assigned.append((kid, column))
            else:
                assigned.append((kid, columns))
                columns += 1
        for kid, kid_column in reversed(assigned):
            stack.append((kid, kid_column, node))
    closed += [(column, run[0], run[1]) for column, run in runs.items()]
    return Layout(cells, tuple(order), tuple(sorted(closed)), tuple(elbows), max(columns, 1))


def short_text(value: object, width: int = LABEL_CHARS) -> str:
    """A one-line label of a turn's content, whitespace collapsed, cut to ``width``."""
    text = value if isinstance(value, str) else ("" if value is None else repr(value))
    text = " ".join(text[: width * 4].split())
    return text if len(text) <= width else text[: width - 1] + "…"


_ROLE = {"user": "user", "llm": "assistant", "code": "tool"}


def _x(column: int) -> int:
    return PAD + column * COLUMN


def _y(row: int) -> int:
    return PAD + row * ROW


def draw_session(session: str, turns: Sequence[Turn], head: str | None,
                 tips: Sequence[str], quoted: frozenset[str] = frozenset()) -> tuple[str, Layout]:
    """The SVG of a session (already escaped: safe to put in a page as it is).

    ``quoted``: turns highlighted (those a context block quoted, from the memory page).
    """
    layout = lay_out([turn.node for turn in turns])
    by_id = {turn.node.id: turn for turn in turns}
    tip_set = set(tips)
    label_x = _x(layout.columns) + 8
    width = label_x + LABEL_CHARS * 7 + 160
    height = PAD * 2 + max(len(layout.order), 1) * ROW
    base = f"/session/{quote(session, safe='')}/turn/"
    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" class="dag" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{html.escape(f"the DAG of session {session}")}">')]
    out += [f'<line class="edge" x1="{_x(c)}" y1="{_y(a)}" x2="{_x(c)}" y2="{_y(b)}"/>'
            for c, a, b in layout.runs]
    out += [f'<path class="edge {kind}" d="M{_x(pc)} {_y(pr)} H{_x(c)} V{_y(r)}"/>'
            for pr, pc, r, c, kind in layout.elbows]
    for node_id in layout.order:
        turn = by_id[node_id]
        node = turn.node
        row, column = layout.cells[node_id]
        x, y = _x(column), _y(row)
        flags = [flag for flag, on in (("head", node_id == head), ("tip", node_id in tip_set),
                                       ("rewound", node.rewound), ("spawn", node.is_spawn_root),
                                       ("summary", node.is_summary),
                                       ("quoted", node_id in quoted)) if on]
        classes = " ".join(["turn", turn.status, *flags])
        shape = (f'<rect x="{x - 5}" y="{y - 5}" width="10" height="10"/>' if node.is_summary
                 else f'<circle cx="{x}" cy="{y}" r="5"/>')
        ring = f'<circle class="ring" cx="{x}" cy="{y}" r="8"/>' if node_id == head else ""
        note = f" [{', '.join(flags)}]" if flags else ""
        speaker = node.metadata.get("speaker_display")
        who = speaker if isinstance(speaker, str) and speaker else _ROLE.get(node.role, node.role)
        label = f"{node_id} {short_text(who, 24)}: {short_text(node.output)}{note}"
        out.append(
            f'<a href="{base}{quote(node_id, safe="")}" class="{classes}" '
            f'data-turn="{html.escape(node_id)}">{ring}{shape}'
            f'<text x="{label_x}" y="{y + 4}">{html.escape(label)}</text>'
            f'<title>{html.escape(turn.status)}: {html.escape(turn.reason)}</title></a>')
    out.append("</svg>")
    return "".join(out), layout
