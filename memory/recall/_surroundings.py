"""A turn's surroundings: the turns next to it in its session's DAG, whose words it is found by.

An answer rarely repeats the question's words, so the index also matches a
turn by the words of the turns around it (the ``around`` column). Which
turns those are is a question about the session's DAG, not about the
index: this module reads each turn's predecessor from the store
(:class:`Predecessors`) and picks the neighbours (:func:`surroundings`,
pure); :mod:`memory.recall._index` writes the words in.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Mapping, Sequence

from store import StoreError
from store.lowlevel import decode_node, parse_filename

__all__ = ["REACH", "Predecessors", "surroundings", "write_surroundings"]

# How many turns either side count as a turn's surroundings.
REACH = 3


class Predecessors:
    """Each turn's predecessor, from the session store beside the workspace.

    A turn's surroundings are the turns next to it in its session's DAG,
    and an archive holds turns of every branch in the order they were
    written, so it cannot say which turns are next to which; the store can.
    The node files (``<state>/sessions/<sid>/history/*.json``, SPEC §4) are
    read with the store's own decoder, each once per process: a node's
    predecessor never changes. A session without a readable store gives
    nothing (the archive's order is used instead).
    """

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self._known: dict[str, dict[str, str | None]] = {}

    def of(self, session: str) -> dict[str, str | None]:
        """Node id -> predecessor id (``ROOT`` or None at a root) of every node of ``session``."""
        known = self._known.setdefault(session, {})
        history = os.path.join(self.state_dir, "sessions", session, "history")
        try:
            names = os.listdir(history)
        except OSError:
            return known
        for name in names:
            parsed = parse_filename(name)
            if parsed is None or parsed[2] in known:
                continue
            path = os.path.join(history, name)
            try:
                with open(path, "rb") as handle:
                    node = decode_node(handle.read(), path)
            except (OSError, StoreError):
                continue  # unreadable: the store reports it; this turn uses the archive's order
            known[node.id] = node.predecessor
        return known


def surroundings(
    turns: Sequence[tuple[int, str, str]], links: Mapping[str, str | None],
    changed: Iterable[int],
) -> dict[int, str]:
    """The ``around`` words of each turn whose surroundings ``changed`` turns may have moved.

    ``turns`` are ``(seq, node id, text)`` of one archive (all of them, or a
    window of seqs when ``links`` is empty); ``links`` maps node ids to
    their predecessors. A turn whose node id ``links`` knows is surrounded
    by its :data:`REACH` nearest archived ancestors (skipping nodes the
    archive does not hold, such as tool calls) and its descendants down a
    chain with no fork: below a fork, which branch follows depends on the
    branch asked from, so none does. Neither a rewound sibling nor the turns
    below it are ever a turn's neighbours. A turn ``links`` does not know
    is surrounded by the :data:`REACH` turns either side of it in the
    archive, as before. Pure.
    """
    by_seq = {seq: (node, text) for seq, node, text in turns}
    seq_of = {node: seq for seq, node, _ in turns}
    parent: dict[int, int | None] = {}
    children: dict[int, list[int]] = {}
    for seq, node, _ in turns:
        if node not in links:
            continue
        above, steps = links[node], 0
        while above is not None and above not in seq_of and above in links and steps < 64:
            above, steps = links[above], steps + 1  # past nodes the archive does not hold
        parent[seq] = seq_of.get(above) if above is not None else None
        if parent[seq] is not None:
            children.setdefault(parent[seq] or 0, []).append(seq)

    def ancestors(seq: int) -> list[int]:
        found: list[int] = []
        above = parent.get(seq)
        while above is not None and len(found) < REACH:
            found.append(above)
            above = parent.get(above)
        return found[::-1]

    def descendants(seq: int) -> list[int]:
        found: list[int] = []
        below = children.get(seq, [])
        while len(below) == 1 and len(found) < REACH:
            found.append(below[0])
            below = children.get(below[0], [])
        return found

    def near(seq: int) -> list[int]:
        if seq in parent:
            return ancestors(seq) + descendants(seq)
        return [n for n in range(seq - REACH, seq + REACH + 1) if n != seq]

    changed = [seq for seq in changed if seq in by_seq]
    affected = {n for seq in changed for n in range(seq - REACH, seq + 1)}
    for seq in changed:  # whose ancestors or fork-free descendants a new turn may be
        step = [seq]
        for _ in range(REACH):
            step = [n for m in step for n in (*children.get(m, []), parent.get(m)) if n is not None]
            affected.update(step)
    return {seq: " ".join(by_seq[n][1] for n in near(seq) if n in by_seq)
            for seq in sorted(affected) if seq in by_seq}


def write_surroundings(db: sqlite3.Connection, predecessors: Predecessors, relative: str,
                       session: str, first: int, last: int) -> None:
    """Set the ``around`` column (the adjacent turns' words) after turns ``first..last`` came.

    Adjacent in the session's DAG (:func:`surroundings`) when the store
    says each turn's predecessor; in the archive's order for a turn it
    does not know (an archive without its session store).
    """
    links = predecessors.of(session)
    if not links:
        rows = list(db.execute(
            "SELECT id, seq, node_id, text FROM unit WHERE path=? AND seq BETWEEN ? AND ?"
            " ORDER BY seq", (relative, first - 2 * REACH, last + REACH)))
    else:
        rows = list(db.execute("SELECT id, seq, node_id, text FROM unit WHERE path=?"
                               " ORDER BY seq", (relative,)))
    turns = [(int(seq), str(node), str(text)) for _, seq, node, text in rows]
    idents = {int(seq): int(ident) for ident, seq, _, _ in rows}
    for seq, around in surroundings(turns, links, range(first, last + 1)).items():
        db.execute("UPDATE fts SET around=? WHERE rowid=?", (around, idents[seq]))
