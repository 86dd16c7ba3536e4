"""Small logs in each agent's format, written here, and what their raw lines say.

The builders write every structure the importers must keep: branches (a
rewind), a compaction, sub-agents (inline sidechains and ``subagents/``
files; a codex spawned thread), one API response over several lines, tool
calls and results, meta lines, unknown record types, a pi tree with a
compaction, a branch summary and a fork. The ``raw_*`` functions count, from
the raw lines alone and without the importers' code, what the store must
then hold: turns, summaries, sub-agent turns and their callers, tips, times.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "FACTS",
    "SHARED",
    "Raw",
    "append_line",
    "claude_code_session",
    "codex_rollouts",
    "iso",
    "pi_sessions",
    "raw_claude_code",
    "raw_codex",
    "raw_pi",
    "seconds",
    "write_jsonl",
]

# Where CI lays out the shared fixtures: the repo clone sits beside shared/.
_REPO = Path(__file__).resolve().parents[3]
SHARED = next((p for p in (Path("/work/shared/fixtures/clients"),
                           _REPO.parent / "shared" / "fixtures" / "clients") if p.is_dir()), None)

# A fact each built log states, for memory search after import and write.
FACTS = {
    "claude-code": ("Lisbon offsite", "The Lisbon offsite starts on the fourteenth of March."),
    "codex": ("quarterly invoices", "The quarterly invoices live in the billing bucket."),
    "pi": ("greenhouse sensor", "The greenhouse sensor reports humidity every ten minutes."),
}

T0 = "2026-03-01T09:00:00.000Z"


def iso(minute: int, second: int = 0) -> str:
    return f"2026-03-01T09:{minute:02d}:{second:02d}.000Z"


def seconds(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def write_jsonl(path: Path, lines: Iterable[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def append_line(path: Path, line: dict[str, Any] | str) -> None:
    text = line if isinstance(line, str) else json.dumps(line) + "\n"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


# -- Claude Code -------------------------------------------------------------------------

def _cc(kind: str, uuid: str, parent: str | None, minute: int, content: Any, *,
        msg: str | None = None, sid: str = "cc-1", **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if msg is not None:
        message.update({"id": msg, "type": "message", "model": "claude-test"})
    line = {"type": kind, "uuid": uuid, "parentUuid": parent, "isSidechain": False,
            "userType": "external", "sessionId": sid, "version": "2.1.0",
            "timestamp": iso(minute), "message": message}
    line.update(extra)
    return line


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def claude_code_session(root: Path) -> Path:
    """A project folder with one session file and one sub-agent file; returns the folder."""
    fact = FACTS["claude-code"][1]
    main = [
        _cc("user", "u1", None, 0, _text(f"Plan the trip. {fact}")),
        _cc("assistant", "a1", "u1", 1, _text("I will ask an agent for flights."), msg="m1"),
        _cc("assistant", "a1b", "a1", 1, [{"type": "tool_use", "id": "tu1", "name": "Agent",
                                           "input": {"prompt": "Find flights"}}], msg="m1"),
        _cc("user", "r1", "a1b", 3, [{"type": "tool_result", "tool_use_id": "tu1",
                                      "content": "Three flights."}],
            toolUseResult={"agentId": "ag1", "status": "completed"}),
        _cc("assistant", "a2", "r1", 4, _text("The agent found three flights."), msg="m2"),
        _cc("user", "u2", "a2", 5, _text("Try the train instead.")),
        _cc("assistant", "a3", "u2", 6, _text("Trains take nine hours."), msg="m3"),
        _cc("user", "u3", "a2", 7, _text("Book the TAP flight.")),  # a rewind: a2's 2nd child
        _cc("assistant", "a4", "u3", 8, _text("Booked TAP flight 123."), msg="m4"),
        {"type": "system", "subtype": "compact_boundary", "uuid": "cb", "parentUuid": None,
         "logicalParentUuid": "a4", "sessionId": "cc-1", "timestamp": iso(9),
         "content": "Conversation compacted", "compactMetadata": {"trigger": "auto"}},
        _cc("user", "cs", "cb", 9, _text("Summary: the user booked a TAP flight."),
            isCompactSummary=True),
        _cc("user", "u4", "cs", 10, _text("What about hotels?")),
        _cc("assistant", "a5", "u4", 11,
            [{"type": "text", "text": "Asking a second agent."},
             {"type": "tool_use", "id": "tu2", "name": "Task", "input": {"prompt": "Hotels"}}],
            msg="m5"),
        _cc("user", "meta1", "a5", 11, "Caveat: local command output below.", isMeta=True),
        {"type": "file-history-snapshot", "messageId": "x", "snapshot": {}},
        _cc("user", "sc1", None, 12, "Find hotels near the venue.", isSidechain=True,
            agentId="ag2"),
        _cc("assistant", "sc2", "sc1", 13, _text("Hotel Avenida has rooms."), msg="m6",
            isSidechain=True, agentId="ag2"),
        _cc("user", "r2", "meta1", 14, [{"type": "tool_result", "tool_use_id": "tu2",
                                         "content": "Hotel Avenida."}], agentId="ag2"),
        _cc("assistant", "a6", "r2", 15, _text("Hotel Avenida it is."), msg="m7"),
    ]
    write_jsonl(root / "cc-1.jsonl", main)
    sub = root / "cc-1" / "subagents"
    write_jsonl(sub / "agent-ag1.jsonl", [
        _cc("user", "f1", None, 2, "Find flights to Lisbon.", isSidechain=True, agentId="ag1"),
        _cc("assistant", "f2", "f1", 2, _text("Found TAP, Ryanair and easyJet."), msg="m8",
            isSidechain=True, agentId="ag1"),
    ])
    (sub / "agent-ag1.meta.json").write_text(json.dumps(
        {"agentType": "general-purpose", "description": "Flights", "toolUseId": "tu1"}))
    return root


@dataclass
class Raw:
    """What a session's raw lines say the store must hold."""

    turns: dict[str, float | None] = field(default_factory=dict)  # node id: its time
    tips: set[str] = field(default_factory=set)
    summaries: int = 0
    spawn_callers: dict[str, str] = field(default_factory=dict)  # spawn root: caller
    sub_turns: set[str] = field(default_factory=set)
    unknown: int = 0


