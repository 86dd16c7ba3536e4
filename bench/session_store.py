"""Benchmarks of the session store on a real filesystem with real fsyncs.

Run from the repository root::

    python bench/session_store.py [--repeat N] [--json] [--fsync-latency-ms MS]

Each figure is measured in the same rounds as what it is set against
(``bench/_harness.py``: a warm-up round, then at least five, median with
min and max):

1. **Cold load** of a 300-node, ~4 MB session (``SessionCore.open``: lock,
   leftover scan, journal scan, meta, index) against its floor, reading and
   orjson-parsing the same files (keeping the parsed records). Target: <= 1.3x.
2. **A 64-node marker merge** (``merge_node_metadata_batch``), both its
   *acknowledged* cost (to the return: one journal record, files installed
   unsynced) and its *full* cost (the journal's retirement included: every
   file synced, the journal truncated), each against

   - its floor, the same work in bare syscalls: read and parse each node,
     re-encode its metadata tail, one fdatasync'd log record, 64 unsynced
     installs (and, for the full cost, either an fsync of each file and one
     directory sync, or one ``syncfs``, the cheaper in each round, then the
     log's truncation); and
   - the baseline to beat: 64 plain fsynced atomic writes of the merged
     bytes (precomputed) with one directory sync. Target (issue 15): the
     full cost >= 5x faster than that.

   The same merge **through the runtime log** (``--journal shared``: a copy
   of the session opened with ``SessionCore.open(..., log=RuntimeLog.open(
   state))``), in the same rounds, against the same floor and baseline:
   acknowledged (the log record flushed, the files installed unsynced), full
   cost (``retire_journals()`` too: the files synced, the retirement
   appended; it rides on the log's next flush, as a session journal's
   truncation is not flushed either), and the full cost with that
   retirement flushed at once (``RuntimeLog.flush``).
3. **An append** (node file + meta.json), acknowledged and with its share of
   a checkpoint every 16 appends, against its floor: one fdatasync'd log
   record, two unsynced installs (and per 16: each file synced and one
   directory sync, or one ``syncfs``, the log truncated).

The floors work on a copy of the session's files beside it on the same
filesystem, so they never disturb the store's own index. ``os.sync`` runs,
untimed, before every measurement, so none pays for another's writeback.

``--fsync-latency-ms MS`` *emulates* a slower disk: it sleeps MS after every
fsync/fdatasync, on the store's side (through its file seam) and on the
floors' alike. Rows of such a run say "emulated"; they are not measurements
of a real disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _harness import (
    FLOOR,
    MIN_ROUNDS,
    TO_BEAT,
    Row,
    Summary,
    interleaved,
    markdown_table,
    ratio_row,
    timed,
)
from _raw import HAS_SYNCFS, RawDisk

from store import DurableFiles, RuntimeLog, SessionCore, SessionOptions

NODES = 300
TOTAL_BYTES = 4 * 1024 * 1024
MERGE_NODES = 64
CHECKPOINT_EVERY = 16
MARKER = "memory_written_scriptorium"


def _build(state: Path, session: str = "bench") -> None:
    core = SessionCore.create(state, session, title="bench")
    body = "lorem ipsum dolor sit amet, 茶 " * (TOTAL_BYTES // NODES // 31)
    previous = "ROOT"
    for i in range(NODES):
        message = core.append({
            "id": f"n{i:04d}", "role": ["user", "assistant"][i % 2], "content": body,
            "predecessor": previous, "speaker_kind": "owner", "authority_tier": "owner",
        })
        previous = message["id"]
    core.close()


class EmulatedSlowFsync(DurableFiles):
    """The store's file seam, sleeping ``latency`` s after every fsync (emulation only)."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    def _flush(self, fd: int, path: str, *, data_only: bool = False) -> None:
        super()._flush(fd, path, data_only=data_only)
        if self.latency:
            time.sleep(self.latency)

    def _flush_filesystem(self, fd: int, path: str) -> None:
        super()._flush_filesystem(fd, path)
        if self.latency:
            time.sleep(self.latency)


def _log_record(entries: list[tuple[str, bytes]]) -> bytes:
    """A length-prefixed record naming each file: what a log must hold to replay them."""
    parts = [len(entries).to_bytes(4, "big")]
    for rel, data in entries:
        name = rel.encode()
        parts += [len(name).to_bytes(4, "big"), name, len(data).to_bytes(4, "big"), data]
    return b"".join(parts)


