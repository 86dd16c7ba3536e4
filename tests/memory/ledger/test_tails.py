"""OwedTails: the owed tail per tip, kept between appends, is always the one a fresh walk finds.

Random sessions (forks, marker merges of this and another workspace,
rewinds, head moves, refused turns, outside writes by a second owner,
reloads) are driven through a real :class:`SessionCore`; after every step
each tip's kept tail is compared with :meth:`NodeRecords.owed` computed
from scratch. The planted faults (a kept tail surviving a merge, an
extension that ignores the new node's marker) must fail it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory._errors import LedgerError
from memory.ledger._records import MARKER_KEY, SourceRecord
from memory.ledger._tails import NodeRecords, OwedTails
from store import Node, SessionCore
from store._index import SessionIndex
from store._walk import branch, visible_back_from

OURS, THEIRS = "ws-ours", "ws-theirs"


def fresh(core: SessionCore, tip: str | None) -> list[SourceRecord] | str:
    records = NodeRecords(core.session)
    try:
        return records.owed(core.nodes_back(tip), lambda: core.branch_nodes(tip), OURS)
    except LedgerError as error:
        return f"{type(error).__name__}: {error}"


def kept(tails: OwedTails, core: SessionCore, tip: str | None) -> list[SourceRecord] | str:
    try:
        return tails.of(core, tip)
    except LedgerError as error:
        return f"{type(error).__name__}: {error}"


def step(rng: random.Random, core: SessionCore, other: SessionCore, serial: int) -> None:
    ids = [node.id for node in core.nodes()]
    choice = rng.random()
    if not ids or choice < 0.55:
        owner = other if rng.random() < 0.15 else core  # sometimes an outside append
        message: dict[str, object] = {
            "id": f"n{serial}", "role": rng.choice(["user", "assistant"]),
            "content": rng.choice(["a question", "an answer", "", "more words here"]),
        }
        if ids:
            message["predecessor"] = (owner.head if rng.random() < 0.7 and owner.head
                                      else rng.choice(ids))
        if rng.random() < 0.05:
            message["authority_schema"] = 1  # a refused turn (SPEC §6.1)
        if rng.random() < 0.05:
            message[MARKER_KEY] = OURS  # a copied turn carrying our marker
        if rng.random() < 0.04:
            message["rewound"] = True  # on no branch
        owner.append(message)
    elif choice < 0.75:
        owner = other if rng.random() < 0.3 else core
        chosen = rng.sample(ids, k=min(len(ids), rng.randint(1, 3)))
        workspace = OURS if rng.random() < 0.8 else THEIRS
        owner.merge_node_metadata_batch({node: {MARKER_KEY: workspace} for node in chosen})
    elif choice < 0.85:
        users = [n.id for n in core.branch_nodes() if n.role == "user"]
        if users:
            core.rewind_to(rng.choice(users))
    elif choice < 0.93:
        core.set_head(rng.choice([n.id for n in core.nodes() if not n.is_summary]))
    else:
        core.reload()


@pytest.mark.parametrize("seed", range(8))
def test_kept_tails_match_a_fresh_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = random.Random(seed)
    core = SessionCore.create(tmp_path, "s")
    other = SessionCore.open(tmp_path, "s")
    tails = OwedTails(NodeRecords("s"), OURS)
    extend = OwedTails._extend
    extended = 0

    def counted(self: OwedTails, core: SessionCore, node_id: str) -> None:
        nonlocal extended
        extend(self, core, node_id)
        extended += node_id in self._kept

    monkeypatch.setattr(OwedTails, "_extend", counted)
    for serial in range(90):
        step(rng, core, other, serial)
        tips = [None, *(row["head_msg_id"] for row in core.list_branches())]
        tips += rng.sample([n.id for n in core.nodes()], k=min(3, len(core.nodes())))
        for tip in tips:
            assert kept(tails, core, tip) == fresh(core, tip), (seed, serial, tip)
    assert extended > 10  # the kept path was taken, not only the walk


class IndexOnly:
    """The reads OwedTails makes, over a hand-built index (nodes no append can make)."""

    def __init__(self) -> None:
        self.index = SessionIndex()
        self.session = "s"
        self.head: str | None = None

    @property
    def index_version(self) -> int:
        return self.index.version

    def added_since(self, version: int) -> list[str] | None:
        return self.index.added_since(version)

    def node(self, node_id: str) -> Node:
        return self.index.nodes[node_id]

    def nodes_back(self, tip: str | None) -> Iterator[Node]:
        assert tip is not None
        return visible_back_from(self.index, tip)

    def branch_nodes(self, tip: str | None) -> list[Node]:
        assert tip is not None
        return branch(self.index, self.session, tip)

    def add(self, node_id: str, predecessor: str | None, **metadata: object) -> None:
        self.index.add(Node(id=node_id, created_at=float(len(self.index.nodes)),
                            seq=len(self.index.nodes), role="user", output=f"turn {node_id}",
                            predecessor=predecessor, metadata=dict(metadata)))


def walk(core: IndexOnly, tip: str) -> list[SourceRecord]:
    return NodeRecords("s").owed(core.nodes_back(tip), lambda: core.branch_nodes(tip), OURS)


def test_a_new_node_with_our_marker_owes_nothing_after_it() -> None:
    core = IndexOnly()
    tails = OwedTails(NodeRecords("s"), OURS)
    core.add("u1", "ROOT")
    assert [r.message_id for r in tails.of(core, "u1")] == ["u1"]  # type: ignore[arg-type]
    core.add("u2", "u1", **{MARKER_KEY: OURS})  # a file the agent copied, marker and all
    assert tails.of(core, "u2") == walk(core, "u2") == []  # type: ignore[arg-type]


def test_a_child_of_a_node_named_root_starts_its_own_branch() -> None:
    core = IndexOnly()
    tails = OwedTails(NodeRecords("s"), OURS)
    core.add("ROOT", None)  # a real root node, without display: it owes its own turn
    assert [r.message_id for r in tails.of(core, "ROOT")] == ["ROOT"]  # type: ignore[arg-type]
    core.add("u1", "ROOT")  # its walk ends at "ROOT" without including that node
    assert ([r.message_id for r in tails.of(core, "u1")]  # type: ignore[arg-type]
            == [r.message_id for r in walk(core, "u1")] == ["u1"])