def _cc_kind(line: dict[str, Any]) -> str:
    if line.get("type") not in ("user", "assistant", "system"):
        return "unknown"
    if line["type"] == "system" or line.get("isMeta"):
        return "skip"
    content = line.get("message", {}).get("content")
    if isinstance(content, list) and content and all(
            b.get("type") == "tool_result" for b in content):
        return "skip"
    return "summary" if line.get("isCompactSummary") else "turn"


def raw_claude_code(files: list[Path]) -> Raw:
    """Counts of one session's files (the main file first), from their raw lines."""
    lines: list[tuple[dict[str, Any], bool]] = []
    for number, path in enumerate(files):
        for text in path.read_text(encoding="utf-8").splitlines():
            if text.strip():
                lines.append((json.loads(text), number > 0))
    raw = Raw()
    by_uuid = {line["uuid"]: line for line, _ in lines if "uuid" in line}
    group: dict[str, str] = {}  # uuid: the uuid of the first line of its API response
    first_of_msg: dict[str, str] = {}
    for line, _ in lines:
        if _cc_kind(line) == "unknown":
            raw.unknown += 1
            continue
        msg = line.get("message", {}).get("id") if line["type"] == "assistant" else None
        group[line["uuid"]] = first_of_msg.setdefault(msg, line["uuid"]) if msg else line["uuid"]
    use_turn = {b["id"]: group[line["uuid"]] for line, _ in lines if "uuid" in line
                for b in (line.get("message", {}).get("content") or [])
                if isinstance(b, dict) and b.get("type") == "tool_use"}

    def parent_group(line: dict[str, Any]) -> str | None:
        """The response group a line follows, through left-out lines and boundaries."""
        own = group.get(line["uuid"])
        up: str | None = line.get("parentUuid") or line.get("logicalParentUuid")
        while up is not None and up in by_uuid:
            above = by_uuid[up]
            if _cc_kind(above) == "turn" and group[up] != own:
                return group[up]
            up = above.get("parentUuid") or above.get("logicalParentUuid")
        return None

    has_child: set[str] = set()
    agent_caller = {line.get("toolUseResult", {}).get("agentId") or line.get("agentId"):
                    b["tool_use_id"] for line, side in lines if not line.get("isSidechain")
                    and _cc_kind(line) == "skip" and "message" in line
                    for b in line["message"]["content"] if isinstance(b, dict)
                    and b.get("type") == "tool_result"}
    for line, _ in lines:
        kind = _cc_kind(line)
        if kind == "summary":
            raw.summaries += 1
        if kind != "turn":
            continue
        node = group[line["uuid"]]
        above = parent_group(line)
        if above is not None:
            has_child.add(above)
        if node != line["uuid"]:
            continue
        raw.turns[node] = seconds(line["timestamp"])
        if line.get("isSidechain"):
            raw.sub_turns.add(node)
            if above is None:
                agent = line.get("agentId")
                meta: dict[str, Any] = next((json.loads(p.with_suffix(".meta.json").read_text())
                             for p in files[1:] if p.stem == f"agent-{agent}"
                             and p.with_suffix(".meta.json").exists()), {})
                use = meta.get("toolUseId") or agent_caller.get(agent)
                spawns = [u for u in use_turn if use_turn[u] in raw.turns
                          and not by_uuid[use_turn[u]].get("isSidechain")]
                if use is None and len(spawns) == 1:
                    use = spawns[0]  # the only call that can have started it
                raw.spawn_callers[node] = use_turn[use]
    raw.tips = {n for n in raw.turns if n not in has_child}
    return raw


