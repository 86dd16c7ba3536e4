"""The recall index: an SQLite FTS5 table derived from the workspace's files.

``<state>/memory/.scriptorium/recall.sqlite`` (WAL) is never the source of
truth: it holds what the topic files and the v2 archives say, and
:meth:`RecallIndex.rebuild` makes it again from them at any time. A missing,
corrupt or old-schema file is rebuilt; a full or failing disk is raised.

Keeping it current costs the change, not the workspace:

- :meth:`RecallIndex.sync` first asks ``workspace_revision`` (a stat scan;
  only files whose stat changed are read). The same revision as the last
  sync: nothing to do. So commits by other processes (another runtime, the
  reference agent) are picked up on the next query.
- A topic file is re-cut only when its digest changed (its stat says which).
- An archive only grows (SPEC §5: frames are appended, never rewritten), so
  when its first bytes are the ones indexed, only the frames after them are
  parsed and added; anything else is a full re-cut of that one archive.

One sync is one SQLite transaction, taken under ``.scriptorium/write.lock``
so that it reads a topic set no install is halfway through: a crash or an
error at any step rolls the whole sync back and the next one starts from the
state before it. Queries read a WAL snapshot, so a query during a sync sees
the index before it or after it.

Not thread-safe by itself: :class:`~memory.recall._recall.Recall` serialises
calls with a lock and runs them in worker threads. The tables are
:mod:`~memory.recall._schema`'s, the queries :mod:`~memory.recall._index_reads`'s
and a turn's neighbours :mod:`~memory.recall._surroundings`'s.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from memory.recall._embedding import Embedder, pack_vector
from memory.recall._index_reads import IndexReads
from memory.recall._private import (
    cannot_write,
    empty_private,
    not_damage,
    private_copy,
    reading_lock,
)
from memory.recall._schema import INDEX_PATH, SCHEMA, SCHEMA_VERSION
from memory.recall._surroundings import Predecessors, write_surroundings
from memory.recall._units import Unit, source_units, topic_units
from memory.workspace import (
    RACY_NS,
    ArchiveScan,
    RevisionCache,
    decode_topic,
    parse_archive,
    workspace_lock,
)
from store import DurableFiles
from store.lowlevel import FILE_MODE

__all__ = ["FULL_SCAN_EVERY", "RecallIndex", "SyncReport"]

_ARCHIVE_PREFIX = "sources/openprogram/_v2/"
_ARCHIVE_HEADER = b"<!-- openprogram-source-archive:v2 -->\n\n"
# The longest a sync trusts the directories' stats without scanning the files (s).
FULL_SCAN_EVERY = 1.0
# The directories every recall file lies under (whether or not they exist yet).
_RECALL_DIRECTORIES = ("", "topics", "sources", "sources/openprogram", "sources/openprogram/_v2")


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one sync did: files re-cut, units added and removed, whether it rebuilt."""

    revision: str
    files: int
    added: int
    removed: int
    rebuilt: bool = False
    private: bool = False  # the state could not be written: an index in memory, this process's


class _Default:
    """The type of "not given" for :meth:`RecallIndex.sync`'s lock bound (None means forever)."""


_DEFAULT = _Default()


def _signature(stat: os.stat_result) -> str:
    return f"{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ctime_ns}"


def _directory_stamp(memory_dir: str, relative: str) -> tuple[int, int, int] | None:
    """``(inode, mtime ns, ctime ns)`` of a directory (a link followed); None if there is none."""
    try:
        stat = os.stat(os.path.join(memory_dir, relative))
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns


def _is_topic(relative: str) -> bool:
    return relative.startswith("topics/") and relative.endswith(".md") and "/." not in relative


def _archive_session(relative: str) -> str | None:
    if not relative.startswith(_ARCHIVE_PREFIX) or not relative.endswith(".md"):
        return None
    stem = relative[len(_ARCHIVE_PREFIX):-3]
    return unquote(stem) if stem and "/" not in stem else None


