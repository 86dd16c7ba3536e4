"""Scriptorium `store` package (see docs/architecture.md).

Layout: ``_durable`` is the one seam for durable writes; ``_ids``, ``_node``,
``_message`` and ``_format`` are the pure record rules; ``_index`` and
``_walk`` the in-memory index and the branch/tip rules over it; ``_journal``
and ``_lock`` the batch journal and the cross-process lock; ``_session`` the
synchronous core one session actor owns (over ``_session_owner``, its lock
and journal steps, and ``_session_reads``, its cache and reads),
``_session_journal`` its side of the journal; ``_runtime_log`` a process's
shared log (``_log_records`` its format, ``_log_recovery`` dead owners');
``_sessions`` lists the sessions of a state directory; ``_threads`` the
one-hop ``run_durable`` and its thread lanes.
``store.lowlevel`` re-exports the walks and formats for code that models a
session without its actor.
"""

from ._actor import Append as Append
from ._actor import FindNodes as FindNodes
from ._actor import GetBranch as GetBranch
from ._actor import GetMeta as GetMeta
from ._actor import InsertSummary as InsertSummary
from ._actor import ListBranches as ListBranches
from ._actor import MergeHeads as MergeHeads
from ._actor import MergeMetadata as MergeMetadata
from ._actor import RewindTo as RewindTo
from ._actor import SessionActor as SessionActor
from ._actor import SessionMessage as SessionMessage
from ._actor import SetHead as SetHead
from ._actor import SpawnBranch as SpawnBranch
from ._actor import TipMoved as TipMoved
from ._damage import DamagedLog as DamagedLog
from ._durable import DurableFiles as DurableFiles
from ._errors import AppendConflictError as AppendConflictError
from ._errors import AppendInvariantError as AppendInvariantError
from ._errors import BrokenChainError as BrokenChainError
from ._errors import ChainCycleError as ChainCycleError
from ._errors import CorruptFileError as CorruptFileError
from ._errors import DuplicateNodeError as DuplicateNodeError
from ._errors import FutureTimestampError as FutureTimestampError
from ._errors import HeadFieldError as HeadFieldError
from ._errors import InvalidNodeError as InvalidNodeError
from ._errors import InvalidRequestError as InvalidRequestError
from ._errors import MetaFileError as MetaFileError
from ._errors import NodeFileError as NodeFileError
from ._errors import NodeNotFoundError as NodeNotFoundError
from ._errors import OversizedContentError as OversizedContentError
from ._errors import ReservedMetadataKeyError as ReservedMetadataKeyError
from ._errors import SessionExistsError as SessionExistsError
from ._errors import SessionLockTimeoutError as SessionLockTimeoutError
from ._errors import SessionNotFoundError as SessionNotFoundError
from ._errors import StoreError as StoreError
from ._errors import SummaryHeadError as SummaryHeadError
from ._errors import UnencodableValueError as UnencodableValueError
from ._errors import UnsafeIdError as UnsafeIdError
from ._errors import UnsafeLinkError as UnsafeLinkError
from ._lock import LOCK_TIMEOUT as LOCK_TIMEOUT
from ._message import message_to_node as message_to_node
from ._message import node_to_message as node_to_message
from ._node import RESERVED_KEYS as RESERVED_KEYS
from ._node import Node as Node
from ._options import SessionOptions as SessionOptions
from ._runtime_log import RuntimeLog as RuntimeLog
from ._session import CLOCK_SKEW as CLOCK_SKEW
from ._session import AppendedTurn as AppendedTurn
from ._session import SessionCore as SessionCore
from ._session import SessionStatistics as SessionStatistics
from ._sessions import list_sessions as list_sessions

__all__ = [
    "CLOCK_SKEW",
    "LOCK_TIMEOUT",
    "RESERVED_KEYS",
    "Append",
    "AppendConflictError",
    "AppendInvariantError",
    "BrokenChainError",
    "ChainCycleError",
    "CorruptFileError",
    "DamagedLog",
    "DuplicateNodeError",
    "DurableFiles",
    "FindNodes",
    "FutureTimestampError",
    "GetBranch",
    "GetMeta",
    "HeadFieldError",
    "InsertSummary",
    "InvalidNodeError",
    "InvalidRequestError",
    "ListBranches",
    "MergeHeads",
    "MergeMetadata",
    "MetaFileError",
    "Node",
    "NodeFileError",
    "NodeNotFoundError",
    "OversizedContentError",
    "ReservedMetadataKeyError",
    "RewindTo",
    "RuntimeLog",
    "SessionActor",
    "SessionCore",
    "SessionExistsError",
    "SessionLockTimeoutError",
    "SessionMessage",
    "SessionNotFoundError",
    "SessionOptions",
    "SetHead",
    "SpawnBranch",
    "StoreError",
    "SummaryHeadError",
    "TipMoved",
    "UnencodableValueError",
    "UnsafeIdError",
    "UnsafeLinkError",
    "list_sessions",
    "message_to_node",
    "node_to_message",
]
