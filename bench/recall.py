"""Recall: does memory put the right facts into the next prompt? LoCoMo, next to BM25 on raw turns.

Run from the repository root (the ``bench`` extra: ``pip install -e '.[bench]'``)::

    python bench/recall.py                # Markdown table
    python bench/recall.py --json         # one JSON document (bench/run.py reads it)
    python bench/recall.py --quick        # a smoke run on a tiny slice

The data is ``../shared/datasets/locomo-dev/`` (``--data``), read in place.
Every conversation is one session of ONE state directory (an agent's memory
holds all its conversations): written as a jsonl in a temporary directory
and ingested through ``scriptorium import jsonl``'s path
(:func:`memory.runtime.import_jsonl`; speaker_a the user, speaker_b the
assistant, the speaker's name in the turn's metadata, ``created_at`` from
the session date and the turn order, node id ``D1-3`` from ``D1:3``), then
written to memory by the built-in extractive writer at the session boundary
(``rt.boundary``). For every non-adversarial question with evidence,
``rt.context(question, budget_tokens=B, session=<its session>)`` is scored
for B = 250, 500, 1000:

- **evidence recall@B**: the fraction of the question's evidence turns in
  the block's ``.quoted`` (a paragraph that only cites a turn does not count);
- **answer recall@B**: the fraction of the answer's words in ``.text``;

each next to the BM25-over-raw-turns baseline of the dataset README,
computed in the same run (``bench/_locomo.py``, which reproduces the
README's table). Memory's blocks are counted with the ledger's counter
(``.tokens``: about UTF-8 bytes / 4, rounded up, or tiktoken), the
baseline's with characters / 4 (or tiktoken), as the README says: per item
memory's count is never the smaller, so the budget does not favour memory.

At scale (``--units``, default 100,000), on a synthetic workspace grown by
real write cycles (the workspace actor, the extractive writer) from
generated turns that state facts over a vocabulary that follows Zipf's law
(:class:`Facts`), asked about facts the workspace holds:

- **reindex rate**: ``RecallIndex.rebuild`` from the files, units/s;
- **index size** against the workspace's own files (``.scriptorium/`` left out);
- **query latency** p50 / p99 of ``Recall.recall`` (k = 8) and
  ``Recall.context`` (500 tokens), from the event loop (thread hop included),
  on a fresh question each call;
- **index update per commit**: a small batch (8 turns) through the write
  cycle on the grown workspace, the workspace actor syncing the index after
  its archive append and after its commit (``on_change``, as the runtime
  wires it); the syncs' time against the time of those two calls without
  them (the archive append and the commit), per round.

Targets (issue 13): evidence and answer recall@500 >= 0.75; no figure
below the baseline at any B; query p50 <= 10 ms at 100,000 units; index
update <= 0.5x the commit it follows. The figures are one run over the data (they
are deterministic); the latencies of ``rt.context`` are reported with them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _harness import (
    MIN_ROUNDS,
    RIDES_ON,
    TO_BEAT,
    Row,
    Summary,
    arounds,
    markdown_table,
    percentile,
    ratio_row,
    rounds,
    timed,
    value_row,
)
from _locomo import (
    BUDGETS,
    Bm25Baseline,
    Conversation,
    answer_recall,
    budget_counter,
    evidence_recall,
    load_conversations,
)

from actors import ActorRef, open_actor
from memory.ledger._records import SourceRecord
from memory.recall import Recall, RecallIndex
from memory.runtime import RuntimeConfig, import_jsonl, open_runtime
from memory.runtime._workspace_actor import (
    ArchiveBatches,
    CommitEdits,
    TakeSnapshot,
    WorkspaceActor,
    WorkspaceMessage,
)
from memory.workspace._edits import WorkspaceSnapshot
from memory.writers._cycle import run_write_cycle
from memory.writers._extractive import ExtractiveWriter
from memory.writers._writer import Batch

DATA = ROOT.parent / "shared" / "datasets" / "locomo-dev"
TARGET_AT = 500
TARGET = 0.75
QUICK_CONVERSATION = "conv-30"
QUICK_SESSIONS = 3
QUICK_QUESTIONS = 12
QUICK_UNITS = 1_000
QUICK_QUERIES = 20
UNITS = 100_000
GROW_BATCH = 250  # records per write cycle while the workspace grows
PER_SESSION = 1_000  # records per synthetic session (one archive file each)
COMMIT_BATCH = 8  # records of the measured commits: a short exchange
QUERIES = 100  # questions per latency round
QUERY_P50_MS = 10.0
UPDATE_RATIO = 0.5


def baseline_figures(conversations: Sequence[Conversation],
                     budgets: Sequence[int]) -> dict[str, Any]:
    """The README's BM25 baseline: per B, the mean evidence and answer recall."""
    counter_name, counter = budget_counter()
    evidence: dict[int, list[float]] = {b: [] for b in budgets}
    answer: dict[int, list[float]] = {b: [] for b in budgets}
    began = time.perf_counter()
    for conversation in conversations:
        baseline = Bm25Baseline(conversation, counter)
        for question in conversation.questions:
            for budget, (ids, text) in baseline.blocks(question.text, budgets).items():
                evidence[budget].append(evidence_recall(question, ids))
                answer[budget].append(answer_recall(question, text))
    return {
        "counter": counter_name,
        "seconds": time.perf_counter() - began,
        "evidence": {str(b): _mean(evidence[b]) for b in budgets},
        "answer": {str(b): _mean(answer[b]) for b in budgets},
    }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


