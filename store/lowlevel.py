"""The store's side for code that builds on it: durable writes, locks, walks, formats.

Code that keeps sessions (a host appending turns, reading branches) uses
``store`` (``SessionCore``, the session actor's messages) and needs none of
this. As with ``trio.lowlevel``, what is here is public but assumes its
caller keeps the store's rules; this module only re-exports.

- For ``memory``, which keeps its workspace files, claims and audit beside
  the sessions with the store's own tools: the one durable seam
  (``run_durable``, ``DIR_MODE``, ``FILE_MODE``, ``TEMP_SUFFIX``), the
  cross-process lock (``SessionLock``, ``wait_for_flock``, ``CLAIM_NAME``),
  the fingerprint of a session directory (``Fingerprint``, ``FileStamp``,
  ``file_stamp``), the symlink rules (``refuse_file_link``, ``walk_files``),
  the thread lanes of memory's write side and marker merges (``write_lane``,
  ``mark_lane``), the node file format (``decode_node``, ``encode_node``,
  ``parse_filename``), id checks (``validate_id``, ``citable_id_problem``),
  ``state_path``, ``missing_meta``, ``predecessor_cycles``, the recovery
  of a dead runtime's log (``recover_dead_runtimes``), a session built aside moved in
  whole (``install_staged_session``), and for the audit of
  a state that cannot be written, the damaged logs found without writing
  (``find_damaged_logs``) and a session read as found (``read_session_as_found``,
  ``unreplayed``); and a session's nodes as a tree to draw (``drawing_tree``).
- For the ledger baselines of ``scriptorium simulate --compare``
  (``memory.simulate.baselines``), which replay a forking workload on an
  in-memory DAG and write session files of a given size: ``SessionIndex``,
  ``ROOT``, the walks of SPEC §4 over an index (``branch``,
  ``visible_back_from``, ``list_tips``, ``rewind_ids``), ``node_filename``
  and ``encode_meta`` (an index built by hand, files written without the
  session lock).
"""

from store._damaged_logs import find_damaged_logs
from store._durable import DIR_MODE, FILE_MODE, TEMP_SUFFIX, run_durable
from store._format import decode_node, encode_meta, encode_node, node_filename, parse_filename
from store._ids import citable_id_problem, validate_id
from store._index import CLAIM_NAME, FileStamp, Fingerprint, SessionIndex, file_stamp
from store._links import refuse_file_link, walk_files
from store._lock import SessionLock, wait_for_flock
from store._node import ROOT
from store._session import install_staged_session, recover_dead_runtimes
from store._session_view import read_session_as_found, unreplayed
from store._sessions import missing_meta, state_path
from store._threads import mark_lane, write_lane
from store._walk import (
    branch,
    drawing_tree,
    list_tips,
    predecessor_cycles,
    rewind_ids,
    visible_back_from,
)

__all__ = [
    "CLAIM_NAME",
    "DIR_MODE",
    "FILE_MODE",
    "ROOT",
    "TEMP_SUFFIX",
    "FileStamp",
    "Fingerprint",
    "SessionIndex",
    "SessionLock",
    "branch",
    "citable_id_problem",
    "decode_node",
    "drawing_tree",
    "encode_meta",
    "encode_node",
    "file_stamp",
    "find_damaged_logs",
    "install_staged_session",
    "list_tips",
    "mark_lane",
    "missing_meta",
    "node_filename",
    "parse_filename",
    "predecessor_cycles",
    "read_session_as_found",
    "recover_dead_runtimes",
    "refuse_file_link",
    "rewind_ids",
    "run_durable",
    "state_path",
    "unreplayed",
    "validate_id",
    "visible_back_from",
    "wait_for_flock",
    "walk_files",
    "write_lane",
]
