"""When a pass is due (pure, taking ``now``): runtime.json's counters drive it.

The reference agent reorganises its topics after 5 write batches or 40,000
written tokens, and once a day; its ``runtime.json`` carries exactly the
counters for that (``local_batches``, ``local_tokens``,
``write_commits_since_global``, ``last_global_at``), which every commit
raises and a pass resets (:func:`~._pass.reset_counters`). So:

* **global** when anything was written since the last global pass
  (``write_commits_since_global > 0``) and ``last_global_at`` is at least
  ``global_interval`` ago (or was never set);
* else **local** when ``local_batches >= local_batches`` or
  ``local_tokens >= local_tokens`` of the policy;
* else nothing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

from memory.workspace._runtime_state import RuntimeState

__all__ = ["ConsolidationPolicy", "due_scope", "global_due_at"]


@dataclass(frozen=True, slots=True)
class ConsolidationPolicy:
    """The triggers (``RuntimeConfig.consolidation``); ``enabled=False`` turns them off.

    ``check_interval``: how often the runtime reads the counters (seconds).
    ``model``: with a model writer, the automatic passes ask the model too
    (off by default: each pass is a call, outside the writer's token budgets).
    """

    local_batches: int = 5
    local_tokens: int = 40_000
    global_interval: float = 86_400.0
    check_interval: float = 60.0
    enabled: bool = True
    model: bool = False


def _parse_time(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None  # an unreadable stamp counts as never: a pass sets a good one
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def global_due_at(state: RuntimeState, policy: ConsolidationPolicy) -> float | None:
    """The wall time the global pass falls due (None: nothing written since the last one)."""
    if state.write_commits_since_global <= 0:
        return None
    last = _parse_time(state.last_global_at)
    return float("-inf") if last is None else last + policy.global_interval


def due_scope(
    state: RuntimeState, policy: ConsolidationPolicy, now: float,
) -> Literal["local", "global"] | None:
    """Which pass is due at ``now``; see the module docstring."""
    if not policy.enabled:
        return None
    due = global_due_at(state, policy)
    if due is not None and now >= due:
        return "global"
    if state.local_batches >= policy.local_batches or state.local_tokens >= policy.local_tokens:
        return "local"
    return None
