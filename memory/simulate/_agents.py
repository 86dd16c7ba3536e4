"""Simulated agents: seeded conversations that grow real DAGs through the runtime.

The runtime's claims are about DAGs, so a stress load of straight chains
would prove nothing. Each simulated agent owns one session and, turn by turn,
does what a real agent's user does: talks, retries a reply (a sibling
assistant turn, sometimes chosen as the new head), re-asks from an earlier
message (a fork the conversation then follows), rewinds its last exchange,
spawns a same-session sub-agent branch, compacts (a summary node), goes idle
long enough for the idle watchdog to write it, and resumes.

Every choice comes from the agent's own ``random.Random(seed, index)``, so a
seed reproduces the same conversations. An agent survives a runtime crash:
its progress lives here, and on the next incarnation it re-reads its head
branch and carries on. Each acknowledged metadata key is reported to a
:class:`Acknowledged` ledger that the oracle checks against the files.

An agent also survives its session actor crashing under a call (the
``actor-crash`` fault, before or after the call's effect). Every append
carries the agent's own id, so the kernel delivers it again and a repeat
returns the turn already there; if the call still fails, the agent sends
the same message again (same id: never a second copy). A call that is not
idempotent (a rewind, a spawn, a summary) fails with ``ActorCrashedError`` and
may or may not have happened: the agent re-reads its branch and goes on,
never repeating it. Each turn carries :data:`SIM_TURN`, the identity the
oracle's "no turn appended twice" counts.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from actors import ActorCrashedError, ActorError
from memory.runtime._runtime import MemoryRuntime
from store import StoreError

__all__ = ["SIM_KEY", "SIM_TURN", "Acknowledged", "Agent", "Mix", "chatter", "sentence"]

SIM_KEY = "sim_agent"  # a metadata key every simulated turn carries (the oracle tracks it)
SIM_TURN = "sim_turn"  # which turn of the agent a node is: the same on every retry of it
# Sends of one append (its retries keep the message, id included) before giving up.
APPEND_ATTEMPTS = 4
# Message-view fields that are not metadata (SPEC §4 message view).
_VIEW_FIELDS = frozenset({
    "id", "session_id", "role", "content", "predecessor", "caller", "timestamp",
    "token_model", "function", "extra", "status",
})

_PEOPLE = ("Alice", "Bob", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun")
_THINGS = ("green tea", "hiking", "jazz", "espresso", "chess", "sailing", "sushi", "rust",
           "gardening", "cycling", "opera", "pottery")
_PROJECTS = ("the billing service", "the mobile app", "the search index", "the data pipeline",
             "the design system", "the onboarding flow")
_CITIES = ("Berlin", "Lisbon", "Osaka", "Nairobi", "Toronto", "Lyon", "Quito", "Tallinn")
# Questions and pleasantries: real turns are mostly these, and a writer keeps none of them.
_CHATTER = ("Could you walk me through the trade-offs here before we commit?",
            "What did we say about this part of the plan last time?",
            "Can you check that against what I told you earlier?",
            "Thanks", "Sounds good", "Got it", "Okay")


def sentence(rng: random.Random) -> str:
    """One statement of the kind an extractive writer keeps; a small vocabulary repeats facts."""
    kind = rng.randrange(5)
    if kind == 0:
        return f"I prefer {rng.choice(_THINGS)} over {rng.choice(_THINGS)} most days."
    if kind == 1:
        return f"We decided to ship {rng.choice(_PROJECTS)} before the end of the quarter."
    if kind == 2:
        return f"My colleague {rng.choice(_PEOPLE)} is leading {rng.choice(_PROJECTS)}."
    if kind == 3:
        return f"The deadline for {rng.choice(_PROJECTS)} moved to week {rng.randrange(1, 53)}."
    return f"The team office is in {rng.choice(_CITIES)} near the old harbour."


def chatter(rng: random.Random) -> str:
    return rng.choice(_CHATTER)


@dataclass(frozen=True)
class Mix:
    """Per-turn probabilities of each agent behaviour (the rest are plain turns)."""

    retry: float = 0.05
    fork: float = 0.06
    rewind: float = 0.02
    spawn: float = 0.02
    compact: float = 0.01
    idle: float = 0.004
    # Statements per turn, beside one line of chatter (the extractive writer files
    # chatter as a conversation unit, so (0, 0) is a valid, all-chatter mix).
    facts: tuple[int, int] = (1, 2)
    idle_seconds: float = 1.0


@dataclass
class Acknowledged:
    """Every metadata key the runtime acknowledged writing, per ``(session, node)``."""

    keys: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    # When each session's latest compaction summary append returned (wall clock):
    # a summary's created_at is backdated before the turns it covers, so the
    # node files alone cannot say when the session was last appended to.
    summarised: dict[str, float] = field(default_factory=dict)

    def add(self, session: str, node: str, keys: Iterable[str]) -> None:
        self.keys[(session, node)].update(keys)

    def add_view(self, session: str, message: Mapping[str, Any]) -> None:
        """A returned message view: every key that is not a view field is metadata."""
        self.add(session, str(message["id"]), (k for k in message if k not in _VIEW_FIELDS))


@dataclass
class Agent:
    """One simulated conversation; ``step`` until ``done``."""

    index: int
    session: str
    turns: int
    seed: int
    mix: Mix
    acknowledged: Acknowledged
    done_turns: int = 0
    actions: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    refused: int = 0
    errors: int = 0  # calls that failed because the session actor could not be healed
    crashed: int = 0  # non-idempotent calls that crashed their actor (outcome unknown)
    retried: int = 0  # appends sent again after their session actor failed them
    ack_seconds: list[float] = field(default_factory=list)  # per append: first send to return
    line: list[tuple[str, str]] = field(default_factory=list)  # (node id, role) of the head branch
    rng: random.Random = field(init=False)
    _ids: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.seed}/{self.index}")

    @property
    def done(self) -> bool:
        return self.done_turns >= self.turns

    def _next_id(self) -> str:
        self._ids += 1
        return f"a{self.index}-{self._ids}"

    def _text(self) -> str:
        low, high = self.mix.facts
        facts = [sentence(self.rng) for _ in range(self.rng.randint(low, high))]
        return " ".join([chatter(self.rng), *facts])

    async def resync(self, rt: MemoryRuntime) -> None:
        """Re-read the head branch (after a runtime restart or an outside append)."""
        branch = await rt.sessions.get_branch(self.session)
        self.line = [(str(m["id"]), str(m["role"])) for m in branch]

    async def run(self, rt: MemoryRuntime) -> None:
        """The closed loop: the next step as soon as the last one returned, until ``done``."""
        await self.resync(rt)
        while not self.done:
            await self.arrive(rt)

    async def arrive(self, rt: MemoryRuntime) -> None:
        """One step, as an arrival of the open loop issues it; its expected refusals absorbed."""
        try:
            await self.step(rt)
        except StoreError:
            # A refused request (a stale fork point, an outside writer moved the
            # head): nothing changed; re-read and go on, as an agent would.
            self.refused += 1
            await self.resync(rt)
        except ActorError as error:
            if isinstance(error, ActorCrashedError) and not error.redeliverable:
                # A rewind, spawn or summary crashed its actor and was not delivered
                # again: it may or may not have happened. Re-read, never repeat it.
                self.crashed += 1
                await self.resync(rt)
                return
            # The message crashed its actor more often than redelivery allows
            # (PoisonMessageError) or the supervisor gave the session up: counted and
            # reported; the oracle still judges the files.
            self.errors += 1
            if self.errors > 3:
                raise
            await self.resync(rt)

    async def _append(self, rt: MemoryRuntime, role: str, predecessor: str | None,
                      caller: str | None = None) -> str:
        node_id = self._next_id()
        message: dict[str, Any] = {"id": node_id, "role": role, "content": self._text(),
                                   SIM_KEY: self.index, SIM_TURN: node_id}
        if predecessor is not None:
            message["predecessor"] = predecessor
        if caller is not None:
            message["caller"] = caller
        sent = time.perf_counter()
        for attempt in range(1, APPEND_ATTEMPTS + 1):
            try:
                node = await rt.sessions.append(self.session, message)
                break
            except ActorError:
                # Crashed more often than redelivery allows, or between incarnations:
                # the same message again is safe (its id makes the append idempotent).
                if attempt == APPEND_ATTEMPTS:
                    raise
                self.retried += 1
        self.ack_seconds.append(time.perf_counter() - sent)
        self.done_turns += 1
        self.acknowledged.add_view(self.session, node)
        return str(node["id"])

    async def step(self, rt: MemoryRuntime) -> None:
        roll = self.rng.random()
        mix = self.mix
        for action, share in (("retry", mix.retry), ("fork", mix.fork), ("rewind", mix.rewind),
                              ("spawn", mix.spawn), ("compact", mix.compact),
                              ("idle", mix.idle)):
            if roll < share:
                await getattr(self, f"_{action}")(rt)
                self.actions[action] += 1
                return
            roll -= share
        await self._turn(rt)
        self.actions["turn"] += 1

    async def _turn(self, rt: MemoryRuntime) -> None:
        role = "assistant" if self.line and self.line[-1][1] == "user" else "user"
        node = await self._append(rt, role, None)  # at the head, wherever it is now
        self.line.append((node, role))

    async def _retry(self, rt: MemoryRuntime) -> None:
        """A sibling of the last reply; the user keeps it half of the time."""
        if len(self.line) < 2 or self.line[-1][1] != "assistant":
            return await self._turn(rt)
        asked = self.line[-2][0]
        node = await self._append(rt, "assistant", asked)
        if self.rng.random() < 0.5:
            await rt.sessions.set_head(self.session, node)
            self.line[-1] = (node, "assistant")

    async def _fork(self, rt: MemoryRuntime) -> None:
        """Re-ask from an earlier reply; the conversation follows the new branch."""
        replies = [i for i, (_, role) in enumerate(self.line[:-1]) if role == "assistant"]
        if not replies:
            return await self._turn(rt)
        at = self.rng.choice(replies)
        node = await self._append(rt, "user", self.line[at][0])
        await rt.sessions.set_head(self.session, node)
        self.line = [*self.line[: at + 1], (node, "user")]

    async def _rewind(self, rt: MemoryRuntime) -> None:
        """Undo the last exchange: rewind to the last user turn of the head branch."""
        users = [i for i, (_, role) in enumerate(self.line) if role == "user"]
        if not users:
            return await self._turn(rt)
        at = users[-1]
        stamped = await rt.sessions.rewind_to(self.session, self.line[at][0])
        for node in stamped:
            self.acknowledged.add(self.session, node, ("rewound", "rewound_at"))
        self.line = self.line[:at]

    async def _spawn(self, rt: MemoryRuntime) -> None:
        """A same-session sub-agent branch of one to three turns under the last reply."""
        if not self.line:
            return await self._turn(rt)
        # The agent's own tag in the prompt: what tells a second copy from a second spawn.
        root = await rt.sessions.spawn_branch(self.session, self.line[-1][0], "agent_spawn",
                                              f"Sub-agent {self._next_id()}: {self._text()}")
        self.done_turns += 1
        self.acknowledged.add_view(self.session, root)
        previous = str(root["id"])
        for turn in range(self.rng.randint(1, 3)):
            previous = await self._append(rt, "assistant" if turn % 2 == 0 else "user", previous)

    async def _compact(self, rt: MemoryRuntime) -> None:
        """Summarise the oldest few turns of the head branch."""
        if len(self.line) < 4:
            return await self._turn(rt)
        covers = [node for node, _ in self.line[: self.rng.randint(2, 4)]]
        try:
            summary = await rt.sessions.insert_summary(
                self.session, covers, f"Summary {self._next_id()}: {self._text()}")
        finally:
            # Also when it crashed: it may have landed, before this moment.
            self.acknowledged.summarised[self.session] = rt.config.clock()
        self.done_turns += 1
        self.acknowledged.add_view(self.session, summary)

    async def _idle(self, rt: MemoryRuntime) -> None:
        """Go quiet past the idle timeout: the watchdog writes the session meanwhile."""
        await anyio.sleep(self.mix.idle_seconds)
        await self.resync(rt)  # resume where the head is now