class RecallIndex(IndexReads):
    """The index of one ``<state>/memory``; see the module docstring.

    ``step`` is called with a name at each step of a sync (tests plant
    crashes there, as ``tests/faults.py`` does for durable writes).
    """

    def __init__(
        self,
        memory_dir: str,
        *,
        files: DurableFiles | None = None,
        lock_timeout: float | None = None,
        step: Callable[[str], None] | None = None,
        embedder: Embedder | None = None,
        clock: Callable[[], int] = time.time_ns,
        read_only: bool = False,
    ) -> None:
        self.memory_dir = memory_dir
        self.embedder = embedder
        self.path = os.path.join(memory_dir, INDEX_PATH)
        self.files = files if files is not None else DurableFiles()
        self.lock_timeout = lock_timeout
        self.step = step or (lambda name: None)
        self.revisions = RevisionCache(memory_dir)
        self.predecessors = Predecessors(os.path.dirname(os.path.abspath(memory_dir)))
        self._db: sqlite3.Connection | None = None
        self._wait = lock_timeout
        self._total: tuple[str, int] | None = None
        self.clock = clock
        # After a full scan: (revision, when it began in clock ns, directory stamps).
        self._quiet: tuple[str, int, dict[str, tuple[int, int, int] | None]] | None = None
        self._common: dict[tuple[str, int], bool] = {}  # (term, bound) -> common (per revision)
        self.rows_read = 0  # unit rows a ranked query read (tests look at it)
        # Why the shared file could not be written (memory.recall._private); None: it can.
        # ``read_only`` (the inspector): private from the start, and no lock file is made.
        self.read_only = read_only
        self.private: OSError | sqlite3.OperationalError | None = (
            PermissionError(errno.EROFS, "opened read-only", self.path) if read_only else None)

    # -- opening -----------------------------------------------------------------

    @property
    def opened(self) -> bool:
        """Whether this process has the index open (a sync or a query used it)."""
        return self._db is not None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._privately_if_read_only(self._open)
        return self._db

    def _privately_if_read_only(
        self, make: Callable[[], sqlite3.Connection],
    ) -> sqlite3.Connection:
        """``make()``; if the state cannot be written, again with a private index."""
        try:
            return make()
        except (OSError, sqlite3.OperationalError) as error:
            if self.private is not None or not cannot_write(error):
                raise
            self.private = error
            return make()

    def _connect(self, *, fresh: bool = False) -> sqlite3.Connection:
        if self.private is not None:
            return empty_private() if fresh else private_copy(self.path)
        self.files.make_dirs(os.path.dirname(self.path))
        # Owner-only (SPEC §3): SQLite gives its -wal and -shm files the mode of
        # the database file, so the file is created 0600 before SQLite opens it.
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE))
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                             timeout=30.0)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # derived data: a lost tail is re-synced
        return db

    def _open(self) -> sqlite3.Connection:
        """The connection; a missing, damaged or old-schema index is made anew."""
        db = self._connect()
        try:
            row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            model = db.execute("SELECT value FROM meta WHERE key='embedder'").fetchone()
            if (row is not None and row[0] == SCHEMA_VERSION and model is not None
                    and model[0] == self._model()):
                db.execute("SELECT count(*) FROM fts WHERE fts MATCH 'x'").fetchone()
                return db
        except sqlite3.DatabaseError as error:
            if not_damage(error):
                db.close()
                raise
        db.close()
        return self._create()

    def _create(self) -> sqlite3.Connection:
        self._delete_files()
        db = self._connect(fresh=True)
        db.execute("BEGIN IMMEDIATE")
        for statement in SCHEMA:
            db.execute(statement)
        db.execute("INSERT INTO meta VALUES('schema', ?), ('revision', ''), ('embedder', ?)",
                   (SCHEMA_VERSION, self._model()))
        db.execute("COMMIT")
        return db

    def _model(self) -> str:
        """The embedder's name in the index (vectors of another model are not comparable)."""
        return "" if self.embedder is None else "model:" + self.embedder.name

    def _delete_files(self) -> None:
        self._quiet = None
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
        if self.private is not None:
            return  # the shared file is not ours to delete
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path + suffix)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- keeping it current --------------------------------------------------------

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> SyncReport:
        """Delete the index and make it again from the files (in memory if the state is read-only).

        ``progress(done, total)`` counts files.
        """
        self._db = self._privately_if_read_only(self._create)  # deletes the old files first
        report = self.sync(progress=progress)
        return SyncReport(report.revision, report.files, report.added, report.removed, True,
                          self.private is not None)

    def sync(self, *, lock_timeout: float | None | _Default = _DEFAULT,
             full: bool = False, progress: Callable[[int, int], None] | None = None) -> SyncReport:
        """Bring the index to the files' current state; a no-op at the same revision.

        A damaged index found on the way is rebuilt (once). ``lock_timeout``
        bounds the wait for write.lock (default: the index's own). Unless
        ``full``, a sync whose directories say nothing changed (:meth:`quiet`)
        does not scan the files.
        """
        known = self._quiet
        if not full and known is not None and self.quiet():
            return SyncReport(known[0], 0, 0, 0)
        self._wait = self.lock_timeout if isinstance(lock_timeout, _Default) else lock_timeout
        try:
            return self._sync(progress)
        except sqlite3.DatabaseError as error:
            if not_damage(error):
                raise
            self._db = self._privately_if_read_only(self._create)
            report = self._sync(progress)
            return SyncReport(report.revision, report.files, report.added, report.removed, True,
                              self.private is not None)

    # -- the cheap check --------------------------------------------------------------

    def quiet(self) -> bool:
        """Whether the files recall reads are known unchanged since the last scan, by a few stats.

        Every write scriptorium makes under ``<state>/memory`` replaces a file
        (temp file, rename), and a rename moves its directory's mtime; a new
        directory moves its parent's. So when every directory that holds (or
        leads to) a topic file or an archive has the stat it had at the last
        full scan, nothing recall reads changed, and the scan is skipped.
        Trusted only when those stats were older than :data:`RACY_NS` at that
        scan (a rename in the same timestamp tick leaves an mtime as it was),
        and for at most :data:`FULL_SCAN_EVERY` seconds: an outside writer
        that writes a file in place moves no directory, and is seen by the
        full scan that follows within that time.
        """
        if self._quiet is None:
            return False
        _, scanned_at, directories = self._quiet
        if self.clock() - scanned_at > FULL_SCAN_EVERY * 1e9:
            return False
        return all(_directory_stamp(self.memory_dir, relative) == stamp
                   for relative, stamp in directories.items())

    def _remember_quiet(self, revision: str, scanned_at: int,
                        scan: Sequence[tuple[str, os.stat_result]]) -> None:
        """Keep the directories' stats after a full scan begun at ``scanned_at`` (ns)."""
        wanted = set(_RECALL_DIRECTORIES)
        for relative, _ in scan:
            if _is_topic(relative) or _archive_session(relative) is not None:
                parent = os.path.dirname(relative)
                while parent and parent not in wanted:
                    wanted.add(parent)
                    parent = os.path.dirname(parent)
        directories = {relative: _directory_stamp(self.memory_dir, relative)
                       for relative in sorted(wanted)}
        settled = all(stamp is None or max(stamp[1], stamp[2]) < scanned_at - RACY_NS
                      for stamp in directories.values())
        self._quiet = (revision, scanned_at, directories) if settled else None

    def _sync(self, progress: Callable[[int, int], None] | None = None) -> SyncReport:
        db = self.db
        self._quiet = None
        lock = (workspace_lock(self.memory_dir, self.files, timeout=self._wait)
                if self.private is None else reading_lock(self.memory_dir, self.files, self._wait,
                                                          create=not self.read_only))
        with lock:
            scanned_at = self.clock()
            revision = self.revisions.revision()
            row = db.execute("SELECT value FROM meta WHERE key='revision'").fetchone()
            if row is not None and row[0] == revision:
                self._remember_quiet(revision, scanned_at, self.revisions.last_scan)
                return SyncReport(revision, 0, 0, 0)
            scan = list(self.revisions.last_scan)
            db.execute("BEGIN IMMEDIATE")
            try:
                known = {path: (kind, signature, digest, size, frames, complete)
                         for path, kind, signature, digest, size, frames, complete
                         in db.execute("SELECT * FROM files")}
                counts = [0, 0, 0]  # files, added, removed
                seen: set[str] = set()
                for done, (relative, stat) in enumerate(scan, 1):
                    if progress is not None:
                        progress(done, len(scan))
                    if _is_topic(relative):
                        seen.add(relative)
                        self._sync_topic(relative, stat, known.get(relative), counts)
                    elif (session := _archive_session(relative)) is not None:
                        seen.add(relative)
                        self._sync_archive(relative, session, stat, known.get(relative), counts)
                for gone in sorted(set(known) - seen):
                    self.step("remove")
                    counts[2] += self._delete_units(gone)
                    db.execute("DELETE FROM files WHERE path=?", (gone,))
                    counts[0] += 1
                self.step("revision")
                db.execute("UPDATE meta SET value=? WHERE key='revision'", (revision,))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            self._remember_quiet(revision, scanned_at, scan)
        return SyncReport(revision, counts[0], counts[1], counts[2])

    def _read(self, relative: str) -> bytes | None:
        try:
            with open(os.path.join(self.memory_dir, relative), "rb") as handle:
                return handle.read()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _read_if_touched(
        self, relative: str, stat: os.stat_result, known: tuple[object, ...] | None,
    ) -> tuple[str, bytes, str] | None:
        """Its stat signature, bytes and digest; None if the signature is known or it is gone."""
        signature = _signature(stat)
        if known is not None and known[1] == signature:
            return None
        data = self._read(relative)
        if data is None:
            return None
        return signature, data, hashlib.sha256(data).hexdigest()

    def _sync_topic(
        self, relative: str, stat: os.stat_result, known: tuple[object, ...] | None,
        counts: list[int],
    ) -> None:
        read = self._read_if_touched(relative, stat, known)
        if read is None:
            return
        signature, data, digest = read
        if known is None or known[2] != digest:
            self.step("topic")
            counts[0] += 1
            counts[2] += self._delete_units(relative)
            try:
                text = decode_topic(data, relative)
            except Exception:  # noqa: BLE001 - a file that is not UTF-8 has no units
                units: list[Unit] = []
            else:
                units = topic_units(relative, text)
            counts[1] += self._insert(units)
        self._record_file(relative, "topic", signature, digest, len(data), 0, True)

    def _sync_archive(
        self, relative: str, session: str, stat: os.stat_result,
        known: tuple[object, ...] | None, counts: list[int],
    ) -> None:
        read = self._read_if_touched(relative, stat, known)
        if read is None:
            return
        signature, data, digest = read
        if known is not None and known[2] == digest:
            self._record_file(relative, "archive", signature, digest, len(data),
                              int(str(known[4])), bool(known[5]))
            return
        self.step("archive")
        counts[0] += 1
        grown = self._appended(relative, session, data, known)
        if grown is not None:
            first, tail = grown
            counts[1] += self._insert(source_units(relative, session, tail, 0), offset=first)
            write_surroundings(self.db, self.predecessors, relative, session, first, first + len(tail.frames) - 1)
            self._record_file(relative, "archive", signature, digest, len(data),
                              first + len(tail.frames), True)
            return
        counts[2] += self._delete_units(relative)
        scan = parse_archive(data, session)
        counts[1] += self._insert(source_units(relative, session, scan))
        write_surroundings(self.db, self.predecessors, relative, session, 0, len(scan.frames) - 1)
        self._record_file(relative, "archive", signature, digest, len(data),
                          len(scan.frames), scan.complete)

    def _appended(
        self, relative: str, session: str, data: bytes, known: tuple[object, ...] | None,
    ) -> tuple[int, ArchiveScan] | None:
        """``(first seq, scan of the new frames)`` when ``data`` only adds frames; else None."""
        if known is None or not known[5]:
            return None
        size, frames = int(str(known[3])), int(str(known[4]))
        if size == 0 or len(data) <= size:
            return None
        if hashlib.sha256(data[:size]).hexdigest() != known[2]:
            return None
        tail_bytes = data[size:]
        if tail_bytes.startswith(b"\n"):
            tail_bytes = tail_bytes[1:]  # the separator after a closed last frame
        tail = parse_archive(_ARCHIVE_HEADER + tail_bytes, session)
        if not tail.complete or not tail.frames:
            return None
        ids = [frame.message_id for frame in tail.frames]
        placeholders = ",".join("?" * len(ids))
        clash = self.db.execute(
            f"SELECT 1 FROM unit WHERE path=? AND node_id IN ({placeholders}) LIMIT 1",
            (relative, *ids)).fetchone()
        return None if clash is not None else (frames, tail)

    def _record_file(
        self, relative: str, kind: str, signature: str, digest: str, size: int, frames: int,
        complete: bool,
    ) -> None:
        self.db.execute("INSERT OR REPLACE INTO files VALUES(?, ?, ?, ?, ?, ?, ?)",
                        (relative, kind, signature, digest, size, frames, int(complete)))

    def _delete_units(self, relative: str) -> int:
        db = self.db
        ids = [row[0] for row in db.execute("SELECT id FROM unit WHERE path=?", (relative,))]
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            db.execute(f"DELETE FROM fts WHERE rowid IN ({marks})", chunk)
            db.execute(f"DELETE FROM vector WHERE id IN ({marks})", chunk)
            db.execute(f"DELETE FROM unit WHERE id IN ({marks})", chunk)
        return len(ids)

    def _insert(self, units: Iterable[Unit], offset: int = 0) -> int:
        db = self.db
        count = 0
        embed: list[tuple[int, str]] = []
        for unit in units:
            cursor = db.execute(
                "INSERT INTO unit(kind, path, seq, text, when_text, start, finish, block_id,"
                " heading, sources, session, node_id, anchor, speaker, trust)"
                " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (unit.kind, unit.path, unit.seq + offset, unit.text, unit.when, unit.start,
                 unit.end, unit.block_id, unit.heading, json.dumps(unit.sources),
                 unit.session, unit.node_id, unit.anchor, unit.speaker, unit.trust))
            db.execute("INSERT INTO fts(rowid, text, speaker, heading, around)"
                       " VALUES(?, ?, ?, ?, '')",
                       (cursor.lastrowid, unit.text, unit.speaker, unit.heading))
            embed.append((int(cursor.lastrowid or 0), unit.text))
            count += 1
        if self.embedder is not None and embed:
            vectors = self.embedder.embed([text for _, text in embed])
            db.executemany("INSERT INTO vector(id, v) VALUES(?, ?)",
                           [(ident, pack_vector(v)) for (ident, _), v in zip(embed, vectors,
                                                                            strict=True)])
        return count
