"""Benchmark of the actor kernel against the raw anyio floor, on asyncio and trio.

Run from the repository root:

    python bench/actor_kernel.py            # a Markdown table
    python bench/actor_kernel.py --json     # the same figures as JSON

Each figure is printed next to a floor measured in the same run with bare
anyio (a memory-object-stream ping-pong, a bare task spawn) and the ratio,
so a slow machine does not hide or fake a regression. Targets (issue 2):
call p50 <= 1.3x the ping-pong floor; cast >= 100k msg/s; spawn <= 150 us;
idle actor <= 10 KB; crash-to-restarted <= 200 us.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors import Actor, ActorCell, ActorRef, open_actor
from supervisors import Backoff, ChildSpec, GetChild, Supervisor

CALLS = 20_000
CASTS = 200_000
SPAWNS = 2_000


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the actors measured --------------------------------------------------------


class Echo(Actor):
    async def handle(self, message: Any) -> Any:
        return message


class Counter(Actor):
    def __init__(self) -> None:
        self.count = 0

    async def handle(self, message: Any) -> Any:
        self.count += 1
        return self.count


class Idle(Actor):
    def __init__(self, started: Callable[[], None]) -> None:
        self.started = started

    async def on_start(self) -> None:
        self.started()

    async def handle(self, message: Any) -> Any:
        return None


class Crasher(Actor):
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


async def floor_ping_pong(callers: int) -> list[float]:
    """Round trips through bare memory object streams: the floor for ``call``."""
    requests_send, requests_recv = anyio.create_memory_object_stream[
        tuple[int, ObjectSendStream[int]]
    ](1000)
    samples: list[float] = []

    async def server() -> None:
        async for value, reply in requests_recv:
            await reply.send(value)

    async def caller(n: int) -> None:
        reply_send, reply_recv = anyio.create_memory_object_stream[int](1)
        for i in range(n):
            t = time.perf_counter()
            await requests_send.send((i, reply_send))
            await reply_recv.receive()
            samples.append(time.perf_counter() - t)

    async with anyio.create_task_group() as tg:
        tg.start_soon(server)
        async with anyio.create_task_group() as callers_tg:
            for _ in range(callers):
                callers_tg.start_soon(caller, CALLS // callers)
        requests_send.close()
    return samples


async def actor_call(callers: int) -> list[float]:
    samples: list[float] = []
    async with open_actor(Echo(), name="echo") as ref:

        async def caller(n: int) -> None:
            for i in range(n):
                t = time.perf_counter()
                await ref.call(i)
                samples.append(time.perf_counter() - t)

        async with anyio.create_task_group() as tg:
            for _ in range(callers):
                tg.start_soon(caller, CALLS // callers)
    return samples


# -- cast throughput ---------------------------------------------------------


async def floor_stream_throughput() -> float:
    send, receive = anyio.create_memory_object_stream[int](1000)
    count = 0

    async def consumer(stream: ObjectReceiveStream[int]) -> None:
        nonlocal count
        async for _ in stream:
            count += 1

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(consumer, receive)
        for i in range(CASTS):
            await send.send(i)
        send.close()
    return CASTS / (time.perf_counter() - start)


async def actor_cast_throughput() -> float:
    async with open_actor(Counter(), name="counter") as ref:
        start = time.perf_counter()
        for i in range(CASTS):
            await ref.cast(i)
        assert await ref.call("sync") == CASTS + 1
        return CASTS / (time.perf_counter() - start)


# -- spawn cost and idle memory ------------------------------------------------


async def floor_spawn(measure_memory: bool = False) -> float:
    """Seconds per bare task that starts and then waits (or bytes per such task)."""
    started = 0
    done = anyio.Event()
    stop = anyio.Event()

    async def task() -> None:
        nonlocal started
        started += 1
        if started == SPAWNS:
            done.set()
        await stop.wait()

    async with anyio.create_task_group() as tg:
        gc.collect()
        if measure_memory:
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
        t = time.perf_counter()
        for _ in range(SPAWNS):
            tg.start_soon(task)
        await done.wait()
        await anyio.wait_all_tasks_blocked()
        result = (time.perf_counter() - t) / SPAWNS
        if measure_memory:
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            result = sum(s.size_diff for s in after.compare_to(before, "filename")) / SPAWNS
        stop.set()
    return result


async def actor_spawn(measure_memory: bool) -> float:
    """Seconds per actor started (on_start ran), or bytes per idle actor."""
    started = 0
    done = anyio.Event()

    def on_started() -> None:
        nonlocal started
        started += 1
        if started == SPAWNS:
            done.set()

    def make() -> Actor:
        return Idle(on_started)

    cells: list[ActorCell] = []
    async with anyio.create_task_group() as tg:
        gc.collect()
        if measure_memory:
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
        t = time.perf_counter()
        for i in range(SPAWNS):
            cell = ActorCell(make, name=f"idle-{i}")
            cells.append(cell)
            tg.start_soon(cell.run_incarnation)
        await done.wait()
        await anyio.wait_all_tasks_blocked()
        elapsed = time.perf_counter() - t
        result = elapsed / SPAWNS
        if measure_memory:
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
            result = grown / SPAWNS
        tg.cancel_scope.cancel()
    return result


# -- crash to restarted ------------------------------------------------------------


async def crash_to_restarted() -> list[float]:
    Crasher.restarted = []
    spec = ChildSpec("crasher", Crasher, poison_threshold=1)
    supervisor = Supervisor([spec], max_restarts=10**9, within=1.0, backoff=Backoff.none())
    async with open_actor(supervisor, name="bench") as root:
        child: ActorRef = await root.call(GetChild("crasher"))
        for _ in range(2_000):
            await child.cast("crash")
            await child.call("ping")
    return Crasher.restarted


# -- driver --------------------------------------------------------------------------


async def measure() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def row(
        metric: str, value: float, floor: float | None, unit: str, target: str, ok: bool
    ) -> None:
        rows.append(
            {
                "metric": metric,
                "value": value,
                "floor": floor,
                "ratio": (value / floor) if floor else None,
                "unit": unit,
                "target": target,
                "ok": ok,
            }
        )

    for callers in (1, 64):
        floor = await floor_ping_pong(callers)
        mine = await actor_call(callers)
        f50, m50 = percentile(floor, 0.5) * 1e6, percentile(mine, 0.5) * 1e6
        f99, m99 = percentile(floor, 0.99) * 1e6, percentile(mine, 0.99) * 1e6
        row(f"call p50, {callers} caller(s)", m50, f50, "us", "<= 1.3x floor", m50 <= 1.3 * f50)
        row(f"call p99, {callers} caller(s)", m99, f99, "us", "(reported)", True)

    floor_rate = await floor_stream_throughput()
    rate = await actor_cast_throughput()
    row("cast throughput", rate, floor_rate, "msg/s", ">= 100k msg/s", rate >= 100_000)

    spawn_floor = await floor_spawn() * 1e6
    spawn = await actor_spawn(measure_memory=False) * 1e6
    row("spawn", spawn, spawn_floor, "us/actor", "<= 150 us", spawn <= 150)

    memory = await actor_spawn(measure_memory=True) / 1024
    memory_floor = await floor_spawn(measure_memory=True) / 1024
    row("idle actor memory", memory, memory_floor, "KB/actor", "<= 10 KB", memory <= 10)

    restarts = await crash_to_restarted()
    r50 = percentile(restarts, 0.5) * 1e6
    row("crash to restarted p50", r50, spawn_floor, "us", "<= 200 us", r50 <= 200)
    row(
        "crash to restarted p99",
        percentile(restarts, 0.99) * 1e6,
        spawn_floor,
        "us",
        "(reported)",
        True,
    )
    return rows


def run(backend: str) -> list[dict[str, Any]]:
    options: dict[str, Any] = {}
    if backend == "asyncio":
        options = {"use_uvloop": False}
    result: list[dict[str, Any]] = anyio.run(measure, backend=backend, backend_options=options)
    return result


def markdown(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        (
            f"Machine: {platform.machine()}, {platform.processor() or platform.platform()}, "
            f"Python {platform.python_version()}, anyio {anyio_version()}; "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        ),
        "",
        "| backend | metric | scriptorium | anyio floor | ratio | target | met |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for backend, rows in results.items():
        for r in rows:
            floor = f"{r['floor']:,.1f}" if r["floor"] is not None else "-"
            ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
            lines.append(
                f"| {backend} | {r['metric']} | {r['value']:,.1f} {r['unit']} | {floor} | {ratio} "
                f"| {r['target']} | {'yes' if r['ok'] else '**no**'} |"
            )
    return "\n".join(lines)


def anyio_version() -> str:
    from importlib.metadata import version

    return version("anyio")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    parser.add_argument("--backend", choices=("asyncio", "trio"), action="append")
    args = parser.parse_args(argv)
    results = {backend: run(backend) for backend in args.backend or ("asyncio", "trio")}
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
