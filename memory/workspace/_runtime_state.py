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

Issue 23: ``runtime.json`` must never lose an entry. Every change is a
read-modify-write under the workspace lock (:func:`counted`,
:func:`floored`: pure, over what is on disk now, never over a copy read
earlier), and a commit's counters move in the same install as its topics
(:mod:`memory.workspace._transaction`), so a kill cannot leave block ids
without an order or a batch counted twice. ``runtime-floor.json`` keeps the
counters' high-water marks (lowered only by a consolidation, in the same
write that resets them): a ``runtime.json`` overwritten by anyone else with
older counters is found by ``audit`` and raised back by ``--repair``, and
by the next commit.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from store import DurableFiles

__all__ = [
    "FLOOR_PATH",
    "RECORDS_DIR",
    "RUNTIME_FILE",
    "RUNTIME_FILES",
    "RUNTIME_PATH",
    "SESSION_END_PATH",
    "Floor",
    "RuntimeState",
    "StateUpdate",
    "Tally",
    "counted",
    "floored",
    "is_record_path",
    "parse_floor",
    "parse_runtime_state",
    "parse_session_end",
    "read_floor",
    "read_runtime_state",
    "read_session_end",
    "render_floor",
    "render_runtime_state",
    "render_session_end",
    "runtime_changes",
    "runtime_files",
    "update_runtime_state",
    "write_runtime_state",
    "write_session_end",
]

# Relative to ``<state>/memory``.
RUNTIME_PATH = os.path.join(".scriptorium", "runtime.json")
SESSION_END_PATH = os.path.join(".scriptorium", "session-end.json")
FLOOR_PATH = os.path.join(".scriptorium", "runtime-floor.json")
# The two files a commit's install journal may name besides topics (POSIX, like its paths).
RUNTIME_FILE = ".scriptorium/runtime.json"
# A consolidation pass's record: one new file per pass, installed with its topics.
RECORDS_DIR = ".scriptorium/consolidation"
_RECORD = re.compile(r"\.scriptorium/consolidation/[0-9A-Za-z_-]{1,80}\.json")
RUNTIME_FILES = frozenset({RUNTIME_FILE, ".scriptorium/runtime-floor.json"})


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


@dataclass(frozen=True, slots=True)
class Tally:
    """What one commit adds to the counters: its batches and their tokens."""

    batches: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Floor:
    """The counters' high-water marks: what ``runtime.json`` held after scriptorium's last write.

    ``entries`` is the size of ``creation_order`` (entries are never removed).
    """

    entries: int = 0
    write_commits_since_global: int = 0
    local_batches: int = 0
    local_tokens: int = 0

    @classmethod
    def of(cls, state: RuntimeState) -> Floor:
        return cls(len(state.creation_order), state.write_commits_since_global,
                   state.local_batches, state.local_tokens)

    def shortfalls(self, state: RuntimeState) -> list[dict[str, Any]]:
        """Pure: each counter of ``state`` below this floor (``{counter, floor, value}``)."""
        now = Floor.of(state)
        return [
            {"counter": name, "floor": getattr(self, name), "value": getattr(now, name)}
            for name in ("entries", *_COUNTERS)
            if getattr(now, name) < getattr(self, name)
        ]


def parse_floor(data: bytes | None) -> Floor:
    """A missing or corrupt floor reads as zeros: it can only fail to find a loss, never invent one."""
    try:
        document = json.loads(data) if data is not None else {}
    except (ValueError, UnicodeDecodeError, RecursionError):
        return Floor()
    if not isinstance(document, dict):
        return Floor()
    values: dict[str, int] = {}
    for name in ("entries", *_COUNTERS):
        value = document.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            values[name] = value
    return Floor(**values)


def render_floor(floor: Floor) -> bytes:
    document = {"entries": floor.entries, **{name: getattr(floor, name) for name in _COUNTERS}}
    return (json.dumps(document, indent=2) + "\n").encode("utf-8")


def read_floor(memory_dir: str) -> Floor:
    return parse_floor(_read(os.path.join(memory_dir, FLOOR_PATH)))


