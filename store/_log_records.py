"""The runtime log's files as found on disk: their layout, the record format, their reading.

:class:`~store._runtime_log.RuntimeLog` writes an owner's segments; the
recovery of a dead owner's (:mod:`store._log_recovery`), the owner's own
replay after a failed write and the audit's scan (:mod:`store._damaged_logs`)
read them. What they share lives here: where the files are
(``<state>/.scriptorium/wal/<owner>.<n>.log`` beside ``<owner>.lock`` and
``<owner>.recovery``), how a record is framed (``M <sid>`` a mutation,
``R <sid>`` a retirement: see :mod:`store._runtime_log` for the rules) and
which of a session's records are still *live* (after its last retirement).

Segments are read whole, once per version of the file: a recoverer asks the
same dead log about each of its sessions in turn.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

from ._damage import warn_damaged
from ._journal import JournalEntry, decode_entries, frame, read_frames

__all__ = [
    "MAGIC",
    "MUTATION",
    "RETIREMENT",
    "WAL_DIR",
    "Record",
    "forget_cached",
    "live_in",
    "live_sessions",
    "owners",
    "read_segments",
    "record",
    "unlink_owner_files",
]

WAL_DIR = os.path.join(".scriptorium", "wal")
MAGIC = b"scriptorium-log 1 "
MUTATION, RETIREMENT = b"M", b"R"

# (kind, session, body, rel, offset): a record as read, its entries decoded
# only for the session asked about, so one damaged record is its session's
# problem alone.
Record = tuple[bytes, str, bytes, str, int]
_CACHE: dict[str, tuple[tuple[int, int, int], list[Record]]] = {}
_CACHE_LOCK = threading.Lock()


def record(kind: bytes, session: str, body: bytes = b"") -> bytes:
    return frame(MAGIC, b"%s %s\n%s" % (kind, session.encode(), body))


def forget_cached(path: str) -> None:
    with _CACHE_LOCK:
        _CACHE.pop(path, None)


def _read_segment(path: str, directory: str) -> list[Record]:
    """The valid records of one segment (cached while the file is unchanged); [] if it is gone."""
    try:
        with open(path, "rb") as handle:
            stat = os.fstat(handle.fileno())
            key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            with _CACHE_LOCK:
                cached = _CACHE.get(path)
            if cached is not None and cached[0] == key:
                return cached[1]
            data = handle.read()
    except FileNotFoundError:
        forget_cached(path)
        return []
    rel = os.path.relpath(path, os.path.dirname(os.path.dirname(directory)))
    records: list[Record] = []
    frames, end = read_frames(data, (MAGIC,))
    warn_damaged(rel, end, len(data))
    for _, offset, payload in frames:
        line_end = payload.find(b"\n")
        kind, _, name = payload[:line_end].partition(b" ")
        records.append((kind, name.decode("utf-8", "replace"), payload[line_end + 1:], rel,
                        offset))
    with _CACHE_LOCK:
        _CACHE[path] = (key, records)
    return records


def read_segments(paths: Iterable[str], directory: str) -> list[Record]:
    return [record for path in paths for record in _read_segment(path, directory)]


def live_in(records: list[Record], session: str) -> list[list[JournalEntry]]:
    """``session``'s mutations after its last retirement, decoded (JournalFileError if not ours)."""
    live: list[Record] = []
    for record in records:
        if record[1] != session:
            continue
        if record[0] == RETIREMENT:
            live.clear()
        else:
            live.append(record)
    return [decode_entries(body, rel, offset) for _, _, body, rel, offset in live]


def live_sessions(records: list[Record]) -> list[str]:
    """The sessions whose last record here is a mutation (no retirement after it)."""
    last: dict[str, bool] = {}
    for kind, name, *_ in records:
        last[name] = kind == MUTATION
    return [name for name, live in last.items() if live]


def owners(directory: str) -> dict[str, list[str]]:
    """Each owner with files in ``directory`` and its segment paths in order."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return {}
    owners: dict[str, list[tuple[int, str]]] = {}
    for name in names:
        if name.startswith("."):
            continue
        parts = name.split(".")
        if len(parts) == 2 and parts[1] in ("lock", "recovery"):
            owners.setdefault(parts[0], [])
        elif len(parts) == 3 and parts[2] == "log" and parts[1].isdigit():
            owners.setdefault(parts[0], []).append((int(parts[1]), os.path.join(directory, name)))
    return {owner: [path for _, path in sorted(found)] for owner, found in owners.items()}


def unlink_owner_files(directory: str, owner: str) -> None:
    for suffix in ("lock", "recovery"):
        try:
            os.unlink(os.path.join(directory, f"{owner}.{suffix}"))
        except FileNotFoundError:
            pass
