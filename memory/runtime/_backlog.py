"""How far memory is behind, and how much the write side takes at once when it is.

Issue 20: under load an agent's memory fell minutes behind and nobody could
see it. Two rules answer that, both pure:

- :func:`group_size`: how many due batches a writer worker takes as one
  write cycle (one topics transaction, one index update, one runtime-state
  update, the archives synced together). A batch that is alone is written
  alone at once, so a light load keeps its low latency; when batches wait,
  the worker takes them all, up to ``limit``, because then the cycle's
  fixed cost (snapshot, render of each touched topic, install) is the
  bottleneck and paying it once for many batches is what lets the write
  side catch up. The group is taken when the commit slot is free
  (:mod:`memory.runtime._pool`), so its size is the backlog that piled up
  while the previous group was committed: it grows with the load by itself.
- :func:`memory_lag`: what :meth:`MemoryRuntime.statistics` reports as
  :class:`MemoryLag`: the age of the oldest due batch whose markers are not
  durable yet, how many due batches wait for a worker, and the sizes of the
  last groups taken.

The :class:`~memory.runtime._jobs.JobQueue` keeps the inputs (when each job
in flight became due, the recent group sizes); this module only computes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["GROUP_LIMIT", "MemoryLag", "group_size", "memory_lag"]

GROUP_LIMIT = 32  # batches per group commit; bounds one commit's size and latency


@dataclass(frozen=True)
class MemoryLag:
    """How far memory is behind the sessions (see the module docstring).

    ``oldest_due_age``: seconds since the oldest batch handed to the write
    side became due (SPEC §6.3's rule first called for it), while its markers
    are not durable; None when no batch is in flight. ``due_waiting``: due
    batches queued for a worker, not taken yet. ``in_flight``: jobs submitted
    and not finished. ``recent_groups``: the sizes of the last groups the
    workers took, oldest first (1: a batch written alone).
    """

    oldest_due_age: float | None
    due_waiting: int
    in_flight: int
    recent_groups: tuple[int, ...]


def group_size(waiting: int, *, limit: int = GROUP_LIMIT, batching: bool = True) -> int:
    """How many batches a worker holding one takes as one cycle: it, and ``waiting`` more.

    ``batching`` False (a writer that cannot write a group): always 1.
    Never waits for company: with nothing waiting, the batch goes alone.
    """
    if limit < 1:
        raise ValueError(f"a group holds at least one batch, not limit={limit}")
    if not batching:
        return 1
    return max(1, min(limit, 1 + max(waiting, 0)))


def memory_lag(due_at: Iterable[float], now: float, *, waiting: int, in_flight: int,
               recent_groups: Iterable[int]) -> MemoryLag:
    """The :class:`MemoryLag` of the jobs in flight, whose due times are ``due_at``, at ``now``."""
    oldest = min(due_at, default=None)
    return MemoryLag(
        oldest_due_age=None if oldest is None else max(0.0, now - oldest),
        due_waiting=waiting,
        in_flight=in_flight,
        recent_groups=tuple(recent_groups),
    )