def floored(
    state: RuntimeState, floor: Floor, block_ids: Sequence[str] = (),
) -> RuntimeState:
    """Pure: ``state`` with every counter raised to ``floor`` and an order for every block id.

    What a stale overwrite by another program lost comes back as far as it
    can: counters to their high-water marks, and each block id a topic holds
    (``block_ids``, in topic order) numbered after the last order.
    """
    return replace(
        _with_orders(state, block_ids),
        write_commits_since_global=max(state.write_commits_since_global,
                                       floor.write_commits_since_global),
        local_batches=max(state.local_batches, floor.local_batches),
        local_tokens=max(state.local_tokens, floor.local_tokens),
    )


StateUpdate = Callable[[RuntimeState, Sequence[str]], RuntimeState]
"""``update(state, created)``: the state after a commit that created the block ids ``created``."""


def counted(tally: Tally) -> StateUpdate:
    """The update of a write commit: ``tally``'s batches and tokens, one commit, new orders."""
    return lambda state, created: _counted(state, created, tally)


def _counted(base: RuntimeState, created: Sequence[str], tally: Tally) -> RuntimeState:
    return replace(
        _with_orders(base, created),
        local_batches=base.local_batches + tally.batches,
        local_tokens=base.local_tokens + tally.tokens,
        write_commits_since_global=base.write_commits_since_global + 1,
    )


def _with_orders(state: RuntimeState, block_ids: Sequence[str]) -> RuntimeState:
    missing = [b for b in dict.fromkeys(block_ids) if b not in state.creation_order]
    if not missing:
        return state
    order = dict(state.creation_order)
    # After the highest number, not at len(order): numbers never collide, even
    # in a file whose entries were lost.
    start = max(order.values(), default=-1) + 1
    order.update((block, start + n) for n, block in enumerate(missing))
    return replace(state, creation_order=order)


def runtime_files(state: RuntimeState, *, lowered: bool = False) -> list[tuple[str, bytes]]:
    """The files one runtime-state write installs: ``runtime.json`` and its floor.

    Raising: runtime.json first, so a crash between leaves the floor low (a
    loss missed, never one invented). ``lowered`` (a consolidation's reset):
    the floor first, for the same reason.
    """
    files = [(RUNTIME_PATH, render_runtime_state(state)),
             (FLOOR_PATH, render_floor(Floor.of(state)))]
    return files[::-1] if lowered else files


def runtime_changes(
    memory_dir: str, update: StateUpdate, created: Sequence[str],
    present: Callable[[], Sequence[str]],
) -> list[tuple[str, str | None]]:
    """The install-journal entries that move the counters with a commit (under its lock).

    ``present()``: the block ids the topics hold before the commit. Asked
    only when ``creation_order`` is below its floor (someone wrote an old
    copy): then each of them without an order gets one in this install. A
    scan of every id on every commit would cost ~O(blocks) for nothing.
    """
    state, floor = read_runtime_state(memory_dir), read_floor(memory_dir)
    ids = present() if len(state.creation_order) < floor.entries else ()
    after = update(floored(state, floor, ids), created)
    return [(relative.replace(os.sep, "/"), data.decode("utf-8"))
            for relative, data in runtime_files(after)]


def is_record_path(path: str) -> bool:
    """Whether ``path`` (POSIX, relative to ``memory/``) names a consolidation record."""
    return _RECORD.fullmatch(path) is not None


def read_runtime_state(memory_dir: str) -> RuntimeState:
    """The current state; an unreadable file is the default state, never an error."""
    return parse_runtime_state(_read(os.path.join(memory_dir, RUNTIME_PATH)))


def update_runtime_state(
    memory_dir: str, update: Callable[[RuntimeState], RuntimeState], files: DurableFiles,
    *, lowered: bool = False,
) -> RuntimeState:
    """Read-modify-write ``runtime.json`` (and its floor); call it under the workspace lock.

    ``update`` sees what is on disk now, raised to its floor; the files are
    written only if something changed. Returns the state after.
    """
    current = read_runtime_state(memory_dir)
    after = update(floored(current, read_floor(memory_dir)))
    if after != current:
        write_runtime_state(memory_dir, after, files, lowered=lowered)
    return after


def write_runtime_state(
    memory_dir: str, state: RuntimeState, files: DurableFiles, *, lowered: bool = False,
) -> None:
    """Replace ``runtime.json`` and its floor, each atomically and durably.

    Call it under the workspace lock, with ``state`` computed from what was
    read under that same lock (see the module docstring).
    """
    files.make_dirs(os.path.join(memory_dir, ".scriptorium"))
    for relative, data in runtime_files(state, lowered=lowered):
        files.write_atomic(os.path.join(memory_dir, relative), data)


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
