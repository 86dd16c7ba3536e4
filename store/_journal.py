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
(each once, then their directories; from a handful of files on, one
``syncfs`` that concurrent checkpoints share), then truncate it durably. That
happens when the owner is idle or closes, and before the journal grows past
a bound, so the per-file flushes are paid once per checkpoint, off the
critical path, and meta.json (in every append's record) once per
checkpoint instead of once per turn.

A record is ``scriptorium-journal 3 <size> <crc32>\\n`` (the CRC of the
magic and the payload) and ``size`` bytes of payload: per file its path
relative to the session directory, a line ``<before> <patch size> <size>``,
the patch, the file's new bytes and a newline, then ``end\\n``. ``before``
says what the file was when the record was written: the BLAKE2b-128 hex
digest of its bytes, or ``absent``. The patch is set (JSON) when the entry's
only change is a metadata merge into a node file (a marker batch, a rewind's
stamps). Framing, not JSON: the content is already encoded and sits on the
critical path. Records of format 2 (no ``before``, no patch) are still read
and replayed as before.

Recovery (:func:`scan`, run by whoever takes the lock and finds a journal
it did not write): the valid prefix of records is replayed, *last record
wins per file*, skipping files already holding those bytes; the files are
synced; the journal is truncated. Replay only ever installs bytes a record
holds, or those bytes merged onto a file someone else changed (below), so
it is idempotent, and a crash during replay is repaired by the next replay.

Why the valid prefix is exactly the acknowledged records, plus maybe more:
a record is acknowledged only after its ``fdatasync``, which made it and
everything before it durable. A crash can tear only records written after
the last flush; the scan stops at the first record that is short or fails
its checksum and never resynchronises, so bytes after a tear are never
trusted. A complete but unacknowledged last record (crash between the
flush and the ack) is replayed: the operation happens, as if it had been
acknowledged, never half.

The invariant that makes replay in order safe: **a file named by a
record not yet checkpointed changes only through later records**, for
every writer that takes the lock. The reference agent takes none: it
rewrites node files (metadata merges, rewind stamps) and meta.json (head
moves) whenever it likes, also between our install and a crash. So replay
never installs over a file that changed since: :func:`replay_plan` collects
per file every state the records account for (each record's ``before`` and
new bytes); a file in one of those states gets the last record's bytes, and
a file in any other state was written by someone else, whose write wins.
What of ours can still be applied is merged onto it: the keys of the
records' metadata patches that the file does not hold (a newer value the
agent gave a key is kept). Everything else (meta.json, a node file our
append created) is kept as the other writer left it and reported: the
agent's head move or rewind is newer than any head our records name.

