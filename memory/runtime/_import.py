"""Importing a conversation kept elsewhere: one JSON message a line, appended to one session.

An agent that adopts scriptorium has history already (an export of another
tool, a benchmark's conversations); memory can only be written from turns
the store holds, with their own times. ``scriptorium import jsonl FILE``
(and :func:`import_jsonl` for code) reads one message a line::

    {"role": "user" | "assistant", "content": "...", "created_at"?: seconds,
     "id"?: "...", "predecessor"?: "...", "speaker"?: "...", ...metadata}

Contract:

- **the whole file is checked before anything is written**: JSON, fields,
  ids (``"ROOT"`` is no turn's), times (a finite number, not beyond the
  clock's skew), predecessors (an earlier line's id, a turn the session
  holds, or ``"ROOT"`` for the session's first turn only), what the
  store itself would refuse (reserved keys, sizes), and each line whose id
  the session already holds (:class:`ImportLineError` names the file, the
  line and what to do; nothing of the file is imported);
- **a line whose id the session already holds is skipped** when it is the
  same turn (role, content, and the predecessor it names), so importing a
  file twice changes nothing; an id the session holds as another turn is a
  bad line;
- **a line without an id gets one from what it says** (the id of the line
  before it, its role, content and time: ``i`` + 12 hex), so it too is skipped by
  a second import;
- a line without ``predecessor`` follows the line before it; the first line
  follows the session's head (a new session: ``ROOT``);
- **after an import that appended turns, the head is the file's last line**:
  lines equal to turns already there are shared (their ids come from what
  they say), so a second file forks off that prefix, and recall ranks the
  head's branch first;
- ``speaker`` is the turn's speaker name, stored as ``speaker_display`` (the
  reference agent's field, which the ledger and the archive read); every
  other field is metadata;
- **without a session id**, the session is ``import-`` + the first 12 hex of
  the file's sha256: the same file imports into the same session, so a
  second import changes nothing there too.

All or nothing: a checked file can still fail while it is written (a full
disk, a crash). A new session is built aside and moved into place whole
(:mod:`memory.runtime._import_staging`): it is there with every turn, or not
at all (:class:`ImportFailedError`). Into an existing session each turn is
appended whole; the turns appended before a failure stay (the store deletes
nothing), and every line has an id, so running the same import again skips
them and appends the rest: :class:`ImportInterruptedError` says so.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import orjson

from memory._errors import (
    HistoryImportError,
    ImportFailedError,
    ImportInterruptedError,
    ImportLineError,
)
from memory.runtime._import_staging import import_new_session
from store import (
    CLOCK_SKEW,
    RESERVED_KEYS,
    FindNodes,
    GetMeta,
    InvalidRequestError,
    StoreError,
    message_to_node,
)
from store.lowlevel import citable_id_problem, encode_node, run_durable, validate_id

if TYPE_CHECKING:
    from memory.runtime._runtime import MemoryRuntime

__all__ = [
    "ImportLine",
    "ImportReport",
    "derived_session_id",
    "import_jsonl",
    "object_line",
    "parse_import_lines",
    "plan_import",
]

ROLES = ("user", "assistant")
ROOT = "ROOT"  # SPEC §4: the predecessor of a session's first turn
# Line fields that are not metadata; every other key of a line is.
_LINE_FIELDS = frozenset({"role", "content", "created_at", "id", "predecessor", "speaker"})
SPEAKER_KEY = "speaker_display"
# Fields of the message view a line cannot set: its time is created_at, and
# sub-calls, tool rows and model names are not conversation history.
_REFUSED = (RESERVED_KEYS | {"name", "input", "reads"}) - _LINE_FIELDS


@dataclass(frozen=True)
class ImportLine:
    """One checked line: the turn it asks for, with its id and predecessor settled.

    ``predecessor`` is None only on a first line that names none: it follows
    the session's head. ``named_predecessor``: the line itself named it.
    """

    number: int
    id: str
    role: str
    content: str
    created_at: float | None
    predecessor: str | None
    named_predecessor: bool
    metadata: Mapping[str, Any]

    def message(self) -> dict[str, Any]:
        """The message dict to append (the store's view names)."""
        message: dict[str, Any] = {**self.metadata, "id": self.id, "role": self.role,
                                   "content": self.content}
        if self.predecessor is not None:
            message["predecessor"] = self.predecessor
        return message


@dataclass(frozen=True)
class ImportReport:
    """What an import did: the session, the turns appended and the lines skipped."""

    file: str
    session: str
    created_session: bool
    imported: int
    skipped: int

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "session": self.session,
                "created_session": self.created_session, "imported": self.imported,
                "skipped": self.skipped}


