"""``workspace_revision``: one short name for "everything memory says right now".

A writer works against a snapshot; by the time its edits come back another
process (or a consolidation) may have changed memory. The transaction
compares the revision the writer started from with the current one under the
write lock (SPEC §5) and refuses stale edits. The revision must therefore
cover every file under ``<state>/memory`` except scriptorium's own machinery
(``.scriptorium*``, ``.git``, crash leftovers named ``*.scriptorium-tmp``),
while ``.scriptorium/runtime.json`` counts: its counters are memory state.

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

from store._durable import TEMP_SUFFIX

__all__ = ["RevisionCache", "workspace_revision", "revision_paths", "RACY_NS"]

RACY_NS = 2_000_000_000  # coarse filesystems (FAT, some network mounts) tick every 2 s
_COUNTED_PRIVATE = ".scriptorium/runtime.json"

_Signature = tuple[int, int, int, int]


def _skipped(relative: str, name: str) -> bool:
    return name == ".git" or name.startswith(".scriptorium") or name.endswith(TEMP_SUFFIX)


def revision_paths(memory_dir: str) -> list[tuple[str, os.stat_result]]:
    """Every counted file as ``(relative posix path, stat)``, sorted by path."""
    found: list[tuple[str, os.stat_result]] = []
    runtime = os.path.join(memory_dir, ".scriptorium", "runtime.json")
    try:
        stat = os.stat(runtime)
    except FileNotFoundError:
        pass
    else:
        found.append((_COUNTED_PRIVATE, stat))
    stack = [("", memory_dir)]
    while stack:
        prefix, directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            continue
        for entry in entries:
            relative = prefix + entry.name
            if _skipped(relative, entry.name):
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append((relative + "/", entry.path))
            elif entry.is_file(follow_symlinks=False):
                found.append((relative, entry.stat(follow_symlinks=False)))
    found.sort(key=lambda item: item[0].encode("utf-8"))
    return found


@dataclass
class RevisionCache:
    """Per-file digests keyed by stat signature, for one ``<state>/memory``."""

    memory_dir: str
    _digests: dict[str, tuple[_Signature, bytes]] = field(default_factory=dict)
    reads: int = 0  # files actually read (tests and the benchmark look at it)

    def revision(self, *, now_ns: int | None = None) -> str:
        """The current ``workspace_revision``; reads only files whose stat changed."""
        now = time.time_ns() if now_ns is None else now_ns
        total = hashlib.sha256()
        live: dict[str, tuple[_Signature, bytes]] = {}
        for relative, stat in revision_paths(self.memory_dir):
            signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
            cached = self._digests.get(relative)
            if cached is not None and cached[0] == signature:
                digest = cached[1]
            else:
                read = self._read_digest(relative)
                if read is None:  # vanished between the scan and the read
                    continue
                digest = read
            if now - max(stat.st_mtime_ns, stat.st_ctime_ns) > RACY_NS:
                live[relative] = (signature, digest)
            total.update(relative.encode("utf-8") + b"\0" + digest + b"\0")
        self._digests = live
        return total.hexdigest()[:32]

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
