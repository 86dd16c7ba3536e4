"""Benchmark the model writer (issue 14) against a scripted model server on loopback.

Run from the repository root::

    python bench/writer.py [--rounds 5] [--batches 8] [--json]

Each figure is measured in the same rounds as what it is set against
(``bench/_harness.py``):

- **overhead per batch**: ``ModelWriter.write`` for one batch in a
  workspace of 50 topic files (the bounded prompt rendered in a thread, the
  request built, sent, read strictly, the actions turned into topic edits
  and dry-run through the real transaction validator, the usage file kept)
  against its floor, the raw HTTP round trip of the same request
  body to the same server with a bare ``httpx.AsyncClient`` (what any
  client must pay); target <= 1.2x. Measured twice: a server that answers
  at once (the overhead laid bare) and one that answers in 20 ms (a fast
  local model). Beside it, the same without the dry run (no row target:
  what the validator costs, which the commit pays once more anyway);
- **throughput**: with a server answering in a fixed 200 ms, K = 1, 4, 16
  concurrent workers writing batches through one writer whose concurrency
  limit is 16, in batches/s, against the ideal K / 0.2 s (a ceiling);
  target >= 0.8x; and against the same bodies posted by K tasks with a bare
  httpx client in the same rounds (what this machine and server allow any
  client). And K = 16 with the default limit of 4, against its own ideal
  4 / 0.2 s: the limit holds.

The server is ``tests/model_server.py`` (uvicorn) in a process of its own,
as a local model server would be: it shares the machine's 2 cores with the
client, not its interpreter lock.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from typing import Any

import anyio
import anyio.to_thread
import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import (
    CEILING,
    FLOOR,
    MIN_ROUNDS,
    Row,
    Summary,
    ainterleaved,
    markdown_table,
    ratio_row,
)

from memory.ledger import estimate_tokens
from memory.ledger._records import SourceRecord
from memory.workspace import ArchiveCache, TopicEdit, Transactions, WorkspaceSnapshot
from memory.writers import Batch
from memory.writers.model import (
    WRITING_RULES,
    ModelSettings,
    ModelWriter,
    UsageFile,
    build_request,
    render_model_prompt,
)
from store import DurableFiles
from tests.model_server import model_server_process

NOW = 1_800_000_000.0


def records(session: str, count: int = 4) -> tuple[SourceRecord, ...]:
    return tuple(SourceRecord(
        session_id=session, message_id=f"n{i}", role="user" if i % 2 == 0 else "assistant",
        content=f"I moved to Lisbon in March and I prefer green tea, note {i}.",
        timestamp=NOW + i, speaker="user" if i % 2 == 0 else "assistant", tokens=16)
        for i in range(count))


class Workspace:
    """A real memory dir whose archive holds every benchmark batch, for the validator."""

    def __init__(self, root: str, sessions: int, topics: int = 50) -> None:
        self.memory = os.path.join(root, "memory")
        os.makedirs(os.path.join(self.memory, ".scriptorium"))
        files = DurableFiles()
        self.archive = ArchiveCache(self.memory, files)
        self.batches = []
        for index in range(sessions):
            sid = f"bench-{index:04d}"
            batch = Batch(sid, records(sid), "")
            self.archive.append(sid, batch.records)
            self.batches.append(batch)
        self.transactions = Transactions(self.memory, archived=self.archive.archived, files=files)
        self.lock = threading.Lock()
        self.usage = UsageFile(self.memory, files)
        # A workspace in use: topic files the prompt outlines and shows, one of them the
        # file every benchmark batch appends to.
        seed = Batch("seed", records("seed", 2 * topics), "")
        self.archive.append("seed", seed.records)
        edits = [TopicEdit(f"topics/{'notes' if i == 0 else f'subject-{i:03d}'}.md",
                           f"# Subject {i}\n\n## Notes\n\nA fact about subject {i}.[^e1]\n\n"
                           f"[^e1]: Time: `2027-01-15`; Sources: {seed.records[2 * i].source_id}\n")
                 for i in range(topics)]
        self.transactions.commit(edits, base_revision=self.transactions.revision(),
                                 batch_sources={r.source_id for r in seed.records})

    async def snapshot(self) -> WorkspaceSnapshot:
        view = await anyio.to_thread.run_sync(self.transactions.snapshot)

        def locked_check(edits: Any, sources: frozenset[str]) -> Any:
            with self.lock:  # the workspace actor serialises it with every other request
                return self.transactions.check(edits, batch_sources=sources)

        async def check(edits: Any, sources: frozenset[str]) -> Any:
            return await anyio.to_thread.run_sync(locked_check, edits, sources)

        return WorkspaceSnapshot(view.revision, view.topic_paths, view.read, check)


def settings(base_url: str, concurrency: int = 16) -> ModelSettings:
    return ModelSettings(base_url=base_url, model="bench-1", concurrency=concurrency)


async def overhead(latency: float, rounds: int, loops: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="scriptorium-bench-") as root, \
            model_server_process(latency=latency) as base_url:
        workspace = Workspace(root, 1)
        batch = workspace.batches[0]
        writer = ModelWriter(settings(base_url), env={}, counter=estimate_tokens,
                             usage_file=workspace.usage)
        view = render_model_prompt(batch, await workspace.snapshot(), count=estimate_tokens,
                                   structure_tokens=6000, full_files=3)
        path, headers, body = build_request(
            "openai", model="bench-1", system=WRITING_RULES, turns=[("user", view.text)],
            mode="json_schema", max_tokens=4096)
        raw = httpx.AsyncClient(base_url=base_url)
        content = json.dumps(body).encode()
        edits: list[TopicEdit] = []

        async def model_writer() -> float:
            snapshot = await workspace.snapshot()  # not timed: the runtime's step
            started = time.perf_counter()
            for _ in range(loops):
                edits[:] = await writer.write(batch, snapshot)
                writer._reusable.clear()  # every loop calls the model (no reuse)
            return (time.perf_counter() - started) / loops

        async def raw_round_trip() -> float:
            started = time.perf_counter()
            for _ in range(loops):
                response = await raw.post(path, content=content, headers=headers)
                response.json()
            return (time.perf_counter() - started) / loops

        async def without_dry_run() -> float:
            full = await workspace.snapshot()
            snapshot = WorkspaceSnapshot(full.revision, full.topic_paths, full.read)
            started = time.perf_counter()
            for _ in range(loops):
                await writer.write(batch, snapshot)
                writer._reusable.clear()
            return (time.perf_counter() - started) / loops

        found = await ainterleaved({"writer": model_writer, "raw": raw_round_trip,
                                    "bare": without_dry_run}, rounds=rounds, warmup=1)
        await raw.aclose()
        await writer.aclose()
        assert edits and edits[0].path == "topics/notes.md"  # it really wrote
    label = "at once" if not latency else f"in {latency * 1000:g} ms"
    what = "the raw httpx POST of the same body to the same server"
    return [ratio_row(f"ModelWriter.write per batch, server answering {label}",
                      found["writer"].scaled(1000), "ms", found["raw"].scaled(1000),
                      kind=FLOOR, what=what, op="<=", bound=1.2),
            ratio_row(f"the same without the validator's dry run (answering {label})",
                      found["bare"].scaled(1000), "ms", found["raw"].scaled(1000),
                      kind=FLOOR, what=what)]


async def throughput(workers: int, limit: int, rounds: int, per_worker: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="scriptorium-bench-") as root, \
            model_server_process(latency=0.2, per_session_files=True) as base_url:
        workspace = Workspace(root, workers)
        writer = ModelWriter(settings(base_url, limit), env={}, counter=estimate_tokens,
                             usage_file=workspace.usage)
        snapshot = await workspace.snapshot()
        requests = []
        for batch in workspace.batches:  # what each worker's writer sends, for the raw side
            view = render_model_prompt(batch, snapshot, count=estimate_tokens,
                                       structure_tokens=6000, full_files=3)
            path, headers, body = build_request(
                "openai", model="bench-1", system=WRITING_RULES, turns=[("user", view.text)],
                mode="json_schema", max_tokens=4096)
            requests.append(json.dumps(body).encode())
        raw = httpx.AsyncClient(base_url=base_url, limits=httpx.Limits(max_connections=limit))

        async def worker(batch: Batch) -> None:
            for _ in range(per_worker):
                await writer.write(batch, snapshot)
                writer._reusable.pop((batch.session_id, batch.node_ids), None)

        async def raw_worker(content: bytes) -> None:
            for _ in range(per_worker):
                (await raw.post(path, content=content, headers=headers)).json()

        async def measure() -> float:
            started = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for batch in workspace.batches:
                    tg.start_soon(worker, batch)
            return workers * per_worker / (time.perf_counter() - started)

        async def measure_raw() -> float:
            started = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for content in requests:
                    tg.start_soon(raw_worker, content)
            return workers * per_worker / (time.perf_counter() - started)

        found = await ainterleaved({"writer": measure, "raw": measure_raw}, rounds=rounds,
                                   warmup=1)
        await raw.aclose()
        await writer.aclose()
        assert writer.totals["failed"] == 0
    ideal = min(workers, limit) / 0.2
    rate = found["writer"]
    figure = f"throughput, K = {workers} workers, concurrency limit {limit}"
    return [ratio_row(figure, rate, "batches/s", Summary.of([ideal] * rate.rounds),
                      kind=CEILING, what=f"the ideal min(K, limit) / 0.2 s = {ideal:g} batches/s",
                      op=">=", bound=0.8),
            ratio_row(f"{figure}, against raw httpx", rate, "batches/s", found["raw"],
                      kind=FLOOR, what=f"{workers} tasks posting the same bodies with a bare "
                                       f"httpx client of {limit} connections", faster=False)]


async def main_async(args: argparse.Namespace) -> list[Row]:
    rows = await overhead(0.0, args.rounds, args.loops)
    rows += await overhead(0.02, args.rounds, max(1, args.loops // 4))
    for workers in (1, 4, 16):
        rows += await throughput(workers, 16, args.rounds, args.batches)
    rows += await throughput(16, 4, args.rounds, max(1, args.batches // 2))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    parser.add_argument("--loops", type=int, default=40, help="batches per overhead round")
    parser.add_argument("--batches", type=int, default=4, help="batches per worker per round")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.loops, args.batches = 10, 2
    if args.rounds < MIN_ROUNDS:
        parser.error(f"--rounds must be at least {MIN_ROUNDS}")
    rows = anyio.run(main_async, args)
    if args.json:
        print(json.dumps({"rows": [row.to_json() for row in rows], "args": vars(args)}))
    else:
        print(markdown_table(rows))


if __name__ == "__main__":
    main()