def derived_session_id(data: bytes) -> str:
    """The session a file imports into when none is named: the same bytes, the same session."""
    return "import-" + hashlib.sha256(data).hexdigest()[:12]


def _derived_node_id(previous: str | None, role: str, content: str,
                     created_at: float | None) -> str:
    digest = hashlib.sha256(orjson.dumps([previous, role, content, created_at])).hexdigest()
    return "i" + digest[:12]


def _id_problem(value: object, what: str) -> str | None:
    if not isinstance(value, str):
        return f"{what} is not a string"
    try:
        validate_id(value, what)
    except InvalidRequestError as exc:
        return str(exc).split("; nothing")[0]
    problem = citable_id_problem(value)
    return None if problem is None else f"{what} {value!r}: {problem}"


class _BadLineError(Exception):
    """What is wrong with one line (raised as :class:`ImportLineError` with its number)."""


def _line_turn(record: Mapping[str, Any], now: float) -> tuple[str, str, float | None, str]:
    """The checked role, content and time of a line, or _BadLineError saying what is wrong."""
    refused = sorted(key for key in record if key in _REFUSED)
    if refused:
        raise _BadLineError(f"field {refused[0]!r} cannot be imported (a line's fields are "
                         "role, content, created_at, id, predecessor, speaker and metadata)")
    role = record.get("role")
    if role not in ROLES:
        raise _BadLineError(f"role {role!r} is not one of {', '.join(ROLES)}")
    content = record.get("content")
    if not isinstance(content, str):
        raise _BadLineError("content is missing or not a string")
    when = record.get("created_at")
    if when is not None:
        if isinstance(when, bool) or not isinstance(when, (int, float)) \
                or not math.isfinite(when) or when < 0:
            raise _BadLineError(f"created_at {when!r} is not seconds since the epoch")
        if when > now + CLOCK_SKEW:
            raise _BadLineError(f"created_at {when!r} is in the future (more than "
                             f"{CLOCK_SKEW:g} s ahead of this clock); give seconds, "
                             "not milliseconds")
        when = float(when)
    speaker = record.get("speaker")
    if speaker is not None and not isinstance(speaker, str):
        raise _BadLineError("speaker is not a string")
    if speaker is not None and record.get(SPEAKER_KEY, speaker) != speaker:
        raise _BadLineError(f"speaker and {SPEAKER_KEY} disagree")
    return role, content, when, speaker or ""


