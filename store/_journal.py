"""The batch journal: N node rewrites for two fsyncs on the critical path.

The problem: a marker merge rewrites N node files, and writing each durably
(temp, fsync, rename) plus one directory fsync costs N+1 fsyncs before the
writer worker may go on; at 64 nodes that is most of a batch's latency.

The design. A metadata batch (and a rewind, which stamps nodes and moves
the head) first writes one *journal* holding the full new bytes of every
file it will change, durably: temp file, fsync, rename, fsync of the session
directory (2 fsyncs). Then each file is installed with
:meth:`~store._durable.DurableFiles.replace_unsynced` (temp + rename, no
fsync): readers never see a torn file, and the journal is what makes the new
bytes durable. The operation is acknowledged. Later the journal is *retired*:
``sync_paths`` the installed files (and their directories), then unlink the
journal. That happens when the owner is idle, at close, or before any later
mutation touches a file the journal names.

Recovery. Opening a session (and taking its lock) replays every journal
found that this owner did not write: install each file's journal bytes
again, sync them, unlink the journal. Replay is idempotent (it only ever
installs the same bytes), so a crash during replay is repaired by the next
replay.

The invariant that makes replay safe: **a file named by an outstanding
journal is not changed again until that journal is retired.** Otherwise a
replay after a crash would put back older bytes over a newer write. The
session core keeps it by retiring every outstanding journal that names a
file before touching that file, and by retiring, under the session lock,
journals left by other processes before doing anything.

Crash cases (each one tested by killing the operation at every step):

* before the journal's rename: no journal, no file changed, not acknowledged;
* after it, during installs: some files new, some old; the next open
  replays, so all are new, and the operation was durable before its ack;
* during retirement: the journal still exists; replay installs identical
  bytes and finishes the retirement;
* an ``OSError`` after the journal's rename (the owner keeps running): the
  owner does not count the journal as its own, so its next mutation (or
  any other lock holder) replays it like a crash leftover; the caller got
  the error, and the batch ends up whole, as a retried merge would leave it.

A journal is a header line ``scriptorium-journal 1``, then per file its
path relative to the session directory, a line with its length, its bytes
and a newline, then ``end``: framing, not JSON, because the journal sits on
the critical path and its content is already encoded. It is atomic by
rename, so a journal that does not parse was damaged outside scriptorium: it
is reported and left in place.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable

from ._durable import DurableFiles
from ._errors import CorruptFileError
from ._format import parse_filename

__all__ = [
    "JOURNAL_PREFIX",
    "JOURNAL_SUFFIX",
    "decode_journal",
    "encode_journal",
    "find_journals",
    "journal_name",
    "retire",
    "write_and_install",
]

JOURNAL_PREFIX = ".journal-"
JOURNAL_SUFFIX = ".json"
_HEADER = b"scriptorium-journal 1\n"
_TRAILER = b"end\n"


def journal_name() -> str:
    return f"{JOURNAL_PREFIX}{secrets.token_hex(8)}{JOURNAL_SUFFIX}"


def _valid_target(rel: object) -> bool:
    if rel == "meta.json":
        return True
    if not isinstance(rel, str) or not rel.startswith("history/"):
        return False
    name = rel[len("history/"):]
    return "/" not in name and parse_filename(name) is not None


def encode_journal(entries: list[tuple[str, bytes]]) -> bytes:
    parts = [_HEADER]
    for rel, data in entries:
        parts.append(f"{rel}\n{len(data)}\n".encode())
        parts.append(data)
        parts.append(b"\n")
    parts.append(_TRAILER)
    return b"".join(parts)


def decode_journal(data: bytes, path: str) -> list[tuple[str, bytes]]:
    if not data.startswith(_HEADER):
        raise CorruptFileError(path, "not a version-1 journal")
    entries: list[tuple[str, bytes]] = []
    at = len(_HEADER)
    while data[at:] != _TRAILER:
        try:
            rel_end = data.index(b"\n", at)
            size_end = data.index(b"\n", rel_end + 1)
            rel = data[at:rel_end].decode("utf-8")
            size = int(data[rel_end + 1:size_end])
        except (ValueError, UnicodeDecodeError):
            raise CorruptFileError(path, f"journal entry at byte {at} is malformed") from None
        body_end = size_end + 1 + size
        if not _valid_target(rel) or size < 0 or data[body_end:body_end + 1] != b"\n":
            raise CorruptFileError(path, f"journal entry {rel[:80]!r} is not a node or meta")
        entries.append((rel, data[size_end + 1:body_end]))
        at = body_end + 1
    return entries


def find_journals(session_dir: str) -> list[str]:
    """Names of the journals in ``session_dir``, sorted."""
    try:
        names = os.listdir(session_dir)
    except FileNotFoundError:
        return []
    return sorted(
        n for n in names if n.startswith(JOURNAL_PREFIX) and n.endswith(JOURNAL_SUFFIX)
    )


def write_and_install(
    files: DurableFiles, session_dir: str, entries: list[tuple[str, bytes]]
) -> str:
    """Journal ``entries`` durably (2 fsyncs), install each unsynced; return the journal name."""
    name = journal_name()
    files.write_atomic(os.path.join(session_dir, name), encode_journal(entries))
    for rel, data in entries:
        files.replace_unsynced(os.path.join(session_dir, rel), data)
    return name


def retire(
    files: DurableFiles,
    session_dir: str,
    name: str,
    targets: Iterable[tuple[str, bytes]],
    *,
    install: bool,
) -> None:
    """Make the journaled files durable, then drop the journal.

    ``install=True`` (recovery) first puts the journal's bytes in place,
    since a crash may have happened before some installs.
    """
    paths: list[str] = []
    for rel, data in targets:
        path = os.path.join(session_dir, rel)
        if install:
            files.replace_unsynced(path, data)
        paths.append(path)
    files.sync_paths(paths)
    files.unlink(os.path.join(session_dir, name))
