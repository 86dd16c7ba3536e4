"""Turns not yet written are found when asked for (``include_owed``), labelled ``owed``.

Right after an import (or between two writes) the newest turns are in the
session store only; a search of memory cannot see them. With
``include_owed`` they come after memory's hits, as ``kind="owed"``; off by
default; once written they are memory's, not owed.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from memory.cli._cli import main
from memory.ledger import SourceMeta, SourceRecord, estimate_tokens
from memory.ledger._ledger import WritePolicy
from memory.recall import Context, parse_query
from memory.recall._owed import OWED, OWED_HEADING, rank_owed, with_owed
from memory.runtime._runtime import RuntimeConfig, open_runtime
from memory.runtime._session_state import BoundaryOutcome


def record(node: str, text: str, trust: str = "trusted") -> SourceRecord:
    meta = None if trust == "trusted" else SourceMeta("guest", "guest/1", "guest", trust)
    return SourceRecord("s", node, "user", text, 1_700_000_000.0, "Owner", meta=meta)


def test_owed_turns_are_ranked_by_their_words_and_labelled() -> None:
    records = [record("u1", "the red bicycle is a Gazelle"), record("u2", "tea at four"),
               record("u3", "a Gazelle, a gazelle"), record("u4", "gazelle", trust="pending")]
    hits = rank_owed(records, parse_query("gazelle", as_of=0.0), k=8)
    assert {hit.node_id for hit in hits} == {"u1", "u3"}  # u2 no match, u4 pending
    assert {hit.kind for hit in hits} == {OWED}
    assert hits[0].node_id == "u3"  # the word twice in fewer words
    assert [h.node_id for h in rank_owed(records, parse_query("gazelle", as_of=0.0), k=1)] == ["u3"]
    shown = rank_owed(records, parse_query("gazelle", as_of=0.0), k=1)
    rest = rank_owed(records, parse_query("gazelle", as_of=0.0), k=8, shown=shown)
    assert [h.node_id for h in rest] == ["u1"]


async def test_the_runtime_finds_owed_turns_only_when_asked_and_not_once_written(
    tmp_path: Path,
) -> None:
    config = RuntimeConfig(policy=WritePolicy(threshold=8000), writer_workers=1,
                           counter=estimate_tokens)
    async with open_runtime(tmp_path, config=config) as rt:
        sid = await rt.sessions.create(title="bikes", session_id="bikes")
        await rt.sessions.append(sid, {"id": "u1", "role": "user", "predecessor": "ROOT",
                                       "content": "My bicycle is a red Gazelle."})
        assert await rt.recall("gazelle") == []
        [owed] = await rt.recall("gazelle", include_owed=True)
        assert (owed.kind, owed.session, owed.node_id) == ("owed", "bikes", "u1")
        assert (await rt.context("gazelle")).text == ""
        block = await rt.context("gazelle", include_owed=True)
        assert block.text.splitlines() == [
            OWED_HEADING, f"- [{owed.time}] user (bikes/u1): My bicycle is a red Gazelle."]
        assert block.tokens <= 500 and [h.kind for h in block.hits] == ["owed"]
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        hits = await rt.recall("gazelle", include_owed=True)
        assert hits and "owed" not in {hit.kind for hit in hits}


def test_search_include_owed_right_after_an_import(tmp_path: Path) -> None:
    source = tmp_path / "history.jsonl"
    source.write_text(json.dumps({"role": "user", "content": "My bicycle is a red Gazelle."})
                      + "\n")
    state = str(tmp_path / "state")
    runner = CliRunner()
    assert runner.invoke(main, ["import", "jsonl", str(source), "--session", "bikes",
                                "--state", state]).exit_code == 0
    plain = runner.invoke(main, ["memory", "search", "gazelle", "--state", state])
    assert plain.stdout == "no match\n"
    owed = runner.invoke(main, ["memory", "search", "gazelle", "--include-owed", "--state", state])
    assert owed.exit_code == 0, owed.output
    [line] = owed.stdout.splitlines()
    assert "bikes/" in line and "(owed: not yet in memory)" in line and "Gazelle" in line


def test_owed_turns_fill_only_what_memorys_block_left_of_the_budget() -> None:
    records = [record("u1", "gazelle " + "long " * 40), record("u2", "a gazelle")]
    owed = rank_owed(records, parse_query("gazelle", as_of=0.0), k=8)
    memory = Context("- [undated] memory (topics/a.md ^b): the owner rides a gazelle", 14, (),
                     ())
    block = with_owed(memory, owed, 40, estimate_tokens)
    assert block.text.startswith(memory.text + "\n" + OWED_HEADING)
    assert [h.node_id for h in block.hits] == ["u2"]  # u1 does not fit; the shorter one does
    assert block.tokens == estimate_tokens(block.text) <= 40
    assert with_owed(memory, owed, 14, estimate_tokens) == memory  # no room: unchanged
