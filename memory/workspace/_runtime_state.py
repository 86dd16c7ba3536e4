"""The workspace's small state files: runtime.json and session-end.json.

SPEC §5: ``runtime.json`` holds counters only (``creation_order``,
``local_batches``, ``local_tokens``, ``write_commits_since_global``,
``last_global_at``), keeps every key it does not know, and never blocks
writing: a missing or unparsable file reads as the default state. The legacy
key ``cursors`` is exposed so migration (§6.7) can find it and drop it once
every session was marked. SPEC §6.6: ``session-end.json`` maps a session id to
the ``updated_at`` whose session boundary was already processed.

Both files are read and rendered by pure functions here; reading and writing
them goes through :class:`DurableFiles` (one atomic replace each). The
rendering reproduces the reference agent's bytes (``indent=2``, non-ASCII
kept, trailing LF, counters in its field order), because ``runtime.json``
counts in ``workspace_revision`` and a needless byte change would look like
a concurrent update to every open transaction.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from store import DurableFiles

__all__ = [
    "RUNTIME_PATH",
    "SESSION_END_PATH",
    "RuntimeState",
    "parse_runtime_state",
    "parse_session_end",
    "read_runtime_state",
    "read_session_end",
    "render_runtime_state",
    "render_session_end",
    "write_runtime_state",
    "write_session_end",
]

# Relative to ``<state>/memory``.
RUNTIME_PATH = os.path.join(".scriptorium", "runtime.json")
SESSION_END_PATH = os.path.join(".scriptorium", "session-end.json")


@dataclass(frozen=True, slots=True)
class RuntimeState:
    """The counters of ``runtime.json`` plus whatever else the file held.

    ``extra`` holds unknown keys in file order; they are written back
    unchanged. ``cursors`` is the legacy position-cursor map
    (``{sid: {message_id, ordinal}}``), None when absent.
    """

    creation_order: Mapping[str, int] = field(default_factory=dict)
    write_commits_since_global: int = 0
    local_batches: int = 0
    local_tokens: int = 0
    last_global_at: str | None = None
    cursors: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def without_cursors(self) -> RuntimeState:
        """The state after migration: counters and unknown keys kept, cursors gone."""
        return replace(self, cursors=None)


_COUNTERS = ("write_commits_since_global", "local_batches", "local_tokens")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_runtime_state(data: bytes | None) -> RuntimeState:
    """Read ``runtime.json``'s bytes; None, garbage or a non-object read as the default.

    A known key holding the wrong type reads as that counter's default (the
    counters only pace consolidation); the next write replaces it.
    """
    if data is None:
        return RuntimeState()
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return RuntimeState()
    if not isinstance(document, dict):
        return RuntimeState()
    fields: dict[str, Any] = {}
    order = document.get("creation_order")
    if isinstance(order, dict) and all(_is_int(v) for v in order.values()):
        fields["creation_order"] = dict(order)
    for name in _COUNTERS:
        value = document.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            fields[name] = value
    last = document.get("last_global_at")
    if isinstance(last, str):
        fields["last_global_at"] = last
    cursors = document.get("cursors")
    if isinstance(cursors, dict):
        fields["cursors"] = cursors
    known = {"creation_order", "last_global_at", "cursors", *_COUNTERS}
    fields["extra"] = {k: v for k, v in document.items() if k not in known}
    return RuntimeState(**fields)


def render_runtime_state(state: RuntimeState) -> bytes:
    """The file's bytes: the reference agent's field order, then cursors, then unknown keys."""
    document: dict[str, Any] = {
        "creation_order": dict(state.creation_order),
        "write_commits_since_global": state.write_commits_since_global,
        "local_batches": state.local_batches,
        "local_tokens": state.local_tokens,
        "last_global_at": state.last_global_at,
    }
    if state.cursors is not None:
        document["cursors"] = dict(state.cursors)
    for key, value in state.extra.items():
        document.setdefault(key, value)
    return (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def read_runtime_state(memory_dir: str) -> RuntimeState:
    """The current state; an unreadable file is the default state, never an error."""
    return parse_runtime_state(_read(os.path.join(memory_dir, RUNTIME_PATH)))


def write_runtime_state(memory_dir: str, state: RuntimeState, files: DurableFiles) -> None:
    """Replace ``runtime.json`` atomically and durably (one durable operation)."""
    path = os.path.join(memory_dir, RUNTIME_PATH)
    files.make_dirs(os.path.dirname(path))
    files.write_atomic(path, render_runtime_state(state))


def parse_session_end(data: bytes | None) -> dict[str, float]:
    """``{sid: updated_at}``; a missing or corrupt file (or entry) reads as absent.

    Losing an entry only means the idle watchdog looks at that session once
    more, which is harmless; refusing to run would not be.
    """
    if data is None:
        return {}
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    if not isinstance(document, dict):
        return {}
    return {
        sid: float(value)
        for sid, value in document.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    }


def render_session_end(entries: Mapping[str, float]) -> bytes:
    """Sorted keys, ``indent=2``, trailing LF; floats keep their exact repr."""
    return (json.dumps(dict(entries), ensure_ascii=False, indent=2, sort_keys=True) + "\n").encode(
        "utf-8"
    )


def read_session_end(memory_dir: str) -> dict[str, float]:
    return parse_session_end(_read(os.path.join(memory_dir, SESSION_END_PATH)))


def write_session_end(memory_dir: str, entries: Mapping[str, float], files: DurableFiles) -> None:
    """Replace ``session-end.json`` atomically and durably (one durable operation)."""
    path = os.path.join(memory_dir, SESSION_END_PATH)
    files.make_dirs(os.path.dirname(path))
    files.write_atomic(path, render_session_end(entries))


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
