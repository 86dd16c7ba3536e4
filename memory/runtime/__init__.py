"""Scriptorium `memory.runtime`: the supervision tree (SPEC §2, §6.6, §7) and the embedded API (§8).

Layout (see docs/architecture.md): ``_runtime`` the tree and its API,
composed of ``_config``, ``_events``, ``_jobs``, ``_timers``, ``_claims``,
``_quarantine``, ``_write_cycle`` and ``_desk``; ``_backlog`` the memory lag and
the group-size rule; ``_session_actor`` (with
``_session_marks``, ``_session_outcomes``, ``_session_state``),
``_workspace_actor``, ``_pool``, ``_watchdog`` its actors, each given the
parts it uses, never the runtime; ``_sessions`` the session operations;
``_maintenance`` migration and backfill through the actors;
``_headless`` one pass without a daemon; ``_import`` history imported
from a JSON-lines file; ``_settings`` the timings from flags, a file or code.
"""

from memory._errors import ImportInterruptedError as ImportInterruptedError
from memory._errors import ImportLineError as ImportLineError
from memory.runtime._backlog import MemoryLag as MemoryLag
from memory.runtime._config import Shard as Shard
from memory.runtime._config import apply_timings as apply_timings
from memory.runtime._events import Abandoned as Abandoned
from memory.runtime._events import BoundaryReached as BoundaryReached
from memory.runtime._events import ConsolidationPass as ConsolidationPass
from memory.runtime._events import DeferralUnknown as DeferralUnknown
from memory.runtime._events import Deferred as Deferred
from memory.runtime._events import EventTally as EventTally
from memory.runtime._events import GroupTaken as GroupTaken
from memory.runtime._events import GroupWritten as GroupWritten
from memory.runtime._events import JobDone as JobDone
from memory.runtime._events import Marked as Marked
from memory.runtime._events import MarkersRepaired as MarkersRepaired
from memory.runtime._events import MarkersRepairFailed as MarkersRepairFailed
from memory.runtime._events import Migrated as Migrated
from memory.runtime._events import Quarantined as Quarantined
from memory.runtime._events import QuarantineUnsaved as QuarantineUnsaved
from memory.runtime._events import SessionEnd as SessionEnd
from memory.runtime._events import SessionEndUnsaved as SessionEndUnsaved
from memory.runtime._events import Skipped as Skipped
from memory.runtime._events import Submitted as Submitted
from memory.runtime._headless import SessionReport as SessionReport
from memory.runtime._headless import run_headless as run_headless
from memory.runtime._headless import run_once as run_once
from memory.runtime._headless import run_triggers as run_triggers
from memory.runtime._import import ImportReport as ImportReport
from memory.runtime._import import import_jsonl as import_jsonl
from memory.runtime._runtime import MemoryRuntime as MemoryRuntime
from memory.runtime._runtime import RuntimeConfig as RuntimeConfig
from memory.runtime._runtime import RuntimeStatistics as RuntimeStatistics
from memory.runtime._runtime import open_runtime as open_runtime
from memory.runtime._session_state import BoundaryOutcome as BoundaryOutcome
from memory.runtime._session_state import BoundaryReport as BoundaryReport
from memory.runtime._settings import Timings as Timings
from memory.runtime._settings import check_seconds as check_seconds
from memory.runtime._settings import check_threshold as check_threshold
from memory.runtime._settings import read_settings as read_settings

__all__ = [
    "Abandoned",
    "BoundaryOutcome",
    "BoundaryReached",
    "BoundaryReport",
    "ConsolidationPass",
    "DeferralUnknown",
    "Deferred",
    "EventTally",
    "GroupTaken",
    "GroupWritten",
    "ImportInterruptedError",
    "ImportLineError",
    "ImportReport",
    "JobDone",
    "Marked",
    "MarkersRepairFailed",
    "MarkersRepaired",
    "MemoryLag",
    "MemoryRuntime",
    "Migrated",
    "QuarantineUnsaved",
    "Quarantined",
    "RuntimeConfig",
    "RuntimeStatistics",
    "SessionEnd",
    "SessionEndUnsaved",
    "SessionReport",
    "Shard",
    "Skipped",
    "Submitted",
    "Timings",
    "apply_timings",
    "check_seconds",
    "check_threshold",
    "import_jsonl",
    "open_runtime",
    "read_settings",
    "run_headless",
    "run_once",
    "run_triggers",
]
