"""The recall benchmark's parts: LoCoMo as sessions, the two figures, the BM25 baseline, a smoke run.

The figures are only worth something if they are the dataset README's: the
baseline computed here must give the README's table, the figures must
count what the README says (a malformed evidence id is a miss, an answer
without words counts 0, the block stops at the first turn that does not
fit), and the conversations must reach the store through the import path
with their ids, times and speakers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _locomo import (
    BUDGETS,
    Conversation,
    Question,
    answer_recall,
    answer_words,
    evidence_recall,
    load_conversations,
    pack,
    session_time,
)

from memory.runtime import import_jsonl, open_runtime
from store import SessionCore

ROOT = Path(__file__).resolve().parent.parent.parent
DATA = ROOT.parent / "shared" / "datasets" / "locomo-dev"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"{DATA} is not there")


def bench_extra() -> None:
    pytest.importorskip("rank_bm25", reason="the bench extra: pip install -e '.[bench]'")
    pytest.importorskip("Stemmer", reason="the bench extra: pip install -e '.[bench]'")


def test_session_dates_are_utc_seconds() -> None:
    assert session_time("1:56 pm on 8 May, 2023") == 1683554160.0
    assert session_time("12:48 am on 1 February, 2023") == 1675212480.0


def test_answer_words_drop_stop_words_and_pronouns() -> None:
    assert answer_words("The sunset at the lake, with her kids") == ["sunset", "lake", "kids"]
    assert answer_words(2022) == ["2022"]
    assert answer_words("her") == []


def test_the_figures_count_what_the_readme_says() -> None:
    question = Question("q", "7 May 2023", ("D1:3", "D8:6; D9:17"), 2)
    assert evidence_recall(question, ["D1-3", "D2-1"]) == 0.5  # a malformed id is a miss
    assert evidence_recall(question, []) == 0.0
    assert answer_recall(question, "[8 May] Caroline: on 7 may, 2023!") == 1.0
    assert answer_recall(question, "May 2023") == pytest.approx(2 / 3)
    nothing = Question("q", "her", ("D1:1",), 1)
    assert answer_recall(nothing, "her") == 0.0  # no words to find: 0, as the README's table


def test_the_block_stops_at_the_first_turn_that_does_not_fit() -> None:
    costs = [10.0, 30.0, 5.0, 1.0]
    assert pack([0, 1, 2, 3], costs, 39.0) == [0]  # turn 2 would fit, but packing stopped
    assert pack([0, 1, 2, 3], costs, 46.0) == [0, 1, 2, 3]
    assert pack([1], costs, 29.9) == []


@needs_data
def test_the_baseline_reproduces_the_readmes_table() -> None:
    bench_extra()
    sys.path.insert(0, str(ROOT / "bench"))
    from recall import baseline_figures  # bench/ is a directory of scripts

    figures = baseline_figures(load_conversations(DATA), BUDGETS)
    if figures["counter"] != "characters / 4":
        pytest.skip("tiktoken is installed: the README's table counts characters / 4")
    readme = {250: (0.513, 0.510), 500: (0.601, 0.596), 1000: (0.682, 0.688)}
    for budget, (evidence, answer) in readme.items():
        assert round(figures["evidence"][str(budget)], 3) == evidence, budget
        assert round(figures["answer"][str(budget)], 3) == answer, budget


@needs_data
def test_the_dataset_has_the_readmes_question_count() -> None:
    conversations = load_conversations(DATA)
    assert sum(len(c.questions) for c in conversations) == 760
    assert all(q.category != 5 and q.evidence for c in conversations for q in c.questions)


@needs_data
async def test_a_conversation_reaches_the_store_through_the_import_path(tmp_path: Path) -> None:
    (conversation,) = load_conversations(DATA, ["conv-30"])
    small: Conversation = conversation.sliced(2)
    source = small.write_jsonl(tmp_path / "conv.jsonl")
    state = tmp_path / "state"
    async with open_runtime(state) as rt:
        report = await import_jsonl(rt, source, session=small.session_id)
        assert report.imported == len(small.turns)
        branch = await rt.sessions.get_branch(small.session_id)
    assert [m["id"] for m in branch] == [t.node_id for t in small.turns]
    assert branch[0]["id"] == "D1-1"
    roles = {conversation.speaker_a: "user", conversation.speaker_b: "assistant"}
    assert [(m["role"], m["speaker_display"]) for m in branch] == \
        [(roles[t.speaker], t.speaker) for t in small.turns]
    assert {m["role"] for m in branch} == {"user", "assistant"}
    assert branch[0]["timestamp"] == session_time("4:04 pm on 20 January, 2023")
    assert branch[1]["timestamp"] > branch[0]["timestamp"]  # the turn order
    times = [n.created_at for n in SessionCore.open(state, small.session_id).nodes()]
    assert times == sorted(times) and times == [t.created_at for t in small.turns]


@needs_data
def test_the_quick_run_gives_rows_bench_run_can_read() -> None:
    bench_extra()
    done = subprocess.run([sys.executable, "bench/recall.py", "--quick", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["quick"] and result["questions"] > 0
    assert result["memory"]["ingest"]["conv-30"]["boundary"] == "written"
    sys.path.insert(0, str(ROOT / "bench"))
    from run import _harness_rows

    rows = _harness_rows(result)
    figures = {r.figure.split(" (")[0] for r in rows}
    assert {f"evidence recall@{b}" for b in BUDGETS} <= figures
    scale = result["scale"]
    assert scale["units"] >= 1_000 and scale["records"] < scale["units"]  # topics and turns
    assert {"recall query p50", "reindex from the files"} <= figures
    if result["memory"]["measured"]:
        assert result["memory"]["over_budget"] == 0
