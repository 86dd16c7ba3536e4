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
archive: target, the cached ratio at the largest archive <= 1.5x the ratio
at a new archive (a scaling baseline, not a floor).

Ledger walk: records/s of ``records_from_branch`` + ``unwritten_turns`` +
``first_batch`` over one long branch of message dicts, which the session
actor runs after every turn (no target, no floor: reported).

Every figure is the median, with min and max, of at least five rounds after
a warm-up (``bench/_harness.py``), the append and its floor interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _harness import (
    FLOOR,
    MIN_ROUNDS,
    SCALING,
    Row,
    Summary,
    interleaved,
    markdown_table,
    ratio_row,
    rounds,
    timed,
    value_row,
)
from _raw import RawDisk, durable_replace

from memory.ledger._ledger import first_batch, records_from_branch, unwritten_turns
from memory.ledger._records import SourceMeta, SourceRecord
from memory.workspace._archive import append_records, archive_relpath, parse_archive
from memory.workspace._archive_cache import ArchiveCache
from store import DurableFiles

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


def _raw_replace(disk: RawDisk, path: str, data: bytes) -> None:
    """The bare syscalls of one append as a whole-file replace: read, then durable replace."""
    with open(path, "rb") as handle:
        handle.read()
    durable_replace(disk, path, data)


def bench_append(existing: int, batch: int, repeat: int) -> dict[str, Any]:
    """Median/min/max (ms) of the uncached and cached append and their floor, interleaved."""
    files = DurableFiles()
    disk = RawDisk(0.0)
    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, archive_relpath("bench"))
        files.make_dirs(os.path.dirname(path))
        append_records(root, "bench", _records(0, existing), files)
        base = Path(path).read_bytes() if existing else b""
        fresh = _records(existing, batch)
        append_records(root, "bench", fresh, files)
        new = Path(path).read_bytes()
        cache = ArchiveCache(root, files)

        def reset() -> None:
            files.write_atomic(path, base)

        def reset_cached() -> None:
            reset()
            cache.scan("bench")  # the scan a previous append left behind

        seen: dict[str, list[float]] = {"cached": [], "raw": []}

        def kept(name: str, measure: Callable[[], float]) -> Callable[[], float]:
            def run() -> float:
                seen[name].append(measure())
                return seen[name][-1]
            return run

        found = interleaved({
            "append": timed(lambda: append_records(root, "bench", fresh, files), setup=reset),
            "cached": kept("cached", timed(lambda: cache.append("bench", fresh),
                                           setup=reset_cached)),
            "raw": kept("raw", timed(lambda: _raw_replace(disk, path, new), setup=reset)),
        }, rounds=repeat, settle=os.sync)
        # the cached append over its floor, round by round (both measured in the same round)
        paired = Summary.of([cached / raw for cached, raw in
                             zip(seen["cached"][-repeat:], seen["raw"][-repeat:])])
        assert cache.statistics().scans == repeat + 1  # one per reset: never inside the timing
        again = rounds(timed(lambda: append_records(root, "bench", fresh, files)),
                       rounds=repeat)
        scan = rounds(timed(lambda: parse_archive(base, "bench")), rounds=repeat)
    return {
        "existing_frames": existing,
        "batch": batch,
        "file_bytes": len(base),
        **{f"{name}_ms": summary.scaled(1e3).to_json() for name, summary in found.items()},
        "reappend_ms": again.scaled(1e3).to_json(),
        "cached_over_floor": paired.to_json(),
        "scan_frames_per_s": scan.inverse(existing).to_json() if existing else None,
    }


def append_rows(result: dict[str, Any]) -> list[Row]:
    """The uncached and the cached append of one ``bench_append`` result, each vs its floor."""
    raw = Summary.from_json(result["raw_ms"])
    where = (f"{result['batch']} frames appended to {result['existing_frames']:,} "
             f"({result['file_bytes'] / 1024:,.0f} KiB)")
    what = "read the file, then temp file, write, fsync, rename, directory fsync"
    return [
        ratio_row(f"archive append, {where}, uncached scan",
                  Summary.from_json(result["append_ms"]), "ms", raw, kind=FLOOR, what=what),
        ratio_row(f"archive append, {where}, cached scan (what the workspace actor runs)",
                  Summary.from_json(result["cached_ms"]), "ms", raw, kind=FLOOR, what=what),
    ]


def flatness_row(small: dict[str, Any], large: dict[str, Any]) -> Row:
    """The cached append's ratio to its floor at the largest archive, against the smallest."""
    return ratio_row(
        f"cached append / its floor (per round), {large['existing_frames']:,} frames",
        Summary.from_json(large["cached_over_floor"]), "x",
        Summary.from_json(small["cached_over_floor"]), kind=SCALING,
        what=f"the same ratio at {small['existing_frames']:,} frames", op="<=", bound=1.5,
        paired=False)  # two archives, measured one after the other


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

    rate = rounds(timed(walk), rounds=repeat).inverse(messages)
    return {"messages": messages, "records_per_s": rate.to_json()}


def ledger_row(ledger: dict[str, Any]) -> Row:
    return value_row(f"ledger walk over {ledger['messages']:,} messages",
                     Summary.from_json(ledger["records_per_s"]), "records/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--repeat", type=int, default=9,
                        help=f"timed rounds (at least {MIN_ROUNDS})")
    parser.add_argument("--sizes", default="0,100,1000,10000",
                        help="archive sizes in frames, comma separated")
    args = parser.parse_args()
    if args.repeat < MIN_ROUNDS:
        parser.error(f"--repeat must be at least {MIN_ROUNDS}")
    sizes = [int(size) for size in args.sizes.split(",")]
    appends = [bench_append(n, 8, args.repeat) for n in sizes]
    ledger = bench_ledger(20_000, args.repeat)
    rows = [row for result in appends for row in append_rows(result)]
    rows.append(flatness_row(appends[0], appends[-1]))
    rows.append(ledger_row(ledger))
    if args.json:
        print(json.dumps({"rows": [row.to_json() for row in rows], "archive_append": appends,
                          "ledger_walk": ledger}, indent=1))
        return
    print(markdown_table(rows))


if __name__ == "__main__":
    main()
