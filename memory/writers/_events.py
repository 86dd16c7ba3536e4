"""Typed events: what the runtime and the writers report, one frozen dataclass each.

An event names what happened with its type and carries its fields as
typed attributes, so a listener matches on the type (``case Marked():``)
and a misspelt field is a type error where it is emitted. Every event
has a stable ``name`` (``"job"``, ``"model_usage"``...) and one record
form, :meth:`Event.as_record`: ``{"event": name, "at": at, fields...}``,
the JSON line ``scriptorium run --log-json`` prints (a documented
interface: the record's keys are the fields' names, in their order).

The base and the writers' events live here, the lowest folder that
emits; the runtime's events are in :mod:`memory.runtime._events`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

__all__ = ["CpuWorkerFallback", "CpuWorkerLost", "CpuWorkerStarted", "Event", "EventListener",
           "ModelBudgetWait", "ModelMode", "ModelRetry", "ModelUsage", "ModelUsageUnread",
           "ModelUsageUnsaved"]


@dataclass(frozen=True, kw_only=True)
class Event:
    """One event; ``at`` is the wall-clock time it happened (its emitter's clock).

    The runtime's :class:`~memory.runtime._events.EventHook` stamps ``at``
    as it emits; a writer stamps its own with its clock.
    """

    name: ClassVar[str]
    at: float = 0.0

    def as_record(self) -> dict[str, Any]:
        """The log record: ``{"event": name, "at": at, fields...}`` (``run --log-json``)."""
        return {"event": self.name,
                **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}


# What receives events (``RuntimeConfig.on_event``, ``ModelWriter(on_event=...)``).
EventListener = Callable[[Event], None]


# -- the model writer's (memory.writers.model) ------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ModelUsage(Event):
    """A batch's model calls ended: ``result`` (written, nothing, failed, reused) and its cost."""

    name: ClassVar[str] = "model_usage"
    model: str
    session: str
    nodes: int
    result: str
    seconds: float
    prompt_tokens: int
    completion_tokens: int
    retries: int
    calls: int
    repairs: int


@dataclass(frozen=True, kw_only=True)
class ModelBudgetWait(Event):
    """The daily token budget is spent: ``session``'s batch waits ``seconds``."""

    name: ClassVar[str] = "model_budget_wait"
    model: str
    session: str
    nodes: int
    seconds: float
    daily_tokens: int


@dataclass(frozen=True, kw_only=True)
class ModelRetry(Event):
    """A call failed; attempt ``attempt + 1`` of ``attempts`` waits ``seconds``."""

    name: ClassVar[str] = "model_retry"
    model: str
    attempt: int
    attempts: int
    seconds: float
    error: str


@dataclass(frozen=True, kw_only=True)
class ModelMode(Event):
    """The endpoint refused a structured form: the writer now asks in ``mode``."""

    name: ClassVar[str] = "model_mode"
    model: str
    mode: str
    status: int


@dataclass(frozen=True, kw_only=True)
class ModelUsageUnread(Event):
    """The usage file could not be read (the day's spend is this writer's own count)."""

    name: ClassVar[str] = "model_usage_unread"
    model: str
    error: str


@dataclass(frozen=True, kw_only=True)
class ModelUsageUnsaved(Event):
    """A batch's usage could not be saved (it is added to the next save)."""

    name: ClassVar[str] = "model_usage_unsaved"
    model: str
    error: str


# -- the CPU worker's (memory.writers._offload), all named "cpu_worker" ------------------


@dataclass(frozen=True, kw_only=True)
class CpuWorkerStarted(Event):
    """The worker process started (its ``starts``-th start)."""

    name: ClassVar[str] = "cpu_worker"
    state: Literal["started"] = "started"
    starts: int
    pid: int


@dataclass(frozen=True, kw_only=True)
class CpuWorkerLost(Event):
    """The worker process died or could not start; ``unavailable``: no more starts."""

    name: ClassVar[str] = "cpu_worker"
    state: Literal["lost", "unavailable"]
    error: str
    starts: int


@dataclass(frozen=True, kw_only=True)
class CpuWorkerFallback(Event):
    """A call's arguments could not be sent to the worker: it ran in the caller's thread."""

    name: ClassVar[str] = "cpu_worker"
    state: Literal["fallback"] = "fallback"
    error: str
