"""Benchmark of the actor kernel against floors built from its own parts, on asyncio and trio.

Run from the repository root:

    python bench/actor_kernel.py            # a Markdown table
    python bench/actor_kernel.py --json     # the same rows as JSON (bench/run.py reads it)
    python bench/actor_kernel.py --quick    # smaller rounds, for a smoke run

Every floor is the cheapest correct way to do the same work with the parts
the kernel itself uses (a deque and an ``anyio.Event``, the mailbox's own
parts, which do not checkpoint on a send or a receive), measured in the same
rounds as the figure, after a warm-up round, over at least five rounds
(``bench/_harness.py``):

- call: a request/reply ping-pong through a deque + wakeup Event, a reply
  Event per request, no timeout;
- cast: a bounded deque (the mailbox's capacity) drained by one consumer;
  and the same with its sender yielding before each put, since ``cast`` is
  a checkpoint (trio's rule): the floor of the work ``cast`` is asked to do;
- spawn: a bare task that runs a start hook and then waits;
- idle memory: the same bare task, its bytes;
- crash to restarted: a task that raises, is caught at its top, tells its
  parent through a deque + Event, and the parent starts a fresh task whose
  start hook runs (crash isolated, state fresh, inbox kept).

Targets (issue 2): call p50 <= 1.3x the floor; cast >= 100k msg/s; spawn <=
150 us; idle actor <= 10 KB; crash to restarted p50 <= 200 us.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.lowlevel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _harness import FLOOR, Row, Summary, ainterleaved, markdown_table, percentile, ratio_row
from _harness import value_row as target_row

from actors import Actor, MailboxOptions, open_actor
from actors.lowlevel import ActorCell
from supervisors import Backoff, ChildSpec, Intensity, Supervisor, get_child


@dataclass(frozen=True)
class Sizes:
    """Work per round: calls, casts, spawned actors, crashes."""

    calls: int
    casts: int
    spawns: int
    crashes: int
    rounds: int = 5


FULL = Sizes(calls=10_000, casts=100_000, spawns=1_000, crashes=500, rounds=7)
QUICK = Sizes(calls=2_000, casts=20_000, spawns=300, crashes=100)
CAPACITY = 1000  # the mailbox's default capacity, given to the cast floor too


# -- the floors' parts: the mailbox's own ---------------------------------------


class Inbox:
    """A deque and a wakeup Event, as the mailbox keeps them: no checkpoint per put or get."""

    __slots__ = ("_space", "_wakeup", "capacity", "items")

    def __init__(self, capacity: int = 0) -> None:
        self.items: deque[Any] = deque()
        self.capacity = capacity  # 0: unbounded
        self._wakeup: anyio.Event | None = None
        self._space: anyio.Event | None = None

    def put(self, item: Any) -> None:
        self.items.append(item)
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    async def put_waiting(self, item: Any) -> None:
        """Put, first waiting for space when bounded and full (the mailbox's WAIT policy)."""
        while self.capacity and len(self.items) >= self.capacity:
            space = self._space
            if space is None:
                space = self._space = anyio.Event()
            await space.wait()
        self.put(item)

    async def get(self) -> Any:
        while not self.items:
            wakeup = self._wakeup = anyio.Event()
            await wakeup.wait()
        item = self.items.popleft()
        space = self._space
        if space is not None:
            self._space = None
            space.set()
        return item


class Reply:
    """One request's reply: an Event and a value, as a reply slot holds them."""

    __slots__ = ("event", "value")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.value: Any = None


# -- the actors measured --------------------------------------------------------


class Echo(Actor[object]):
    async def handle(self, message: Any) -> Any:
        return message


class Counter(Actor[object]):
    def __init__(self) -> None:
        self.count = 0

    async def handle(self, message: Any) -> Any:
        self.count += 1
        return self.count


class Idle(Actor[object]):
    def __init__(self, started: Callable[[], None]) -> None:
        self.started = started

    async def on_start(self) -> None:
        self.started()

    async def handle(self, message: Any) -> Any:
        return None


class Crasher(Actor[object]):
    crashed_at: ClassVar[float] = 0.0
    restarted: ClassVar[list[float]] = []

    async def on_start(self) -> None:
        if Crasher.crashed_at:
            Crasher.restarted.append(time.perf_counter() - Crasher.crashed_at)
            Crasher.crashed_at = 0.0

    async def handle(self, message: Any) -> Any:
        if message == "crash":
            Crasher.crashed_at = time.perf_counter()
            raise RuntimeError("benchmark crash")
        return message


# -- call round trip ------------------------------------------------------------


async def floor_call(callers: int, calls: int) -> list[float]:
    """Round trips through a deque + Event server, a reply Event per request."""
    inbox = Inbox()
    samples: list[float] = []

    async def server() -> None:
        while True:
            item = await inbox.get()
            if item is None:
                return
            value, reply = item
            reply.value = value
            reply.event.set()

    async def caller(n: int) -> None:
        for i in range(n):
            began = time.perf_counter()
            reply = Reply()
            inbox.put((i, reply))
            await reply.event.wait()
            samples.append(time.perf_counter() - began)

    async with anyio.create_task_group() as tg:
        tg.start_soon(server)
        async with anyio.create_task_group() as callers_tg:
            for _ in range(callers):
                callers_tg.start_soon(caller, calls // callers)
        inbox.put(None)
    return samples


async def actor_call(callers: int, calls: int) -> list[float]:
    samples: list[float] = []
    async with open_actor(Echo(), name="echo") as ref:

        async def caller(n: int) -> None:
            for i in range(n):
                began = time.perf_counter()
                await ref.call(i)
                samples.append(time.perf_counter() - began)

        async with anyio.create_task_group() as tg:
            for _ in range(callers):
                tg.start_soon(caller, calls // callers)
    return samples


# -- cast throughput ---------------------------------------------------------


async def floor_cast(casts: int, checkpoint: bool = False) -> float:
    """Messages per second through a bounded deque + Event, drained by one consumer.

    ``checkpoint``: the sender yields before each put, as ``cast`` does (trio's rule).
    """
    inbox = Inbox(CAPACITY)
    done = anyio.Event()

    async def consumer() -> None:
        count = 0
        while count < casts:
            await inbox.get()
            count += 1
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(consumer)
        began = time.perf_counter()
        for i in range(casts):
            if checkpoint:
                await anyio.lowlevel.checkpoint()
            await inbox.put_waiting(i)
        await done.wait()
        elapsed = time.perf_counter() - began
    return casts / elapsed


async def actor_cast(casts: int) -> float:
    async with open_actor(Counter(), name="counter") as ref:
        began = time.perf_counter()
        for i in range(casts):
            await ref.cast(i)
        assert await ref.call("sync") == casts + 1
        return casts / (time.perf_counter() - began)


# -- spawn cost and idle memory ------------------------------------------------


async def _spawned(spawns: int, start: Callable[[Any, Callable[[], None]], None],
                   measure_memory: bool) -> float:
    """Seconds (or bytes) per task started by ``start(task_group, on_started)``."""
    started = 0
    done = anyio.Event()

    def on_started() -> None:
        nonlocal started
        started += 1
        if started == spawns:
            done.set()

    async with anyio.create_task_group() as tg:
        gc.collect()
        if measure_memory:
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
        began = time.perf_counter()
        for _ in range(spawns):
            start(tg, on_started)
        await done.wait()
        await anyio.wait_all_tasks_blocked()
        result = (time.perf_counter() - began) / spawns
        if measure_memory:
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            result = sum(s.size_diff for s in after.compare_to(before, "filename")) / spawns
        tg.cancel_scope.cancel()
    return result


async def floor_spawn(spawns: int, measure_memory: bool = False) -> float:
    """A bare task that runs a start hook and then waits."""
    stop = anyio.Event()

    async def task(on_started: Callable[[], None]) -> None:
        on_started()
        await stop.wait()

    return await _spawned(spawns, lambda tg, hook: tg.start_soon(task, hook), measure_memory)


async def actor_spawn(spawns: int, measure_memory: bool = False) -> float:
    """An actor cell's incarnation: factory, ``on_start``, then waiting for mail."""
    cells: list[ActorCell[object]] = []

    def start(tg: Any, hook: Callable[[], None]) -> None:
        cell = ActorCell(lambda: Idle(hook), name=f"idle-{len(cells)}")
        cells.append(cell)
        tg.start_soon(cell.run_incarnation)

    return await _spawned(spawns, start, measure_memory)


# -- crash to restarted ------------------------------------------------------------


async def floor_crash(crashes: int) -> list[float]:
    """A task raises; caught at its top, it tells its parent, which starts a fresh task.

    The inbox outlives the incarnations (as a cell's mailbox does), the
    state of each incarnation is fresh, and the time is taken from the
    raise to the new incarnation's start hook.
    """
    inbox = Inbox()
    notices = Inbox()
    samples: list[float] = []
    restarted = anyio.Event()
    crashed_at = 0.0

    async def incarnation() -> None:
        nonlocal crashed_at, restarted
        state = {"handled": 0}  # a fresh incarnation's own state
        if crashed_at:
            samples.append(time.perf_counter() - crashed_at)
            crashed_at = 0.0
            restarted.set()
        while True:
            message = await inbox.get()
            state["handled"] += 1
            if message == "crash":
                crashed_at = time.perf_counter()
                raise RuntimeError("benchmark crash")

    async def guarded() -> None:
        try:
            await incarnation()
        except RuntimeError as crash:
            notices.put(crash)

    async def parent(tg: Any) -> None:
        while True:
            await notices.get()
            tg.start_soon(guarded)

    async with anyio.create_task_group() as tg:
        tg.start_soon(parent, tg)
        tg.start_soon(guarded)
        for _ in range(crashes):
            restarted = anyio.Event()
            inbox.put("crash")
            await restarted.wait()
        tg.cancel_scope.cancel()
    return samples


async def actor_crash(crashes: int) -> list[float]:
    Crasher.restarted = []
    spec = ChildSpec("crasher", Crasher, options=MailboxOptions(poison_threshold=1))
    supervisor = Supervisor([spec], intensity=Intensity(10**9, 1.0), backoff=Backoff.none())
    async with open_actor(supervisor, name="bench") as root:
        child = await get_child(root, spec)
        for _ in range(crashes):
            await child.cast("crash")
            await child.call("ping")
    return Crasher.restarted


# -- driver --------------------------------------------------------------------------


async def _latencies(
    actor: Callable[[], Awaitable[list[float]]],
    floor: Callable[[], Awaitable[list[float]]],
    rounds: int,
) -> dict[str, tuple[Summary, Summary]]:
    """p50 and p99 (us) of each round of the actor and of its floor, interleaved."""
    p99: dict[str, list[float]] = {"actor": [], "floor": []}

    def of(name: str, run: Callable[[], Awaitable[list[float]]]) -> Callable[
            [], Awaitable[float]]:
        async def measure() -> float:
            samples = await run()
            p99[name].append(percentile(samples, 99) * 1e6)
            return percentile(samples, 50) * 1e6
        return measure

    p50 = await ainterleaved({"actor": of("actor", actor), "floor": of("floor", floor)},
                             rounds=rounds)
    # the warm-up round's p99 is the first one recorded: drop it as ainterleaved drops its p50
    return {name: (p50[name], Summary.of(p99[name][-rounds:])) for name in p50}


async def measure(sizes: Sizes) -> list[Row]:
    rows: list[Row] = []
    rounds = sizes.rounds
    call_floor = "deque + Event ping-pong (the mailbox's parts), no checkpoint, no timeout"
    for callers in (1, 64):
        found = await _latencies(functools.partial(actor_call, callers, sizes.calls),
                                 functools.partial(floor_call, callers, sizes.calls), rounds)
        (a50, a99), (f50, f99) = found["actor"], found["floor"]
        rows.append(ratio_row(f"call p50, {callers} caller(s)", a50, "us", f50, kind=FLOOR,
                              what=call_floor, op="<=", bound=1.3))
        rows.append(ratio_row(f"call p99, {callers} caller(s)", a99, "us", f99, kind=FLOOR,
                              what=call_floor))

    cast = await ainterleaved({"actor": lambda: actor_cast(sizes.casts),
                               "floor": lambda: floor_cast(sizes.casts)}, rounds=rounds)
    rows.append(target_row("cast throughput", cast["actor"], "msg/s", op=">=", bound=100_000,
                           against=cast["floor"], kind=FLOOR,
                           what=f"bounded deque ({CAPACITY}) + Event, one consumer"))
    # cast is a checkpoint (trio's rule): the same floor, its sender yielding per send.
    yielding = await ainterleaved(
        {"actor": lambda: actor_cast(sizes.casts),
         "floor": lambda: floor_cast(sizes.casts, checkpoint=True)}, rounds=rounds)
    rows.append(ratio_row("cast throughput, floor yielding per send", yielding["actor"],
                          "msg/s", yielding["floor"], kind=FLOOR,
                          what=f"bounded deque ({CAPACITY}) + Event, a checkpoint per send"))

    spawn = await ainterleaved({"actor": lambda: actor_spawn(sizes.spawns),
                                "floor": lambda: floor_spawn(sizes.spawns)}, rounds=rounds)
    rows.append(target_row("spawn", spawn["actor"].scaled(1e6), "us/actor", op="<=", bound=150,
                           against=spawn["floor"].scaled(1e6), kind=FLOOR,
                           what="bare task: start hook, then wait (warm)"))

    memory = await ainterleaved(
        {"actor": lambda: actor_spawn(sizes.spawns, measure_memory=True),
         "floor": lambda: floor_spawn(sizes.spawns, measure_memory=True)}, rounds=rounds)
    rows.append(target_row("idle actor memory", memory["actor"].scaled(1 / 1024), "KB/actor",
                           op="<=", bound=10, against=memory["floor"].scaled(1 / 1024),
                           kind=FLOOR, what="bare task waiting on an Event"))

    crash = await _latencies(lambda: actor_crash(sizes.crashes),
                             lambda: floor_crash(sizes.crashes), rounds)
    (c50, c99), (g50, g99) = crash["actor"], crash["floor"]
    crash_floor = "task raises, parent told via deque + Event, fresh task's start hook"
    rows.append(target_row("crash to restarted p50", c50, "us", op="<=", bound=200,
                           against=g50, kind=FLOOR, what=crash_floor))
    rows.append(ratio_row("crash to restarted p99", c99, "us", g99, kind=FLOOR,
                          what=crash_floor))
    return rows


def run(backend: str, sizes: Sizes) -> list[Row]:
    options: dict[str, Any] = {"use_uvloop": False} if backend == "asyncio" else {}

    async def main() -> list[Row]:
        return await measure(sizes)

    result: list[Row] = anyio.run(main, backend=backend, backend_options=options)
    return [Row.from_json({**row.to_json(), "figure": f"{backend}: {row.figure}"})
            for row in result]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    parser.add_argument("--quick", action="store_true", help="smaller rounds (a smoke run)")
    parser.add_argument("--backend", choices=("asyncio", "trio"), action="append")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    rows = [row for backend in args.backend or ("asyncio", "trio")
            for row in run(backend, sizes)]
    if args.json:
        print(json.dumps({"rows": [row.to_json() for row in rows],
                          "sizes": sizes.__dict__}, indent=1))
    else:
        print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