# -- codex -------------------------------------------------------------------------------

def _cx(second: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": f"2026-02-02T10:00:{second:02d}.000Z", "type": kind,
            "payload": payload}


def codex_rollouts(root: Path) -> list[Path]:
    """A parent thread that spawns a child thread, and the child's rollout."""
    parent, child = "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002"
    fact = FACTS["codex"][1]
    first = write_jsonl(root / "2026/02/02" / f"rollout-2026-02-02T10-00-00-{parent}.jsonl", [
        _cx(0, "session_meta", {"id": parent, "cwd": "/w", "originator": "codex_cli_rs"}),
        _cx(1, "turn_context", {"cwd": "/w", "model": "m"}),
        _cx(2, "event_msg", {"type": "user_message", "message": f"Where are the invoices? {fact}"}),
        _cx(2, "response_item", {"type": "message", "role": "user",
                                 "content": [{"type": "input_text", "text": "Where?"}]}),
        _cx(3, "response_item", {"type": "reasoning", "summary": []}),
        _cx(4, "response_item", {"type": "function_call", "name": "spawn_agent",
                                 "arguments": "{}", "call_id": "c1"}),
        _cx(5, "event_msg", {"type": "collab_tool_call", "call_id": "c1",
                             "sender_thread_id": parent, "new_thread_id": child}),
        _cx(6, "response_item", {"type": "function_call_output", "call_id": "c1",
                                 "output": "spawned"}),
        _cx(7, "event_msg", {"type": "agent_message", "message": "They are in billing."}),
        _cx(8, "compacted", {"message": "The user asked where the invoices are."}),
        _cx(9, "event_msg", {"type": "user_message", "message": "Thanks."}),
        _cx(10, "mystery_record", {"x": 1}),
    ])
    second = write_jsonl(root / "2026/02/02" / f"rollout-2026-02-02T10-00-05-{child}.jsonl", [
        _cx(5, "session_meta", {"id": child, "cwd": "/w"}),
        _cx(6, "event_msg", {"type": "user_message", "message": "Find the invoices."}),
        _cx(7, "event_msg", {"type": "agent_message", "message": "Found them in billing."}),
    ])
    return [first, second]


def raw_codex(files: list[Path]) -> dict[str, Raw]:
    """Per top thread: its turns and its spawned threads' turns, from the raw records."""
    threads: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    spawned: dict[str, tuple[str, str]] = {}  # child thread: (parent, caller node)
    for path in files:
        records = [(n, json.loads(t)) for n, t in enumerate(
            path.read_text(encoding="utf-8").splitlines(), start=1) if t.strip()]
        thread = next(r["payload"]["id"] for _, r in records if r["type"] == "session_meta")
        threads[thread] = records
    out: dict[str, Raw] = {}
    for thread, records in threads.items():
        last = None
        for n, r in records:
            p = r.get("payload", {})
            if r["type"] == "event_msg" and p.get("type") in ("user_message", "agent_message"):
                last = f"{thread}.{n}"
            if p.get("type") == "collab_tool_call" and last is not None:
                spawned[p["new_thread_id"]] = (thread, last)
    for thread, records in threads.items():
        top = thread
        while top in spawned and spawned[top][0] in threads:
            top = spawned[top][0]
        raw = out.setdefault(f"codex-{top}", Raw())
        turns = [f"{thread}.{n}" for n, r in records if r["type"] == "event_msg"
                 and r["payload"].get("type") in ("user_message", "agent_message")]
        for n, r in records:
            if f"{thread}.{n}" in turns:
                raw.turns[f"{thread}.{n}"] = seconds(r["timestamp"])
            raw.summaries += r["type"] == "compacted"
            raw.unknown += r["type"] not in ("session_meta", "turn_context", "event_msg",
                                            "response_item", "compacted")
        if thread != top:
            raw.sub_turns.update(turns)
            raw.spawn_callers[turns[0]] = spawned[thread][1]
        else:
            raw.tips.add(turns[-1])
        if thread != top and turns:
            raw.tips.add(turns[-1])
    return out


