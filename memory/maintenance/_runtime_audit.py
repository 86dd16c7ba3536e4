"""The audit of ``runtime.json`` (issue 23): block ids without an order, counters that went back.

Scriptorium itself moves the counters only under the workspace lock and in
the same install as the topics (:mod:`memory.workspace._runtime_state`), so
what this finds was done by something else: another program that rewrote
``runtime.json`` from an old copy, an older scriptorium, a restored backup.

* **unordered blocks**: a block id a topic holds (aliases too) with no
  ``creation_order`` entry;
* **counters backwards**: ``creation_order``'s size or a counter below its
  high-water mark in ``runtime-floor.json`` (a consolidation lowers the
  mark in the same write that resets the counter, so only a stale
  overwrite gets here).

``--repair`` (:func:`repair_runtime_state`) numbers each unordered block
after the last order and raises each counter to its mark, under the lock.
Entries lost from ``creation_order`` for blocks no topic holds any more
cannot be brought back; their count is reported, and the mark lowered to
what is true once repaired, so the same loss is not reported forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memory._errors import TopicError
from memory.workspace._install_journal import workspace_lock
from memory.workspace._runtime_state import (
    Floor,
    RuntimeState,
    floored,
    read_floor,
    read_runtime_state,
    update_runtime_state,
    write_runtime_state,
)
from memory.workspace._topics import parse_topic
from store import LOCK_TIMEOUT, DurableFiles

__all__ = [
    "RUNTIME_WHAT_TO_DO",
    "read_runtime_facts",
    "repair_runtime_state",
    "runtime_findings",
    "topic_block_ids",
]

RUNTIME_WHAT_TO_DO: dict[str, str] = {
    "unordered_blocks": (
        "these block ids have no creation_order entry in memory/.scriptorium/runtime.json "
        "(something rewrote it from an older copy): run 'scriptorium memory audit --repair'"
    ),
    "runtime_backwards": (
        "runtime.json's counters are below what scriptorium last wrote (a stale overwrite): "
        "run 'scriptorium memory audit --repair' to raise them back"
    ),
}


def topic_block_ids(topics: Mapping[str, str]) -> list[str]:
    """Pure: every block id (aliases too) of every topic that parses, in path then file order."""
    ids: list[str] = []
    for path in sorted(topics):
        try:
            topic = parse_topic(topics[path], path)
        except TopicError:
            continue  # reported as unreadable by the audit itself
        ids.extend(topic.block_ids())
    return ids


def runtime_findings(
    state: RuntimeState, floor: Floor, block_ids: list[str],
) -> dict[str, list[dict[str, Any]]]:
    """Pure: the two finding lists, keyed as in :data:`RUNTIME_WHAT_TO_DO`."""
    unordered = [b for b in dict.fromkeys(block_ids) if b not in state.creation_order]
    return {
        "unordered_blocks": [{"block": block} for block in unordered],
        "runtime_backwards": floor.shortfalls(state),
    }


def repair_runtime_state(
    memory_dir: str, topics: Mapping[str, str], *, files: DurableFiles | None = None,
    lock_timeout: float | None = LOCK_TIMEOUT,
) -> dict[str, Any]:
    """Order every unordered block and raise the counters to their marks, under the lock.

    Returns ``{ordered, raised, entries_lost}``: how many blocks got an
    order, which counters were raised, and how many ``creation_order``
    entries of blocks no topic holds any more are gone for good.
    """
    files = files if files is not None else DurableFiles()
    ids = topic_block_ids(topics)
    with workspace_lock(memory_dir, files, timeout=lock_timeout):
        before, floor = read_runtime_state(memory_dir), read_floor(memory_dir)
        found = runtime_findings(before, floor, ids)
        after = update_runtime_state(memory_dir, lambda s: floored(s, floor, ids), files)
        lost = max(0, floor.entries - len(after.creation_order))
        if lost:  # the mark said more than can be restored: lower it to the truth
            write_runtime_state(memory_dir, after, files, lowered=True)
    raised = [s["counter"] for s in found["runtime_backwards"] if s["counter"] != "entries"]
    return {"ordered": len(found["unordered_blocks"]), "raised": raised, "entries_lost": lost}


def read_runtime_facts(memory_dir: str) -> tuple[RuntimeState, Floor]:
    """What the audit reads (outside the lock: a report, not a decision)."""
    return read_runtime_state(memory_dir), read_floor(memory_dir)
