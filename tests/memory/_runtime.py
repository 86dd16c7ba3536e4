"""How the memory tests drive a runtime: its config, the turns they append, what they read back.

``config()`` sends the runtime's events to an :class:`EventTally` (``tally``
reads it back: how often each node reached a writer); ``virtual_config()``
adds a wall clock that follows the virtual one and fast retry rules, for
tests marked ``virtual_time``. ``chain`` appends alternating turns;
``build_session`` writes a session with the store alone, before any runtime
opens it. ``marked``, ``markers`` and ``marker_values`` read the markers
back from disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread

from memory.ledger._ledger import WritePolicy
from memory.ledger._records import MARKER_KEY
from memory.runtime._events import EventTally
from memory.runtime._runtime import MemoryRuntime, RuntimeConfig
from store import SessionCore
from supervisors import Backoff

__all__ = [
    "HANG", "SENTENCES", "build_session", "chain", "config", "lock_config", "marked",
    "marker_values", "markers", "tally", "virtual_config", "virtual_wall_clock",
]

SENTENCES = [
    "I prefer green tea in the morning.",
    "We decided to ship the release on Friday.",
    "My sister is named Alice.",
    "The project deadline is next month.",
    "The office is in Berlin.",
    "I love hiking in the Alps.",
]

# Virtual seconds: far beyond anything the runtime does here, so reaching it is a hang.
HANG = 3600.0

EPOCH = 1_800_000_000.0


def config(**overrides: Any) -> RuntimeConfig:
    """The tests' runtime config; its events go to an :class:`EventTally` (and ``on_event``)."""
    forward = overrides.pop("on_event", None)
    options: dict[str, Any] = {"policy": WritePolicy(threshold=8000), "writer_workers": 2,
                               "on_event": EventTally(forward)}
    options.update(overrides)
    return RuntimeConfig(**options)


def virtual_wall_clock() -> float:
    """Wall time that follows the virtual clock, also from the store's worker threads."""
    try:
        return EPOCH + anyio.current_time()
    except anyio.NoEventLoopError:
        return EPOCH + anyio.from_thread.run_sync(anyio.current_time)


def virtual_config(**overrides: Any) -> RuntimeConfig:
    """:func:`config` on virtual time: its wall clock, short retries, a seeded jitter."""
    options: dict[str, Any] = {
        "clock": virtual_wall_clock,
        "max_failures": 3,
        "retry_backoff": Backoff(initial=5.0, factor=2.0, maximum=60.0, jitter=0.25),
        "writer_timeout": 600.0,
        "seed": 1,
        # No call timeouts: on virtual time a slow disk would let them jump ahead.
    }
    options.update(overrides)
    return config(**options)


def lock_config(**overrides: Any) -> RuntimeConfig:
    """:func:`virtual_config` with a lock wait short enough to run out within a test."""
    return virtual_config(lock_timeout=5.0, **overrides)


def tally(rt: MemoryRuntime) -> EventTally:
    """What the runtime's events counted: the tally its config sends them to."""
    found = rt.config.on_event
    assert isinstance(found, EventTally), "a config without an EventTally counts nothing"
    return found


async def chain(rt: MemoryRuntime, sid: str, start: str, ids: list[str]) -> str:
    """Append ``ids`` after ``start`` as alternating user and assistant turns; the last id."""
    previous = start
    for index, node_id in enumerate(ids):
        role = "user" if index % 2 == 0 else "assistant"
        text = f"{SENTENCES[index % len(SENTENCES)]} Turn {node_id}."
        await rt.sessions.append(sid, {"id": node_id, "role": role, "content": text,
                                       "predecessor": previous})
        previous = node_id
    return previous


def build_session(state: Path, sid: str, ids: list[str]) -> None:
    """Session ``sid`` with a chain of ``ids``, written by the store alone and checkpointed."""
    core = SessionCore.create(state, sid, title=sid)
    previous = "ROOT"
    for index, node_id in enumerate(ids):
        core.append({"id": node_id, "role": ["user", "assistant"][index % 2],
                     "predecessor": previous,
                     "content": f"I prefer tea number {index}. We decided to ship it."})
        previous = node_id
    core.close()  # checkpointed: the journal holds nothing a later open would replay


def marked(state: Path, sid: str) -> set[str]:
    """The nodes of ``sid`` that carry a marker (any workspace's)."""
    return {n.id for n in SessionCore.open(state, sid).nodes() if MARKER_KEY in n.metadata}


def markers(state: Path, sid: str, workspace: str) -> set[str]:
    """The nodes of ``sid`` marked by ``workspace``."""
    core = SessionCore.open(state, sid)
    return {n.id for n in core.nodes() if n.metadata.get(MARKER_KEY) == workspace}


def marker_values(state: Path, sid: str) -> dict[str, Any]:
    """Each node of ``sid`` and its marker (``None`` where it has none)."""
    core = SessionCore.open(state, sid)
    try:
        return {n.id: n.metadata.get(MARKER_KEY) for n in core.nodes()}
    finally:
        core.close()
