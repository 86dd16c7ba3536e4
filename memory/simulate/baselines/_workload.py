"""The seeded workload the baselines share: forking sessions, replayable into any ledger.

SPEC §1 measures the replaced position cursor on one forked session; to
compare ledgers fairly they must all see *the same* conversation. So the
workload is generated once, from a seed, as a list of concrete operations
(append this node with this id and predecessor, move the head, rewind to
this user turn), and each ledger replays it into its own copy of the DAG.
The operations are those SPEC §1 names as the source of forks: retries of a
reply, re-asks from an earlier message, rewinds; plus tool calls and
runtime turns, which occupy rows of an unrolled branch without being
records (the very thing that made the cursor's ordinals lie).

The DAG is a :class:`~store.lowlevel.SessionIndex` walked by the store's own
rules (:func:`~store.lowlevel.branch`, :func:`~store.lowlevel.list_tips`,
:func:`~store.lowlevel.rewind_ids`), so a baseline sees exactly the branches the
runtime would; only the files are left out, which keeps a comparison of
thousands of turns in memory and fast.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from memory.ledger import SourceRecord, records_from_branch
from store import Node, node_to_message
from store.lowlevel import ROOT, SessionIndex, branch, list_tips, rewind_ids

__all__ = ["Op", "SessionModel", "Workload", "generate_workload"]

# Per step, the chance of each kind of turn (the rest are plain turns).
_P_REASK = 0.10
_P_RETRY = 0.10
_P_REWIND = 0.05
_P_RUNTIME = 0.05
_P_TOOL = 0.20


@dataclass(frozen=True, slots=True)
class Op:
    """One replayable operation: ``append`` a node, ``head`` moves, ``rewind`` to a user turn."""

    kind: str  # "append" | "head" | "rewind"
    node: Node | None = None
    target: str | None = None


@dataclass
class SessionModel:
    """One session's DAG in memory: the index, the head, and the store's rules over them."""

    session: str
    index: SessionIndex = field(default_factory=SessionIndex)
    head: str | None = None

    def apply(self, op: Op, now: float) -> None:
        if op.kind == "append":
            assert op.node is not None
            self.index.add(op.node)
        elif op.kind == "head":
            self.head = op.target
        else:
            assert op.kind == "rewind" and op.target is not None and self.head is not None
            for node_id in rewind_ids(self.index, self.session, self.head, op.target):
                node = self.index.nodes[node_id]
                self.index.replace(
                    node.with_metadata({**node.metadata, "rewound": True, "rewound_at": now})
                )
            predecessor = self.index.nodes[op.target].predecessor
            self.head = predecessor if predecessor in self.index.nodes else None

    def merge(self, node_id: str, patch: dict[str, Any]) -> None:
        node = self.index.nodes[node_id]
        self.index.replace(node.with_metadata({**node.metadata, **patch}))

    def messages(self, tip: str) -> list[dict[str, Any]]:
        """``get_branch(tip)``: the visible branch as message dicts, root to tip."""
        return [node_to_message(n, self.session) for n in branch(self.index, self.session, tip)]

    def records(self, tip: str) -> list[SourceRecord]:
        return records_from_branch(self.session, self.messages(tip))

    def tips(self) -> list[str]:
        """Every live tip, the head's first (the order of a session boundary, SPEC §6.6)."""
        rows = list_tips(self.index, {"head_id": self.head})
        others = [row["head_msg_id"] for row in rows if row["head_msg_id"] != self.head]
        return ([self.head] if self.head is not None else []) + others


@dataclass
class Workload:
    """Per session, the operations in order; ``steps`` marks where a turn ends (a trigger point)."""

    seed: int
    sessions: dict[str, list[Op]]
    steps: dict[str, list[int]]  # per session: op counts after which the trigger runs
    kinds: Counter[str]

    @property
    def nodes(self) -> int:
        return sum(1 for ops in self.sessions.values() for op in ops if op.kind == "append")