async def memory_figures(conversations: Sequence[Conversation], budgets: Sequence[int],
                         workdir: Path) -> dict[str, Any]:
    """Import every conversation into one state, write memory, ask ``rt.context``; score it."""
    state = workdir / "state"
    evidence: dict[int, list[float]] = {b: [] for b in budgets}
    answer: dict[int, list[float]] = {b: [] for b in budgets}
    latencies: list[float] = []
    over_budget = 0
    ingest: dict[str, Any] = {}
    async with open_runtime(state, config=RuntimeConfig()) as rt:
        began = time.perf_counter()
        for conversation in conversations:
            source = conversation.write_jsonl(workdir / f"{conversation.name}.jsonl")
            imported = await import_jsonl(rt, source, session=conversation.session_id)
            written = await rt.boundary(conversation.session_id)
            ingest[conversation.name] = {
                "turns": imported.imported, "boundary": str(written.outcome.value),
                "reason": written.reason,
            }
        await rt.drain()
        ingest_seconds = time.perf_counter() - began
        if not hasattr(rt, "context"):
            return {"measured": False, "why": "rt.context is not on this branch",
                    "ingest": ingest, "ingest_seconds": ingest_seconds}
        for conversation in conversations:
            for question in conversation.questions:
                for budget in budgets:
                    asked = time.perf_counter()
                    block = await rt.context(question.text, budget_tokens=budget,
                                             session=conversation.session_id)
                    latencies.append(time.perf_counter() - asked)
                    over_budget += block.tokens > budget
                    quoted = [node for session, node in block.quoted
                              if session == conversation.session_id]
                    evidence[budget].append(evidence_recall(question, quoted))
                    answer[budget].append(answer_recall(question, block.text))
    return {
        "measured": True,
        "ingest": ingest,
        "ingest_seconds": ingest_seconds,
        "evidence": {str(b): _mean(evidence[b]) for b in budgets},
        "answer": {str(b): _mean(answer[b]) for b in budgets},
        "context_ms_p50": percentile(latencies, 50) * 1e3,
        "context_ms_p99": percentile(latencies, 99) * 1e3,
        "over_budget": over_budget,
    }


