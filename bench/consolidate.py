"""Consolidation on LoCoMo: topics smaller, recall not lower, every cited source kept (issue 23).

Run from the repository root (the ``bench`` extra: ``pip install -e '.[bench]'``)::

    python bench/consolidate.py            # Markdown table
    python bench/consolidate.py --json     # one JSON document (bench/run.py reads it)
    python bench/consolidate.py --quick    # a smoke run on a tiny slice

The data is ``../shared/datasets/locomo-dev/`` (``--data``), read in place.
Every conversation is imported into one state directory and written by the
built-in extractive writer at its session boundary, exactly as
``bench/recall.py`` does (the runtime's own consolidation turned off). Then,
before and after one global pass of the offline consolidator
(``memory.consolidation.consolidate_workspace``, timed):

- topic bytes and paragraphs;
- evidence and answer recall at 250 / 500 / 1000 tokens (``rt.context``,
  the dataset README's definitions, ``bench/_locomo.py``);
- the sources the topics cite (must be equal: 100% kept).

And the time of a **local pass over one batch's growth** against that
batch's write cycle: one more session of 8 turns written at its boundary
(timed), then a local pass (timed).

Targets: topics >= 25% smaller in bytes; recall not lower at any budget,
answer recall@500 >= 0.75; 100% of cited sources kept; the local pass <= 10x
the batch's write cycle.
"""

from __future__ import annotations

import argparse
import json
import shutil
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

from _harness import Row, Summary
from _locomo import (
    BUDGETS,
    Conversation,
    answer_recall,
    evidence_recall,
    load_conversations,
)

from memory.consolidation import (
    ConsolidationPolicy,
    ModelConsolidator,
    consolidate_offline,
    consolidate_with_model,
    consolidate_workspace,
)
from memory.consolidation._plan import cited_sources
from memory.maintenance._audit_inputs import read_topics
from memory.runtime import RuntimeConfig, import_jsonl, open_runtime
from memory.workspace._topics import parse_topic
from memory.writers.model import Endpoint, ModelSettings
from tests.model_server import model_server_process

DATA = ROOT.parent / "shared" / "datasets" / "locomo-dev"
QUICK_CONVERSATION = "conv-30"
QUICK_SESSIONS = 3
QUICK_QUESTIONS = 12
TARGET_SMALLER = 0.25
TARGET_ANSWER_500 = 0.75
TARGET_LOCAL_RATIO = 10.0
CONFIG = RuntimeConfig(consolidation=ConsolidationPolicy(enabled=False))


def _topics_facts(memory_dir: Path) -> dict[str, Any]:
    texts = read_topics(str(memory_dir))
    topics = {path: parse_topic(text, path) for path, text in texts.items()}
    return {
        "bytes": sum(len(text.encode()) for text in texts.values()),
        "paragraphs": sum(len(topic.paragraphs) for topic in topics.values()),
        "files": len(texts),
        "sources": sorted(cited_sources(topics)),
    }


async def _ingest(conversations: Sequence[Conversation], state: Path, workdir: Path) -> None:
    async with open_runtime(state, config=CONFIG) as rt:
        for conversation in conversations:
            source = conversation.write_jsonl(workdir / f"{conversation.name}.jsonl")
            await import_jsonl(rt, source, session=conversation.session_id)
            await rt.boundary(conversation.session_id)
        await rt.drain()


async def _recall(conversations: Sequence[Conversation], state: Path,
                  budgets: Sequence[int]) -> dict[str, dict[str, float]]:
    evidence: dict[int, list[float]] = {b: [] for b in budgets}
    answer: dict[int, list[float]] = {b: [] for b in budgets}
    async with open_runtime(state, config=CONFIG) as rt:
        for conversation in conversations:
            for question in conversation.questions:
                for budget in budgets:
                    block = await rt.context(question.text, budget_tokens=budget,
                                             session=conversation.session_id)
                    quoted = [node for session, node in block.quoted
                              if session == conversation.session_id]
                    evidence[budget].append(evidence_recall(question, quoted))
                    answer[budget].append(answer_recall(question, block.text))
    return {"evidence": {str(b): _mean(evidence[b]) for b in budgets},
            "answer": {str(b): _mean(answer[b]) for b in budgets}}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


