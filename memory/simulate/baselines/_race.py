"""The lost-marker race on real node files: a naive read-modify-write vs the session's owner.

SPEC §1 names the design doc's one unsolved weakness: node files are
unlocked, so a marker merged while another component rewrites the same node
is lost wholesale. The model in :mod:`memory.simulate.baselines._ledgers` counts the
consequences over a whole workload; this shows the race itself on disk.

Two components patch the same node files: memory sets its marker, the host
stamps a checkpoint. Naively each one reads the node file, merges its key
and writes the file back atomically (atomicity does not help: the file is
replaced whole). The interleaving is fixed, the unlucky one (both read, then
both write), as a race test must be; which write lands last is drawn from
the seed per node. Then the same patches, in the same order, go through
:meth:`~store._session.SessionCore.merge_node_metadata_batch`, the one owner
that re-reads each node under the session lock: nothing is lost. Lost keys
are counted by reading the files back from disk.
"""

from __future__ import annotations

import os
import random
from typing import Any

from memory.ledger import MARKER_KEY
from store import DurableFiles, SessionCore, SessionOptions
from store.lowlevel import decode_node, encode_node, node_filename

from ._ledgers import STAMP_KEY

__all__ = ["race_on_disk"]

_WORKSPACE = "w-0b5e1111"


def _history(core: SessionCore, node_id: str) -> str:
    return os.path.join(core.directory, "history", node_filename(core.node(node_id)))


def _session(state_dir: str, name: str, nodes: int, files: DurableFiles) -> tuple[
    SessionCore, list[str]
]:
    core = SessionCore.create(state_dir, name, title=name, options=SessionOptions(files=files))
    ids = [
        core.append({"role": ("user", "assistant")[i % 2], "content": f"turn {i}"})["id"]
        for i in range(nodes)
    ]
    return core, ids


def _lost(core: SessionCore, ids: list[str], patches: dict[str, dict[str, Any]]) -> int:
    """Keys some component wrote that the node file on disk no longer holds."""
    lost = 0
    for node_id in ids:
        path = _history(core, node_id)
        with open(path, "rb") as handle:
            metadata = decode_node(handle.read(), path).metadata
        lost += sum(1 for key, value in patches[node_id].items() if metadata.get(key) != value)
    return lost


def race_on_disk(
    state_dir: str, *, seed: int, nodes: int = 16, files: DurableFiles | None = None
) -> dict[str, Any]:
    """Lost metadata keys on ``nodes`` node files: naive read-modify-write vs the owner."""
    files = files if files is not None else DurableFiles()
    rng = random.Random(f"{seed}/race-on-disk")
    stamp_last = [rng.random() < 0.5 for _ in range(nodes)]
    marker = {MARKER_KEY: _WORKSPACE}

    naive, naive_ids = _session(state_dir, "race-naive", nodes, files)
    expected: dict[str, dict[str, Any]] = {}
    for node_id, late_stamp in zip(naive_ids, stamp_last):
        stamp = {STAMP_KEY: f"cp-{node_id}"}
        expected[node_id] = {**marker, **stamp}
        path = _history(naive, node_id)
        # Both components read the file before either writes it back.
        with open(path, "rb") as handle:
            seen_by_memory = decode_node(handle.read(), path)
        with open(path, "rb") as handle:
            seen_by_host = decode_node(handle.read(), path)
        writes = [(seen_by_memory, marker), (seen_by_host, stamp)]
        if not late_stamp:
            writes.reverse()
        for seen, patch in writes:
            node = seen.with_metadata({**seen.metadata, **patch})
            files.write_atomic(path, encode_node(node, naive.session))

    owned, owned_ids = _session(state_dir, "race-owned", nodes, files)
    owned_expected: dict[str, dict[str, Any]] = {}
    for node_id, late_stamp in zip(owned_ids, stamp_last):
        stamp = {STAMP_KEY: f"cp-{node_id}"}
        owned_expected[node_id] = {**marker, **stamp}
        patches = [marker, stamp] if late_stamp else [stamp, marker]
        for patch in patches:  # the owner's mailbox order: one merge after the other
            owned.merge_node_metadata_batch({node_id: patch})
    owned.close()
    return {
        "nodes": nodes,
        "naive_rmw": {"lost_keys": _lost(naive, naive_ids, expected),
                      "lost_markers": _lost(naive, naive_ids,
                                            {i: marker for i in naive_ids})},
        "session_owner": {"lost_keys": _lost(owned, owned_ids, owned_expected),
                          "lost_markers": _lost(owned, owned_ids,
                                                {i: marker for i in owned_ids})},
    }