def recall_rows(result: dict[str, Any]) -> list[Row]:
    """Per B, evidence and answer recall next to the baseline; the targets of issue 13."""
    rows: list[Row] = []
    base, memory = result["baseline"], result["memory"]
    what = (f"BM25 over raw turns, same run ({base['counter']}; dataset README's "
            "definition)")
    for budget in result["budgets"]:
        for figure in ("evidence", "answer"):
            name = f"{figure} recall@{budget} ({result['questions']} questions)"
            against = Summary.single(base[figure][str(budget)])
            if not memory.get("measured"):
                rows.append(Row(f"{name}: baseline only", against, ""))
                continue
            value = memory[figure][str(budget)]
            floor_met = value >= against.median
            if budget == TARGET_AT:
                rows.append(Row(name, Summary.single(value), "", against, TO_BEAT, what,
                                target=f">= {TARGET} and >= the baseline",
                                met=value >= TARGET and floor_met))
            else:
                rows.append(Row(name, Summary.single(value), "", against, TO_BEAT, what,
                                target=">= the baseline", met=floor_met))
    if memory.get("measured"):
        rows.append(value_row("blocks over their budget", Summary.single(memory["over_budget"]),
                              "", op="==", bound=0))
        rows.append(Row("rt.context p50 / p99 on the LoCoMo state", Summary.single(0), "",
                        text=(f"{memory['context_ms_p50']:.1f} / "
                              f"{memory['context_ms_p99']:.1f} ms")))
    else:
        rows.append(Row("memory", Summary.single(0), "", text=f"not measured: {memory['why']}"))
    return rows


# -- at scale: a synthetic workspace ---------------------------------------------------

_DOES = ("adopted", "painted", "bought", "repaired", "sold", "photographed", "built",
         "visited", "borrowed", "lost", "found", "cooked", "planted", "designed", "wrote")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_T0 = 1_650_000_000.0  # April 2022
_SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou")
VOCABULARY = 20_000  # distinct content words, drawn by Zipf's law as in real text
NAMES = 500


class Facts:
    """Generated turns that state facts, over a vocabulary whose words follow Zipf's law.

    Real conversations share a few words a lot and most words rarely; a
    handful of words repeated everywhere would make every query match most
    of the workspace (a worst case no conversation has), and unique words
    would make it match one unit. Each fact names a person, a deed, three
    content words and a month; its question asks about the person, the deed
    and two of the words, as a question about something said does.
    """

    def __init__(self, seed: int = 13) -> None:
        self.rng = random.Random(seed)
        words: set[str] = set()
        while len(words) < VOCABULARY + NAMES:
            words.add("".join(self.rng.choice(_SYLLABLES)
                              for _ in range(self.rng.choice((2, 3, 3, 4)))))
        ordered = sorted(words)
        self.rng.shuffle(ordered)
        self.names = [w.capitalize() for w in ordered[:NAMES]]
        self.words = ordered[NAMES:]
        self.weights = list(itertools.accumulate(1.0 / rank
                                                 for rank in range(1, VOCABULARY + 1)))
        self.asked: list[str] = []

    def _word(self) -> str:
        return self.rng.choices(self.words, cum_weights=self.weights)[0]

    def fact(self) -> str:
        rng = self.rng
        who, does = rng.choice(self.names), rng.choice(_DOES)
        what, near, how = self._word(), self._word(), self._word()
        month, year = rng.choice(_MONTHS), rng.choice((2021, 2022, 2023))
        if rng.random() < 0.05:  # keep questions about facts the workspace holds
            self.asked.append(f"What did {who} do with the {what} near {near}?")
        return f"{who} {does} the {what} near {near} in {month} {year}; it was {how}."

    def records(self, session: str, start: int, count: int) -> list[SourceRecord]:
        return [SourceRecord(session, f"n{number:07d}",
                             "user" if number % 2 == 0 else "assistant", self.fact(),
                             _T0 + number * 60.0, self.rng.choice(self.names))
                for number in range(start, start + count)]


def _batch(records: Sequence[SourceRecord]) -> Batch:
    return Batch(records[0].session_id, tuple(records), "")


async def _write(workspace: ActorRef[WorkspaceMessage], writer: ExtractiveWriter, batch: Batch) -> float:
    """One write cycle through the workspace actor, as the runtime's workers run it.

    Returns the seconds of its two writes, the archive append and the commit.
    """
    spent: list[float] = []

    async def snapshot() -> WorkspaceSnapshot:
        view: WorkspaceSnapshot = await workspace.call(TakeSnapshot())
        return view

    async def archive(batch: Batch) -> object:
        start = time.perf_counter()
        try:
            return await workspace.call(ArchiveBatches((batch,)))
        finally:
            spent.append(time.perf_counter() - start)

    async def commit(batch: Batch, edits: Sequence[Any], base: str) -> list[dict[str, Any]]:
        start = time.perf_counter()
        try:
            return await workspace.call(CommitEdits((batch,), tuple(edits), base))
        finally:
            spent.append(time.perf_counter() - start)

    outcome = await run_write_cycle(batch, writer, snapshot=snapshot, archive=archive,
                                    commit=commit, timeout=None)
    if outcome.error is not None:
        raise outcome.error
    return sum(spent)