async def _one_batch_then_local_pass(state: Path) -> dict[str, float]:
    """One more short session written at its boundary (timed), then a local pass (timed)."""
    async with open_runtime(state, config=CONFIG) as rt:
        sid = await rt.sessions.create(title="one batch")
        previous = None
        for n in range(8):
            message = await rt.sessions.append(sid, {
                "role": ("user", "assistant")[n % 2], "predecessor": previous,
                "content": f"My neighbour number {n} keeps {n + 2} chickens in the garden."})
            previous = message["id"]
        began = time.perf_counter()
        await rt.boundary(sid)
        await rt.drain()
        write = time.perf_counter() - began
    began = time.perf_counter()
    consolidate_workspace(str(state / "memory"), consolidate_offline, scope="local",
                          now=time.time())
    return {"write_cycle_s": write, "local_pass_s": time.perf_counter() - began}


async def _model_pass(memory_dir: Path, base_url: str) -> float:
    settings = ModelSettings(base_url=base_url, model="scripted-1", total_timeout=60.0)
    async with Endpoint(settings, env={}) as endpoint:
        began = time.perf_counter()
        await consolidate_with_model(str(memory_dir), ModelConsolidator(endpoint),
                                     scope="global", now=time.time())
        return time.perf_counter() - began


def _model_figures(conversations: Sequence[Conversation], state: Path, budgets: Sequence[int],
                   before: dict[str, Any]) -> dict[str, Any]:
    """The same pass proposed by the loopback model (200 ms an answer): it merges the
    paragraphs whose statement is equal but for case, and nothing else."""
    with model_server_process(latency=0.2, default="consolidate") as base_url:
        seconds = anyio.run(_model_pass, state / "memory", base_url)
    after = _topics_facts(state / "memory")
    return {"pass_seconds": seconds, "after": {k: v for k, v in after.items() if k != "sources"},
            "sources_kept": set(before["sources"]) <= set(after["sources"]),
            "recall_after": anyio.run(_recall, conversations, state, budgets)}


def run(data: Path, quick: bool) -> dict[str, Any]:
    conversations = load_conversations(data, [QUICK_CONVERSATION] if quick else None)
    if quick:
        conversations = [c.sliced(QUICK_SESSIONS, QUICK_QUESTIONS) for c in conversations]
    budgets = list(BUDGETS)
    with tempfile.TemporaryDirectory(prefix="scriptorium-consolidate-") as tmp:
        workdir = Path(tmp)
        state = workdir / "state"
        anyio.run(_ingest, conversations, state, workdir)
        shutil.copytree(state, workdir / "model-state")
        before = _topics_facts(state / "memory")
        recall_before = anyio.run(_recall, conversations, state, budgets)
        began = time.perf_counter()
        prepared = consolidate_workspace(str(state / "memory"), consolidate_offline,
                                         scope="global", now=time.time())
        pass_seconds = time.perf_counter() - began
        after = _topics_facts(state / "memory")
        recall_after = anyio.run(_recall, conversations, state, budgets)
        local = anyio.run(_one_batch_then_local_pass, state)
        model = _model_figures(conversations, workdir / "model-state", budgets, before)
    kinds: dict[str, int] = {}
    for action in prepared.record["actions"]:
        kinds[action["kind"]] = kinds.get(action["kind"], 0) + 1
    kept = set(before["sources"]) <= set(after["sources"])
    return {
        "data": str(data), "quick": quick, "conversations": [c.name for c in conversations],
        "questions": sum(len(c.questions) for c in conversations),
        "before": {k: v for k, v in before.items() if k != "sources"},
        "after": {k: v for k, v in after.items() if k != "sources"},
        "sources_before": len(before["sources"]), "sources_after": len(after["sources"]),
        "sources_kept": kept,
        "actions": kinds,
        "pass_seconds": pass_seconds,
        "pass_seconds_per_1000_paragraphs": pass_seconds * 1000 / max(before["paragraphs"], 1),
        "recall_before": recall_before, "recall_after": recall_after,
        **local,
        "model": model,
    }


