"""Benchmark the memory workspace: revision, transaction install, extractive writer.

Run from the repository root::

    python bench/workspace.py [--files 1000] [--commits 7] [--records 5000] [--json]

Each figure is measured in the same rounds as what it is set against
(``bench/_harness.py``: warm-up, then at least five rounds, median with min
and max), and that is named for what it is:

- ``workspace_revision`` cold (empty cache) against its floor, walking the
  tree and reading and sha256-hashing every file; warm (nothing changed)
  against its floor, walking the tree and stat-ing every file;
- a transaction installing K topic files in a workspace of N, against its
  floor, the same file operations in bare syscalls (walk and stat every
  file for the revision check, the journal written durably, K unsynced
  replaces, each synced, one directory sync, the journal unlinked): the
  ratio is the parsing, validation and bookkeeping on top;
- the extractive writer alone, in records/s, next to the CPU time of the
  same rounds (not a floor: how much of the wall time was this process's),
  target >= 2,000 records/s (issue 4); and writer + transaction per batch
  on disk; once on turns that state facts, once on turns mostly small talk;
- the archive append of ``bench/workspace_archive.py`` at 1,000 frames.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _harness import (
    CPU_TIME,
    FLOOR,
    MIN_ROUNDS,
    Row,
    Summary,
    interleaved,
    markdown_table,
    ratio_row,
    rounds,
    timed,
    value_row,
)
from _raw import HAS_SYNCFS, RawDisk, durable_replace, read_and_hash, walk_and_stat, walk_files

from memory.ledger._records import SourceMeta, SourceRecord
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot
from memory.workspace._revision import RACY_NS, RevisionCache, revision_paths
from memory.workspace._topic_ids import normalise_topic
from memory.workspace._topics import Topic, parse_topic
from memory.workspace._transaction import Transactions
from memory.writers._extractive import ExtractiveWriter, extract_edits

SESSION = "bench"


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


def bench_revision(memory: str, repeat: int) -> list[Row]:
    later = time.time_ns() + 2 * RACY_NS  # steady state: every file older than the racy window
    cache = RevisionCache(memory)
    cache.revision(now_ns=later)

    def walk_read_hash() -> bytes:
        return read_and_hash(sorted(walk_files(memory)))

    cold = interleaved({
        "cold": timed(lambda: RevisionCache(memory).revision(now_ns=later)),
        "floor": timed(walk_read_hash),
    }, rounds=repeat)
    warm = interleaved({
        "warm": timed(lambda: cache.revision(now_ns=later), loops=5),
        "floor": timed(lambda: walk_and_stat(memory), loops=5),
    }, rounds=repeat)
    count = len(revision_paths(memory))
    return [
        ratio_row(f"workspace_revision cold ({count} files)", cold["cold"].scaled(1e3), "ms",
                  cold["floor"].scaled(1e3), kind=FLOOR,
                  what="walk the tree, read and sha256 every file"),
        ratio_row("workspace_revision warm (nothing changed)", warm["warm"].scaled(1e3), "ms",
                  warm["floor"].scaled(1e3), kind=FLOOR, what="walk the tree, stat every file"),
    ]


def bench_commit(memory: str, repeat: int, touched: int, files: int) -> list[Row]:
    tx = Transactions(memory, archived=lambda source: True)
    disk = RawDisk(0.0)
    turn = iter(range(10**9))
    topics = os.path.join(memory, "topics")

    def edits_for(number: int) -> list[TopicEdit]:
        edits = []
        for k in range(touched):
            path = f"topics/t{(number * touched + k) % files:04d}.md"
            text = _read(memory, path)
            edits.append(TopicEdit(path, text + (
                f"\nRound {number} adds a fact.[^e99]\n\n"
                f"[^e99]: Time: `2025-08-13`; Sources: openprogram/{SESSION}/r{number}\n"
            )))
        return edits

    def commit() -> float:
        number = next(turn)
        edits = edits_for(number)
        base = tx.revision()
        began = time.perf_counter()
        result = tx.commit(edits, base_revision=base,
                           batch_sources={f"openprogram/{SESSION}/r{number}"})
        elapsed = time.perf_counter() - began
        assert len(result.changed_files) == touched, result.audit
        return elapsed

    def floor(bulk: bool) -> Callable[[], float]:
        def measure() -> float:
            number = next(turn)
            payload = [(os.path.join(memory, edit.path), (edit.text or "").encode())
                       for edit in edits_for(number)]
            journal = os.path.join(memory, ".scriptorium", "bench.journal")
            began = time.perf_counter()
            walk_and_stat(memory)  # the revision check must look at every file
            durable_replace(disk, journal,
                            json.dumps([[p, d.decode()] for p, d in payload]).encode())
            for path, data in payload:
                disk.install(path, data, synced=False)
            if bulk:
                disk.syncfs(topics)
            else:
                disk.sync_files([path for path, _ in payload])
                disk.sync_dir(topics)
            os.unlink(journal)
            disk.sync_dir(os.path.dirname(journal))
            return time.perf_counter() - began
        return measure

    variants = {"fsync": floor(False), **({"syncfs": floor(True)} if HAS_SYNCFS else {})}
    found = interleaved({"commit": commit, **variants}, rounds=repeat, settle=os.sync)
    cheapest = Summary.of([min(values) for values in
                           zip(*(found[name].values for name in variants))])
    return [ratio_row(f"commit of {touched} files into {files} topic files",
                      found["commit"].scaled(1e3), "ms", cheapest.scaled(1e3), kind=FLOOR,
                      what=("walk + stat every file, journal written durably, replaces, then "
                            "one syncfs or each synced + one directory sync (the cheaper per "
                            "round), journal unlinked"))]


def _records(count: int, chatter: bool = False) -> list[SourceRecord]:
    """Turns that each state three facts, every tenth repeating an earlier turn.

    With ``chatter``, two turns in three are small talk instead (logged, not filed).
    """
    meta = SourceMeta("owner", "owner/bench", "owner", "trusted")
    names = ["Ada", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus"]
    talk = ["ok", "thanks!", "Noted: tea.", "Sounds good.", "Got it, thanks.", "Biscuits too."]
    out = []
    for i in range(count):
        n = i - 37 if i % 10 == 9 and i >= 37 else i
        content = (
            f"I prefer blend {n} of tea with breakfast. We decided to rename module {n} "
            f"next week. My colleague {names[n % 7]} {n} reviews patch {n}. Anything else?"
        ) if not chatter or i % 3 == 0 else talk[i % len(talk)]
        out.append(SourceRecord(SESSION, f"w{i}", "user", content,
                                1_755_000_000.0 + 60 * i, "Owner", meta=meta))
    return out


def _writer_alone(records: list[SourceRecord], batch: int) -> None:
    """The extractive writer on an in-memory workspace kept current by the normaliser."""
    texts: dict[str, str] = {}
    ids: set[str] = set()
    labels: set[str] = set()
    writer = ExtractiveWriter()
    for start in range(0, len(records), batch):
        snapshot = WorkspaceSnapshot("r", tuple(sorted(texts)), texts.__getitem__)
        edits = extract_edits(records[start:start + batch], snapshot, writer._index)
        for edit in edits:
            assert edit.text is not None
            done = normalise_topic(edit.path, edit.text, base=None if edit.path not in texts
                                   else _parsed(texts[edit.path], edit.path),
                                   existing_ids=ids.copy(), used_ids=ids, used_labels=labels)
            assert done.text is not None
            texts[edit.path] = done.text


def _writer_and_transaction(root: str, records: list[SourceRecord], batch: int) -> None:
    """Writer + transaction on disk, batch by batch, into a fresh workspace."""
    memory = tempfile.mkdtemp(prefix="pipeline-", dir=root)
    tx = Transactions(memory, archived=lambda source: True)
    piped = ExtractiveWriter()
    for start in range(0, len(records), batch):
        chunk = records[start:start + batch]
        snapshot = tx.snapshot()
        edits = extract_edits(chunk, snapshot, piped._index)
        result = tx.commit(edits, base_revision=snapshot.revision,
                           batch_sources={record.source_id for record in chunk})
        assert all(entry["status"] == "ok" for entry in result.audit), result.audit
        assert result.changed_files, "a fresh batch always changes memory"
    assert tx.all_cited([record.source_id for record in records])


def bench_writer(root: str, count: int, batch: int, chatter: bool, repeat: int) -> list[Row]:
    records = _records(count, chatter)
    wall: list[float] = []
    cpu: list[float] = []

    def alone() -> float:
        began, cpu_began = time.perf_counter(), time.process_time()
        _writer_alone(records, batch)
        wall.append(time.perf_counter() - began)
        cpu.append(time.process_time() - cpu_began)
        return count / wall[-1]

    rate = rounds(alone, rounds=repeat)
    cpu_rate = Summary.of([count / seconds for seconds in cpu[-repeat:]])
    piped = rounds(lambda: count / timed(lambda: _writer_and_transaction(root, records, batch))(),
                   rounds=repeat)
    kind = "2 in 3 turns small talk, " if chatter else ""
    return [
        value_row(f"extractive writer ({kind}{count} records, batches of {batch})", rate,
                  "records/s", op=">=", bound=2_000, against=cpu_rate, kind=CPU_TIME,
                  what="the same rounds' rate by this process's CPU time"),
        value_row(f"extractive writer + transaction on disk ({kind.rstrip(', ') or 'facts'})",
                  piped, "records/s"),
    ]


def _parsed(text: str, path: str) -> Topic:
    return parse_topic(text, path)


def _read(memory: str, path: str) -> str:
    with open(os.path.join(memory, path), encoding="utf-8") as handle:
        return handle.read()


def bench_archive_append(repeat: int, existing: int = 1000, batch: int = 8) -> list[Row]:
    """Archive append (SPEC §5), as the workspace actor does it (cached scan), vs its floor.

    The measurement lives in ``bench/workspace_archive.py`` (its sizes
    sweep); this row puts the workspace's figures in one table.
    """
    from workspace_archive import append_rows, bench_append  # the sibling script

    return append_rows(bench_append(existing, batch, repeat=repeat))[1:2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--paragraphs", type=int, default=5)
    parser.add_argument("--commits", type=int, default=7,
                        help=f"timed rounds of each measurement (at least {MIN_ROUNDS})")
    parser.add_argument("--touched", type=int, default=5)
    parser.add_argument("--records", type=int, default=5000, help="records per writer round")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.commits < MIN_ROUNDS:
        parser.error(f"--commits must be at least {MIN_ROUNDS}")
    repeat = args.commits
    with tempfile.TemporaryDirectory(prefix="scriptorium-bench-") as root:
        memory = build_workspace(root, args.files, args.paragraphs)
        # Let every file age past the racy window, as in a workspace in use.
        time.sleep(RACY_NS / 1e9 + 0.1)
        rows = bench_revision(memory, repeat)
        rows += bench_commit(memory, repeat, args.touched, args.files)
        rows += bench_writer(root, args.records, args.batch, chatter=False, repeat=repeat)
        rows += bench_writer(root, args.records, args.batch, chatter=True, repeat=repeat)
    rows += bench_archive_append(repeat)
    if args.json:
        print(orjson.dumps({"rows": [row.to_json() for row in rows], "args": vars(args)}).decode())
    else:
        print(markdown_table(rows))


if __name__ == "__main__":
    main()
