"""The open loop of ``scriptorium simulate --rate R``: turns arrive on a clock, not on completion.

A closed loop (each agent appends its next turn when the last one
returned) slows down with the runtime, so its latencies hide the queue a
real load would build: the runtime is never offered more than it can
take. Here the arrivals are fixed in advance, at an average rate of ``R``
turns/s across all sessions (:func:`arrival_offsets`: a Poisson process or
a fixed interval, seeded), and issued at their times whatever the runtime
does (:class:`OpenLoop`).

Arrival ``k`` belongs to lane ``k % lanes``, one lane per simulated agent:
a conversation's turns follow each other, so a lane issues its next
arrival only when its previous turn has returned. An arrival whose time
comes while its lane is still busy is issued as soon as the lane is free
and counted as *late*, with how late it was: never dropped, never
silently rescheduled. Other lanes keep their times. A runtime that holds
its callers up therefore shows as late arrivals, not as a lower rate.

The loop survives a runtime crash: each lane's next arrival is kept here,
and the next incarnation resumes the same schedule (its arrivals are late
by the time the reopening took).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio

__all__ = ["ARRIVALS", "OpenLoop", "arrival_offsets"]

ARRIVALS = ("poisson", "fixed")


def arrival_offsets(rate: float, count: int, *, arrivals: str = "poisson",
                    seed: int = 0) -> list[float]:
    """The seconds after the start at which each of ``count`` turns arrives, at ``rate`` per s.

    ``poisson``: exponential gaps of mean ``1/rate`` from a generator seeded
    with ``seed`` (the same seed, the same schedule); ``fixed``: one every
    ``1/rate`` s, the first at 0.
    """
    if not rate > 0:
        raise ValueError(f"the arrival rate must be a positive number of turns/s, not {rate}")
    if arrivals == "fixed":
        return [k / rate for k in range(count)]
    if arrivals != "poisson":
        raise ValueError(f"unknown arrival process {arrivals!r}; one of {', '.join(ARRIVALS)}")
    rng = random.Random(f"arrivals/{seed}")
    offsets: list[float] = []
    at = 0.0
    for _ in range(count):
        offsets.append(at)
        at += rng.expovariate(rate)
    return offsets


@dataclass
class OpenLoop:
    """Issues each arrival of ``offsets`` on its lane at its time; see the module docstring.

    ``issued[k]`` is when arrival ``k`` was issued, on anyio's clock, and
    ``lateness[k]`` how long after its scheduled time (0.0 when its lane was
    free on time); ``late`` counts the arrivals that found their lane busy.
    The start is the first :meth:`run`'s, kept by later ones.
    """

    offsets: list[float]
    lanes: int
    start: float | None = None
    issued: dict[int, float] = field(default_factory=dict)
    lateness: dict[int, float] = field(default_factory=dict)
    late: int = 0
    held: frozenset[int] | None = None  # the lanes this process issues; None: every lane
    _next: dict[int, int] = field(default_factory=dict)  # lane -> its next arrival index

    def __post_init__(self) -> None:
        if self.lanes < 1:
            raise ValueError("an open loop needs at least one lane")

    @property
    def lanes_here(self) -> list[int]:
        """The lanes this process issues (a sharded run's other processes issue the rest)."""
        return [lane for lane in range(min(self.lanes, len(self.offsets)))
                if self.held is None or lane in self.held]

    @property
    def scheduled_here(self) -> int:
        """How many of the arrivals this process issues."""
        return sum(len(range(lane, len(self.offsets), self.lanes)) for lane in self.lanes_here)

    @property
    def done(self) -> bool:
        return all(self._next.get(lane, lane) >= len(self.offsets) for lane in self.lanes_here)

    def scheduled(self, k: int) -> float:
        assert self.start is not None
        return self.start + self.offsets[k]

    async def run(self, issue: Callable[[int, int], Awaitable[None]]) -> None:
        """Issue every arrival not issued yet: ``await issue(lane, k)`` for arrival ``k``."""
        if self.start is None:
            self.start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for lane in self.lanes_here:
                tg.start_soon(self._lane, lane, issue)

    async def _lane(self, lane: int, issue: Callable[[int, int], Awaitable[None]]) -> None:
        k = self._next.get(lane, lane)
        while k < len(self.offsets):
            due = self.scheduled(k)
            now = anyio.current_time()
            if now <= due:
                await anyio.sleep_until(due)
                self.lateness[k] = 0.0
            else:  # the lane was busy (or the runtime reopening) when k came due
                self.late += 1
                self.lateness[k] = now - due
            self.issued[k] = anyio.current_time()
            await issue(lane, k)
            k += self.lanes
            self._next[lane] = k
