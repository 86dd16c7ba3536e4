"""Benchmark the memory workspace: revision, transaction install, extractive writer.

Each cost is printed next to the raw cost of the file operations it performs,
so the ratio shows what the runtime adds on top of the disk:

- ``workspace_revision`` cold (empty cache) against reading and hashing every
  file, and warm (nothing changed) against stat-ing every file;
- a transaction that installs K topic files in a workspace of N topic files,
  against the same file operations done directly (a stat of every file for
  the revision check, the journal, K unsynced replaces, one sync, the
  journal's unlink);
- the extractive writer alone, and writer + transaction per batch, in records/s.

    python bench/workspace.py [--files 1000] [--commits 20] [--records 5000] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from memory._extractive import ExtractiveWriter, extract_edits
from memory._records import SourceMeta, SourceRecord
from memory._revision import RACY_NS, RevisionCache, revision_paths
from memory._topic_ids import normalise_topic
from memory._topics import Topic, parse_topic
from memory._transaction import Transactions
from memory._writer import TopicEdit, WorkspaceSnapshot
from store._durable import DurableFiles

SESSION = "bench"


def _best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def _draft(index: int, paragraphs: int) -> str:
    units = [f"# Topic {index}"]
    for p in range(paragraphs):
        units.append(f"Statement {p} about topic {index} is recorded here.[^e{p}]")
        units.append(f"[^e{p}]: Time: `2025-08-12`; Sources: openprogram/{SESSION}/n{p}")
    return "\n\n".join(units) + "\n"


def build_workspace(root: str, files: int, paragraphs: int) -> str:
    memory = os.path.join(root, "memory")
    os.makedirs(os.path.join(memory, ".scriptorium"))
    os.makedirs(os.path.join(memory, "sources/openprogram/_v2"))
    with open(os.path.join(memory, ".scriptorium/runtime.json"), "wb") as handle:
        handle.write(b"{}")
    with open(os.path.join(memory, f"sources/openprogram/_v2/{SESSION}.md"), "wb") as handle:
        handle.write(b"x" * 1_000_000)  # an archive of 1 MB: counted by the revision
    tx = Transactions(memory, archived=lambda source: True)
    sources = {f"openprogram/{SESSION}/n{p}" for p in range(paragraphs)}
    for start in range(0, files, 250):
        edits = [TopicEdit(f"topics/t{i:04d}.md", _draft(i, paragraphs))
                 for i in range(start, min(files, start + 250))]
        tx.commit(edits, base_revision=tx.revision(), batch_sources=sources)
    return memory


def bench_revision(memory: str) -> list[dict[str, Any]]:
    paths = [os.path.join(memory, relative) for relative, _ in revision_paths(memory)]

    def raw_read() -> None:
        for path in paths:
            with open(path, "rb") as handle:
                hashlib.sha256(handle.read()).digest()

    def raw_stat() -> None:
        revision_paths(memory)

    later = time.time_ns() + 2 * RACY_NS  # steady state: every file older than the racy window
    cold = _best(lambda: RevisionCache(memory).revision(now_ns=later), 5)
    cache = RevisionCache(memory)
    cache.revision(now_ns=later)
    warm = _best(lambda: cache.revision(now_ns=later), 20)
    return [
        _row(f"workspace_revision cold ({len(paths)} files)", cold, "read+sha256 every file",
             _best(raw_read, 5)),
        _row("workspace_revision warm (nothing changed)", warm, "stat every file",
             _best(raw_stat, 20)),
    ]


def bench_commit(memory: str, commits: int, touched: int, files: int) -> list[dict[str, Any]]:
    tx = Transactions(memory, archived=lambda source: True)
    durable = DurableFiles()
    elapsed = 0.0
    raw = 0.0
    for round_number in range(-1, commits):  # round -1 warms the caches, untimed
        edits = []
        for k in range(touched):
            path = f"topics/t{((round_number + 1) * touched + k) % files:04d}.md"
            with open(os.path.join(memory, path), encoding="utf-8") as handle:
                text = handle.read()
            edits.append(TopicEdit(path, text + (
                f"\nRound {round_number} adds a fact.[^e99]\n\n"
                f"[^e99]: Time: `2025-08-13`; Sources: openprogram/{SESSION}/r{round_number}\n"
            )))
        base = tx.revision()
        started = time.perf_counter()
        result = tx.commit(edits, base_revision=base,
                           batch_sources={f"openprogram/{SESSION}/r{round_number}"})
        if round_number < 0:
            continue
        elapsed += time.perf_counter() - started
        assert len(result.changed_files) == touched, result.audit
        # The same file operations, done directly.
        payload = [(os.path.join(memory, p), _read(memory, p).encode())
                   for p in result.changed_files]
        journal = os.path.join(memory, ".scriptorium/bench.journal")
        started = time.perf_counter()
        revision_paths(memory)  # the revision check must look at every file
        durable.write_atomic(journal, orjson.dumps([[p, d.decode()] for p, d in payload]))
        for path, data in payload:
            durable.replace_unsynced(path, data)
        durable.sync_paths([path for path, _ in payload])
        durable.unlink(journal)
        raw += time.perf_counter() - started
    return [_row(f"commit of {touched} files into {files} topic files", elapsed / commits,
                 "stat every file + journal + replaces + one sync + unlink", raw / commits)]


def _records(count: int) -> list[SourceRecord]:
    meta = SourceMeta("owner", "owner/bench", "owner", "trusted")
    names = ["Ada", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus"]
    out = []
    for i in range(count):
        n = i - 37 if i % 10 == 9 and i >= 37 else i
        out.append(SourceRecord(SESSION, f"w{i}", "user", (
            f"I prefer blend {n} of tea with breakfast. We decided to rename module {n} "
            f"next week. My colleague {names[n % 7]} {n} reviews patch {n}. Anything else?"
        ), 1_755_000_000.0 + 60 * i, "Owner", meta=meta))
    return out


def bench_writer(root: str, count: int, batch: int) -> list[dict[str, Any]]:
    records = _records(count)
    # Writer alone, on an in-memory workspace kept current by the normaliser.
    texts: dict[str, str] = {}
    ids: set[str] = set()
    labels: set[str] = set()
    writer = ExtractiveWriter()
    writing = 0.0
    for start in range(0, count, batch):
        snapshot = WorkspaceSnapshot("r", tuple(sorted(texts)), texts.__getitem__)
        started = time.perf_counter()
        edits = extract_edits(records[start:start + batch], snapshot, writer._index)
        writing += time.perf_counter() - started
        for edit in edits:
            assert edit.text is not None
            done = normalise_topic(edit.path, edit.text, base=None if edit.path not in texts
                                   else _parsed(texts[edit.path], edit.path),
                                   existing_ids=ids.copy(), used_ids=ids, used_labels=labels)
            assert done.text is not None
            texts[edit.path] = done.text
    # Writer + transaction on disk, batch by batch.
    memory = os.path.join(root, "pipeline")
    os.makedirs(memory)
    tx = Transactions(memory, archived=lambda source: True)
    piped = ExtractiveWriter()
    started = time.perf_counter()
    for start in range(0, count, batch):
        chunk = records[start:start + batch]
        snapshot = tx.snapshot()
        edits = extract_edits(chunk, snapshot, piped._index)
        result = tx.commit(edits, base_revision=snapshot.revision,
                           batch_sources={record.source_id for record in chunk})
        assert all(entry["status"] == "ok" for entry in result.audit), result.audit
    pipeline = time.perf_counter() - started
    return [
        {"measure": f"extractive writer ({count} records, batches of {batch})",
         "value": f"{count / writing:,.0f} records/s", "raw": "", "ratio": ""},
        {"measure": "extractive writer + transaction on disk",
         "value": f"{count / pipeline:,.0f} records/s", "raw": "", "ratio": ""},
    ]


def _parsed(text: str, path: str) -> Topic:
    return parse_topic(text, path)


def _read(memory: str, path: str) -> str:
    with open(os.path.join(memory, path), encoding="utf-8") as handle:
        return handle.read()


def _row(measure: str, seconds: float, raw_name: str, raw: float) -> dict[str, Any]:
    return {
        "measure": measure, "value": f"{seconds * 1000:.2f} ms",
        "raw": f"{raw_name}: {raw * 1000:.2f} ms", "ratio": f"{seconds / raw:.2f}x",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--paragraphs", type=int, default=5)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--touched", type=int, default=5)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="scriptorium-bench-") as root:
        memory = build_workspace(root, args.files, args.paragraphs)
        # Let every file age past the racy window, as in a workspace in use.
        time.sleep(RACY_NS / 1e9 + 0.1)
        rows = bench_revision(memory)
        rows += bench_commit(memory, args.commits, args.touched, args.files)
        rows += bench_writer(root, args.records, args.batch)
    if args.json:
        print(orjson.dumps({"rows": rows, "args": vars(args)}).decode())
        return
    print("| measure | value | raw file operations | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['measure']} | {row['value']} | {row['raw']} | {row['ratio']} |")


if __name__ == "__main__":
    main()
