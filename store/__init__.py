"""Scriptorium `store` package (see docs/architecture.md).

Layout: ``_durable`` is the one seam for durable writes; ``_ids``, ``_node``,
``_message`` and ``_format`` are the pure record rules; ``_index`` and
``_walk`` the in-memory index and the branch/tip rules over it; ``_journal``
and ``_lock`` the batch journal and the cross-process lock; ``_session`` the
synchronous core one session actor owns, ``_session_journal`` its side of
the journal; ``_sessions`` lists the sessions of a state directory.
``store.lowlevel`` re-exports the walks and formats for code that models a
session without its actor.
"""

from ._actor import Append as Append
from ._actor import FindNodes as FindNodes
from ._actor import GetBranch as GetBranch
from ._actor import GetMeta as GetMeta
from ._actor import InsertSummary as InsertSummary
from ._actor import ListBranches as ListBranches
from ._actor import MergeMetadata as MergeMetadata
from ._actor import RewindTo as RewindTo
from ._actor import SessionActor as SessionActor
from ._actor import SetHead as SetHead
from ._actor import SpawnBranch as SpawnBranch
from ._actor import TipMoved as TipMoved
from ._damage import DamagedLog as DamagedLog
from ._damaged_logs import find_damaged_logs as find_damaged_logs
from ._durable import DIR_MODE as DIR_MODE
from ._durable import FILE_MODE as FILE_MODE
from ._durable import TEMP_SUFFIX as TEMP_SUFFIX
from ._durable import DurableFiles as DurableFiles
from ._durable import run_durable as run_durable
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
from ._format import decode_node as decode_node
from ._format import encode_node as encode_node
from ._format import parse_filename as parse_filename
from ._ids import citable_id_problem as citable_id_problem
from ._ids import validate_id as validate_id
from ._index import CLAIM_NAME as CLAIM_NAME
from ._index import FileStamp as FileStamp
from ._index import Fingerprint as Fingerprint
from ._index import file_stamp as file_stamp
from ._links import refuse_file_link as refuse_file_link
from ._links import walk_files as walk_files
from ._lock import LOCK_TIMEOUT as LOCK_TIMEOUT
from ._lock import SessionLock as SessionLock
from ._lock import wait_for_flock as wait_for_flock
from ._message import message_to_node as message_to_node
from ._message import node_to_message as node_to_message
from ._node import RESERVED_KEYS as RESERVED_KEYS
from ._node import Node as Node
from ._runtime_log import RuntimeLog as RuntimeLog
from ._session import CLOCK_SKEW as CLOCK_SKEW
from ._session import AppendedTurn as AppendedTurn
from ._session import SessionCore as SessionCore
from ._session import SessionStatistics as SessionStatistics
from ._session import recover_dead_runtimes as recover_dead_runtimes
from ._session_view import read_session_as_found as read_session_as_found
from ._session_view import unreplayed as unreplayed
from ._sessions import list_sessions as list_sessions
from ._sessions import missing_meta as missing_meta
from ._sessions import state_path as state_path
from ._walk import predecessor_cycles as predecessor_cycles

__all__ = [
    "CLAIM_NAME",
    "CLOCK_SKEW",
    "DIR_MODE",
    "FILE_MODE",
    "LOCK_TIMEOUT",
    "RESERVED_KEYS",
    "TEMP_SUFFIX",
    "Append",
    "AppendConflictError",
    "AppendInvariantError",
    "BrokenChainError",
    "ChainCycleError",
    "CorruptFileError",
    "DamagedLog",
    "DuplicateNodeError",
    "DurableFiles",
    "FileStamp",
    "FindNodes",
    "Fingerprint",
    "FutureTimestampError",
    "GetBranch",
    "GetMeta",
    "HeadFieldError",
    "InsertSummary",
    "InvalidNodeError",
    "InvalidRequestError",
    "ListBranches",
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
    "SessionLock",
    "SessionLockTimeoutError",
    "SessionNotFoundError",
    "SetHead",
    "SpawnBranch",
    "StoreError",
    "SummaryHeadError",
    "TipMoved",
    "UnencodableValueError",
    "UnsafeIdError",
    "UnsafeLinkError",
    "citable_id_problem",
    "decode_node",
    "encode_node",
    "file_stamp",
    "find_damaged_logs",
    "list_sessions",
    "message_to_node",
    "missing_meta",
    "node_to_message",
    "parse_filename",
    "predecessor_cycles",
    "read_session_as_found",
    "recover_dead_runtimes",
    "refuse_file_link",
    "run_durable",
    "state_path",
    "unreplayed",
    "validate_id",
    "walk_files",
]
