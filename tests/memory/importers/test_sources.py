"""Importing real agents' logs: the DAG kept, checked against what the raw lines say.

Issue 22, section 1. The logs are built here (``_logs``) in each format; where
the shared fixtures are present (CI), every sample there is imported too.
Each import is checked against counts computed from the raw lines alone:
turns per session with their times, tips, summary nodes, sub-agent turns on
spawn branches with their callers; then a second import adds nothing,
appended lines and new files are picked up, a malformed line imports nothing
of its session, and a dry run writes nothing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from memory.importers import ImportPass, LogImporter
from memory.runtime import RuntimeConfig, open_runtime
from store import Node, SessionCore
from tests.memory.importers._logs import (
    SHARED,
    Raw,
    append_line,
    claude_code_session,
    codex_rollouts,
    iso,
    pi_sessions,
    raw_claude_code,
    raw_codex,
    raw_pi,
)

NOW = 2_000_000_000.0


def config() -> RuntimeConfig:
    return RuntimeConfig(clock=lambda: NOW)


async def run_import(state: Path, importer: LogImporter, *, dry_run: bool = False) -> ImportPass:
    async with open_runtime(state, config=config()) as rt:
        return await importer.run(rt, dry_run=dry_run)


def check(state: Path, session: str, raw: Raw) -> None:
    """The session holds exactly what the raw lines say, in the DAG they say."""
    core = SessionCore.open(state, session)
    try:
        nodes = {n.id: n for n in core.nodes()}
        tips = {row["head_msg_id"] for row in core.list_branches()}
        merged = core.meta().get("merged_heads", [])
    finally:
        core.close()
    turns = {i: n for i, n in nodes.items() if not n.is_summary}
    assert set(turns) == set(raw.turns), session
    for node_id, when in raw.turns.items():
        assert turns[node_id].created_at == when, (session, node_id)  # its own time
    assert sum(n.is_summary for n in nodes.values()) == raw.summaries, session
    # A sub-agent's tip is a merged head (written completely at a boundary), not a tip;
    # a tip merged on an earlier pass stays merged after its branch grew.
    spawn_tips = {t for t in raw.tips if _spawn_root_of(turns, t) is not None}
    assert len(merged) == len(set(merged)) and spawn_tips <= set(merged), session
    assert all(_spawn_root_of(turns, t) is not None for t in merged), session
    assert tips == raw.tips - spawn_tips, session
    roots = {i: n.caller for i, n in turns.items() if n.is_spawn_root}
    assert roots == raw.spawn_callers, session
    assert all(turns[root].predecessor is None for root in roots), session
    on_spawns = {i for i in turns if _spawn_root_of(turns, i) is not None}
    assert on_spawns == raw.sub_turns, session
    for summary in (n for n in nodes.values() if n.is_summary):
        covered = summary.metadata["covers_ids"]
        assert covered and set(covered) <= set(turns), session
        assert summary.id.startswith("summary_") and summary.name == "context/summary"


def _spawn_root_of(turns: dict[str, Node], node: str | None) -> str | None:
    seen = set()
    while node is not None and node in turns and node not in seen:
        seen.add(node)
        current = turns[node]
        if current.is_spawn_root:
            return node
        node = current.predecessor
    return None


async def test_claude_code_keeps_branches_compaction_and_both_sub_agent_layouts(
        tmp_path: Path) -> None:
    logs = claude_code_session(tmp_path / "projects" / "-w")
    state = tmp_path / "state"
    report = await run_import(state, LogImporter("claude-code", [tmp_path / "projects"]))
    assert not report.errors
    files = [logs / "cc-1.jsonl", logs / "cc-1" / "subagents" / "agent-ag1.jsonl"]
    raw = raw_claude_code(files)
    assert len(raw.tips) == 4 and raw.summaries == 1 and len(raw.spawn_callers) == 2
    check(state, "claude-code-cc-1", raw)
    assert report.unknown == {"file-history-snapshot": raw.unknown}
    core = SessionCore.open(state, "claude-code-cc-1")
    try:
        a1 = core.node("a1")  # two lines of one response: one turn, both blocks
        assert a1.output == "I will ask an agent for flights." and a1.metadata["tool_calls"] \
            == ["Agent"]
        assert core.head == "a6"
        assert [n.id for n in core.branch_nodes()] == ["u1", "a1", "a2", "u3", "a4", "u4", "a5",
                                                       "a6"]  # through the compaction
        summary = core.node("summary_cs")
        assert summary.metadata["covers_ids"] == ["u1", "a1", "a2", "u3", "a4"]
    finally:
        core.close()


async def test_codex_spawned_thread_is_a_spawn_branch_of_its_parent(tmp_path: Path) -> None:
    files = codex_rollouts(tmp_path / "sessions")
    state = tmp_path / "state"
    report = await run_import(state, LogImporter("codex", [tmp_path / "sessions"]))
    assert not report.errors
    expected = raw_codex(files)
    assert list(expected) == ["codex-aaaaaaaa-0000-4000-8000-000000000001"]
    for session, raw in expected.items():
        check(state, session, raw)
    assert report.unknown == {"mystery_record": 1}


async def test_pi_tree_summaries_and_fork_link(tmp_path: Path) -> None:
    first, forked = pi_sessions(tmp_path / "sessions")
    state = tmp_path / "state"
    report = await run_import(state, LogImporter("pi", [tmp_path / "sessions"]))
    assert not report.errors
    check(state, "pi-11111111-aaaa-4aaa-8aaa-000000000001", raw_pi(first))
    check(state, "pi-22222222-aaaa-4aaa-8aaa-000000000002", raw_pi(forked))
    core = SessionCore.open(state, "pi-22222222-aaaa-4aaa-8aaa-000000000002")
    try:
        link = core.node("f1").metadata
        assert link["forked_from"] == "pi-11111111-aaaa-4aaa-8aaa-000000000001"
        assert link["forked_from_file"] == str(first)
    finally:
        core.close()
    core = SessionCore.open(state, "pi-11111111-aaaa-4aaa-8aaa-000000000001")
    try:  # the branch summary covers the abandoned path, the compaction what it summarised
        covers = sorted(n.metadata["covers_ids"] for n in core.nodes() if n.is_summary)
        assert covers == [["e1", "e2"], ["e4", "e5"]]
        assert core.head == "e11"
    finally:
        core.close()


@pytest.mark.parametrize("agent", ["claude-code", "codex", "pi"])
async def test_a_second_import_adds_nothing_and_appended_lines_and_files_are_picked_up(
        tmp_path: Path, agent: str) -> None:
    root = tmp_path / "logs"
    if agent == "claude-code":
        first_file = claude_code_session(root) / "cc-1.jsonl"
    else:
        first_file = (codex_rollouts(root) if agent == "codex" else pi_sessions(root))[0]
    state = tmp_path / "state"
    importer = LogImporter(agent, [root])
    first = await run_import(state, importer)
    assert first.imported > 0
    before = sorted(p.name for p in (state / "sessions").rglob("history/*.json"))
    again = await run_import(state, LogImporter(agent, [root]))  # a fresh reader, same logs
    assert again.imported == 0 and not again.errors
    assert sorted(p.name for p in (state / "sessions").rglob("history/*.json")) == before
    line: dict[str, Any] = {
        "claude-code": {"type": "user", "uuid": "late", "parentUuid": "a6", "sessionId": "cc-1",
                        "timestamp": iso(30), "message": {"role": "user", "content": "Late."}},
        "codex": {"timestamp": "2026-02-02T10:00:30.000Z", "type": "event_msg",
                  "payload": {"type": "user_message", "message": "Late."}},
        "pi": {"type": "message", "id": "late", "parentId": "e12", "timestamp": iso(30),
               "message": {"role": "user", "content": "Late."}},
    }[agent]
    append_line(first_file, line)
    more = await run_import(state, importer)
    assert more.imported == 1
    shutil.copytree(root, tmp_path / "copy")  # a new file: the same logs under a new session id
    renamed = _renamed_copy(agent, tmp_path / "copy", root)
    assert renamed is not None
    newer = await run_import(state, importer)
    assert newer.imported > 0 and all(s.created for s in newer.sessions if s.imported)


def _renamed_copy(agent: str, copy: Path, root: Path) -> Path | None:
    """Put one copied log back under ``root`` as a new session of ``agent``."""
    source = min(p for p in copy.rglob("*.jsonl") if p.parent.name != "subagents")
    text = source.read_text(encoding="utf-8")
    ids = {"claude-code": ("cc-1", "cc-2"),
           "codex": ("aaaaaaaa-0000-4000-8000-000000000001", "cccccccc-0000-4000-8000-000000000003"),
           "pi": ("11111111-aaaa-4aaa-8aaa-000000000001", "33333333-aaaa-4aaa-8aaa-000000000003")}
    old, new = ids[agent]
    target = root / "new" / source.name.replace(old, new)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text.replace(old, new), encoding="utf-8")
    return target


async def test_a_malformed_line_imports_nothing_of_its_session_and_names_the_line(
        tmp_path: Path) -> None:
    logs = claude_code_session(tmp_path / "logs")
    good = pi_sessions(tmp_path / "pi")
    bad = logs / "cc-1.jsonl"
    lines = bad.read_text().splitlines(keepends=True)
    lines.insert(5, "{not json\n")
    bad.write_text("".join(lines))
    state = tmp_path / "state"
    report = await run_import(state, LogImporter("claude-code", [tmp_path / "logs"]))
    assert report.errors and report.errors[0].startswith(f"{bad}:6: not JSON")
    assert not (state / "sessions" / "claude-code-cc-1").exists()
    # a malformed sub-agent file also keeps its whole session out; other sessions come in
    lines.pop(5)
    bad.write_text("".join(lines))
    append_line(logs / "cc-1" / "subagents" / "agent-ag1.jsonl", "[1, 2]\n")
    report = await run_import(state, LogImporter("claude-code", [tmp_path / "logs"]))
    assert report.errors and ":3: not a JSON object" in report.errors[0]
    assert not (state / "sessions" / "claude-code-cc-1").exists()
    report = await run_import(state, LogImporter("pi", [good[0]]))
    assert report.imported == len(raw_pi(good[0]).turns) + raw_pi(good[0]).summaries


async def test_a_truncated_last_line_waits_until_it_is_complete(tmp_path: Path) -> None:
    files = codex_rollouts(tmp_path / "logs")
    state = tmp_path / "state"
    importer = LogImporter("codex", [tmp_path / "logs"])
    line = json.dumps({"timestamp": "2026-02-02T10:00:40.000Z", "type": "event_msg",
                       "payload": {"type": "agent_message", "message": "Half."}}) + "\n"
    append_line(files[0], line[:25])  # the agent is still writing it
    report = await run_import(state, importer)
    assert not report.errors and report.waiting == [str(files[0])]
    imported = report.imported
    append_line(files[0], line[25:])
    report = await run_import(state, importer)
    assert report.imported == 1 and not report.waiting
    assert imported == sum(len(r.turns) + r.summaries for r in raw_codex(files).values()) - 1


async def test_a_dry_run_says_what_it_would_import_and_writes_nothing(tmp_path: Path) -> None:
    files = pi_sessions(tmp_path / "logs")
    state = tmp_path / "state"
    report = await run_import(state, LogImporter("pi", [tmp_path / "logs"]), dry_run=True)
    expected = sum(len(raw.turns) + raw.summaries for raw in map(raw_pi, files))
    assert report.imported == expected and all(s.created for s in report.sessions)
    assert not list((state / "sessions").iterdir())


def _shared_groups() -> list[tuple[str, list[Path]]]:
    if SHARED is None:
        return []
    groups: list[tuple[str, list[Path]]] = []
    for main in sorted((SHARED / "claude-code").rglob("*.jsonl")):
        if main.parent.name != "subagents":
            subs = sorted((main.with_suffix("") / "subagents").glob("agent-*.jsonl"))
            groups.append(("claude-code", [main, *subs]))
    return groups


@pytest.mark.skipif(SHARED is None, reason="the shared fixtures are not beside the repository")
async def test_every_shared_sample_imports_as_its_raw_lines_say(tmp_path: Path) -> None:
    assert SHARED is not None
    logs = tmp_path / "shared"
    shutil.copytree(SHARED, logs)  # read-only originals: the importer gets copies
    state = tmp_path / "state"
    report = await run_import(state, LogImporter("claude-code", [logs / "claude-code"]))
    assert not report.errors
    for _, files in _shared_groups():
        copies = [logs / f.relative_to(SHARED) for f in files]
        raw = raw_claude_code(copies)
        session = json.loads(copies[0].read_text().splitlines()[0])["sessionId"]
        check(state, f"claude-code-{session}", raw)
    report = await run_import(state, LogImporter("codex", [logs / "codex"]))
    malformed = sorted((logs / "codex" / "malformed").glob("*.jsonl"))
    assert report.errors == [e for e in report.errors if e.startswith(str(malformed[0]) + ":3:")]
    assert len(report.errors) == 1
    assert not (state / "sessions" / "codex-66666666-6666-4666-8666-666666666666").exists()
    good = sorted((logs / "codex" / "sessions").rglob("*.jsonl"))
    for session, raw in raw_codex(good).items():
        check(state, session, raw)
    for agent in ("claude-code", "codex"):
        again = await run_import(state, LogImporter(agent, [logs / agent]))
        assert again.imported == 0