def _dumps(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def _patched(data: bytes, patch: dict[str, Any]) -> bytes:
    """A node file's bytes with ``patch`` merged into its metadata (the last field).

    Parsed to know the metadata; when the file ends with its encoding, only
    that tail is re-encoded (the content is kept byte for byte), else the
    whole record is.
    """
    record = orjson.loads(data)
    metadata = record.get("metadata") or {}
    old = b'"metadata": ' + _dumps(metadata) + b"}"
    merged = {**metadata, **patch}
    if data.endswith(old):
        return b"".join((data[: len(data) - len(old)], b'"metadata": ', _dumps(merged), b"}"))
    return _dumps({**record, "metadata": merged})


def run(directory: Path, repeat: int, fsync_latency: float = 0.0) -> list[Row]:
    emulated = f" (emulated: +{fsync_latency * 1e3:g} ms sleep per fsync)" if fsync_latency \
        else ""
    state = directory / "state"
    _build(state)
    history = state / "sessions" / "bench" / "history"
    rows: list[Row] = []

    if not fsync_latency:  # a load does no fsync: the emulation would change nothing
        rows.append(_cold_load(state, history, repeat))

    files = EmulatedSlowFsync(fsync_latency)
    disk = RawDisk(fsync_latency)
    core = SessionCore.open(state, "bench", options=SessionOptions(files=files))
    # the same session through the runtime log: its own copy, since a logged core
    # holds the session's lock from open to close
    _build(state, "bench-log")
    runtime_log = RuntimeLog.open(state, files=files)
    logged = SessionCore.open(state, "bench-log", options=SessionOptions(
        files=files, log=runtime_log))
    # beside the session directory: same filesystem, same depth
    scratch = state / "sessions" / "floor-copy"
    shutil.copytree(history, scratch / "history")
    shutil.copy(state / "sessions" / "bench" / "meta.json", scratch / "meta.json")
    log = os.open(scratch / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    disk.sync_dir(str(scratch))
    try:
        rows += _merge(core, logged, runtime_log, disk, scratch, log, repeat, emulated)
        rows += _append(core, disk, scratch, log, repeat, emulated)
    finally:
        os.close(log)
        core.close()
        logged.close()
        runtime_log.close()
    return rows


def _cold_load(state: Path, history: Path, repeat: int) -> Row:
    size = sum(p.stat().st_size for p in history.iterdir())

    def raw() -> list[object]:
        parsed = []  # kept, as any loader must keep them
        for name in sorted(os.listdir(history)):
            with open(os.path.join(history, name), "rb") as handle:
                parsed.append(orjson.loads(handle.read()))
        return parsed

    def cold() -> None:
        SessionCore.open(state, "bench")

    found = interleaved({"cold": timed(cold), "raw": timed(raw)}, rounds=repeat, warmup=2)
    return ratio_row(f"cold load, {NODES} nodes, {size / 2**20:.1f} MiB",
                     found["cold"].scaled(1e3), "ms", found["raw"].scaled(1e3), kind=FLOOR,
                     what="read + orjson-parse every node file", op="<=", bound=1.3)


def _cheapest(found: dict[str, Summary], full: dict[str, list[float]], names: list[str],
              repeat: int) -> tuple[Summary, Summary, str]:
    """Per round, the cheaper of the floor's variants: (acknowledged, full, which won)."""
    def per_round(series: list[tuple[float, ...]]) -> tuple[list[float], list[int]]:
        best = [min(values) for values in zip(*series)]
        winner = [min(range(len(values)), key=values.__getitem__) for values in zip(*series)]
        return best, winner

    acknowledged, _ = per_round([found[name].values for name in names])
    whole, winner = per_round([tuple(full[name][-repeat:]) for name in names])
    wins = ", ".join(f"{name.removeprefix('floor_')} in {winner.count(i)}"
                     for i, name in enumerate(names))
    return Summary.of(acknowledged), Summary.of(whole), f"cheaper per round: {wins}"


def _retire(disk: RawDisk, bulk: bool, paths: list[str], directory: str, log: int) -> None:
    """Make installed files durable, then empty the log: one syncfs, or each file + its dir."""
    if bulk:
        disk.syncfs(directory)
    else:
        disk.sync_files(paths)
        disk.sync_dir(directory)
    disk.log_truncate(log)


def _variants() -> list[tuple[str, bool]]:
    """The floor's ways to retire a log: per-file fsyncs, and one syncfs where it exists."""
    return [("floor_fsync", False), *([("floor_syncfs", True)] if HAS_SYNCFS else [])]


def _merge(core: SessionCore, logged: SessionCore, runtime_log: RuntimeLog, disk: RawDisk,
           scratch: Path, log: int, repeat: int, emulated: str) -> list[Row]:
    ids = [f"n{i:04d}" for i in range(MERGE_NODES)]
    floor_dir = str(scratch / "history")
    floor_paths = sorted(os.path.join(floor_dir, n) for n in os.listdir(floor_dir)
                         if not n.startswith("."))[:MERGE_NODES]
    counter = iter(range(10**9))
    variants = _variants()
    full: dict[str, list[float]] = {"merge": [], "merge_log": [], "merge_log_flushed": [],
                                    **{name: [] for name, _ in variants}}

    def merge() -> float:
        patches = {node: {MARKER: f"w-{next(counter):08x}"} for node in ids}
        began = time.perf_counter()
        core.merge_node_metadata_batch(patches)
        acknowledged = time.perf_counter()
        core.retire_journals()
        full["merge"].append(time.perf_counter() - began)
        return acknowledged - began

    def merge_log() -> float:
        patches = {node: {MARKER: f"w-{next(counter):08x}"} for node in ids}
        began = time.perf_counter()
        logged.merge_node_metadata_batch(patches)
        acknowledged = time.perf_counter()
        logged.retire_journals()  # files synced, retirement appended (flushed by the next commit)
        retired = time.perf_counter()
        runtime_log.flush()
        full["merge_log"].append(retired - began)
        full["merge_log_flushed"].append(time.perf_counter() - began)
        return acknowledged - began

    def floor(name: str, bulk: bool) -> Callable[[], float]:
        def measure() -> float:
            stamp = f"w-{next(counter):08x}"
            began = time.perf_counter()
            entries = []
            for path in floor_paths:
                with open(path, "rb") as handle:
                    data = handle.read()
                entries.append((path, _patched(data, {MARKER: stamp})))
            disk.log_append(log, _log_record([(os.path.basename(p), d) for p, d in entries]))
            for path, data in entries:
                disk.install(path, data, synced=False)
            acknowledged = time.perf_counter()
            _retire(disk, bulk, floor_paths, floor_dir, log)
            full[name].append(time.perf_counter() - began)
            return acknowledged - began
        return measure

    contents = [Path(p).read_bytes() for p in floor_paths]

    def to_beat() -> float:
        began = time.perf_counter()
        for path, data in zip(floor_paths, contents):
            disk.install(path, data, synced=True)
        disk.sync_dir(floor_dir)
        return time.perf_counter() - began

    found = interleaved({"merge": merge, "merge_log": merge_log,
                         **{name: floor(name, bulk) for name, bulk in variants},
                         "to_beat": to_beat}, rounds=repeat, settle=os.sync)
    floor_ack, floor_full, wins = _cheapest(found, full, [name for name, _ in variants], repeat)
    merge_full = Summary.of(full["merge"][-repeat:]).scaled(1e3)
    merge_ack = found["merge"].scaled(1e3)
    log_ack = found["merge_log"].scaled(1e3)
    log_full = Summary.of(full["merge_log"][-repeat:]).scaled(1e3)
    log_flushed = Summary.of(full["merge_log_flushed"][-repeat:]).scaled(1e3)
    beat = found["to_beat"].scaled(1e3)
    beat_what = f"{MERGE_NODES} plain fsynced atomic writes, one directory sync"
    floor_ack_what = ("read, parse, patch each node's metadata tail, one fdatasync'd log record, "
                      f"{MERGE_NODES} unsynced installs")
    floor_full_what = ("the same, then one syncfs or an fsync of each file + one directory sync, "
                       f"log truncated ({wins})")
    name = f"marker merge, {MERGE_NODES} nodes"
    via = f"{name}, through the runtime log"
    log_rows = [
        ratio_row(f"{via}, acknowledged{emulated}", log_ack, "ms", floor_ack.scaled(1e3),
                  kind=FLOOR, what=floor_ack_what),
        ratio_row(f"{via}, full cost (files synced, retirement written){emulated}", log_full,
                  "ms", floor_full.scaled(1e3), kind=FLOOR, what=floor_full_what),
        ratio_row(f"{via}, acknowledged{emulated}", log_ack, "ms", beat, kind=TO_BEAT,
                  what=beat_what, faster=True),
        ratio_row(f"{via}, full cost (files synced, retirement written){emulated}", log_full,
                  "ms", beat, kind=TO_BEAT, what=beat_what, faster=True, op=">=", bound=5),
        ratio_row(f"{via}, full cost with the retirement flushed at once{emulated}",
                  log_flushed, "ms", beat, kind=TO_BEAT, what=beat_what, faster=True),
        ratio_row(f"{via}, full cost (files synced, retirement written){emulated}", log_full,
                  "ms", merge_full, kind=TO_BEAT,
                  what="the same merge through the session's own journal, journal retired",
                  faster=True),
    ]
    return [
        ratio_row(f"{name}, acknowledged{emulated}", merge_ack, "ms", floor_ack.scaled(1e3),
                  kind=FLOOR, what=floor_ack_what),
        ratio_row(f"{name}, full cost (journal retired){emulated}", merge_full, "ms",
                  floor_full.scaled(1e3), kind=FLOOR, what=floor_full_what),
        ratio_row(f"{name}, acknowledged{emulated}", merge_ack, "ms", beat, kind=TO_BEAT,
                  what=beat_what, faster=True),
        ratio_row(f"{name}, full cost (journal retired){emulated}", merge_full, "ms", beat,
                  kind=TO_BEAT, what=beat_what, faster=True, op=">=", bound=5),
        *log_rows,
    ]


def _append(core: SessionCore, disk: RawDisk, scratch: Path, log: int, repeat: int,
            emulated: str) -> list[Row]:
    appended = iter(range(10**9))
    node_dir = str(scratch / "history")
    meta_path = str(scratch / "meta.json")
    meta = orjson.loads(Path(meta_path).read_bytes())
    variants = _variants()
    full: dict[str, list[float]] = {"append": [], **{name: [] for name, _ in variants}}

    def append() -> float:
        acknowledged = 0.0
        began = time.perf_counter()
        for _ in range(CHECKPOINT_EVERY):
            started = time.perf_counter()
            core.append({"id": f"x{next(appended)}", "content": "short turn", "role": "user"})
            acknowledged += time.perf_counter() - started
        core.retire_journals()
        full["append"].append((time.perf_counter() - began) / CHECKPOINT_EVERY)
        return acknowledged / CHECKPOINT_EVERY

    def floor(name: str, bulk: bool) -> Callable[[], float]:
        def measure() -> float:
            acknowledged = 0.0
            written: list[str] = []
            began = time.perf_counter()
            for _ in range(CHECKPOINT_EVERY):
                started = time.perf_counter()
                node = f"y{next(appended)}"
                now = time.time()
                record = {"id": node, "content": "short turn", "role": "user",
                          "predecessor": meta.get("head_id"), "created_at": now,
                          "metadata": {}}
                node_bytes = _dumps(record)
                meta["head_id"], meta["updated_at"] = node, now
                meta_bytes = _dumps(meta)
                path = os.path.join(node_dir, f"{node}.json")
                disk.log_append(log, _log_record([(node, node_bytes), ("meta.json", meta_bytes)]))
                disk.install(path, node_bytes, synced=False)
                disk.install(meta_path, meta_bytes, synced=False)
                written.append(path)
                acknowledged += time.perf_counter() - started
            _retire(disk, bulk, [*written, meta_path], node_dir, log)
            full[name].append((time.perf_counter() - began) / CHECKPOINT_EVERY)
            return acknowledged / CHECKPOINT_EVERY
        return measure

    found = interleaved({"append": append, **{name: floor(name, bulk) for name, bulk in variants}},
                        rounds=repeat, settle=os.sync)
    floor_ack, floor_full, wins = _cheapest(found, full, [name for name, _ in variants], repeat)
    append_full = Summary.of(full["append"][-repeat:]).scaled(1e3)
    return [
        ratio_row(f"append (node file + meta.json), acknowledged{emulated}",
                  found["append"].scaled(1e3), "ms", floor_ack.scaled(1e3), kind=FLOOR,
                  what="one fdatasync'd log record, two unsynced installs"),
        ratio_row(f"append + its share of a checkpoint every {CHECKPOINT_EVERY}{emulated}",
                  append_full, "ms", floor_full.scaled(1e3), kind=FLOOR,
                  what=(f"the same, then per {CHECKPOINT_EVERY}: one syncfs or an fsync of "
                        f"each file + one directory sync, log truncated ({wins})")),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="directory to run in (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=9,
                        help=f"timed rounds (at least {MIN_ROUNDS})")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--fsync-latency-ms", type=float, default=0.0,
                        help="EMULATE a slower disk: sleep this long after every fsync")
    args = parser.parse_args()
    if args.repeat < MIN_ROUNDS:
        parser.error(f"--repeat must be at least {MIN_ROUNDS}")
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="scriptorium-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        rows = run(directory, args.repeat, args.fsync_latency_ms / 1e3)
    finally:
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)
    if args.json:
        document: dict[str, Any] = {"rows": [row.to_json() for row in rows],
                                    "fsync_latency_ms": args.fsync_latency_ms,
                                    "emulated": bool(args.fsync_latency_ms)}
        print(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())
    else:
        print(markdown_table(rows))


if __name__ == "__main__":
    main()