A record that passes its checksum but names a file outside the session
was not written by scriptorium: :class:`~store._errors.JournalFileError`,
the journal is left untouched and mutations are refused (appending after
it would write records no replay reaches).
"""

from __future__ import annotations

import hashlib
import os
import zlib
from dataclasses import dataclass, field

from ._errors import JournalFileError
from ._format import parse_filename

__all__ = [
    "ABSENT",
    "JOURNAL_NAME",
    "FilePlan",
    "JournalEntry",
    "JournalScan",
    "decode_entries",
    "digest",
    "encode_entries",
    "encode_record",
    "frame",
    "latest_per_file",
    "read_frames",
    "read_journal",
    "replay_plan",
    "scan",
]

JOURNAL_NAME = ".journal"
_MAGIC = b"scriptorium-journal 3 "
_MAGIC_V2 = b"scriptorium-journal 2 "
_TRAILER = b"end\n"
ABSENT = "absent"  # ``before`` of a file that did not exist


def digest(data: bytes | None) -> str:
    """What ``before`` records for a file holding ``data`` (None: no file)."""
    if data is None:
        return ABSENT
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True)
class JournalEntry:
    """One file of a record: its new bytes and what it was when the record was written.

    ``before`` is :func:`digest` of the file's bytes then (None only in a
    format-2 record, which did not say); ``patch`` the metadata patch as JSON
    when the entry changes nothing but the node's metadata (else empty).
    """

    rel: str
    data: bytes
    before: str | None = None
    patch: bytes = b""


@dataclass(frozen=True)
class JournalScan:
    """What a journal holds: its valid records in order, and where they end."""

    records: list[list[JournalEntry]]
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


def _valid_before(before: str) -> bool:
    return before == ABSENT or (
        len(before) == 32 and all(c in "0123456789abcdef" for c in before))


def encode_entries(entries: list[JournalEntry]) -> bytes:
    parts: list[bytes] = []
    for entry in entries:
        if entry.before is None:  # only format-2 records lack it; we never write those
            raise ValueError(f"journal entry {entry.rel!r} does not say what the file was")
        parts.append(
            f"{entry.rel}\n{entry.before} {len(entry.patch)} {len(entry.data)}\n".encode())
        parts.append(entry.patch)
        parts.append(entry.data)
        parts.append(b"\n")
    parts.append(_TRAILER)
    return b"".join(parts)


def decode_entries(
    payload: bytes, path: str, offset: int, *, version: int = 3
) -> list[JournalEntry]:
    """The entries of one checksummed payload; JournalFileError if they are not ours."""
    entries: list[JournalEntry] = []
    at = 0
    while payload[at:] != _TRAILER:
        before: str | None = None
        patch_size = 0
        try:
            rel_end = payload.index(b"\n", at)
            size_end = payload.index(b"\n", rel_end + 1)
            rel = payload[at:rel_end].decode("utf-8")
            fields = payload[rel_end + 1:size_end].decode("ascii").split(" ")
            if version == 2:
                (size_text,) = fields
            else:
                before, patch_text, size_text = fields
                patch_size = int(patch_text)
            size = int(size_text)
        except (ValueError, UnicodeDecodeError):
            raise JournalFileError(path, offset, "an entry is malformed") from None
        patch_end = size_end + 1 + patch_size
        body_end = patch_end + size
        if not _valid_target(rel) or size < 0 or patch_size < 0 or (
            before is not None and not _valid_before(before)
        ) or payload[body_end:body_end + 1] != b"\n":
            raise JournalFileError(path, offset, f"entry {rel[:80]!r} is not a node file or meta")
        entries.append(JournalEntry(rel, payload[patch_end:body_end], before,
                                    payload[size_end + 1:patch_end]))
        at = body_end + 1
    return entries


def encode_record(entries: list[JournalEntry]) -> bytes:
    return frame(_MAGIC, encode_entries(entries))


def frame(magic: bytes, payload: bytes) -> bytes:
    """``payload`` behind its header: ``magic``, its size and a CRC of magic and payload."""
    return b"%s%d %08x\n%s" % (magic, len(payload), _checksum(magic, payload), payload)


def _checksum(magic: bytes, payload: bytes) -> int:
    """A format-3 checksum covers the magic too: a flipped version digit is damage.

    Format 2 summed the payload alone, so a format-3 record whose ``3`` flipped
    to ``2`` would otherwise pass as format 2 and then fail to decode.
    """
    return zlib.crc32(payload) if magic == _MAGIC_V2 else zlib.crc32(payload, zlib.crc32(magic))


def scan(data: bytes, path: str) -> JournalScan:
    """The valid prefix of records in ``data``; stops at the first short or bad record.

    ``path`` (relative to the state directory) names the journal in errors.
    Records of format 2 (written before ``before`` was recorded) are read too.
    """
    records: list[list[JournalEntry]] = []
    found, end = read_frames(data, (_MAGIC, _MAGIC_V2))
    for magic, offset, payload in found:
        version = 3 if magic == _MAGIC else 2
        records.append(decode_entries(payload, path, offset, version=version))
    return JournalScan(records, end, len(data))


def read_frames(
    data: bytes, magics: tuple[bytes, ...]
) -> tuple[list[tuple[bytes, int, bytes]], int]:
    """The valid prefix of frames (:func:`frame`) in ``data``: (magic, offset, payload) each, and its end.

    Stops at the first frame that is short, fails its checksum or has a
    header other than the one :func:`frame` writes for its payload, and
    never resynchronises: bytes after a tear are never trusted.
    """
    longest = max(len(magic) for magic in magics) + 20 + 1 + 8 + 1
    found: list[tuple[bytes, int, bytes]] = []
    at = 0
    while at < len(data):
        header_end = data.find(b"\n", at, at + longest)
        if header_end < 0:
            break
        magic = next((m for m in magics if data.startswith(m, at)), None)
        if magic is None:
            break
        fields = data[at + len(magic):header_end].split(b" ")
        if len(fields) != 2 or not fields[0].isdigit():
            break
        size = int(fields[0])
        payload = data[header_end + 1:header_end + 1 + size]
        # the header must be exactly what frame() writes for this payload
        # (so "0A1B..." for "0a1b...", or a leading zero, is damage, not a frame)
        canonical = b"%s%d %08x\n" % (magic, size, _checksum(magic, payload))
        if len(payload) != size or data[at:header_end + 1] != canonical:
            break
        found.append((magic, at, payload))
        at = header_end + 1 + size
    return found, at


def read_journal(session_dir: str, path: str) -> JournalScan:
    """Scan ``session_dir/.journal`` (absent: empty)."""
    try:
        with open(os.path.join(session_dir, JOURNAL_NAME), "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        data = b""
    return scan(data, path)


def latest_per_file(records: list[list[JournalEntry]]) -> dict[str, bytes]:
    """Each file's bytes as the last record naming it left them, in replay order.

    A file is placed where its last record names it, so installing in this
    order keeps each record's own order (an append's node file before the
    meta.json whose head names it).
    """
    latest: dict[str, bytes] = {}
    for entries in records:
        for entry in entries:
            latest.pop(entry.rel, None)
            latest[entry.rel] = entry.data
    return latest


@dataclass
class FilePlan:
    """What replay does with one file: see :func:`replay_plan`.

    ``known`` holds the digest of every state the records account for (None:
    a format-2 record names the file, so any state is taken as ours);
    ``patches`` the metadata patches of its entries, in order; ``merge_only``
    is True when every entry either patched the file's metadata or created
    the file, so a foreign version can take the patches.
    """

    data: bytes
    known: set[str] | None = field(default_factory=set)
    patches: list[bytes] = field(default_factory=list)
    merge_only: bool = True


def replay_plan(records: list[list[JournalEntry]]) -> dict[str, FilePlan]:
    """Per file, in :func:`latest_per_file` order: the bytes to install and how to judge the disk.

    A file on disk whose digest is in ``known`` is in a state our records
    account for (before any of them, or as one of them left it): replay
    installs ``data``. Any other state is someone else's write made after
    our last install, which replay must not revert.
    """
    plans: dict[str, FilePlan] = {}
    for rel, data in latest_per_file(records).items():
        plans[rel] = FilePlan(data)
    for entries in records:
        for entry in entries:
            plan = plans[entry.rel]
            if entry.patch:
                plan.patches.append(entry.patch)
            elif entry.before != ABSENT:
                plan.merge_only = False
            if entry.before is None or plan.known is None:
                plan.known = None
                continue
            plan.known.add(entry.before)
            plan.known.add(digest(entry.data))
    return plans