class _Builder:
    """Generates one session's operations, applying them to a model to choose the next."""

    def __init__(self, session: str, rng: random.Random, kinds: Counter[str]) -> None:
        self.model = SessionModel(session)
        self.rng = rng
        self.kinds = kinds
        self.ops: list[Op] = []
        self.seq = 0
        self.clock = 1_755_000_000.0

    def _do(self, op: Op) -> None:
        self.model.apply(op, self.clock)
        self.ops.append(op)

    def append(
        self, role: str, text: str, predecessor: str | None, *, caller: str = "",
        metadata: dict[str, Any] | None = None, name: str = "",
    ) -> str:
        node_id = f"{self.model.session}-{self.seq:05d}"
        self.clock += 1.0
        node = Node(
            id=node_id, created_at=self.clock, seq=self.seq, role=role, name=name,
            output=text, caller=caller, predecessor=predecessor, metadata=metadata or {},
        )
        self.seq += 1
        self._do(Op("append", node))
        return node_id

    def exchange(self, predecessor: str | None, *, runtime: bool = False) -> None:
        """A user turn and the reply (maybe through a tool call); the head moves to the reply."""
        n = self.seq
        meta = {"display": "runtime", "source": "job_followup"} if runtime else {}
        user = self.append("user", f"question {n}", predecessor or ROOT, metadata=meta)
        last = user
        if self.rng.random() < _P_TOOL:
            call = self.append("llm", "", user, name="model")  # a tool call: no text
            tool = self.append("code", f"tool output {n}", call, caller=call, name="search")
            last = tool
            self.kinds["tool calls"] += 1
        reply = self.append("llm", f"answer {n}", last, name="model")
        self._do(Op("head", target=reply))

    def user_turns(self) -> list[str]:
        """User turns on the visible head branch, oldest first."""
        if self.model.head is None:
            return []
        return [m["id"] for m in self.model.messages(self.model.head)
                if m["role"] == "user" and not m.get("display")]

    def step(self) -> None:
        users = self.user_turns()
        roll = self.rng.random()
        if roll < _P_REASK and len(users) >= 3:
            # Not the first user turn: a second conversation start is refused by the store.
            earlier = self.model.index.nodes[self.rng.choice(users[1:-1])]
            self.kinds["re-asks"] += 1
            self.exchange(earlier.predecessor)
        elif roll < _P_REASK + _P_RETRY and users:
            # Another reply to the last user turn: a sibling of the current reply.
            self.kinds["retries"] += 1
            reply = self.append("llm", f"answer {self.seq} (retry)", users[-1], name="model")
            self._do(Op("head", target=reply))
        elif roll < _P_REASK + _P_RETRY + _P_REWIND and len(users) >= 2:
            self.kinds["rewinds"] += 1
            self._do(Op("rewind", target=users[-1]))
            self.exchange(self.model.head)
        elif roll < _P_REASK + _P_RETRY + _P_REWIND + _P_RUNTIME and users:
            self.kinds["runtime turns"] += 1
            self.exchange(self.model.head, runtime=True)
        else:
            self.kinds["plain turns"] += 1
            self.exchange(self.model.head)


def generate_workload(*, seed: int, sessions: int, turns: int) -> Workload:
    """``sessions`` sessions of ``turns`` steps each, every choice drawn from ``seed``."""
    kinds: Counter[str] = Counter()
    ops: dict[str, list[Op]] = {}
    steps: dict[str, list[int]] = {}
    for number in range(sessions):
        rng = random.Random(f"{seed}/{number}")
        builder = _Builder(f"s{number:04d}", rng, kinds)
        ends: list[int] = []
        for _ in range(turns):
            builder.step()
            ends.append(len(builder.ops))
        ops[builder.model.session] = builder.ops
        steps[builder.model.session] = ends
    return Workload(seed, ops, steps, kinds)