def rows(result: dict[str, Any]) -> list[Row]:
    """The figures as ``bench/run.py`` reads them, each with its target and verdict."""
    before, after = result["before"], result["after"]
    smaller = 1 - after["bytes"] / max(before["bytes"], 1)
    ratio = result["local_pass_s"] / max(result["write_cycle_s"], 1e-9)
    out = [
        Row("topics smaller after a pass (bytes)", Summary.single(smaller * 100), "%",
            target=f">= {TARGET_SMALLER:.0%}", met=smaller >= TARGET_SMALLER,
            text=f"{before['bytes']:,} -> {after['bytes']:,} bytes, {before['paragraphs']:,} -> "
                 f"{after['paragraphs']:,} paragraphs"),
        Row("cited sources kept", Summary.single(result["sources_after"]), "sources",
            target="100%", met=bool(result["sources_kept"]),
            text=f"{result['sources_before']:,} -> {result['sources_after']:,}"),
        Row("global pass per 1,000 paragraphs",
            Summary.single(result["pass_seconds_per_1000_paragraphs"]), "s"),
        Row("local pass after one batch / that batch's write cycle", Summary.single(ratio), "x",
            target=f"<= {TARGET_LOCAL_RATIO:g}x", met=ratio <= TARGET_LOCAL_RATIO),
    ]
    model = result["model"]
    model_smaller = 1 - model["after"]["bytes"] / max(before["bytes"], 1)
    out += [
        Row("model consolidator (loopback): topics smaller", Summary.single(model_smaller * 100),
            "%", text=f"{before['bytes']:,} -> {model['after']['bytes']:,} bytes in "
                      f"{model['pass_seconds']:.2f} s (a scripted model: exact merges only)"),
        Row("model consolidator (loopback): cited sources kept",
            Summary.single(float(model["sources_kept"])), "", target="100%",
            met=bool(model["sources_kept"])),
    ]
    for kind in ("evidence", "answer"):
        for budget, value in result["recall_before"][kind].items():
            model_now = model["recall_after"][kind][budget]
            out.append(Row(f"model consolidator (loopback): {kind} recall@{budget}",
                           Summary.single(model_now), "", target=f">= {value:.3f}",
                           met=model_now >= value - 1e-12))
    for kind in ("evidence", "answer"):
        for budget, value in result["recall_before"][kind].items():
            now = result["recall_after"][kind][budget]
            floor = max(value, TARGET_ANSWER_500) if (kind, budget) == ("answer", "500") else value
            out.append(Row(f"{kind} recall@{budget} after (before {value:.3f})",
                           Summary.single(now), "", target=f">= {floor:.3f}",
                           met=now >= floor - 1e-12))
    return out


def markdown(result: dict[str, Any]) -> str:
    before, after = result["before"], result["after"]
    smaller = 1 - after["bytes"] / max(before["bytes"], 1)
    lines = [
        f"LoCoMo {', '.join(result['conversations'])} ({result['questions']} questions)"
        + (" — quick slice" if result["quick"] else ""),
        "",
        "| figure | before | after | target |",
        "|---|---:|---:|---|",
        (f"| topic bytes | {before['bytes']:,} | {after['bytes']:,} ({smaller:.1%} smaller) | "
         f">= {TARGET_SMALLER:.0%} smaller |"),
        f"| paragraphs | {before['paragraphs']:,} | {after['paragraphs']:,} | |",
        (f"| cited sources | {result['sources_before']:,} | {result['sources_after']:,} | "
         f"100% kept ({'yes' if result['sources_kept'] else 'NO'}) |"),
    ]
    for kind in ("evidence", "answer"):
        for budget, value in result["recall_before"][kind].items():
            target = "not lower" + (f", >= {TARGET_ANSWER_500}" if kind == "answer"
                                    and budget == "500" else "")
            lines.append(f"| {kind} recall@{budget} | {value:.3f} | "
                         f"{result['recall_after'][kind][budget]:.3f} | {target} |")
    ratio = result["local_pass_s"] / max(result["write_cycle_s"], 1e-9)
    lines += [
        (f"| global pass | | {result['pass_seconds']:.2f} s "
         f"({result['pass_seconds_per_1000_paragraphs']:.2f} s / 1,000 paragraphs; "
         f"{result['actions']}) | |"),
        (f"| local pass after one 8-turn batch | | {result['local_pass_s']:.2f} s = "
         f"{ratio:.1f}x its write cycle ({result['write_cycle_s']:.2f} s) | "
         f"<= {TARGET_LOCAL_RATIO:.0f}x |"),
    ]
    model = result["model"]
    lines.append(f"| model consolidator (loopback, 200 ms) | | "
                 f"{model['after']['bytes']:,} bytes, {model['after']['paragraphs']:,} paragraphs "
                 f"in {model['pass_seconds']:.2f} s; sources kept: "
                 f"{'yes' if model['sources_kept'] else 'NO'}; answer recall@500 "
                 f"{model['recall_after']['answer']['500']:.3f} | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.data, args.quick)
    if args.json:
        print(json.dumps({**result, "rows": [row.to_json() for row in rows(result)]}, indent=2))
    else:
        print(markdown(result))


if __name__ == "__main__":
    main()
