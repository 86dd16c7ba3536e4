"""What archiving evidence and walking the ledger cost.

Run from the repository root::

    python bench/workspace_archive.py            # Markdown table
    python bench/workspace_archive.py --json     # one JSON document

Archive append: one batch appended to a session archive that already holds
``existing`` frames, through ``append_records`` (read, strict scan, render,
whole-file atomic replace through DurableFiles), next to the raw file
operations that append performs on the same bytes (read the file; write a
temp file, fsync, rename, fsync the directory). The ratio is the price of
the format and the checks on top of the unavoidable I/O. A re-append of the
same batch (every frame already present: a scan, no write) is shown too.

Cached append: the same batch through ``ArchiveCache.append`` with the scan
of the existing file already cached (as in a WorkspaceActor that appended
before): the file is read and replaced, but only the new frames are
scanned. Its ratio to the raw file operations should not grow with the
archive.

Ledger walk: records/s of ``records_from_branch`` + ``unwritten_turns`` +
``first_batch`` over one long branch of message dicts, which the session
actor runs after every turn.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memory._archive import append_records, archive_relpath, parse_archive
from memory._archive_cache import ArchiveCache
from memory._ledger import first_batch, records_from_branch, unwritten_turns
from memory._records import SourceMeta, SourceRecord
from store._durable import DurableFiles

META = SourceMeta("owner", "owner/install/0123456789abcdef", "owner", "trusted")
TEXT = "The owner mentioned that the quarterly report is due on Friday and prefers tea. " * 3


def _records(start: int, count: int) -> list[SourceRecord]:
    return [
        SourceRecord(
            "bench",
            f"m{start + i:07d}",
            "user",
            f"{TEXT}#{start + i}\r\nsecond line",
            1755000002.0 + start + i,
            "Owner (owner/local)",
            "owner/local",
            META,
        )
        for i in range(count)
    ]


def _time(
    fn: Callable[[], object], repeat: int, reset: Callable[[], object] = lambda: None
) -> float:
    """Median seconds of ``fn``; ``reset`` runs before each sample, untimed."""
    samples = []
    for _ in range(repeat):
        reset()
        began = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples)


def _raw_replace(path: str, data: bytes) -> None:
    """The bare syscalls of one durable replace, without the seam."""
    with open(path, "rb") as handle:
        handle.read()
    temp = path + ".raw-tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def bench_append(existing: int, batch: int, repeat: int) -> dict[str, Any]:
    files = DurableFiles()
    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, archive_relpath("bench"))
        files.make_dirs(os.path.dirname(path))
        append_records(root, "bench", _records(0, existing), files)
        base = Path(path).read_bytes() if existing else b""
        fresh = _records(existing, batch)

        def reset() -> None:
            files.write_atomic(path, base)

        reset()
        append_records(root, "bench", fresh, files)
        new = Path(path).read_bytes()
        t_append = _time(lambda: append_records(root, "bench", fresh, files), repeat, reset)
        t_raw = _time(lambda: _raw_replace(path, new), repeat, reset)
        t_again = _time(lambda: append_records(root, "bench", fresh, files), repeat)
        t_scan = _time(lambda: parse_archive(base, "bench"), repeat)
        cache = ArchiveCache(root, files)

        def reset_cached() -> None:
            reset()
            cache.scan("bench")  # the scan a previous append left behind

        t_cached = _time(lambda: cache.append("bench", fresh), repeat, reset_cached)
        assert cache.statistics().scans == repeat  # one per reset: never inside the timing
    return {
        "existing_frames": existing,
        "batch": batch,
        "file_bytes": len(base),
        "append_ms": t_append * 1e3,
        "raw_ms": t_raw * 1e3,
        "ratio": t_append / t_raw,
        "reappend_ms": t_again * 1e3,
        "cached_ms": t_cached * 1e3,
        "cached_ratio": t_cached / t_raw,
        "scan_frames_per_s": existing / t_scan if existing else 0.0,
    }


def bench_ledger(messages: int, repeat: int) -> dict[str, Any]:
    branch: list[dict[str, Any]] = []
    for i in range(messages):
        view: dict[str, Any] = {
            "id": f"n{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{TEXT}#{i}",
            "timestamp": 1755000000.0 + i,
            "speaker_display": "Owner",
            "speaker_id": "owner/local",
            "authority_tier": "owner",
            "principal_id": "owner/install/0",
            "speaker_kind": "owner",
        }
        if i < messages // 2:
            view["memory_written_scriptorium"] = "w-aa116220"
        if i % 10 == 9:
            view["role"] = "tool"
        branch.append(view)

    def walk() -> None:
        records = records_from_branch("bench", branch)
        first_batch(unwritten_turns(records, "w-aa116220"), 16_000)

    seconds = _time(walk, repeat)
    return {"messages": messages, "walk_ms": seconds * 1e3, "records_per_s": messages / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    appends = [bench_append(n, 8, args.repeat) for n in (0, 100, 1_000, 10_000)]
    ledger = bench_ledger(20_000, max(3, args.repeat // 3))
    if args.json:
        print(json.dumps({"archive_append": appends, "ledger_walk": ledger}, indent=2))
        return
    print(
        "| archive frames | file KiB | append 8 (ms) | raw file ops (ms) | ratio "
        "| re-append (ms) | scan frames/s | cached append (ms) | cached ratio |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in appends:
        print(
            f"| {row['existing_frames']:,} | {row['file_bytes'] / 1024:,.0f} | {row['append_ms']:.2f} "
            f"| {row['raw_ms']:.2f} | {row['ratio']:.2f} | {row['reappend_ms']:.2f} "
            f"| {row['scan_frames_per_s']:,.0f} | {row['cached_ms']:.2f} "
            f"| {row['cached_ratio']:.2f} |"
        )
    print()
    print("| ledger walk messages | walk (ms) | records/s |")
    print("|---:|---:|---:|")
    print(f"| {ledger['messages']:,} | {ledger['walk_ms']:.1f} | {ledger['records_per_s']:,.0f} |")


if __name__ == "__main__":
    main()
