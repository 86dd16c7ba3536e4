"""Scriptorium `memory.writers`: writers (SPEC §8) and the write cycle of one batch (§6.4).

Layout (see docs/architecture.md): ``_writer`` the protocol; ``_extractive``
the built-in writer (``_sentences`` its rules on text); ``_prompt`` the
rendered prompt; ``_cycle`` archive, write, commit, then mark; ``_offload``
the worker process for their CPU work.
"""

from memory.writers._cycle import FailureKind as FailureKind
from memory.writers._cycle import WriteOutcome as WriteOutcome
from memory.writers._cycle import run_group_cycle as run_group_cycle
from memory.writers._cycle import run_write_cycle as run_write_cycle
from memory.writers._extractive import ExtractiveWriter as ExtractiveWriter
from memory.writers._extractive import extract_edits as extract_edits
from memory.writers._offload import CPU_WORKER_MODES as CPU_WORKER_MODES
from memory.writers._offload import CpuWorker as CpuWorker
from memory.writers._offload import CpuWorkerMode as CpuWorkerMode
from memory.writers._prompt import render_observations as render_observations
from memory.writers._prompt import render_prompt as render_prompt
from memory.writers._writer import Batch as Batch
from memory.writers._writer import CommittedWrite as CommittedWrite
from memory.writers._writer import GroupWriter as GroupWriter
from memory.writers._writer import Writer as Writer
from memory.writers._writer import WriterOutput as WriterOutput

__all__ = [
    "CPU_WORKER_MODES",
    "Batch",
    "CommittedWrite",
    "CpuWorker",
    "CpuWorkerMode",
    "ExtractiveWriter",
    "FailureKind",
    "GroupWriter",
    "WriteOutcome",
    "Writer",
    "WriterOutput",
    "extract_edits",
    "render_observations",
    "render_prompt",
    "run_group_cycle",
    "run_write_cycle",
]
