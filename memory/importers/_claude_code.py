"""Claude Code's session logs (``~/.claude/projects/<project>/<sessionId>.jsonl``) as a plan.

One session file, plus its sub-agents' files
(``<sessionId>/subagents/agent-<agentId>.jsonl`` and ``.meta.json``), is one
session, ``claude-code-<sessionId>``. What each line becomes:

- a ``user`` or ``assistant`` line is a turn, its id the line's ``uuid``,
  its parent ``parentUuid``; several lines of one API response (the same
  ``message.id``, one content block each) are one turn, the first line's;
- a user line that only carries ``tool_result`` blocks, an ``isMeta`` line,
  and every ``system`` line are left out (tool calls are named on their
  turn, in ``tool_calls``);
- a ``compact_boundary`` stands for its ``logicalParentUuid``, and the
  ``isCompactSummary`` line after it is a summary node covering the branch
  the boundary closed;
- a sidechain (``isSidechain``) line belongs to a sub-agent: its first turn
  is a spawn root called by the turn whose ``Task``/``Agent`` tool call
  started it (by ``agentId`` through the tool result, by the sub-agent file's
  ``toolUseId``, else the call whose run spans its time);
- a ``summary`` line (the title Claude Code gave the session) is the
  session's title; any other ``type`` is unknown: skipped and counted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from memory.importers._lines import LogLines
from memory.importers._plan import (
    Entry,
    SessionPlan,
    block_text,
    build_plan,
    iso_seconds,
    node_id,
    path_keys,
)

__all__ = ["AGENT", "SubagentLog", "plan_claude_code"]

AGENT = "claude-code"
_SPAWN_TOOLS = frozenset({"Task", "Agent"})
_TEAMMATE = re.compile(r'<teammate-message\s+teammate_id="([^"]*)"')


@dataclass(frozen=True)
class SubagentLog:
    """A sub-agent's own file: its lines, its ``agentId``, and its ``.meta.json`` (or empty)."""

    agent_id: str
    lines: LogLines
    meta: Mapping[str, Any] = field(default_factory=dict)


def _blocks(record: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def _is_tool_result(record: Mapping[str, Any]) -> bool:
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return bool(isinstance(content, list) and content
                and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content))


def _result_agent(record: Mapping[str, Any]) -> str | None:
    result = record.get("toolUseResult")
    agent = result.get("agentId") if isinstance(result, dict) else None
    agent = agent or record.get("agentId")
    return agent if isinstance(agent, str) and agent else None


@dataclass
class _Scan:
    """What the lines of one session say besides their turns."""

    spawn_calls: dict[str, tuple[str, float | None]] = field(default_factory=dict)  # id: turn, t
    result_times: dict[str, float | None] = field(default_factory=dict)  # tool_use id: time
    agent_calls: dict[str, str] = field(default_factory=dict)  # agentId: tool_use id
    line_agents: dict[str, str] = field(default_factory=dict)  # uuid: agentId it carries
    unknown: Counter[str] = field(default_factory=Counter)
    left_out: int = 0
    title: str = ""


def _speaker(record: Mapping[str, Any], role: str, text: str,
             agent: str | None) -> dict[str, str]:
    if agent is not None:
        return {"speaker_id": f"{AGENT}/agent/{agent}", "speaker_display": f"sub-agent {agent}"}
    if role == "assistant":
        message = record.get("message")
        model = message.get("model") if isinstance(message, dict) else None
        return {"speaker_id": f"{AGENT}/assistant",
                "speaker_display": model if isinstance(model, str) and model else "Claude Code"}
    teammate = _TEAMMATE.search(text)
    if teammate is not None:
        return {"speaker_id": f"{AGENT}/teammate/{teammate.group(1)}",
                "speaker_display": f"teammate {teammate.group(1)}"}
    return {"speaker_id": f"{AGENT}/user", "speaker_display": "user"}


def _entries(log: LogLines, scan: _Scan, *, agent: str | None,
             entries: list[Entry]) -> None:
    """Append the entries of one file; a sub-agent file's lines all belong to ``agent``."""
    merged: dict[str, int] = {}  # API message id: index of its turn in entries
    for number, record in log.records:
        kind = record.get("type")
        key = record.get("uuid")
        if kind == "summary":  # a title Claude Code gave the session, not a turn
            if isinstance(record.get("summary"), str) and record["summary"]:
                scan.title = record["summary"]
            scan.left_out += 1
            continue
        if kind not in ("user", "assistant", "system"):
            scan.unknown[str(kind)] += 1
            continue
        if not isinstance(key, str) or not key:
            scan.left_out += 1
            continue
        parent = record.get("parentUuid") if isinstance(record.get("parentUuid"), str) else None
        when = iso_seconds(record.get("timestamp"))
        sidechain = bool(record.get("isSidechain")) or agent is not None
        line_agent = agent or (record.get("agentId") if sidechain else None)
        if isinstance(line_agent, str) and line_agent:
            scan.line_agents[key] = line_agent
        base = Entry(key=key, parent=parent, kind="skip", line=number, file=log.file,
                     created_at=when, main=not sidechain)
        _note_tools(record, key, when, sidechain, scan)
        if kind == "system":
            logical = record.get("logicalParentUuid")
            if record.get("subtype") == "compact_boundary" and isinstance(logical, str):
                base = replace(base, parent=parent or logical)
            entries.append(base)
            scan.left_out += 1
            continue
        if _is_tool_result(record) or record.get("isMeta"):
            entries.append(base)
            scan.left_out += 1
            continue
        message = record.get("message")
        text = block_text(message.get("content") if isinstance(message, dict) else None)
        if record.get("isCompactSummary"):
            boundary = next((e for e in reversed(entries) if e.key == parent), None)
            covered = path_keys(entries, boundary.parent if boundary else parent)
            entries.append(replace(base, kind="summary", content=text, covers=tuple(covered),
                                   metadata={"imported_from": AGENT}))
            continue
        api_id = message.get("id") if isinstance(message, dict) else None
        tools = [u["name"] for u in _blocks(record, "tool_use") if isinstance(u.get("name"), str)]
        if kind == "assistant" and isinstance(api_id, str) and api_id in merged:
            at = merged[api_id]  # one API response written as several lines: one turn
            first = entries[at]
            calls = [*first.metadata.get("tool_calls", ()), *tools]
            entries[at] = replace(first, content="\n".join(t for t in (first.content, text) if t),
                                  metadata={**first.metadata,
                                            **({"tool_calls": calls} if calls else {})})
            entries.append(replace(base, parent=first.key))
            continue
        role = "assistant" if kind == "assistant" else "user"
        metadata: dict[str, Any] = {"imported_from": AGENT,
                                    **_speaker(record, role, text, line_agent)}
        if tools:
            metadata["tool_calls"] = tools
        if isinstance(line_agent, str):
            metadata["agent_id"] = line_agent
        if kind == "assistant" and isinstance(api_id, str):
            merged[api_id] = len(entries)
            metadata["message_id"] = api_id
        entries.append(replace(base, kind="turn", role=role, content=text, metadata=metadata))


