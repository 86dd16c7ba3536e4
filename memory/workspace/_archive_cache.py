"""A scan cache for the v2 source archives, so an append costs the batch, not the file.

``append_records`` is stateless: it reads the whole archive and scans it
strictly before every append. That keeps appends from other processes
visible, but the strict scan dominates the cost of an append as a session
grows (docs/decisions.md: 10-16x the raw file operations at 1,000 frames).
The WorkspaceActor appends to the same few archives over and over, and the
file changes under it only when another process writes.

So :class:`ArchiveCache` keeps, per session, the scan of the archive
together with the file's stamp (inode, size, mtime_ns, ctime_ns). An append
reads the bytes and ``fstat``\\ s the same open handle (bytes and stamp
describe one file), reuses the scan when the stamp matches, scans only the
new frames, and records the stamp of the file it installed. A stamp that
differs means someone else wrote: the file is scanned again, exactly once.

The cached scan is always what ``parse_archive`` would return for the bytes
with that stamp (tests check it against a fresh scan after every step), so
every rule of the archive (valid prefix, refusal after garbage, skip of
present ids) is unchanged. The whole-file atomic replace stays; what an
append costs beyond the raw read + write + fsync is now the batch's own
frames (``bench/workspace_archive.py``).

Limits: a stamp can only miss a change that keeps inode, size and both
nanosecond times, which a replace (new inode) or an append (new size)
cannot; and between our rename and our ``stat`` a writer in another process
could slip in its own replace, whose stamp we would then pair with our
scan. Archive appends from two processes on one workspace are a lost-frame
race anyway (read-modify-write); the runtime avoids them by owning the
workspace (docs/decisions.md).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import tzinfo

from memory.ledger._records import SourceRecord
from memory.workspace._archive import (
    V2_MARKER,
    AppendResult,
    ArchiveScan,
    archive_relpath,
    parse_archive,
    plan_append,
)
from store import DurableFiles

__all__ = ["ArchiveCache", "ArchiveCacheStatistics", "FileStamp", "extend_scan"]

_HEADER = (V2_MARKER + "\n\n").encode("ascii")


@dataclass(frozen=True, slots=True)
class _Plan:
    """One session's append, planned on the archive as read: what to install."""

    session_id: str
    records: tuple[SourceRecord, ...]
    existing: bytes
    stamp: FileStamp | None
    scan: ArchiveScan
    new: bytes
    added: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FileStamp:
    """What identifies one version of a file without reading it."""

    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, stat: os.stat_result) -> FileStamp:
        return cls(stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


@dataclass(frozen=True, slots=True)
class ArchiveCacheStatistics:
    """``scans``: full scans done (first sight or outside change); ``hits``: scans avoided."""

    hits: int
    scans: int
    appends: int
    entries: int


@dataclass(slots=True)
class _Entry:
    stamp: FileStamp | None  # None: the file did not exist
    scan: ArchiveScan
    trust: dict[str, bool] | None = None  # source id -> trusted, built on first lookup


def extend_scan(scan: ArchiveScan, existing: bytes, new: bytes, session_id: str) -> ArchiveScan:
    """The scan of ``new`` (``existing`` plus appended frames) from ``scan`` of ``existing``.

    Pure. Only the appended frames are parsed: ``plan_append`` put them after
    the header (empty file), directly (open-ended file) or after one LF.
    """
    if not existing:
        start = len(_HEADER)
    elif scan.open_ended:
        start = len(existing)
    else:
        start = len(existing) + 1
    tail = parse_archive(_HEADER + new[start:], session_id)
    if not tail.complete or tail.source_ids & scan.source_ids:
        return parse_archive(new, session_id)  # not an append of whole frames: scan it all
    return ArchiveScan(
        scan.frames + tail.frames,
        True,
        len(new),
        None,
        None,
        scan.source_ids | tail.source_ids,
        tail.open_ended,
    )


class ArchiveCache:
    """Scans of ``<memory>/sources/openprogram/_v2/*.md``, reused while the file is unchanged.

    Not thread-safe: one owner (the WorkspaceActor) calls it, one durable
    operation at a time (each method is one ``run_durable`` hop). At most
    ``max_sessions`` scans are kept, least recently used dropped first.
    """

    def __init__(
        self,
        memory_dir: str,
        files: DurableFiles | None = None,
        *,
        tz: tzinfo | None = None,
        max_sessions: int = 1024,
    ) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, not {max_sessions}")
        self.memory_dir = memory_dir
        self.files = files if files is not None else DurableFiles()
        self.tz = tz
        self.max_sessions = max_sessions
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._hits = 0
        self._scans = 0
        self._appends = 0

    def statistics(self) -> ArchiveCacheStatistics:
        return ArchiveCacheStatistics(self._hits, self._scans, self._appends, len(self._entries))

    def path(self, session_id: str) -> str:
        return os.path.join(self.memory_dir, archive_relpath(session_id))

    def forget(self, session_id: str) -> None:
        self._entries.pop(session_id, None)

    # -- reading -------------------------------------------------------------

    def scan(self, session_id: str) -> ArchiveScan:
        """The archive's scan, as ``read_archive`` would return it now."""
        try:
            stamp: FileStamp | None = FileStamp.of(os.stat(self.path(session_id)))
        except (FileNotFoundError, NotADirectoryError):
            stamp = None
        entry = self._lookup(session_id, stamp)
        if entry is None:
            data, stamp = self._read(session_id)
            entry = self._store(session_id, stamp, self._full_scan(data, session_id))
        return entry.scan

    def archived(self, source: str) -> bool | None:
        """``Transactions``' lookup: True trusted, False pending, None not archived."""
        parts = source.split("/")
        if len(parts) != 3 or parts[0] != "openprogram" or not parts[1]:
            return None
        self.scan(parts[1])
        entry = self._entries[parts[1]]
        if entry.trust is None:
            entry.trust = {frame.source_id: frame.trusted for frame in entry.scan.frames}
        return entry.trust.get(source)

    # -- appending ---------------------------------------------------------------

    def append(self, session_id: str, records: Sequence[SourceRecord]) -> AppendResult:
        """``append_records`` with the scan reused; one durable operation.

        Same contract: already-present frames are skipped (nothing written
        if all are), an incomplete archive is refused with
        :class:`IncompleteArchiveError`, the file is replaced atomically.
        """
        return self.append_many([(session_id, records)])[0]

    def append_many(
        self, batches: Sequence[tuple[str, Sequence[SourceRecord]]],
    ) -> list[AppendResult]:
        """:meth:`append` for several sessions' records, their files installed together.

        One ``write_atomic_many`` for every archive that gains frames, so a
        group commit's archives cost one bulk flush where the platform has
        one (``DurableFiles.write_atomic_many``), not two fsyncs each. Each
        file is still replaced atomically; a crash leaves each archive old
        or new. A session named twice is planned on its first plan's bytes.
        """
        if len({session_id for session_id, _ in batches}) != len(batches):
            return [result for session_id, records in batches
                    for result in self.append_many([(session_id, records)])]
        plans = [self._plan(session_id, records) for session_id, records in batches]
        writes = [(self.path(plan.session_id), plan.new) for plan in plans if plan.added]
        for plan in plans:
            if plan.added:
                self.forget(plan.session_id)  # until the new file's stamp is known
                self.files.make_dirs(os.path.dirname(self.path(plan.session_id)))
        if writes:
            self.files.write_atomic_many(writes)
            self._appends += len(writes)
        results: list[AppendResult] = []
        for plan in plans:
            fresh = set(plan.added)
            present = tuple(r.source_id for r in plan.records if r.source_id not in fresh)
            relpath = archive_relpath(plan.session_id)
            if not plan.added:
                self._store(plan.session_id, plan.stamp, plan.scan)
            else:
                self._store(plan.session_id, FileStamp.of(os.stat(self.path(plan.session_id))),
                            extend_scan(plan.scan, plan.existing, plan.new, plan.session_id))
            results.append(AppendResult(relpath, plan.added, present))
        return results

    def _plan(self, session_id: str, records: Sequence[SourceRecord]) -> _Plan:
        existing, stamp = self._read(session_id)
        entry = self._lookup(session_id, stamp)
        scan = entry.scan if entry is not None else self._full_scan(existing, session_id)
        new, added = plan_append(existing, session_id, records, tz=self.tz, scan=scan)
        return _Plan(session_id, tuple(records), existing, stamp, scan, new, tuple(added))

    # -- the cache itself ----------------------------------------------------------

    def _lookup(self, session_id: str, stamp: FileStamp | None) -> _Entry | None:
        entry = self._entries.get(session_id)
        if entry is None or entry.stamp != stamp:
            return None
        self._hits += 1
        self._entries.move_to_end(session_id)
        return entry

    def _full_scan(self, data: bytes, session_id: str) -> ArchiveScan:
        self._scans += 1
        return parse_archive(data, session_id)

    def _store(self, session_id: str, stamp: FileStamp | None, scan: ArchiveScan) -> _Entry:
        entry = _Entry(stamp, scan)
        self._entries[session_id] = entry
        self._entries.move_to_end(session_id)
        while len(self._entries) > self.max_sessions:
            self._entries.popitem(last=False)
        return entry

    def _read(self, session_id: str) -> tuple[bytes, FileStamp | None]:
        """The file's bytes and the stamp of that very file (one open handle)."""
        try:
            with open(self.path(session_id), "rb") as handle:
                stamp = FileStamp.of(os.fstat(handle.fileno()))
                return handle.read(), stamp
        except (FileNotFoundError, NotADirectoryError):
            return b"", None
