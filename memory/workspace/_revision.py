"""``workspace_revision``: one short name for "everything memory says right now".

A writer works against a snapshot; by the time its edits come back another
process (or a consolidation) may have changed memory. The transaction
compares the revision the writer started from with the current one under the
write lock (SPEC §5) and refuses stale edits. The revision must therefore
cover every file under ``<state>/memory`` except scriptorium's own machinery
(``.scriptorium*``, ``.git``, crash leftovers named ``*.scriptorium-tmp``),
while ``.scriptorium/runtime.json`` counts: its counters are memory state.
Directory links are followed and linked files counted by their target, as
every write sees them (the link rule, :mod:`store._links`).

Cost: a transaction runs on every batch, and a workspace holds thousands of
files plus archives that grow without bound, so re-reading every byte each
time is out. Each file's sha256 is cached under its stat signature (inode,
size, mtime_ns, ctime_ns) and only files whose signature changed are read.
The revision is the first 32 hex of sha256 over, in sorted relative-path
order, ``path \\0 sha256(bytes) \\0`` (the digest of each file rather than its
bytes, which a cache would have to hold in memory; see docs/decisions.md).

A file written within the filesystem's timestamp granularity of the scan
could change again without changing its signature ("racily clean", as git
calls it), so a signature younger than :data:`RACY_NS` is never trusted from
the cache.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field

from store.lowlevel import TEMP_SUFFIX, walk_files

__all__ = ["RACY_NS", "RevisionCache", "revision_paths", "workspace_revision"]

RACY_NS = 2_000_000_000  # coarse filesystems (FAT, some network mounts) tick every 2 s
_COUNTED_PRIVATE = ".scriptorium/runtime.json"

_Signature = tuple[int, int, int, int]


def revision_paths(
    memory_dir: str, linked: set[str] | None = None,
) -> list[tuple[str, os.stat_result]]:
    """Every counted file as ``(relative posix path, stat)``, sorted by path.

    Directory links are followed and linked files counted by their target
    (the link rule, :mod:`store._links`); the paths of linked files are added
    to ``linked``. Raises :class:`~store.UnsafeLinkError` on a link loop.
    """
    found: list[tuple[str, os.stat_result]] = []
    runtime = os.path.join(memory_dir, ".scriptorium", "runtime.json")
    try:
        stat = os.stat(runtime)
    except FileNotFoundError:
        pass
    else:
        found.append((_COUNTED_PRIVATE, stat))
    found.extend(walk_files(memory_dir, skip=_uncounted, linked=linked, shown="memory"))
    # Code point order is UTF-8 byte order, so sorting the strings sorts the paths' bytes.
    found.sort(key=lambda item: item[0])
    return found


def _uncounted(name: str) -> bool:
    return name == ".git" or name.startswith(".scriptorium") or name.endswith(TEMP_SUFFIX)


@dataclass
class RevisionCache:
    """Per-file digests keyed by stat signature, for one ``<state>/memory``."""

    memory_dir: str
    _digests: dict[str, tuple[_Signature, bytes]] = field(default_factory=dict)
    reads: int = 0  # files actually read (tests and the benchmark look at it)
    # The scan behind the last revision, for callers that need the file list too.
    last_scan: list[tuple[str, os.stat_result]] = field(default_factory=list)
    # Which files of that scan are symbolic links (never replaced, store/_links.py).
    last_linked: frozenset[str] = frozenset()

    def revision(self, *, now_ns: int | None = None) -> str:
        """The current ``workspace_revision``; reads only files whose stat changed."""
        linked: set[str] = set()
        self.last_scan = revision_paths(self.memory_dir, linked)
        self.last_linked = frozenset(linked)
        return self._digest_scan(now_ns)

    def revision_after(self, changed: list[str], *, now_ns: int | None = None) -> str:
        """The revision after the caller itself changed only ``changed`` since the last scan.

        Re-stats just those paths. Used right after an install under the write
        lock; if anything else moved meanwhile, the next full :meth:`revision`
        differs and the transaction refuses the stale base: never a lost update.
        """
        scan = {relative: stat for relative, stat in self.last_scan}
        for relative in changed:
            try:
                scan[relative] = os.stat(os.path.join(self.memory_dir, relative))
            except FileNotFoundError:
                scan.pop(relative, None)
        self.last_scan = sorted(scan.items(), key=lambda item: item[0])
        return self._digest_scan(now_ns)

    def _digest_scan(self, now_ns: int | None) -> str:
        # Each cached record is the whole ``path \0 digest \0`` slice, so an
        # unchanged file costs one dict lookup and one tuple comparison.
        trusted_before = (time.time_ns() if now_ns is None else now_ns) - RACY_NS
        digests = self._digests
        live: dict[str, tuple[_Signature, bytes]] = {}
        records: list[bytes] = []
        for relative, stat in self.last_scan:
            signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
            cached = digests.get(relative)
            if cached is not None and cached[0] == signature:
                record = cached[1]
            else:
                digest = self._read_digest(relative)
                if digest is None:  # vanished between the scan and the read
                    continue
                name = relative.encode("utf-8", "surrogateescape")
                record = name + b"\0" + digest + b"\0"
            # ctime moves with every content change (mtime can be set back).
            if stat.st_ctime_ns < trusted_before:
                live[relative] = (signature, record)
            records.append(record)
        self._digests = live
        return hashlib.sha256(b"".join(records)).hexdigest()[:32]

    def _read_digest(self, relative: str) -> bytes | None:
        self.reads += 1
        try:
            with open(os.path.join(self.memory_dir, relative), "rb") as handle:
                return hashlib.file_digest(handle, "sha256").digest()
        except FileNotFoundError:
            return None


def workspace_revision(memory_dir: str) -> str:
    """The revision computed from scratch (no cache)."""
    return RevisionCache(memory_dir).revision()
