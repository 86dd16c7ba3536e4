"""The crash tests' session, the operations they run on it, and how they read what survived.

Shared by the session journal's crash tests (``test_session_crash.py``) and
the runtime log's (``test_runtime_log_crash.py``): the same short chain and
the same operations, so both journals are held to one standard.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from store._journal import JournalEntry
from store._session import SessionCore

__all__ = ["MARK", "OPERATIONS", "build", "first_wins", "node_files", "state_of"]

_runs = itertools.count()
MARK = "memory_written_scriptorium"


def build(tmp_path: Path) -> Path:
    """A fresh state directory holding session "s" with a short chain u0 a1 u2 a3 u4 a5."""
    state = tmp_path / f"run{next(_runs)}"
    core = SessionCore.create(state, "s")
    for i in range(6):
        core.append({"id": f"{'ua'[i % 2]}{i}", "role": ["user", "assistant"][i % 2],
                     "content": f"turn {i}", "checkpoint": 0})
    core.close()
    return state


def node_files(state: Path) -> dict[str, bytes]:
    """Every file of session "s" (but its lock), by path inside the session directory."""
    root = state / "sessions" / "s"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".lock"}


# The power-loss tests' operations: each acknowledged one must survive.
OPERATIONS: list[Callable[[SessionCore], Any]] = [
    lambda c: c.append({"id": "u6", "content": "six", "predecessor": "a5"}),
    lambda c: c.merge_node_metadata_batch({n: {MARK: "w-7"} for n in ("u0", "a1", "u6")}),
    lambda c: c.append({"id": "a7", "role": "assistant", "content": "seven"}),
    lambda c: c.merge_heads(["a3", "a7"]),
    lambda c: c.rewind_to("u6"),
    lambda c: c.set_head("a5"),
]


def state_of(core: SessionCore) -> tuple[object, ...]:
    return (core.head, core.meta().get("merged_heads"),
            [(n.id, n.metadata) for n in core.nodes()])


def first_wins(records: list[list[JournalEntry]]) -> dict[str, bytes]:
    """A planted fault: replay installs the first record naming a file, not the last."""
    latest: dict[str, bytes] = {}
    for entries in records:
        for entry in entries:
            latest.setdefault(entry.rel, entry.data)
    return latest
