"""Where the inspector's answers come from: a state read as it is, or a running runtime.

The web server runs on its own event loop in its own thread (uvicorn serves
on asyncio; ``scriptorium run`` may run on trio), so it never calls into a
runtime directly:

- :class:`StateMemory` (``scriptorium inspect``): recall over the state
  without a runtime: the very :class:`~memory.recall.Recall` the runtime
  owns, opened ``read_only`` (its index in memory, seeded from the shared
  file, nothing written). Without a session, ``rt.recall``/``rt.context``
  are exactly this object's ``recall``/``context``.
- :class:`LiveRuntime` (``scriptorium run --inspect``): ``rt.recall`` and
  ``rt.context`` themselves, called on the runtime's loop through a
  blocking portal; the runtime page's figures are sampled on that loop
  every second (:meth:`LiveRuntime.sample_forever`) from
  ``rt.statistics()``, the actors' introspection (:func:`actors.snapshot`)
  and the runtime's events, and read by the server from a deque.
"""

from __future__ import annotations

import collections
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from anyio.from_thread import BlockingPortal

from actors import ActorSnapshot, snapshot
from memory.recall import Context, Hit, Recall
from memory.runtime import MemoryRuntime

__all__ = ["LiveRuntime", "Memory", "Sample", "StateMemory"]


class Memory(Protocol):
    """What the memory page asks: ``rt.recall`` and ``rt.context`` without a session."""

    async def recall(self, query: str, *, k: int) -> list[Hit]: ...

    async def context(self, query: str, *, budget_tokens: int) -> Context: ...


class StateMemory:
    """Recall over ``<state>/memory`` that writes nothing (see the module docstring)."""

    def __init__(self, state_dir: str) -> None:
        self._recall = Recall(os.path.join(state_dir, "memory"), read_only=True)

    async def recall(self, query: str, *, k: int) -> list[Hit]:
        return await self._recall.recall(query, k=k)

    async def context(self, query: str, *, budget_tokens: int) -> Context:
        return await self._recall.context(query, budget_tokens=budget_tokens)

    def close(self) -> None:
        self._recall.close()


@dataclass(frozen=True, slots=True)
class Sample:
    """The runtime at one instant, as the runtime page charts it."""

    at: float
    in_flight: int
    quarantined: int
    sessions_active: int
    written_jobs: int  # jobs written since start (rt.statistics().outcomes["written"])
    marked_turns: int  # turns marked since start (the "marked" events)
    lag: float  # seconds the oldest batch in flight has been due (0: the writer keeps up)

    def as_json(self) -> dict[str, Any]:
        return {"at": self.at, "in_flight": self.in_flight, "quarantined": self.quarantined,
                "sessions_active": self.sessions_active, "written_jobs": self.written_jobs,
                "marked_turns": self.marked_turns, "lag": round(self.lag, 3)}


def tree_json(node: ActorSnapshot) -> dict[str, Any]:
    return {"id": node.id, "kind": node.kind, "state": node.state.value,
            "mailbox": node.mailbox_depth, "restarts": node.restarts,
            "children": [tree_json(child) for child in node.children]}


class LiveRuntime:
    """A running runtime seen from the server's thread (see the module docstring).

    Built before the runtime (its :meth:`on_event` goes into the runtime's
    config), attached with :meth:`sample_forever` once the runtime runs.
    """

    def __init__(self, *, history: int = 600, interval: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.interval = interval
        self.clock = clock
        self.samples: collections.deque[Sample] = collections.deque(maxlen=history)
        self.cycles: collections.deque[dict[str, Any]] = collections.deque(maxlen=50)
        self.tree: dict[str, Any] | None = None
        self.state_dir: str | None = None
        self._portal: BlockingPortal | None = None
        self._rt: MemoryRuntime | None = None
        self._due: dict[object, float] = {}  # job -> due_at, while in flight
        self._marked = 0

    def on_event(self, event: dict[str, Any]) -> None:
        """The runtime's events (any thread): batches due and written, markers set."""
        kind = event.get("event")
        if kind == "submitted":
            due = event.get("due_at")
            self._due[event.get("job")] = float(due) if isinstance(due, (int, float)) else (
                self.clock())
        elif kind == "job":
            self._due.pop(event.get("job"), None)
            self.cycles.appendleft({k: v for k, v in event.items()
                                    if k in ("at", "session", "result", "seconds", "node_ids")})
        elif kind == "marked":
            self._marked += len(event.get("node_ids") or ())

    async def sample_forever(self, rt: MemoryRuntime) -> None:
        """On the runtime's loop: open the portal the server calls through, sample every second."""
        self.state_dir = rt.state_dir
        async with BlockingPortal() as portal:
            self._rt, self._portal = rt, portal
            try:
                while True:
                    self.sample(rt)
                    await anyio.sleep(self.interval)
            finally:
                self._portal = None

    def sample(self, rt: MemoryRuntime) -> Sample:
        now = self.clock()
        stats = rt.statistics()
        due = list(self._due.values())
        sample = Sample(now, stats.in_flight, stats.quarantined, stats.sessions_active,
                        int(stats.outcomes.get("written", 0)), self._marked,
                        max((now - at for at in due), default=0.0))
        self.samples.append(sample)
        if rt.root is not None:
            self.tree = tree_json(snapshot(rt.root))
        return sample

    @property
    def running(self) -> bool:
        return self._portal is not None

    def _call(self, function: Callable[[], Any]) -> Any:
        portal, rt = self._portal, self._rt
        if portal is None or rt is None:
            raise RuntimeError("the runtime is not running")
        return portal.call(function)

    async def recall(self, query: str, *, k: int) -> list[Hit]:
        rt = self._rt
        assert rt is not None
        hits: list[Hit] = await anyio.to_thread.run_sync(
            self._call, functools.partial(rt.recall, query, k=k))
        return hits

    async def context(self, query: str, *, budget_tokens: int) -> Context:
        rt = self._rt
        assert rt is not None
        block: Context = await anyio.to_thread.run_sync(
            self._call, functools.partial(rt.context, query, budget_tokens=budget_tokens))
        return block

    def document(self) -> dict[str, Any]:
        """What ``/runtime.json`` answers: the samples, the tree, the last write cycles."""
        return {"running": self.running, "samples": [s.as_json() for s in self.samples],
                "tree": self.tree, "cycles": list(self.cycles)}
