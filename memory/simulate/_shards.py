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
line, each a base64 pickle: ``("stage", what, unit, total)``,
``("progress", done, total)``, and last ``("share", Share)``. Its stderr is
kept, and quoted when it fails.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO

import anyio
import anyio.abc
import sniffio
from anyio.streams.buffered import BufferedByteReceiveStream

from memory.runtime._config import Shard
from memory.simulate._config import SimulationConfig, Stage
from memory.simulate._share import Share

__all__ = ["child_env", "read_config", "run_shards", "send_frame"]

_FRAME_LIMIT = 1 << 30  # one share's pickle: a million turns' evidence stays below


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
    done: dict[int, tuple[int, int]] = {}

    def progress(index: int, turns: int, total: int) -> None:
        done[index] = (turns, total)
        if config.progress is not None:
            config.progress(sum(d for d, _ in done.values()), sum(t for _, t in done.values()))

    async with anyio.create_task_group() as tg:
        for index in range(count):
            tg.start_soon(_run_shard, config, Shard(index, count), shares, progress)
    return [shares[index] for index in range(count)]


async def _run_shard(config: SimulationConfig, shard: Shard, shares: dict[int, Share],
                     progress: Callable[[int, int, int], None]) -> None:
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
                    progress(shard.index, frame[1], frame[2])
                elif frame[0] == "stage" and shard.index == 0 and config.on_event is not None:
                    config.on_event(Stage(at=time.time(), what=frame[1], unit=frame[2],
                                          total=frame[3]))
        code = await proc.wait()
    if code != 0 or shard.index not in shares:
        raise RuntimeError(f"simulation shard {shard.index}/{shard.count} exited with {code}: "
                           f"{bytes(errors).decode(errors='replace')[-2000:]}")


async def _collect(stream: anyio.abc.ByteReceiveStream, into: bytearray) -> None:
    async for chunk in stream:
        into.extend(chunk)

