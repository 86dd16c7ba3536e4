"""The session journal: every mutation for one flush on its critical path.

The problem: an append made durable file by file costs four fsyncs (the
node file and meta.json, each temp + fsync + rename + fsync of its
directory), and a marker merge of N nodes N+1; at thousands of turns per
second the flushes, not the work, set the pace.

The design. Each session has one append-only journal, ``<sid>/.journal``.
A mutation (append, marker batch, rewind, head move) first appends one
*record* holding the full new bytes of every file it changes, and
``fdatasync``\\ s it: **one flush**. Then each file is installed with
:meth:`~store._durable.DurableFiles.replace_unsynced` (temp + rename, no
fsync): readers, the reference agent included, never see a torn file and
see the new bytes at once (installs are never deferred behind an overlay),
and the journal is what makes them durable. The mutation is acknowledged.
Later the journal is *checkpointed*: ``sync_paths`` every file it names
(each once, then their directories), then truncate it durably. That
happens when the owner is idle or closes, and before the journal grows past
a bound, so the per-file flushes are paid once per checkpoint, off the
critical path, and meta.json (in every append's record) once per
checkpoint instead of once per turn.

A record is ``scriptorium-journal 2 <size> <crc32>\\n`` and ``size`` bytes
of payload: per file its path relative to the session directory, a line
with its length, its bytes and a newline, then ``end\\n``. Framing, not
JSON: the content is already encoded and sits on the critical path.

Recovery (:func:`scan`, run by whoever takes the lock and finds a journal
it did not write): the valid prefix of records is replayed, *last record
wins per file*, skipping files already holding those bytes; the files are
synced; the journal is truncated. Replay only ever installs bytes a record
holds, so it is idempotent, and a crash during replay is repaired by the
next replay.

Why the valid prefix is exactly the acknowledged records, plus maybe more:
a record is acknowledged only after its ``fdatasync``, which made it and
everything before it durable. A crash can tear only records written after
the last flush; the scan stops at the first record that is short or fails
its checksum and never resynchronises, so bytes after a tear are never
trusted. A complete but unacknowledged last record (crash between the
flush and the ack) is replayed: the operation happens, as if it had been
acknowledged, never half.

The invariant that makes replay in order safe: **a file named by a
record not yet checkpointed changes only through later records.** Every
mutation of the owning core goes through the journal, so it holds; a new
owner (another process, a restarted actor) replays and checkpoints a
journal it did not write before anything else. A writer that takes no lock
(the reference agent) and rewrites a file named by an outstanding record
between our install and a crash would see its write replaced on replay;
checkpointing when idle keeps that window to the owner's busy periods.

A record that passes its checksum but names a file outside the session
was not written by scriptorium: :class:`~store._errors.JournalFileError`,
the journal is left untouched and mutations are refused (appending after
it would write records no replay reaches).
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass

from ._errors import JournalFileError
from ._format import parse_filename

__all__ = [
    "JOURNAL_NAME",
    "JournalScan",
    "decode_entries",
    "encode_entries",
    "encode_record",
    "latest_per_file",
    "read_journal",
    "scan",
]

JOURNAL_NAME = ".journal"
_MAGIC = b"scriptorium-journal 2 "
_TRAILER = b"end\n"
# The longest header line: magic, a 20-digit size, a space, 8 hex digits, LF.
_MAX_HEADER = len(_MAGIC) + 20 + 1 + 8 + 1

Entries = list[tuple[str, bytes]]


@dataclass(frozen=True)
class JournalScan:
    """What a journal holds: its valid records in order, and where they end."""

    records: list[Entries]
    valid_end: int
    size: int

    @property
    def torn_bytes(self) -> int:
        """Bytes after the valid prefix (a record torn by a crash, or damage)."""
        return self.size - self.valid_end


def _valid_target(rel: str) -> bool:
    if rel == "meta.json":
        return True
    if not rel.startswith("history/"):
        return False
    name = rel[len("history/"):]
    return "/" not in name and parse_filename(name) is not None


def encode_entries(entries: Entries) -> bytes:
    parts: list[bytes] = []
    for rel, data in entries:
        parts.append(f"{rel}\n{len(data)}\n".encode())
        parts.append(data)
        parts.append(b"\n")
    parts.append(_TRAILER)
    return b"".join(parts)


def decode_entries(payload: bytes, path: str, offset: int) -> Entries:
    """The entries of one checksummed payload; JournalFileError if they are not ours."""
    entries: Entries = []
    at = 0
    while payload[at:] != _TRAILER:
        try:
            rel_end = payload.index(b"\n", at)
            size_end = payload.index(b"\n", rel_end + 1)
            rel = payload[at:rel_end].decode("utf-8")
            size = int(payload[rel_end + 1:size_end])
        except (ValueError, UnicodeDecodeError):
            raise JournalFileError(path, offset, "an entry is malformed") from None
        body_end = size_end + 1 + size
        if not _valid_target(rel) or size < 0 or payload[body_end:body_end + 1] != b"\n":
            raise JournalFileError(path, offset, f"entry {rel[:80]!r} is not a node file or meta")
        entries.append((rel, payload[size_end + 1:body_end]))
        at = body_end + 1
    return entries


def encode_record(entries: Entries) -> bytes:
    payload = encode_entries(entries)
    return b"%s%d %08x\n%s" % (_MAGIC, len(payload), zlib.crc32(payload), payload)


def scan(data: bytes, path: str) -> JournalScan:
    """The valid prefix of records in ``data``; stops at the first short or bad record.

    ``path`` (relative to the state directory) names the journal in errors.
    """
    records: list[Entries] = []
    at = 0
    while at < len(data):
        header_end = data.find(b"\n", at, at + _MAX_HEADER)
        if header_end < 0 or not data.startswith(_MAGIC, at):
            break
        fields = data[at + len(_MAGIC):header_end].split(b" ")
        if len(fields) != 2 or not fields[0].isdigit():
            break
        size = int(fields[0])
        payload = data[header_end + 1:header_end + 1 + size]
        # the header must be exactly what encode_record writes for this payload
        # (so "0A1B..." for "0a1b...", or a leading zero, is damage, not a record)
        canonical = b"%s%d %08x\n" % (_MAGIC, size, zlib.crc32(payload))
        if len(payload) != size or data[at:header_end + 1] != canonical:
            break
        records.append(decode_entries(payload, path, at))
        at = header_end + 1 + size
    return JournalScan(records, at, len(data))


def read_journal(session_dir: str, path: str) -> JournalScan:
    """Scan ``session_dir/.journal`` (absent: empty)."""
    try:
        with open(os.path.join(session_dir, JOURNAL_NAME), "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        data = b""
    return scan(data, path)


def latest_per_file(records: list[Entries]) -> dict[str, bytes]:
    """Each file's bytes as the last record naming it left them, in replay order.

    A file is placed where its last record names it, so installing in this
    order keeps each record's own order (an append's node file before the
    meta.json whose head names it).
    """
    latest: dict[str, bytes] = {}
    for entries in records:
        for rel, data in entries:
            latest.pop(rel, None)
            latest[rel] = data
    return latest
