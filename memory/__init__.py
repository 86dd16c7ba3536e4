"""Scriptorium `memory` package: the workspace, the ledger, writers and the runtime.

Layout (see docs/architecture.md), each folder importing only those before it:
``ledger/`` (what a branch owes, pure), ``workspace/`` (the formats of SPEC §5
and their installs), ``writers/`` (writers and one batch's write cycle),
``maintenance/`` (migrate, backfill, audit), ``runtime/`` (the supervision
tree), ``simulate/`` (the stress harness), ``cli/`` (the ``scriptorium``
command); ``_errors`` is the package's one errors module.
"""

from memory._errors import ArchiveError as ArchiveError
from memory._errors import BoundaryError as BoundaryError
from memory._errors import ConcurrentUpdateError as ConcurrentUpdateError
from memory._errors import ConsolidationRefusedError as ConsolidationRefusedError
from memory._errors import IncompleteArchiveError as IncompleteArchiveError
from memory._errors import RecallArgumentError as RecallArgumentError
from memory._errors import RecallError as RecallError
from memory._errors import RuntimeClosedError as RuntimeClosedError
from memory._errors import ScriptoriumMemoryError as ScriptoriumMemoryError
from memory._errors import TopicError as TopicError
from memory._errors import TransactionError as TransactionError
from memory._errors import WorkspaceLockTimeoutError as WorkspaceLockTimeoutError
from memory._errors import WriteCycleError as WriteCycleError
from memory.ledger import MARKER_KEY as MARKER_KEY
from memory.ledger import SourceMeta as SourceMeta
from memory.ledger import SourceRecord as SourceRecord
from memory.ledger import WritePolicy as WritePolicy
from memory.ledger import first_batch as first_batch
from memory.ledger import records_from_branch as records_from_branch
from memory.ledger import unwritten_turns as unwritten_turns
from memory.runtime import BoundaryOutcome as BoundaryOutcome
from memory.runtime import BoundaryReport as BoundaryReport
from memory.runtime import MemoryRuntime as MemoryRuntime
from memory.runtime import RuntimeConfig as RuntimeConfig
from memory.runtime import Shard as Shard
from memory.runtime import open_runtime as open_runtime
from memory.workspace import TopicEdit as TopicEdit
from memory.workspace import WorkspaceSnapshot as WorkspaceSnapshot
from memory.writers import Batch as Batch
from memory.writers import CommittedWrite as CommittedWrite
from memory.writers import ExtractiveWriter as ExtractiveWriter
from memory.writers import FailureKind as FailureKind
from memory.writers import WriteOutcome as WriteOutcome
from memory.writers import Writer as Writer

__all__ = [
    "MARKER_KEY",
    "ArchiveError",
    "Batch",
    "BoundaryError",
    "BoundaryOutcome",
    "BoundaryReport",
    "CommittedWrite",
    "ConcurrentUpdateError",
    "ConsolidationRefusedError",
    "ExtractiveWriter",
    "FailureKind",
    "IncompleteArchiveError",
    "MemoryRuntime",
    "RecallArgumentError",
    "RecallError",
    "RuntimeClosedError",
    "RuntimeConfig",
    "ScriptoriumMemoryError",
    "Shard",
    "SourceMeta",
    "SourceRecord",
    "TopicEdit",
    "TopicError",
    "TransactionError",
    "WorkspaceLockTimeoutError",
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
