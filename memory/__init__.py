"""Scriptorium `memory` package: the workspace, the ledger, writers and the runtime.

Layout (see docs/architecture.md): ``_records``, ``_ledger``, ``_tokens``
(what a branch owes, pure); ``_archive``, ``_legacy``, ``_topics``,
``_topic_ids``, ``_revision``, ``_transaction`` (the workspace formats and
their all-or-nothing installs); ``_writer``, ``_extractive``, ``_prompt``,
``_cycle`` (writers and one batch's write cycle); ``_workspace_actor``,
``_session_actor``, ``_pool``, ``_watchdog``, ``_runtime``, ``_headless``
(the supervision tree); ``_cli`` (the ``scriptorium`` command).
"""

from memory._cycle import FailureKind as FailureKind
from memory._cycle import WriteOutcome as WriteOutcome
from memory._errors import ArchiveError as ArchiveError
from memory._errors import ConcurrentUpdate as ConcurrentUpdate
from memory._errors import IncompleteArchive as IncompleteArchive
from memory._errors import ScriptoriumMemoryError as ScriptoriumMemoryError
from memory._errors import TopicError as TopicError
from memory._errors import TransactionError as TransactionError
from memory._errors import WriteCycleError as WriteCycleError
from memory._extractive import ExtractiveWriter as ExtractiveWriter
from memory._ledger import WritePolicy as WritePolicy
from memory._ledger import first_batch as first_batch
from memory._ledger import records_from_branch as records_from_branch
from memory._ledger import unwritten_turns as unwritten_turns
from memory._records import MARKER_KEY as MARKER_KEY
from memory._records import SourceMeta as SourceMeta
from memory._records import SourceRecord as SourceRecord
from memory._runtime import MemoryRuntime as MemoryRuntime
from memory._runtime import RuntimeConfig as RuntimeConfig
from memory._runtime import open_runtime as open_runtime
from memory._session_actor import BoundaryOutcome as BoundaryOutcome
from memory._writer import Batch as Batch
from memory._writer import CommittedWrite as CommittedWrite
from memory._writer import TopicEdit as TopicEdit
from memory._writer import WorkspaceSnapshot as WorkspaceSnapshot
from memory._writer import Writer as Writer

__all__ = [
    "MARKER_KEY",
    "ArchiveError",
    "Batch",
    "BoundaryOutcome",
    "CommittedWrite",
    "ConcurrentUpdate",
    "ExtractiveWriter",
    "FailureKind",
    "IncompleteArchive",
    "MemoryRuntime",
    "RuntimeConfig",
    "ScriptoriumMemoryError",
    "SourceMeta",
    "SourceRecord",
    "TopicEdit",
    "TopicError",
    "TransactionError",
    "WorkspaceSnapshot",
    "WriteCycleError",
    "WriteOutcome",
    "WritePolicy",
    "Writer",
    "first_batch",
    "open_runtime",
    "records_from_branch",
    "unwritten_turns",
]
