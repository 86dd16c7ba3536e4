"""What the model writers spent, kept in ``memory/.scriptorium/model-usage.json``.

Totals per model (batches, calls, prompt and completion tokens, retries,
repairs, reuses, failures, seconds) and the tokens of the current UTC day.
On disk because ``scriptorium memory audit --json`` reports them without a
runtime, and because the daily budget must hold across restarts and across
runtimes sharing the state: each batch's usage is merged into the file
under ``.scriptorium/write.lock`` (read, add, durable replace), and the
day's total read back is what the budget checks. ``.scriptorium/`` files
other than runtime.json are outside ``workspace_revision``, so this never
makes a commit a concurrent update.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from memory.workspace import workspace_lock
from memory.writers.model._retry import DailySpend, utc_day
from store import DurableFiles

__all__ = ["USAGE_FILE", "UsageFile", "merge_usage", "read_model_usage"]

USAGE_FILE = ".scriptorium/model-usage.json"
TOTALS = ("batches", "calls", "prompt_tokens", "completion_tokens", "retries", "repairs",
          "reused", "failed", "seconds")


def read_model_usage(memory_dir: str) -> dict[str, Any]:
    """The file's document; an empty one when it is missing or unreadable (never blocks)."""
    try:
        with open(os.path.join(memory_dir, USAGE_FILE), "rb") as handle:
            document = json.loads(handle.read())
    except (OSError, ValueError):
        return {"models": {}, "daily": {"day": "", "tokens": 0}}
    if not isinstance(document, dict):
        return {"models": {}, "daily": {"day": "", "tokens": 0}}
    models = document.get("models")
    daily = document.get("daily")
    models = models if isinstance(models, dict) else {}
    daily = daily if isinstance(daily, dict) else {}
    return {"models": models, "daily": {"day": str(daily.get("day", "")),
                                        "tokens": _number(daily.get("tokens"))}}


def _number(value: object) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return 0
    return value


def merge_usage(document: Mapping[str, Any], model: str, delta: Mapping[str, float],
                tokens: int, now: float) -> dict[str, Any]:
    """Pure: ``document`` with ``delta`` added to ``model``'s totals and ``tokens`` to today."""
    models = {name: dict(values) for name, values in document.get("models", {}).items()
              if isinstance(values, dict)}
    totals = models.setdefault(model, {})
    for key in TOTALS:
        value = _number(totals.get(key)) + delta.get(key, 0)
        totals[key] = round(value, 6) if key == "seconds" else int(value)
    daily = document.get("daily", {})
    today = utc_day(now)
    before = _number(daily.get("tokens")) if daily.get("day") == today else 0
    return {"models": models, "daily": {"day": today, "tokens": int(before + tokens)}}


class UsageFile:
    """The file of one workspace; :meth:`add` is synchronous (run it with ``run_durable``)."""

    def __init__(self, memory_dir: str, files: DurableFiles | None = None) -> None:
        self.memory_dir = memory_dir
        self.files = files or DurableFiles()

    def add(self, model: str, delta: Mapping[str, float], tokens: int, now: float) -> DailySpend:
        """Merge one batch's usage; the day's spend across every writer on this workspace."""
        with workspace_lock(self.memory_dir, self.files):
            document = merge_usage(read_model_usage(self.memory_dir), model, delta, tokens, now)
            self.files.write_atomic(os.path.join(self.memory_dir, USAGE_FILE),
                                    json.dumps(document, sort_keys=True).encode())
        return DailySpend(document["daily"]["day"], document["daily"]["tokens"])

    def daily(self) -> DailySpend:
        daily = read_model_usage(self.memory_dir)["daily"]
        return DailySpend(daily["day"], int(daily["tokens"]))
