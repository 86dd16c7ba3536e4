"""Every event's record is the documented ``run --log-json`` line, and comes back from it.

The record form is an interface (scripts read ``run --log-json``): its keys
are pinned here per event, as they were when events were dicts built at each
emit site, so renaming or reordering a field is a red test, not a silent
change of the log. Every subclass of :class:`Event` is checked, so an event
added without a pinned record fails too.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal

import orjson

import memory.runtime
import memory.simulate
from memory.runtime import JobDone, Marked, Submitted
from memory.writers import Event

# The documented record of each event: its name, then its keys after "event" and "at".
RECORDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Submitted": ("submitted", ("session", "job", "node_ids", "due_at")),
    "JobDone": ("job", ("session", "job", "result", "nodes", "node_ids", "files", "seconds",
                        "error")),
    "GroupTaken": ("group_taken", ("size", "waiting", "oldest_due_age")),
    "GroupWritten": ("group", ("batches", "written", "fallback")),
    "Deferred": ("deferred", ("session", "job", "nodes", "seconds")),
    "DeferralUnknown": ("deferral_unknown", ("session", "error")),
    "Abandoned": ("abandoned", ("session", "job", "nodes")),
    "Quarantined": ("quarantined", ("session", "nodes", "error")),
    "QuarantineUnsaved": ("quarantine_unsaved", ("session", "nodes", "error")),
    "Marked": ("marked", ("session", "node_ids", "seconds")),
    "MarkersRepaired": ("markers_repaired", ("session", "nodes")),
    "ConsolidationPass": ("consolidation", ("scope", "outcome", "actions", "record", "problems",
                                            "error")),
    "MarkersRepairFailed": ("markers_repair_failed", ("session", "error")),
    "Skipped": ("skipped", ("session", "reason")),
    "BoundaryReached": ("boundary", ("session", "outcome", "batches", "reason")),
    "SessionEnd": ("session_end", ("session", "updated_at")),
    "SessionEndUnsaved": ("session_end_unsaved", ("session", "error")),
    "Migrated": ("migrated", ("marked", "cursors_removed", "errors")),
    "ModelUsage": ("model_usage", ("model", "session", "nodes", "result", "seconds",
                                   "prompt_tokens", "completion_tokens", "retries", "calls",
                                   "repairs")),
    "ModelBudgetWait": ("model_budget_wait", ("model", "session", "nodes", "seconds",
                                              "daily_tokens")),
    "ModelRetry": ("model_retry", ("model", "attempt", "attempts", "seconds", "error")),
    "ModelMode": ("model_mode", ("model", "mode", "status")),
    "ModelUsageUnread": ("model_usage_unread", ("model", "error")),
    "ModelUsageUnsaved": ("model_usage_unsaved", ("model", "error")),
    "CpuWorkerStarted": ("cpu_worker", ("state", "starts", "pid")),
    "CpuWorkerLost": ("cpu_worker", ("state", "error", "starts")),
    "CpuWorkerFallback": ("cpu_worker", ("state", "error")),
    "Stage": ("stage", ("what", "unit", "total")),
}


def every_event() -> list[type[Event]]:
    """Every event type the runtime, the writers and the simulator define."""
    assert memory.runtime and memory.simulate  # imported: their events are subclasses now
    found, todo = [], list(Event.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(found, key=lambda cls: cls.__name__)


def sample(hint: Any, name: str) -> Any:
    """A value of type ``hint`` (non-None, so the record shows the field's JSON form)."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return typing.get_args(hint)[0]
    if origin in (types.UnionType, typing.Union):
        return sample(next(a for a in typing.get_args(hint) if a is not type(None)), name)
    if origin is tuple:
        return (f"{name}-1", f"{name}-2")
    if origin is dict:
        return {f"{name}-key": 2}
    return {str: f"{name}-value", int: 7, float: 1.25, bool: True, object: 1.5}[hint]


def instance(cls: type[Event]) -> Event:
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: sample(hints[f.name], f.name) for f in dataclasses.fields(cls)
                  if f.name != "at"}, at=1_700_000_000.5)


def test_every_event_has_its_documented_record() -> None:
    events = every_event()
    assert {cls.__name__ for cls in events} == set(RECORDS)
    for cls in events:
        name, keys = RECORDS[cls.__name__]
        record = instance(cls).as_record()
        assert cls.name == name and record["event"] == name
        assert list(record) == ["event", "at", *keys], cls.__name__


def test_every_event_round_trips_through_its_json_line() -> None:
    for cls in every_event():
        event = instance(cls)
        line = orjson.dumps(event.as_record())
        parsed = orjson.loads(line)
        assert list(parsed) == list(event.as_record())  # the line keeps the keys' order
        assert parsed.pop("event") == cls.name
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                  for k, v in parsed.items()}
        assert cls(**fields) == event, cls.__name__


def test_a_listener_matches_events_by_type() -> None:
    """What EventTally, the progress view and the live page do: a match, not a string."""
    seen: list[str] = []
    for event in (Submitted(session="s", job=1, node_ids=("a",), due_at=None),
                  JobDone(session="s", job=1, result="written", nodes=1, node_ids=("a",),
                          files=(), seconds=0.5, error=None),
                  Marked(session="s", node_ids=("a",), seconds=0.1)):
        match event:
            case Submitted(job=job) | JobDone(job=job):
                seen.append(f"{event.name} {job}")
            case Marked(node_ids=node_ids):
                seen.append(f"marked {len(node_ids)}")
    assert seen == ["submitted 1", "job 1", "marked 1"]
