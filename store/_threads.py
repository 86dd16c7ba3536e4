"""Thread hops: one worker-thread hop per durable operation, and the lanes they wait in.

:func:`run_durable` runs a whole durable operation (:class:`~store._durable.DurableFiles`
and what calls it) in one worker thread, never torn by cancellation. A hop
waits for a token of its lane's thread limiter: appends and reads use
anyio's default limiter; memory's write side (:func:`write_lane`) and its
marker merges (:func:`mark_lane`) have their own, so neither ever holds a
thread an append waits for (docs/architecture.md, "Lanes").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

__all__ = ["MARK_LANE_THREADS", "WRITE_LANE_THREADS", "mark_lane", "run_durable", "write_lane"]

T = TypeVar("T")


async def run_durable(fn: Callable[..., T], *args: object,
                      limiter: anyio.CapacityLimiter | None = None) -> T:
    """Run one durable operation in one worker-thread hop.

    ``abandon_on_cancel=False`` (the default, spelled out because it is the
    point): a cancelled caller waits for the write to finish, so a durable
    write is never left half done by a timeout or a shutdown.

    ``limiter``: the lane whose threads the hop waits for; None is anyio's
    default limiter, the lane of appends and reads. Memory's write side
    passes :func:`write_lane` and marker merges :func:`mark_lane`, so that
    neither ever holds the threads an append waits for.
    """
    return await anyio.to_thread.run_sync(
        functools.partial(fn, *args), abandon_on_cancel=False, limiter=limiter
    )


# Threads each of memory's lanes may hold at once. The write side (archive,
# snapshot, check, commit; the writer's CPU work when it runs in-thread):
# commits are one at a time anyway. The marker merges of many sessions at
# once (each session's owner merges one chunk at a time). The rest of anyio's
# default 40 stay free for appends and reads.
WRITE_LANE_THREADS = 4
MARK_LANE_THREADS = 8
_LANES: RunVar[dict[str, anyio.CapacityLimiter]] = RunVar("scriptorium_lanes")


def _lane(name: str, threads: int) -> anyio.CapacityLimiter:
    try:
        lanes = _LANES.get()
    except LookupError:
        lanes = {}
        _LANES.set(lanes)
    limiter = lanes.get(name)
    if limiter is None:
        limiter = lanes[name] = anyio.CapacityLimiter(threads)
    return limiter


def write_lane() -> anyio.CapacityLimiter:
    """The write side's thread limiter in this event loop, apart from the default one."""
    return _lane("write", WRITE_LANE_THREADS)


def mark_lane() -> anyio.CapacityLimiter:
    """The marker merges' thread limiter in this event loop, apart from the default one."""
    return _lane("marks", MARK_LANE_THREADS)
