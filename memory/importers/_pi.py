"""pi's session files (``~/.pi/agent/sessions/<cwd>/<time>_<id>.jsonl``) as a plan.

The first line is the header (``type: session``: ``id``, ``version``,
``parentSession`` when the session was forked from another file); the
session is ``pi-<id>``. Entries carry ``id`` and ``parentId``, a tree inside
the file (format 2 and 3; format 1 has neither: an entry's id is then
``L<line>`` and its parent the entry before it, as pi's own migration
chains them). What each entry becomes:

- ``message`` with role ``user`` or ``assistant``: a turn (its ``id``, its
  ``timestamp``); other roles (``toolResult``, ``bashExecution``,
  ``custom``/``hookMessage``, the summaries' own roles) are left out;
- ``compaction``: a summary node covering its branch up to
  ``firstKeptEntryId``; ``branch_summary``: a summary node covering the
  abandoned path from its ``fromId`` back to where it left the branch;
- ``thinking_level_change``, ``model_change``, ``custom``,
  ``custom_message``, ``label``, ``session_info``: left out;
- any other type is unknown: skipped and counted.

A forked session's first turn keeps the link: ``forked_from_file`` (the
header's ``parentSession``) and ``forked_from`` (that file's session, when
the caller could read it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
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

__all__ = ["AGENT", "fork_source", "plan_pi", "session_of"]

AGENT = "pi"
_LEFT_OUT = frozenset({"thinking_level_change", "model_change", "custom", "custom_message",
                       "label", "session_info"})


def _header(log: LogLines) -> dict[str, Any]:
    if log.records and log.records[0][1].get("type") == "session":
        return log.records[0][1]
    return {}


def session_of(log: LogLines) -> str:
    """The session of a pi file: ``pi-`` and its header's id (else the file's name)."""
    raw = _header(log).get("id")
    if not isinstance(raw, str) or not raw:
        raw = log.file.rsplit("/", 1)[-1].removesuffix(".jsonl")
    return f"{AGENT}-{node_id(raw)}"


def fork_source(log: LogLines) -> str | None:
    """The file a forked session came from (its header's ``parentSession``), or None."""
    parent = _header(log).get("parentSession")
    return parent if isinstance(parent, str) and parent else None


def _time(record: dict[str, Any], message: object) -> float | None:
    when = iso_seconds(record.get("timestamp"))
    if when is None and isinstance(message, dict):
        ms = message.get("timestamp")
        if isinstance(ms, (int, float)) and not isinstance(ms, bool):
            when = ms / 1000.0
    return when


def plan_pi(log: LogLines, *, forked_from: str | None = None) -> SessionPlan:
    """The session of one pi file (``forked_from``: the session its ``parentSession`` holds)."""
    header = _header(log)
    legacy = not header.get("version")  # format 1: no ids, a line follows the line before it
    entries: list[Entry] = []
    unknown: Counter[str] = Counter()
    left_out = 0
    previous: str | None = None
    by_index: list[str] = []  # format 1: compaction names its first kept entry by index
    for number, record in log.records:
        kind = record.get("type")
        if kind == "session":
            continue
        raw_id, raw_parent = record.get("id"), record.get("parentId")
        key = raw_id if isinstance(raw_id, str) and raw_id and not legacy else f"L{number}"
        parent = previous if legacy else (raw_parent if isinstance(raw_parent, str) else None)
        by_index.append(key)
        previous = key
        message = record.get("message")
        base = Entry(key=key, parent=parent, kind="skip", line=number, file=log.file,
                     created_at=_time(record, message))
        if kind == "message" and isinstance(message, dict) \
                and message.get("role") in ("user", "assistant"):
            role = str(message["role"])
            model = message.get("model")
            speaker = ({"speaker_id": f"{AGENT}/user", "speaker_display": "user"}
                       if role == "user" else
                       {"speaker_id": f"{AGENT}/assistant",
                        "speaker_display": model if isinstance(model, str) and model else "pi"})
            entries.append(replace(base, kind="turn", role=role,
                                   content=block_text(message.get("content")),
                                   metadata={"imported_from": AGENT, **speaker}))
        elif kind == "compaction":
            path = path_keys(entries, parent)
            kept = record.get("firstKeptEntryId")
            index = record.get("firstKeptEntryIndex")
            if legacy and isinstance(index, int) and 0 <= index < len(by_index):
                kept = by_index[index]
            covers = path[:path.index(kept)] if kept in path else path
            entries.append(_summary(base, record, covers))
        elif kind == "branch_summary":
            keep = set(path_keys(entries, parent))
            covers = [k for k in path_keys(entries, record.get("fromId") or None)
                      if k not in keep]
            entries.append(_summary(base, record, covers))
        elif kind == "message" or kind in _LEFT_OUT:
            entries.append(base)
            left_out += 1
        else:
            unknown[str(kind)] += 1
            entries.append(base)  # transparent all the same: the tree goes on through it
    source = fork_source(log)
    if source is not None:
        first = next((i for i, e in enumerate(entries) if e.kind == "turn"), None)
        if first is not None:
            link: dict[str, Any] = {"forked_from_file": source}
            if forked_from is not None:
                link["forked_from"] = forked_from
            entries[first] = replace(entries[first], metadata={**entries[first].metadata, **link})
    title = next((e.content for e in entries if e.kind == "turn" and e.role == "user"), "")
    return build_plan(AGENT, session_of(log), " ".join(title.split())[:80], [log.file], entries,
                      unknown=unknown, left_out=left_out,
                      waiting=[log.file] if log.waiting else [])


def _summary(base: Entry, record: dict[str, Any], covers: list[str]) -> Entry:
    summary = record.get("summary")
    return replace(base, kind="summary", content=summary if isinstance(summary, str) else "",
                   covers=tuple(covers), metadata={"imported_from": AGENT})
