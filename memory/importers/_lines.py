"""The lines of an agent's JSON-lines log, as far as they are complete.

Agents append to their logs while they run, so the last line may be half
written when it is read. A line is complete when its newline is there, or
(the log's very end) when it is a whole JSON object; an incomplete last line
is not an error: it waits, and is read once it is complete. Any other line
that is not a JSON object is the log's fault: :class:`ImportLineError`
names the file and the line, and nothing of that file is imported.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Any

import orjson

from memory.runtime._import import object_line

__all__ = ["LogLines", "read_lines"]


@dataclass(frozen=True)
class LogLines:
    """The complete lines of one file: ``(line number, object)``; ``waiting``: a tail is not."""

    file: str
    records: list[tuple[int, dict[str, Any]]]
    waiting: bool


def read_lines(data: bytes, file: str) -> LogLines:
    """The complete JSON-object lines of ``data`` (blank lines skipped; numbers count all)."""
    pieces = data.removeprefix(codecs.BOM_UTF8).split(b"\n")
    tail = pieces.pop()  # after the last newline: b"" or a line still being written
    records: list[tuple[int, dict[str, Any]]] = []
    for number, raw in enumerate(pieces, start=1):
        if not raw.strip():
            continue
        records.append((number, object_line(raw, file, number)))
    waiting = False
    if tail.strip():
        try:
            record = orjson.loads(tail)
        except orjson.JSONDecodeError:
            waiting = True  # half written: read again when its newline comes
        else:
            if isinstance(record, dict):
                records.append((len(pieces) + 1, record))
            else:
                waiting = True
    return LogLines(file, records, waiting)