def object_line(raw: bytes, file: str, number: int) -> dict[str, Any]:
    """Line ``number`` of ``file`` as a JSON object, or :class:`ImportLineError` saying why not."""
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ImportLineError(file, number, f"not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise ImportLineError(file, number, "not a JSON object")
    return record


def parse_import_lines(data: bytes, file: str, *, now: float) -> list[ImportLine]:
    """Every line of ``data`` checked as a turn, ids and predecessors settled within the file.

    Blank lines are skipped; line numbers count every line. A leading UTF-8
    byte order mark (what Windows editors and Excel write) is not part of
    the first line. Raises :class:`ImportLineError` for the first bad line;
    predecessors naming turns outside the file are checked by :func:`plan_import`.
    """
    data = data.removeprefix(codecs.BOM_UTF8)
    lines: list[ImportLine] = []
    seen: dict[str, int] = {}
    previous: str | None = None
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        record = object_line(raw, file, number)
        try:
            role, content, when, speaker = _line_turn(record, now)
        except _BadLineError as exc:
            raise ImportLineError(file, number, str(exc)) from None
        named = "predecessor" in record and record["predecessor"] is not None
        predecessor = record["predecessor"] if named else previous
        if named:
            problem = None if predecessor == ROOT else _id_problem(predecessor, "predecessor")
            if problem is not None:
                raise ImportLineError(file, number, problem)
        node_id = record.get("id")
        if node_id is None:
            node_id = _derived_node_id(previous, role, content, when)
        problem = _id_problem(node_id, "id")
        if problem is not None:
            raise ImportLineError(file, number, problem)
        assert isinstance(node_id, str)
        if node_id == ROOT:
            raise ImportLineError(file, number, f"id {ROOT!r} is the predecessor of a "
                                  "session's first turn, not a turn's id; give this line "
                                  "another id")
        if node_id in seen:
            raise ImportLineError(file, number, f"id {node_id!r} is also line {seen[node_id]}'s")
        if node_id == predecessor:
            raise ImportLineError(file, number, f"id {node_id!r} is its own predecessor")
        metadata = {k: v for k, v in record.items() if k not in _LINE_FIELDS}
        if speaker:
            metadata[SPEAKER_KEY] = speaker
        line = ImportLine(number, node_id, role, content, when, predecessor, named, metadata)
        try:  # what the store would refuse, refused before anything is written
            encode_node(message_to_node(line.message(), "import", node_id=node_id, seq=0,
                                        now=when or 0.0), "import")
        except InvalidRequestError as exc:
            raise ImportLineError(file, number, _store_problem(exc)) from None
        seen[node_id] = number
        lines.append(line)
        previous = node_id
    return lines


def _store_problem(exc: InvalidRequestError) -> str:
    problem = getattr(exc, "problem", None)
    return str(problem) if problem else str(exc).split("; nothing")[0]


def plan_import(lines: Sequence[ImportLine], file: str, session: str,
                held: Mapping[str, Mapping[str, Any]], *,
                has_first_turn: bool = False) -> list[ImportLine]:
    """The lines still to append, given the views ``held`` of the session's turns they name.

    A line whose id is held as the same turn is left out; held as another
    turn, or naming a predecessor neither the file (before it) nor the
    session holds, it is an :class:`ImportLineError`. So is a line to append
    that names ``"ROOT"`` when the session already has its first turn
    (``has_first_turn``: a head and a turn on its branch) or an earlier line
    to append will have become it: the store keeps one top-level
    conversation (a display root aside), and refusing that only while
    appending would leave the file half imported for good.
    """
    earlier: set[str] = set()
    todo: list[ImportLine] = []
    started: int | None = None  # the first line to append that starts the conversation
    for line in lines:
        if line.named_predecessor and line.predecessor != ROOT \
                and line.predecessor not in earlier and line.predecessor not in held:
            raise ImportLineError(
                file, line.number,
                f"predecessor {line.predecessor!r} is neither an earlier line's id nor a "
                f"turn of session {session!r}")
        stored = held.get(line.id)
        if stored is None:
            if line.predecessor == ROOT and line.metadata.get("display") != "root" \
                    and (has_first_turn or started is not None):
                first = (f"session {session!r}'s first turn" if has_first_turn
                         else f"line {started}")
                raise ImportLineError(
                    file, line.number,
                    f"predecessor {ROOT!r} would start a second conversation after {first} "
                    "(a session has one first turn); name the turn this line follows")
            todo.append(line)
            if started is None and line.metadata.get("display") != "root":
                started = line.number
        else:
            pairs = [("role", line.role, stored.get("role")),
                     ("content", line.content, stored.get("content"))]
            if line.predecessor is not None:  # a first line that names none follows the head
                pairs.append(("predecessor", line.predecessor, stored.get("predecessor")))
            differs = [name for name, mine, theirs in pairs if mine != theirs]
            if differs:
                raise ImportLineError(
                    file, line.number,
                    f"id {line.id!r} is already another turn of session {session!r} "
                    f"(its {', '.join(differs)} differ); give this line another id")
        earlier.add(line.id)
    return todo


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _session_exists(state_dir: str, session: str) -> bool:
    return os.path.isfile(os.path.join(state_dir, "sessions", session, "meta.json"))


async def import_jsonl(rt: MemoryRuntime, path: str | os.PathLike[str], *,
                       session: str | None = None,
                       progress: Callable[[int, int], None] | None = None) -> ImportReport:
    """Import the file at ``path`` into ``session`` (default: :func:`derived_session_id`).

    A session that does not exist is created. Raises :class:`ImportLineError`
    (nothing imported), :class:`ImportInterruptedError` (some turns appended: run
    it again), or the store's error for an unusable session id.
    ``progress(done, total)`` is called after each turn appended (or staged).
    """
    file = os.fspath(path)
    data = await anyio.to_thread.run_sync(_read, file)
    lines = parse_import_lines(data, file, now=rt.config.clock())
    sid = session if session is not None else derived_session_id(data)
    validate_id(sid, "session id")
    problem = citable_id_problem(sid)
    if problem is not None:
        raise HistoryImportError(f"session id {sid!r}: {problem}; name another with --session")
    names = tuple({name for line in lines
                   for name in (line.id, line.predecessor) if name is not None})
    exists = await anyio.to_thread.run_sync(_session_exists, rt.state_dir, sid)
    held, first_turn = await _held(rt, sid, names) if exists else ({}, False)
    todo = plan_import(lines, file, sid, held, has_first_turn=first_turn)
    if not exists:  # all or nothing: built aside, moved into place whole
        turns = [(line.message(), line.created_at) for line in todo]
        try:
            installed = await run_durable(functools.partial(
                import_new_session, rt.state_dir, sid, f"imported from {os.path.basename(file)}",
                turns, lines[-1].id if todo else None, files=rt.config.files,
                clock=rt.config.clock, progress=progress))
        except (OSError, StoreError) as exc:  # only the sync after the move leaves one
            made = await anyio.to_thread.run_sync(_session_exists, rt.state_dir, sid)
            raise ImportFailedError(file, sid, exc, installed=made) from exc
        if installed:
            return ImportReport(file, sid, True, len(todo), len(lines) - len(todo))
        held, first_turn = await _held(rt, sid, names)  # created meanwhile: check against it
        todo = plan_import(lines, file, sid, held, has_first_turn=first_turn)
    appended = 0
    for line in todo:
        try:
            await rt.sessions.append(sid, line.message(), created_at=line.created_at)
        except Exception as exc:
            raise ImportInterruptedError(file, line.number, sid, appended, exc) from exc
        appended += 1
        if progress is not None:
            progress(appended, len(todo))
    if appended:  # recall ranks the head's branch first: the imported turns are the live ones
        try:
            await rt.sessions.set_head(sid, lines[-1].id)
        except Exception as exc:
            raise ImportInterruptedError(file, lines[-1].number, sid, appended, exc) from exc
    return ImportReport(file, sid, False, appended, len(lines) - appended)


async def _held(rt: MemoryRuntime, session: str,
                names: tuple[str, ...]) -> tuple[dict[str, dict[str, Any]], bool]:
    """The views of the turns of ``names`` the session holds, and whether it has its first turn.

    The store refuses a second top-level turn while meta.json names a head
    and the session holds a conversational turn; the head's branch is
    where that turn is (or was, before the branch forked).
    """
    ref = rt.session_ref(session)
    held: dict[str, dict[str, Any]] = await ref.call(
        FindNodes(names))
    meta: dict[str, Any] = await ref.call(GetMeta())
    first_turn = False
    if meta.get("head_id") is not None:
        first_turn = any(m.get("role") in ROLES and m.get("display") != "root"
                         for m in await rt.sessions.get_branch(session))
    return held, first_turn
