"""The store's pure rules and file formats, for code that models a session without its actor.

Code that keeps sessions uses ``store`` (``SessionCore``, the session
actor's messages). The ledger baselines of ``scriptorium simulate
--compare`` (``memory.simulate.baselines``) replay a forking workload on an
in-memory DAG and write session files of a given size, so they need the
walks and formats themselves; as with ``trio.lowlevel``, what is here is
public but assumes its caller keeps the store's rules (an index built by
hand, files written without the session lock).

- ``SessionIndex``: the in-memory index of one session's nodes; ``ROOT``.
- ``branch``, ``visible_back_from``, ``list_tips``, ``rewind_ids``: the
  walks of SPEC §4 over an index.
- ``node_filename``, ``encode_meta``: the on-disk names and meta.json bytes.
"""

from store._format import encode_meta, node_filename
from store._index import SessionIndex
from store._node import ROOT
from store._walk import branch, list_tips, rewind_ids, visible_back_from

__all__ = [
    "ROOT",
    "SessionIndex",
    "branch",
    "encode_meta",
    "list_tips",
    "node_filename",
    "rewind_ids",
    "visible_back_from",
]