# -- pi ----------------------------------------------------------------------------------

def _pi(kind: str, id_: str, parent: str | None, minute: int, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "id": id_, "parentId": parent, "timestamp": iso(minute), **fields}


def _pm(id_: str, parent: str | None, minute: int, role: str, text: str) -> dict[str, Any]:
    content: Any = text if role == "user" else [{"type": "text", "text": text}]
    return _pi("message", id_, parent, minute, message={"role": role, "content": content})


def pi_sessions(root: Path) -> list[Path]:
    """A tree with a branch, a branch summary and a compaction; and a session forked from it."""
    fact = FACTS["pi"][1]
    first = root / "--w--" / "2026-03-01T09-00-00-000Z_11111111.jsonl"
    write_jsonl(first, [
        {"type": "session", "version": 3, "id": "11111111-aaaa-4aaa-8aaa-000000000001",
         "timestamp": T0, "cwd": "/w"},
        _pm("e1", None, 0, "user", f"Tell me about the greenhouse. {fact}"),
        _pm("e2", "e1", 1, "assistant", "It reports humidity."),
        _pi("model_change", "e3", "e2", 1, provider="x", modelId="y"),
        _pm("e4", "e3", 2, "user", "And temperature?"),
        _pm("e5", "e4", 3, "assistant", "Every hour."),
        _pi("message", "e6", "e5", 3, message={"role": "toolResult", "content": "ok"}),
        _pm("e7", "e2", 4, "user", "Go back: what about light?"),  # a branch from e2
        _pi("branch_summary", "e8", "e7", 4, fromId="e6", summary="Asked about temperature."),
        _pm("e9", "e8", 5, "assistant", "Light is measured at noon."),
        _pi("compaction", "e10", "e9", 6, summary="Greenhouse talk so far.",
            firstKeptEntryId="e7", tokensBefore=1000),
        _pm("e11", "e10", 7, "user", "Thanks."),
        _pi("weird_entry", "e12", "e11", 7),
    ])
    forked = write_jsonl(root / "--w--" / "2026-03-01T10-00-00-000Z_22222222.jsonl", [
        {"type": "session", "version": 3, "id": "22222222-aaaa-4aaa-8aaa-000000000002",
         "timestamp": T0, "cwd": "/w", "parentSession": str(first)},
        _pm("f1", None, 20, "user", "Forked: the greenhouse again."),
        _pm("f2", "f1", 21, "assistant", "Still humid."),
    ])
    return [first, forked]


def raw_pi(path: Path) -> Raw:
    """Counts of one pi file (format 3), from its raw entries."""
    entries = [json.loads(t) for t in path.read_text(encoding="utf-8").splitlines() if t.strip()]
    by_id = {e["id"]: e for e in entries if e["type"] != "session"}
    raw = Raw()

    def is_turn(e: dict[str, Any]) -> bool:
        return e["type"] == "message" and e["message"]["role"] in ("user", "assistant")

    has_child: set[str] = set()
    for e in by_id.values():
        raw.summaries += e["type"] in ("compaction", "branch_summary")
        raw.unknown += e["type"] not in ("message", "compaction", "branch_summary",
                                         "thinking_level_change", "model_change", "custom",
                                         "custom_message", "label", "session_info")
        if not is_turn(e):
            continue
        raw.turns[e["id"]] = seconds(e["timestamp"])
        up = e["parentId"]
        while up is not None and not is_turn(by_id[up]):
            up = by_id[up]["parentId"]
        if up is not None:
            has_child.add(up)
    raw.tips = {t for t in raw.turns if t not in has_child}
    return raw
