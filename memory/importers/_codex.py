"""Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``) as plans.

A rollout is one thread, ``codex-<thread id>`` (``session_meta.payload.id``,
else the id in the file name). Its records have no ids of their own, so a
turn's id is its place: ``<thread id>.<line number>`` (the line never moves:
rollouts are only appended to). What each record becomes:

- ``event_msg`` ``user_message`` / ``agent_message``: a turn (user,
  assistant), each following the thread's previous turn; the
  ``response_item`` messages that repeat them are left out, unless the
  rollout has no such events at all (older rollouts), then they are the turns;
- reasoning, tool calls and their outputs, ``turn_context``, other events:
  left out;
- ``compacted``: a summary node covering the thread's turns so far;
- a ``collab_tool_call`` naming a ``new_thread_id`` (``spawn_agent``): that
  thread's rollout, when it is imported with this one, is a spawn branch of
  this session called by the turn that started it (the turn before the call);
- any other record type is unknown: skipped and counted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from memory.importers._lines import LogLines
from memory.importers._plan import Entry, SessionPlan, block_text, build_plan, iso_seconds, node_id

__all__ = ["AGENT", "plan_codex", "thread_id"]

AGENT = "codex"
_KNOWN = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
_MESSAGE_TEXT = ("input_text", "output_text", "text")
_EVENT_ROLES = {"user_message": "user", "agent_message": "assistant"}
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def thread_id(log: LogLines) -> str:
    """The thread of a rollout: its ``session_meta`` id, else the id in its file name."""
    for _, record in log.records:
        payload = record.get("payload")
        if record.get("type") == "session_meta" and isinstance(payload, dict) \
                and isinstance(payload.get("id"), str) and payload["id"]:
            return str(payload["id"])
    found = _UUID.findall(log.file.rsplit("/", 1)[-1])
    return found[-1] if found else log.file.rsplit("/", 1)[-1].removesuffix(".jsonl")


@dataclass(frozen=True)
class _Spawn:
    parent: str  # the spawning thread
    caller: str  # the key of the turn that started it


def _thread_entries(log: LogLines, thread: str, spawns: dict[str, _Spawn],
                    unknown: Counter[str]) -> tuple[list[Entry], int]:
    """The entries of one rollout (the spawns it makes noted in ``spawns``), and lines left out."""
    events = any(r.get("type") == "event_msg" and isinstance(r.get("payload"), dict)
                 and r["payload"].get("type") in _EVENT_ROLES for _, r in log.records)
    entries: list[Entry] = []
    previous: str | None = None
    left_out = 0
    for number, record in log.records:
        kind = record.get("type")
        payload = record.get("payload")
        payload = payload if isinstance(payload, dict) else {}
        if kind not in _KNOWN:
            unknown[str(kind)] += 1
            continue
        key = f"{thread}.{number}"
        when = iso_seconds(record.get("timestamp"))
        role, text = None, ""
        if kind == "event_msg" and payload.get("type") in _EVENT_ROLES and events:
            role, text = _EVENT_ROLES[payload["type"]], str(payload.get("message") or "")
        elif kind == "response_item" and payload.get("type") == "message" and not events \
                and payload.get("role") in ("user", "assistant"):
            role, text = str(payload["role"]), block_text(payload.get("content"), _MESSAGE_TEXT)
        elif kind == "compacted":
            covered = tuple(e.key for e in entries if e.kind == "turn")
            entries.append(Entry(key=key, parent=previous, kind="summary", line=number,
                                 file=log.file, created_at=when, covers=covered,
                                 content=str(payload.get("message") or ""),
                                 metadata={"imported_from": AGENT}))
            continue
        elif kind == "event_msg" and payload.get("type") == "collab_tool_call":
            new = payload.get("new_thread_id")
            if isinstance(new, str) and new and previous is not None:
                spawns.setdefault(new, _Spawn(thread, previous))
        if role is None:
            left_out += 1
            continue
        speaker = ({"speaker_id": f"{AGENT}/user", "speaker_display": "user"} if role == "user"
                   else {"speaker_id": f"{AGENT}/assistant", "speaker_display": "Codex"})
        entries.append(Entry(key=key, parent=previous, kind="turn", line=number, file=log.file,
                             role=role, content=text, created_at=when,
                             metadata={"imported_from": AGENT, **speaker}))
        previous = key
    return entries, left_out


def plan_codex(logs: Sequence[LogLines]) -> list[SessionPlan]:
    """The sessions of the rollouts ``logs``: one per thread, spawned threads inside their parent's."""
    spawns: dict[str, _Spawn] = {}
    threads: dict[str, tuple[LogLines, list[Entry], int, Counter[str]]] = {}
    for log in logs:
        thread = thread_id(log)
        unknown: Counter[str] = Counter()
        own, out = _thread_entries(log, thread, spawns, unknown)
        threads.setdefault(thread, (log, own, out, unknown))

    def home(thread: str) -> str:
        seen = {thread}
        while thread in spawns and spawns[thread].parent in threads \
                and spawns[thread].parent not in seen:
            thread = spawns[thread].parent
            seen.add(thread)
        return thread

    members: dict[str, list[str]] = {}
    for thread in threads:
        members.setdefault(home(thread), []).append(thread)
    plans = []
    for top, inside in members.items():
        inside.sort(key=lambda t: (t != top, threads[t][0].file))
        entries: list[Entry] = []
        unknown_all: Counter[str] = Counter()
        left_out = 0
        for thread in inside:
            log, own, out, unknown = threads[thread]
            unknown_all.update(unknown)
            left_out += out
            if thread != top:
                own = _spawned(own, spawns[thread], thread)
            entries.extend(own)
        logs_in = [threads[t][0] for t in inside]
        title = next((e.content for e in entries if e.kind == "turn" and e.role == "user"), "")
        plans.append(build_plan(
            AGENT, f"{AGENT}-{node_id(top)}", " ".join(title.split())[:80],
            [log.file for log in logs_in], entries, unknown=unknown_all, left_out=left_out,
            waiting=[log.file for log in logs_in if log.waiting]))
    return plans


def _spawned(entries: list[Entry], spawn: _Spawn, thread: str) -> list[Entry]:
    """A spawned thread's entries: its first turn a spawn root called by ``spawn.caller``."""
    out: list[Entry] = []
    rooted = False
    for entry in entries:
        metadata: dict[str, Any] = {**entry.metadata, "agent_thread": thread}
        if entry.kind == "turn":
            metadata["speaker_id"] = f"{AGENT}/agent/{thread}"
            metadata["speaker_display"] = (f"sub-agent {thread[:8]}" if entry.role == "assistant"
                                           else metadata.get("speaker_display", "user"))
        if entry.kind == "turn" and not rooted:
            rooted = True
            entry = replace(entry, parent=None, caller=spawn.caller)
        out.append(replace(entry, main=False, metadata=metadata))
    return out
