"""One consolidation pass through the topic transactions: refused whole, or installed whole.

A pass reads the topics at one revision (a :class:`WorkspaceSnapshot`),
asks a consolidator for a :class:`~._plan.Plan`, refuses it whole when
:func:`~._plan.losses` finds anything lost, and commits it as one
transaction against that revision: ``whole=True`` (one refused edit
refuses all), the pass's record (``.scriptorium/consolidation/<id>.json``)
and the counters' reset in the same install. So a crash at any step leaves
the old topics or the new ones with their record, never a mix; a write
that landed meanwhile makes the commit a ``ConcurrentUpdateError`` and the
pass is simply planned again later (it yields to writing).

``--scope local`` resets ``local_batches`` and ``local_tokens``; ``global``
also ``write_commits_since_global`` and sets ``last_global_at``.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from memory._errors import ConcurrentUpdateError, ConsolidationRefusedError, TopicError
from memory.consolidation._plan import Plan, losses
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot
from memory.workspace._install_journal import workspace_lock
from memory.workspace._runtime_state import (
    RECORDS_DIR,
    RuntimeState,
    StateUpdate,
    update_runtime_state,
)
from memory.workspace._topics import Topic, parse_topic, render_topic
from memory.workspace._transaction import CommitResult, Transactions
from store import LOCK_TIMEOUT, DurableFiles

__all__ = [
    "Consolidator",
    "PreparedPass",
    "Scope",
    "commit_pass",
    "consolidate_workspace",
    "prepare_pass",
    "read_history",
    "read_topics",
    "reset_counters",
]

Scope = Literal["local", "global"]
Consolidator = Callable[[Mapping[str, Topic]], Plan]


@dataclass(frozen=True, slots=True)
class PreparedPass:
    """What committing a pass needs, and what ``--dry-run`` prints."""

    base_revision: str
    scope: Scope
    edits: tuple[TopicEdit, ...]
    record_path: str
    record: dict[str, Any]
    diff: str

    def as_json(self) -> dict[str, Any]:
        return {**self.record, "diff": self.diff}


def read_topics(snapshot: WorkspaceSnapshot) -> dict[str, Topic]:
    """The snapshot's topics that parse strictly; the others are left to the audit, untouched."""
    topics: dict[str, Topic] = {}
    for path in snapshot.topic_paths:
        try:
            topics[path] = parse_topic(snapshot.read(path), path)
        except (TopicError, OSError, UnicodeDecodeError):
            continue
    return topics


def prepare_pass(
    snapshot: WorkspaceSnapshot, consolidator: Consolidator, *, scope: Scope, now: float,
) -> PreparedPass:
    """Plan a pass over ``snapshot`` (blocking: it reads the topic files).

    Raises :class:`ConsolidationRefusedError` when the plan would lose anything.
    """
    before = read_topics(snapshot)
    plan = consolidator(before)
    problems = losses(before, plan)
    if problems:
        raise ConsolidationRefusedError(problems)
    edits = tuple(
        TopicEdit(path, render_topic(topic) if topic.paragraphs else None, tool="consolidate")
        for path, topic in sorted(plan.topics.items())
    )
    diff = "".join(
        "".join(difflib.unified_diff(
            render_topic(before[path]).splitlines(keepends=True) if path in before else [],
            render_topic(topic).splitlines(keepends=True) if topic.paragraphs else [],
            fromfile=f"a/{path}", tofile=f"b/{path}"))
        for path, topic in sorted(plan.topics.items())
    )
    at = dt.datetime.fromtimestamp(now, dt.UTC)
    digest = hashlib.sha256(f"{snapshot.revision}|{scope}|{now!r}".encode()).hexdigest()[:8]
    pass_id = f"{at:%Y%m%dT%H%M%S%fZ}-{digest}"
    record = {
        "pass": pass_id, "at": at.isoformat(), "scope": scope,
        "base_revision": snapshot.revision, "files": sorted(plan.topics),
        "actions": [action.as_json() for action in plan.actions],
        "removed": dict(sorted(plan.removed.items())),
    }
    return PreparedPass(snapshot.revision, scope, edits, f"{RECORDS_DIR}/{pass_id}.json",
                        record, diff)


def reset_counters(scope: Scope, now: float) -> StateUpdate:
    """The pass's counter update: what it consumed goes back to zero (floor lowered with it)."""
    def update(state: RuntimeState, created: Sequence[str]) -> RuntimeState:
        after = replace(state, local_batches=0, local_tokens=0)
        if scope == "global":
            after = replace(after, write_commits_since_global=0,
                            last_global_at=dt.datetime.fromtimestamp(now, dt.UTC).isoformat())
        return after
    return update


def record_text(prepared: PreparedPass) -> str:
    return json.dumps(prepared.record, ensure_ascii=False, indent=2) + "\n"


def read_history(memory_dir: str, *, limit: int | None = None) -> list[dict[str, Any]]:
    """The pass records, oldest first (the last ``limit``); an unreadable record is skipped."""
    directory = os.path.join(memory_dir, RECORDS_DIR)
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    except FileNotFoundError:
        return []
    if limit is not None:
        names = names[-limit:] if limit > 0 else []
    records: list[dict[str, Any]] = []
    for name in names:
        try:
            with open(os.path.join(directory, name), "rb") as handle:
                record = json.loads(handle.read())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def commit_pass(transactions: Transactions, prepared: PreparedPass, now: float) -> CommitResult | None:
    """Install ``prepared`` (blocking, one durable operation); None when it changes no topic.

    A pass with nothing to change still resets the counters it consumed,
    or the trigger would fire again at once. Raises
    :class:`~memory._errors.ConcurrentUpdateError` when a write landed since its snapshot.
    """
    update = reset_counters(prepared.scope, now)
    if not prepared.edits:
        with workspace_lock(transactions.memory_dir, transactions.files,
                            timeout=transactions.lock_timeout):
            # Counters a write added since the snapshot are not the pass's to reset.
            current = transactions.revisions.revision()
            if current != prepared.base_revision:
                raise ConcurrentUpdateError(prepared.base_revision, current)
            update_runtime_state(transactions.memory_dir, lambda s: update(s, ()),
                                 transactions.files, lowered=True)
        return None
    return transactions.commit(
        prepared.edits, base_revision=prepared.base_revision, batch_sources=frozenset(),
        update_state=update, whole=True, records=[(prepared.record_path, record_text(prepared))],
    )


def consolidate_workspace(
    memory_dir: str, consolidator: Consolidator, *, scope: Scope, now: float,
    dry_run: bool = False, files: DurableFiles | None = None,
    lock_timeout: float | None = LOCK_TIMEOUT,
) -> PreparedPass:
    """One pass over ``<state>/memory`` outside a runtime (``scriptorium memory consolidate``).

    Safe beside a running runtime: the commit takes ``write.lock`` and
    checks the revision like any write.
    """
    transactions = Transactions(memory_dir, archived=lambda _: None, files=files,
                                lock_timeout=lock_timeout)
    transactions.recover()
    prepared = prepare_pass(transactions.snapshot(), consolidator, scope=scope, now=now)
    if not dry_run:
        commit_pass(transactions, prepared, now)
    return prepared
