"""What an agent's log asks for, in the store's terms: the turns of one session, in order.

Every parser (Claude Code, codex, pi) reduces its format to :class:`Entry`
values, one per line or record that has a place in the conversation's DAG,
and :func:`build_plan` turns those into a :class:`SessionPlan`: the nodes to
append, parents (and callers) first, with the agent's own ids and times.
Pure: no I/O, no clock.

The rules every agent shares:

- an entry that is a **turn** becomes a node with the agent's own id
  (:func:`node_id`), time, role and speaker;
- an entry that is **left out** (a tool call or result, a meta or system
  line, a compaction boundary) is transparent: a child of it follows its
  parent instead, so the DAG around it is kept;
- a **summary** (a compaction, an abandoned branch's summary) becomes a
  summary node beside the conversation: id ``summary_`` + the agent's id,
  ``covers_ids`` naming the turns it summarises, predecessor the one of the
  first covered turn (as the store's ``insert_summary``); it is
  transparent too, so the turns after a compaction continue the branch
  they came from and memory still owes every turn before it;
- a turn whose parent is missing (a log that starts mid-session) or null is
  the session's first turn if it is the first such, a **spawn root** when
  its entry names a caller (sub-agent work: ``predecessor`` null,
  ``caller`` the turn that started it), and otherwise follows the turn
  before it in the log (``parent_missing`` keeps the name it gave).

The id rule (documented in README, reversible): an agent's id that is a
citable store id and holds no ``%`` is kept as it is; any other is written
``%XX`` per UTF-8 byte for its first character and every other character
outside ``A-Z a-z 0-9 - _ ~`` (so is ``ROOT`` and an id starting
``summary_``, the store's prefix of summaries: ``ROOT`` is ``%52OOT``).
:func:`agent_id` undoes it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from store import InvalidRequestError
from store.lowlevel import citable_id_problem, validate_id

__all__ = [
    "Entry",
    "PlannedTurn",
    "SessionPlan",
    "agent_id",
    "block_text",
    "build_plan",
    "iso_seconds",
    "node_id",
]

ROOT = "ROOT"
SUMMARY_PREFIX = "summary_"
_PLAIN = re.compile(r"[A-Za-z0-9_~-]")


def node_id(raw: str) -> str:
    """The store id of an agent's id: itself when citable and free of ``%``, else escaped."""
    if "%" not in raw and raw != ROOT and not raw.startswith(SUMMARY_PREFIX):
        try:
            validate_id(raw)
        except InvalidRequestError:
            pass
        else:
            if citable_id_problem(raw) is None:
                return raw
    return "".join(ch if i and _PLAIN.fullmatch(ch) else "".join(f"%{b:02X}" for b in ch.encode())
                   for i, ch in enumerate(raw))


def agent_id(stored: str) -> str:
    """The agent's own id of a store id (the inverse of :func:`node_id`)."""
    return unquote(stored, errors="strict") if "%" in stored else stored


def block_text(content: object, kinds: tuple[str, ...] = ("text",)) -> str:
    """The text of a message's content: a string, or its text blocks (of ``kinds``) joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(b["text"] for b in content if isinstance(b, dict)
                     and b.get("type") in kinds and isinstance(b.get("text"), str))


def iso_seconds(value: object) -> float | None:
    """Seconds since the epoch of an ISO-8601 time (``Z`` or an offset), else None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value)  # Python 3.11 reads a trailing Z
    except ValueError:
        return None
    if when.tzinfo is None:
        return None  # no zone: not a time this importer can place
    return when.timestamp()


@dataclass(frozen=True)
class Entry:
    """One line (or record) of a log that has a place in the DAG.

    ``kind``: ``turn`` (a node), ``summary`` (a summary node beside the
    conversation; ``covers`` the keys it summarises, or ``covers_path_to`` a
    key whose path from the root it covers) or ``skip`` (left out,
    transparent). ``parent`` is the key of the line it follows (None: a root
    or a missing parent); ``caller`` the key of the turn that started it,
    for a sub-agent's first turn.
    """

    key: str
    parent: str | None
    kind: str
    line: int
    file: str
    role: str = "user"
    content: str = ""
    created_at: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    caller: str | None = None
    main: bool = True  # on the session's own conversation, not a sub-agent's
    covers: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlannedTurn:
    """One node to append: the message, its own time, where it came from."""

    id: str
    role: str
    content: str
    created_at: float | None
    predecessor: str | None
    caller: str
    metadata: Mapping[str, Any]
    file: str
    line: int

    @property
    def is_summary(self) -> bool:
        return "covers_ids" in self.metadata

    @property
    def is_spawn_root(self) -> bool:
        return bool(self.metadata.get("spawn_branch_root"))

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {**self.metadata, "id": self.id, "role": self.role,
                                   "content": self.content, "predecessor": self.predecessor}
        if self.caller:
            message["caller"] = self.caller
        if self.is_summary:
            message["name"] = "context/summary"
        return message


