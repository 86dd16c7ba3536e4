"""The quarantine: batches that kept failing, parked until their session changes.

SPEC §7: after N consecutive failures a batch is not retried hot. It is
recorded in ``.scriptorium/quarantine.jsonl`` with the error and skipped
until its session changes (an append bumps the session's ``updated_at``) or
an operator releases it (``scriptorium memory release``). Other sessions are
never affected.

Why ``updated_at`` is the release key: it changes exactly on an append
(SPEC §4), which is the only event that can make a stuck batch different
(a new turn, a rewind followed by new turns). So an entry stores the
``updated_at`` its session had when it was quarantined, and it blocks only
while the session still has that very value. Nothing needs to delete the
entry for the release to happen; the stale line is dropped the next time
the file is rewritten.

The file is one JSON object per line. It is read tolerantly: a line that
does not parse (a hand edit, a foreign tool) is skipped and reported, never
a crash, because refusing to start over a quarantine file would block every
session, which is the opposite of what the file is for. It is written as a
whole-file durable replace through :class:`DurableFiles`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from store import DurableFiles

__all__ = [
    "QUARANTINE_PATH",
    "QuarantineEntry",
    "QuarantineProblem",
    "is_quarantined",
    "parse_quarantine",
    "read_quarantine",
    "render_quarantine",
    "write_quarantine",
]

# Relative to ``<state>/memory``.
QUARANTINE_PATH = os.path.join(".scriptorium", "quarantine.jsonl")


@dataclass(frozen=True, slots=True)
class QuarantineEntry:
    """One parked batch.

    ``updated_at`` is the session's ``updated_at`` when the batch was
    quarantined (None if it was unknown).
    ``at`` is when it was quarantined (unix seconds).
    """

    session: str
    node_ids: tuple[str, ...]
    error: str
    failures: int
    at: float
    updated_at: float | None


@dataclass(frozen=True, slots=True)
class QuarantineProblem:
    """A line of the file that was skipped; ``line`` is 1-based."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"memory/{QUARANTINE_PATH}:{self.line}: {self.reason}; the line is ignored"


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _entry(document: object) -> QuarantineEntry | str:
    """The entry a parsed line holds, or why it holds none."""
    if not isinstance(document, dict):
        return "not a JSON object"
    session = document.get("session")
    if not isinstance(session, str) or not session:
        return "no session id"
    node_ids = document.get("node_ids")
    if not isinstance(node_ids, list) or not all(isinstance(n, str) for n in node_ids):
        return "node_ids is not a list of strings"
    failures = document.get("failures")
    if not isinstance(failures, int) or isinstance(failures, bool) or failures < 0:
        return "failures is not a non-negative integer"
    at = _number(document.get("at"))
    if at is None:
        return "at is not a finite number"
    raw_updated = document.get("updated_at")
    updated_at = _number(raw_updated)
    if raw_updated is not None and updated_at is None:
        return "updated_at is neither null nor a finite number"
    error = document.get("error")
    return QuarantineEntry(
        session, tuple(node_ids), error if isinstance(error, str) else "", failures, at, updated_at
    )


def parse_quarantine(data: bytes) -> tuple[list[QuarantineEntry], list[QuarantineProblem]]:
    """Every well-formed entry in file order, and the lines that were skipped."""
    entries: list[QuarantineEntry] = []
    problems: list[QuarantineProblem] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            parsed = _entry(json.loads(raw))
        except (ValueError, UnicodeDecodeError, RecursionError):
            parsed = "not valid JSON"
        if isinstance(parsed, str):
            problems.append(QuarantineProblem(number, parsed))
        else:
            entries.append(parsed)
    return entries, problems


def render_quarantine(entries: Iterable[QuarantineEntry]) -> bytes:
    """One compact JSON object per line, keys in field order, each line ending in LF."""
    lines = [
        json.dumps(
            {
                "session": e.session,
                "node_ids": list(e.node_ids),
                "error": e.error,
                "failures": e.failures,
                "at": e.at,
                "updated_at": e.updated_at,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )
        for e in entries
    ]
    return "".join(line + "\n" for line in lines).encode("utf-8")


def read_quarantine(
    memory_dir: str, *, problems: list[QuarantineProblem] | None = None
) -> list[QuarantineEntry]:
    """The entries of ``.scriptorium/quarantine.jsonl``; a missing file has none.

    Skipped lines are appended to ``problems`` when given (the caller logs
    them); they never raise.
    """
    try:
        with open(os.path.join(memory_dir, QUARANTINE_PATH), "rb") as handle:
            data = handle.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return []
    entries, skipped = parse_quarantine(data)
    if problems is not None:
        problems.extend(skipped)
    return entries


def write_quarantine(
    memory_dir: str, entries: Sequence[QuarantineEntry], files: DurableFiles
) -> None:
    """Replace the file with ``entries`` (one durable operation; run it with ``run_durable``)."""
    path = os.path.join(memory_dir, QUARANTINE_PATH)
    files.make_dirs(os.path.dirname(path))
    files.write_atomic(path, render_quarantine(entries))


def is_quarantined(
    entries: Iterable[QuarantineEntry], session: str, updated_at: float | None
) -> QuarantineEntry | None:
    """The entry that blocks ``session`` now, or None.

    Pure. An entry blocks only while the session's ``updated_at`` equals the
    one recorded with it (exact comparison: the value is copied, never
    computed). None equals only None: a session whose ``updated_at`` is
    unknown stays blocked by an entry recorded without one.
    """
    for entry in entries:
        if entry.session == session and entry.updated_at == updated_at:
            return entry
    return None