def _tree_bytes(root: Path, skip: str) -> int:
    total = 0
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d != skip]
        total += sum(os.path.getsize(os.path.join(directory, name)) for name in names)
    return total


async def scale_figures(units: int, workdir: Path, repeat: int,
                        queries: int = QUERIES) -> dict[str, Any]:
    """Grow a workspace to ``units`` records, then reindex, query and commit on it."""
    memory_dir = workdir / "memory"
    memory_dir.mkdir(parents=True)
    facts = Facts()
    writer = ExtractiveWriter()
    index = RecallIndex(str(memory_dir))
    began = time.perf_counter()
    records = 0
    indexed = 0
    while indexed < units:  # a fact turn gives about two units: its paragraph and itself
        more = max(GROW_BATCH, (units - indexed) // 2)
        async with open_actor(WorkspaceActor(str(memory_dir))) as workspace:
            for start in range(records, records + more, GROW_BATCH):
                session = f"synthetic-{start // PER_SESSION:04d}"
                await _write(workspace, writer, _batch(facts.records(
                    session, start, min(GROW_BATCH, records + more - start))))
        records += more
        report = index.rebuild()
        indexed = index.count()
    grow_seconds = time.perf_counter() - began
    rebuild = rounds(timed(index.rebuild), rounds=repeat).inverse(indexed)
    index.close()
    index_files = {p.name: p.stat().st_size
                   for p in sorted(memory_dir.glob(".scriptorium/recall.sqlite*"))}
    index_bytes = sum(index_files.values())
    workspace_bytes = _tree_bytes(memory_dir, ".scriptorium")

    recall = Recall(str(memory_dir))
    await recall.sync()
    asked = itertools.cycle(facts.asked or [facts.fact()])

    def latencies(call: Any) -> Any:
        async def measure() -> float:
            samples = []
            for _ in range(queries):
                question = next(asked)
                start = time.perf_counter()
                await call(question)
                samples.append(time.perf_counter() - start)
            spans.append(samples)
            return percentile(samples, 50) * 1e3
        spans: list[list[float]] = []
        return measure, spans

    recall_measure, recall_spans = latencies(lambda q: recall.recall(q, k=8))
    context_measure, context_spans = latencies(
        lambda q: recall.context(q, budget_tokens=TARGET_AT))
    recall_p50 = await arounds(recall_measure, rounds=repeat)
    context_p50 = await arounds(context_measure, rounds=repeat)
    recall.close()

    # The index kept current by the workspace actor after each archive append and commit.
    synced: list[float] = []
    tracked = Recall(str(memory_dir))

    def sync() -> object:
        start = time.perf_counter()
        tracked.sync_blocking()
        synced.append(time.perf_counter() - start)
        return None

    commits: list[float] = []
    updates: list[float] = []
    async with open_actor(WorkspaceActor(str(memory_dir), on_change=sync)) as workspace:
        sync()  # the index current with the grown workspace before the first round
        for number in range(repeat + 1):
            batch = _batch(facts.records("synthetic-live", number * COMMIT_BATCH,
                                         COMMIT_BATCH))
            synced.clear()
            total = await _write(workspace, writer, batch)  # the two writes, syncs included
            if number:  # the first round is the warm-up
                updates.append(sum(synced))
                commits.append(total - sum(synced))
    tracked.close()
    return {
        "units": indexed,
        "records": records,
        "grow_seconds": grow_seconds,
        "rebuilt": report.rebuilt,
        "reindex_units_per_s": rebuild.to_json(),
        "index_bytes": index_bytes,
        "index_files": index_files,
        "workspace_bytes": workspace_bytes,
        "recall_p50_ms": recall_p50.to_json(),
        "recall_p99_ms": percentile([x for span in recall_spans[1:] for x in span], 99) * 1e3,
        "context_p50_ms": context_p50.to_json(),
        "context_p99_ms": percentile([x for span in context_spans[1:] for x in span], 99) * 1e3,
        "commit_ms": Summary.of(commits).scaled(1e3).to_json(),
        "index_update_ms": Summary.of(updates).scaled(1e3).to_json(),
    }


def scale_rows(scale: dict[str, Any], target_size: bool) -> list[Row]:
    """The index at scale; the latency target holds at 100,000 units, not at a smoke size."""
    units = f"{scale['units']:,} units"
    recall_p50 = Summary.from_json(scale["recall_p50_ms"])
    commit = Summary.from_json(scale["commit_ms"])
    update = Summary.from_json(scale["index_update_ms"])
    return [
        value_row(f"recall query p50 ({units}, k = 8)", recall_p50, "ms",
                  op="<=" if target_size else "", bound=QUERY_P50_MS),
        Row(f"recall query p99 ({units})", Summary.single(scale["recall_p99_ms"]), "ms"),
        value_row(f"context query p50 ({units}, {TARGET_AT} tokens)",
                  Summary.from_json(scale["context_p50_ms"]), "ms"),
        Row(f"context query p99 ({units})", Summary.single(scale["context_p99_ms"]), "ms"),
        ratio_row(f"index update after a {COMMIT_BATCH}-turn write cycle ({units})", update,
                  "ms", commit, kind=RIDES_ON,
                  what="the same write cycle's archive append + commit, syncs left out",
                  op="<=", bound=UPDATE_RATIO),
        value_row(f"reindex from the files ({units})",
                  Summary.from_json(scale["reindex_units_per_s"]), "units/s"),
        Row("index size / workspace size (its files, .scriptorium/ left out)",
            Summary.single(0), "",
            text=(f"{scale['index_bytes'] / 2**20:,.1f} MiB / "
                  f"{scale['workspace_bytes'] / 2**20:,.1f} MiB = "
                  f"{scale['index_bytes'] / max(scale['workspace_bytes'], 1):.2f}x")),
    ]


def run(data: Path, quick: bool, units: int, repeat: int) -> dict[str, Any]:
    conversations = load_conversations(data, [QUICK_CONVERSATION] if quick else None)
    if quick:
        conversations = [c.sliced(QUICK_SESSIONS, QUICK_QUESTIONS)
                         for c in conversations]
    budgets = list(BUDGETS)
    result: dict[str, Any] = {
        "data": str(data),
        "quick": quick,
        "budgets": budgets,
        "conversations": [c.name for c in conversations],
        "turns": sum(len(c.turns) for c in conversations),
        "questions": sum(len(c.questions) for c in conversations),
        "baseline": baseline_figures(conversations, budgets),
    }
    with tempfile.TemporaryDirectory(prefix="scriptorium-recall-") as workdir:
        result["memory"] = anyio.run(memory_figures, conversations, budgets, Path(workdir))
    rows = recall_rows(result)
    if units:
        with tempfile.TemporaryDirectory(prefix="scriptorium-recall-scale-") as workdir:
            result["scale"] = anyio.run(scale_figures, units, Path(workdir), repeat,
                                        QUICK_QUERIES if quick else QUERIES)
        rows += scale_rows(result["scale"], units >= UNITS)
    result["rows"] = [row.to_json() for row in rows]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: the first sessions of one conversation")
    parser.add_argument("--data", type=Path, default=DATA,
                        help="the LoCoMo directory (conv-*.json and README.md)")
    parser.add_argument("--units", type=int, default=None,
                        help=f"records of the synthetic workspace (default {UNITS:,}; "
                             f"--quick {QUICK_UNITS:,}; 0 leaves the scale figures out)")
    parser.add_argument("--repeat", type=int, default=MIN_ROUNDS,
                        help=f"timed rounds at scale (at least {MIN_ROUNDS})")
    args = parser.parse_args()
    if not args.data.is_dir():
        parser.error(f"{args.data} is not a directory; pass --data DIR (the LoCoMo files)")
    if args.repeat < MIN_ROUNDS:
        parser.error(f"--repeat must be at least {MIN_ROUNDS}")
    units = args.units if args.units is not None else QUICK_UNITS if args.quick else UNITS
    result = run(args.data, args.quick, units, args.repeat)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(markdown_table([Row.from_json(row) for row in result["rows"]]))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