@dataclass
class SessionPlan:
    """The turns of one session an agent's log(s) hold, in append order.

    ``head``: the turn the agent was on last (its log's last turn);
    ``unknown``: record types this importer does not know, counted;
    ``left_out``: lines kept out of the store (tool calls and results, meta
    and system lines), counted; ``waiting``: files whose last line is not
    complete yet (it is read when it is).
    """

    agent: str
    session: str
    title: str
    files: tuple[str, ...]
    turns: list[PlannedTurn]
    head: str | None
    unknown: Counter[str] = field(default_factory=Counter)
    left_out: int = 0
    waiting: tuple[str, ...] = ()
    held: bool = False  # a response still being written was kept back (while following)

    def spawn_tips(self) -> list[str]:
        """The last turn of each spawn branch, in plan order: a sub-agent's work come back.

        The importer names these merged heads (meta ``merged_heads``), so a
        boundary writes a sub-agent's branch completely (docs/decisions.md).
        """
        branch_of: dict[str, str] = {}  # turn id: the spawn root its chain starts at
        last: dict[str, str] = {}  # spawn root: its branch's last turn in plan order
        for turn in self.turns:
            if turn.is_summary:
                continue
            root = turn.id if turn.is_spawn_root else branch_of.get(turn.predecessor or "")
            if root is not None:
                branch_of[turn.id] = last[root] = turn.id
        return list(last.values())


class _Resolver:
    """Keys → node ids, through left-out entries, with the root rule of the module docstring."""

    def __init__(self, entries: Sequence[Entry]) -> None:
        self.by_key = {e.key: e for e in entries}
        self._memo: dict[str, str | None] = {}

    def node_of(self, key: str | None) -> str | None:
        """The node a child of ``key`` follows: ``key``'s own, or (transparent) its parent's."""
        seen: dict[str, None] = {}  # in walk order
        while key is not None and key not in self._memo:
            entry = self.by_key.get(key)
            if entry is None:
                break
            if key in seen:  # a cycle of left-out lines: nothing to follow
                key = None
                break
            seen[key] = None
            if entry.kind == "turn":
                self._memo[key] = node_id(entry.key)
                break
            key = entry.parent
        found = self._memo.get(key) if key is not None else None
        for k in seen:
            self._memo.setdefault(k, found)
        return found


def _path(resolver: _Resolver, key: str | None) -> list[str]:
    """The turn keys from the root to ``key`` (included when it is a turn), root first."""
    path: list[str] = []
    seen: set[str] = set()
    while key is not None and key not in seen:
        seen.add(key)
        entry = resolver.by_key.get(key)
        if entry is None:
            break
        if entry.kind == "turn":
            path.append(entry.key)
        key = entry.parent
    return path[::-1]


def build_plan(agent: str, session: str, title: str, files: Iterable[str],
               entries: Sequence[Entry], *, unknown: Counter[str] | None = None,
               left_out: int = 0, waiting: Iterable[str] = ()) -> SessionPlan:
    """The :class:`SessionPlan` of ``entries`` (in log order; keys unique)."""
    entries = _parents_first(entries)
    resolver = _Resolver(entries)
    planned: dict[str, PlannedTurn] = {}
    order: list[str] = []
    rooted = False  # a turn follows ROOT: the session's one first turn
    previous_main: str | None = None
    previous: str | None = None
    head: str | None = None
    for entry in entries:
        if entry.kind == "skip":
            continue
        own = node_id(entry.key) if entry.kind == "turn" else SUMMARY_PREFIX + node_id(entry.key)
        if own in planned:
            continue  # a repeated id: the first line with it stands
        metadata = dict(entry.metadata)
        predecessor = resolver.node_of(entry.parent)
        caller = ""
        if entry.kind == "summary":
            covered = list(entry.covers)
            covers = [node_id(k) for k in covered if k in resolver.by_key
                      and resolver.by_key[k].kind == "turn" and node_id(k) in planned]
            if not covers:
                continue  # a summary of nothing this session holds
            first = planned[covers[0]]
            predecessor = first.predecessor if first.predecessor is not None else ROOT
            metadata.update({"type": "compactionSummary", "source": "compaction",
                             "compaction": True, "covers_ids": covers})
            role = "assistant"
        else:
            role = entry.role
            if predecessor is not None and predecessor not in planned:
                predecessor = None  # only in a cycle of parent links: as a missing parent
            if predecessor is None:
                caller_node = resolver.node_of(entry.caller) if entry.caller else None
                if caller_node is not None and caller_node in planned:
                    caller = caller_node
                    metadata.setdefault("source", "agent_spawn")
                    metadata["spawn_branch_root"] = True
                elif not rooted:
                    predecessor, rooted = ROOT, True
                else:  # the store keeps one first turn: a later root follows the log
                    predecessor = previous_main or previous
                    if entry.parent is not None:
                        metadata["parent_missing"] = entry.parent
        turn = PlannedTurn(own, role, entry.content, entry.created_at, predecessor, caller,
                           metadata, entry.file, entry.line)
        planned[own] = turn
        order.append(own)
        if entry.kind == "turn":
            previous = own
            if entry.main and not caller:
                previous_main = head = own
    return SessionPlan(agent, session, title, tuple(files), [planned[i] for i in order],
                       head, unknown or Counter(), left_out, tuple(waiting))


def _parents_first(entries: Sequence[Entry]) -> list[Entry]:
    """``entries`` in log order, except that a parent or caller comes before what follows it."""
    by_key = {e.key: e for e in entries}
    done: set[str] = set()
    ordered: list[Entry] = []
    for entry in entries:
        stack, waiting = [entry], {entry.key}
        while stack:
            top = stack[-1]
            if top.key in done:
                stack.pop()
                continue
            before = [by_key[k] for k in (top.parent, top.caller)
                      if k is not None and k in by_key and k not in done and k not in waiting]
            if before:
                stack.extend(before)
                waiting.update(b.key for b in before)
                continue
            stack.pop()
            done.add(top.key)
            ordered.append(top)
    return ordered


def path_keys(entries: Sequence[Entry], key: str | None) -> list[str]:
    """The turn keys on the path from the root to ``key`` (for parsers that name covers by path)."""
    return _path(_Resolver(entries), key)
