"""Scriptorium `memory.writers`: writers (SPEC §8) and the write cycle of one batch (§6.4).

Layout (see docs/architecture.md): ``_writer`` the protocol; ``_extractive``
the built-in writer (``_sentences`` its rules on text); ``_prompt`` the
rendered prompt; ``_cycle`` archive, write, commit, then mark; ``_offload``
the worker process for their CPU work; ``_events`` the typed events (their
base, and the writers' own).
"""

from memory.writers._cycle import FailureKind as FailureKind
from memory.writers._cycle import WriteOutcome as WriteOutcome
from memory.writers._cycle import run_group_cycle as run_group_cycle
from memory.writers._cycle import run_write_cycle as run_write_cycle
from memory.writers._events import CpuWorkerFallback as CpuWorkerFallback
from memory.writers._events import CpuWorkerLost as CpuWorkerLost
from memory.writers._events import CpuWorkerStarted as CpuWorkerStarted
from memory.writers._events import Event as Event
from memory.writers._events import EventListener as EventListener
from memory.writers._events import ModelBudgetWait as ModelBudgetWait
from memory.writers._events import ModelMode as ModelMode
from memory.writers._events import ModelRetry as ModelRetry
from memory.writers._events import ModelUsage as ModelUsage
from memory.writers._events import ModelUsageUnread as ModelUsageUnread
from memory.writers._events import ModelUsageUnsaved as ModelUsageUnsaved
from memory.writers._extractive import ExtractiveWriter as ExtractiveWriter
from memory.writers._extractive import extract_edits as extract_edits
from memory.writers._offload import CPU_WORKER_MODES as CPU_WORKER_MODES
from memory.writers._offload import CpuWorker as CpuWorker
from memory.writers._offload import CpuWorkerMode as CpuWorkerMode
from memory.writers._prompt import render_observations as render_observations
from memory.writers._prompt import render_prompt as render_prompt
from memory.writers._writer import AdmittingWriter as AdmittingWriter
from memory.writers._writer import Batch as Batch
from memory.writers._writer import CommittedWrite as CommittedWrite
from memory.writers._writer import DeferringWriter as DeferringWriter
from memory.writers._writer import ExclusiveWriter as ExclusiveWriter
from memory.writers._writer import GroupWriter as GroupWriter
from memory.writers._writer import ReportingWriter as ReportingWriter
from memory.writers._writer import Writer as Writer
from memory.writers._writer import WriterOutput as WriterOutput
from memory.writers._writer import is_exclusive as is_exclusive

__all__ = [
    "CPU_WORKER_MODES",
    "AdmittingWriter",
    "Batch",
    "CommittedWrite",
    "CpuWorker",
    "CpuWorkerFallback",
    "CpuWorkerLost",
    "CpuWorkerMode",
    "CpuWorkerStarted",
    "DeferringWriter",
    "Event",
    "EventListener",
    "ExclusiveWriter",
    "ExtractiveWriter",
    "FailureKind",
    "GroupWriter",
    "ModelBudgetWait",
    "ModelMode",
    "ModelRetry",
    "ModelUsage",
    "ModelUsageUnread",
    "ModelUsageUnsaved",
    "ReportingWriter",
    "WriteOutcome",
    "Writer",
    "WriterOutput",
    "extract_edits",
    "is_exclusive",
    "render_observations",
    "render_prompt",
    "run_group_cycle",
    "run_write_cycle",
]
