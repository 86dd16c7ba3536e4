"""The store's side for code that builds on it: durable writes, locks, file rules.

``memory`` keeps its workspace files, claims and audit beside the sessions
with the store's own tools: the one durable seam (``run_durable``, the file
modes and temp suffix), the cross-process lock, the fingerprint that tells a
changed session directory, the symlink rules, the node file format, id
checks, and the recovery of a dead runtime's log. Code that only keeps
sessions (a host appending turns, reading branches) needs none of this and
imports from ``store``; as with ``actors.lowlevel``, this module only
re-exports.
"""

from store._durable import DIR_MODE, FILE_MODE, TEMP_SUFFIX, run_durable
from store._format import decode_node, encode_node, parse_filename
from store._ids import citable_id_problem, validate_id
from store._index import CLAIM_NAME, FileStamp, Fingerprint, file_stamp
from store._links import refuse_file_link, walk_files
from store._lock import SessionLock, wait_for_flock
from store._session import recover_dead_runtimes
from store._sessions import missing_meta, state_path
from store._walk import predecessor_cycles

__all__ = [
    "CLAIM_NAME",
    "DIR_MODE",
    "FILE_MODE",
    "TEMP_SUFFIX",
    "FileStamp",
    "Fingerprint",
    "SessionLock",
    "citable_id_problem",
    "decode_node",
    "encode_node",
    "file_stamp",
    "missing_meta",
    "parse_filename",
    "predecessor_cycles",
    "recover_dead_runtimes",
    "refuse_file_link",
    "run_durable",
    "state_path",
    "validate_id",
    "wait_for_flock",
    "walk_files",
]