def _note_tools(record: Mapping[str, Any], key: str, when: float | None, sidechain: bool,
                scan: _Scan) -> None:
    """Remember spawning tool calls, when their results came, and which agent each result names."""
    for use in _blocks(record, "tool_use"):
        if use.get("name") in _SPAWN_TOOLS and isinstance(use.get("id"), str):
            scan.spawn_calls[use["id"]] = (key, when)
    for result in _blocks(record, "tool_result"):
        use_id = result.get("tool_use_id")
        if isinstance(use_id, str):
            scan.result_times[use_id] = when
            found = _result_agent(record)
            if found is not None and not sidechain:
                scan.agent_calls.setdefault(found, use_id)


def _caller(entry: Entry, scan: _Scan, agent: str | None, meta: Mapping[str, Any]) -> str | None:
    """The key of the turn that started the sub-agent whose first turn is ``entry``."""
    use_id = meta.get("toolUseId")
    if isinstance(use_id, str) and use_id in scan.spawn_calls:
        return scan.spawn_calls[use_id][0]
    if agent is not None and agent in scan.agent_calls \
            and scan.agent_calls[agent] in scan.spawn_calls:
        return scan.spawn_calls[scan.agent_calls[agent]][0]
    when = entry.created_at
    if when is None:
        return None
    spanning = [(start, key) for use, (key, start) in scan.spawn_calls.items()
                if start is not None and start <= when
                and (scan.result_times.get(use) is None or when <= (scan.result_times[use] or 0))]
    return max(spanning)[1] if spanning else None


def _sub_agents(entries: list[Entry], scan: _Scan,
                metas: Mapping[str, Mapping[str, Any]]) -> list[Entry]:
    """Each sub-agent's first turns named spawn roots, called by the turn that started them."""
    keys = {e.key for e in entries}
    group: dict[str, str] = {}  # sidechain lines joined by their parent links

    def top(key: str) -> str:
        while group.get(key, key) != key:
            key = group[key]
        return key

    for entry in entries:
        if not entry.main and entry.parent is not None and entry.parent in keys:
            group[top(entry.key)] = top(entry.parent)
    found: dict[str, str] = {}
    for key, agent_id in scan.line_agents.items():
        found.setdefault(top(key), agent_id)
    agents = {e.key: found.get(top(e.key)) for e in entries if not e.main}
    out: list[Entry] = []
    for entry in entries:
        if entry.main or entry.kind != "turn" or (entry.parent in keys):
            out.append(entry)
            continue
        agent = agents.get(entry.key)
        caller = _caller(entry, scan, agent, metas.get(agent or "", {}))
        metadata = dict(entry.metadata)
        if agent is not None:
            for name, field_name in (("agentType", "agent_type"), ("description", "description")):
                value = metas.get(agent, {}).get(name)
                if isinstance(value, str):
                    metadata[field_name] = value
        out.append(replace(entry, caller=caller, metadata=metadata))
    return out


def plan_claude_code(main: LogLines, subagents: Sequence[SubagentLog] = ()) -> SessionPlan:
    """The session of one Claude Code session file and its sub-agents' files."""
    scan = _Scan()
    entries: list[Entry] = []
    _entries(main, scan, agent=None, entries=entries)
    for sub in subagents:
        _entries(sub.lines, scan, agent=sub.agent_id, entries=entries)
    entries = _sub_agents(entries, scan, {s.agent_id: s.meta for s in subagents})
    raw_session = next((r["sessionId"] for _, r in main.records
                        if isinstance(r.get("sessionId"), str) and r["sessionId"]), None)
    if raw_session is None:
        raw_session = main.file.rsplit("/", 1)[-1].removesuffix(".jsonl")
    first_text = next((e.content for e in entries if e.kind == "turn" and e.main and e.content), "")
    files = (main.file, *(s.lines.file for s in subagents))
    waiting = tuple(log.file for log in (main, *(s.lines for s in subagents)) if log.waiting)
    return build_plan(AGENT, f"{AGENT}-{node_id(raw_session)}", _title(scan.title or first_text),
                      files,
                      entries, unknown=scan.unknown, left_out=scan.left_out, waiting=waiting)


def _title(text: str) -> str:
    line = " ".join(text.split())
    return line[:80] + ("…" if len(line) > 80 else "")
