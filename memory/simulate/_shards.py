"""A simulated run over several processes: the agents sharded by session id, one runtime each.

One runtime is one interpreter: its event loop, its session actors and the
threads of its durable I/O share one lock, so a run in one process keeps
about one core busy however many the machine has (docs/decisions.md,
"Both cores"). Runtimes on one state directory are safe together (claims,
session locks, the workspace's revision check), so the second core is used
by a second runtime: ``simulate(processes=N)`` starts N processes of this
Python, each running :func:`~memory.simulate._simulate.run_share` for the
agents whose session id its :class:`~memory.runtime.Shard` holds (the rule
``scriptorium run --shard K/N`` uses), and adds their shares up
(:mod:`memory.simulate._share`) for the one oracle.

The protocol is this process's own: the configuration goes to the child
pickled on its stdin; the child answers on stdout with frames, one per
line, each a base64 pickle: ``("event", event)`` for each stage and each
job event a progress display reads (:data:`JOB_EVENTS`; a job's id made
unique across the processes), ``("progress", done, total)``, and last
``("share", Share)``. Its stderr is kept, and quoted when it fails.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

import anyio
import anyio.abc
import sniffio
from anyio.streams.buffered import BufferedByteReceiveStream

from memory.runtime._config import Shard
from memory.runtime._events import Abandoned, Deferred, JobDone, Quarantined, Submitted
from memory.simulate._config import SimulationConfig, Stage
from memory.simulate._share import Share
from memory.writers._events import Event

__all__ = ["JOB_EVENTS", "ShardStages", "child_env", "read_config", "run_shards", "send_frame"]

JOB_EVENTS = (Submitted, JobDone, Abandoned, Deferred, Quarantined)

_FRAME_LIMIT = 1 << 30  # the longest frame read: one share, far below it for any run here


def child_env() -> dict[str, str]:
    """The environment of a child ``python -m memory...``: the directory holding ``memory``.

    Not ``memory/`` itself: on the path, a folder of it named as a standard
    library module would shadow that module (``memory/inspector`` was once
    ``memory/inspect``, and ``dataclasses`` imports ``inspect``).
    """
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get(
        "PYTHONPATH")]))}


def send_frame(out: BinaryIO, frame: tuple[Any, ...]) -> None:
    """One frame to the process that started this one (see the module docstring)."""
    out.write(base64.b64encode(pickle.dumps(frame)) + b"\n")
    out.flush()


def read_config(data: bytes) -> SimulationConfig:
    config = pickle.loads(data)
    if not isinstance(config, SimulationConfig):
        raise TypeError(f"a simulation shard reads a SimulationConfig, not {type(config)}")
    return config


async def run_shards(config: SimulationConfig) -> list[Share]:
    """Run ``config.processes`` shards at once; each one's :class:`Share`, in shard order.

    A shard that fails (a non-zero exit, no share) fails the run with its
    stderr quoted; the other shards are stopped.
    """
    count = config.processes
    shares: dict[int, Share] = {}
    stages = ShardStages(count, config.on_event, config.progress)
    async with anyio.create_task_group() as tg:
        for index in range(count):
            tg.start_soon(_run_shard, config, Shard(index, count), shares, stages)
    return [shares[index] for index in range(count)]


class ShardStages:
    """The shards' stages and counts as one run's: a stage is shown once every shard is in it.

    Its counts are the sum of each shard's latest for that stage (a shard
    that moved on counts what it ended the stage with), so a display never
    adds one shard's turns to another's sessions.
    """

    def __init__(self, count: int, on_event: Callable[[Event], None] | None,
                 progress: Callable[[int, int], None] | None) -> None:
        self.seen: list[list[Stage]] = [[] for _ in range(count)]
        self.counts: list[dict[int, tuple[int, int]]] = [{} for _ in range(count)]
        self.shown = 0
        self._on_event = on_event
        self._progress = progress

    def stage(self, index: int, stage: Stage) -> None:
        self.seen[index].append(stage)
        while all(len(seen) > self.shown for seen in self.seen):
            totals = [seen[self.shown].total for seen in self.seen]
            total = None if None in totals else sum(t or 0 for t in totals)
            if self._on_event is not None:
                self._on_event(dataclasses.replace(self.seen[0][self.shown], total=total))
            self.shown += 1
            self._draw()

    def progress(self, index: int, done: int, total: int) -> None:
        self.counts[index][len(self.seen[index]) - 1] = (done, total)
        self._draw()

    def _draw(self) -> None:
        if self._progress is None or self.shown == 0:
            return
        stage = self.shown - 1
        now = [counts.get(stage, (0, seen[stage].total or 0))
               for counts, seen in zip(self.counts, self.seen, strict=True)]
        self._progress(sum(done for done, _ in now), sum(total for _, total in now))


async def _run_shard(config: SimulationConfig, shard: Shard, shares: dict[int, Share],
                     stages: ShardStages) -> None:
    child = dataclasses.replace(config, shard=shard, progress=None, on_event=None)
    backend = "trio" if sniffio.current_async_library() == "trio" else "asyncio"
    command = [sys.executable, "-c",
               "from memory.simulate._simulate import share_process; share_process()", backend]
    errors = bytearray()
    async with await anyio.open_process(command, env=child_env(), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        await proc.stdin.send(pickle.dumps(child))
        await proc.stdin.aclose()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_collect, proc.stderr, errors)
            frames = BufferedByteReceiveStream(proc.stdout)
            while True:
                try:
                    line = await frames.receive_until(b"\n", _FRAME_LIMIT)
                except (anyio.IncompleteRead, anyio.EndOfStream):
                    break
                frame = pickle.loads(base64.b64decode(line))
                if frame[0] == "share":
                    shares[shard.index] = frame[1]
                elif frame[0] == "progress":
                    stages.progress(shard.index, frame[1], frame[2])
                elif frame[0] == "event" and isinstance(frame[1], Stage):
                    stages.stage(shard.index, frame[1])
                elif frame[0] == "event" and config.on_event is not None:
                    event = frame[1]
                    if isinstance(event, (Submitted, JobDone, Abandoned, Deferred)):
                        # Each runtime numbers its jobs from 1: one number space for all.
                        event = dataclasses.replace(event, job=event.job * shard.count + shard.index)
                    config.on_event(event)
        code = await proc.wait()
    if code != 0 or shard.index not in shares:
        raise RuntimeError(f"simulation shard {shard.index}/{shard.count} exited with {code}: "
                           f"{bytes(errors).decode(errors='replace')[-2000:]}")


async def _collect(stream: anyio.abc.ByteReceiveStream, into: bytearray) -> None:
    async for chunk in stream:
        into.extend(chunk)

