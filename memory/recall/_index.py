"""The recall index: an SQLite FTS5 table derived from the workspace's files.

``<state>/memory/.scriptorium/recall.sqlite`` (WAL) is never the source of
truth: it holds what the topic files and the v2 archives say, and
:meth:`RecallIndex.rebuild` makes it again from them at any time. A
missing, corrupt or old-schema file is deleted and rebuilt, never fatal.

Keeping it current costs the change, not the workspace:

- :meth:`RecallIndex.sync` first asks ``workspace_revision`` (a stat scan;
  only files whose stat changed are read). The same revision as the last
  sync: nothing to do. So commits by other processes (another runtime, the
  reference agent) are picked up on the next query.
- A topic file is re-cut only when its digest changed (the stat signature
  says which to read).
- An archive only grows (SPEC §5: frames are appended, never rewritten), so
  when its first bytes are the ones indexed, only the frames after them are
  parsed and added; anything else is a full re-cut of that one archive.

One sync is one SQLite transaction, taken under ``.scriptorium/write.lock``
so that it reads a topic set no install is halfway through: a crash or an
error at any step rolls the whole sync back and the next one starts from the
state before it. Queries read a WAL snapshot, so a query during a sync sees
the index before it or after it.

Not thread-safe by itself: :class:`~memory.recall._recall.Recall` serialises
calls with a lock and runs them in worker threads.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from memory.recall._embedding import Embedder, pack_vector, unit_vector, unpack_vector
from memory.recall._private import cannot_write, empty_private, private_copy, reading_lock
from memory.recall._rank import SqlBound
from memory.recall._units import Unit, source_units, topic_units
from memory.workspace import (
    RACY_NS,
    ArchiveScan,
    RevisionCache,
    decode_topic,
    parse_archive,
    workspace_lock,
)
from store import DurableFiles, StoreError
from store.lowlevel import FILE_MODE, decode_node, parse_filename

__all__ = ["INDEX_PATH", "SCHEMA_VERSION", "TOKENIZE", "WEIGHTS", "IndexedUnit", "Predecessors",
           "RecallIndex", "SyncReport", "surroundings"]

INDEX_PATH = ".scriptorium/recall.sqlite"
SCHEMA_VERSION = "5"  # 5: a turn's surroundings from the DAG
_ARCHIVE_PREFIX = "sources/openprogram/_v2/"
_ARCHIVE_HEADER = b"<!-- openprogram-source-archive:v2 -->\n\n"
# bm25 weights of the FTS columns: the words, the speaker, the heading path, and
# the words of the adjacent turns (an answer rarely repeats the question's words).
WEIGHTS = (1.0, 0.6, 0.4, 0.5)
# How the words of a unit are cut (memory.recall._owed ranks owed turns the same way).
TOKENIZE = "porter unicode61 remove_diacritics 2"
# How many turns either side count as a turn's surroundings.
REACH = 3
# The longest a sync trusts the directories' stats without scanning the files (s).
FULL_SCAN_EVERY = 1.0
# The directories every recall file lies under (whether or not they exist yet).
_RECALL_DIRECTORIES = ("", "topics", "sources", "sources/openprogram", "sources/openprogram/_v2")

_SCHEMA = (
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ("CREATE TABLE files(path TEXT PRIMARY KEY, kind TEXT NOT NULL, signature TEXT NOT NULL,"
     " digest TEXT NOT NULL, size INTEGER NOT NULL, frames INTEGER NOT NULL,"
     " complete INTEGER NOT NULL)"),
    ("CREATE TABLE unit(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, path TEXT NOT NULL,"
     " seq INTEGER NOT NULL, text TEXT NOT NULL, when_text TEXT NOT NULL, start REAL,"
     " finish REAL, block_id TEXT NOT NULL, heading TEXT NOT NULL, sources TEXT NOT NULL,"
     " session TEXT NOT NULL, node_id TEXT NOT NULL, anchor TEXT NOT NULL,"
     " speaker TEXT NOT NULL, trust TEXT NOT NULL)"),
    "CREATE INDEX unit_by_path ON unit(path, seq)",
    "CREATE INDEX unit_by_anchor ON unit(session, anchor)",
    f"CREATE VIRTUAL TABLE fts USING fts5(text, speaker, heading, around, tokenize='{TOKENIZE}')",
    "INSERT INTO fts(fts, rank) VALUES('rank', 'bm25({}, {}, {}, {})')".format(*WEIGHTS),
    "CREATE TABLE vector(id INTEGER PRIMARY KEY, v BLOB NOT NULL)",
)


@dataclass(frozen=True, slots=True)
class IndexedUnit:
    """A unit as the index holds it, with its row id."""

    id: int
    unit: Unit


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


class Predecessors:
    """Each turn's predecessor, from the session store beside the workspace.

    A turn's surroundings are the turns next to it in its session's DAG,
    and an archive holds turns of every branch in the order they were
    written, so it cannot say which turns are next to which; the store can.
    The node files (``<state>/sessions/<sid>/history/*.json``, SPEC §4) are
    read with the store's own decoder, each once per process: a node's
    predecessor never changes. A session without a readable store gives
    nothing (the archive's order is used instead).
    """

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self._known: dict[str, dict[str, str | None]] = {}

    def of(self, session: str) -> dict[str, str | None]:
        """Node id -> predecessor id (``ROOT`` or None at a root) of every node of ``session``."""
        known = self._known.setdefault(session, {})
        history = os.path.join(self.state_dir, "sessions", session, "history")
        try:
            names = os.listdir(history)
        except OSError:
            return known
        for name in names:
            parsed = parse_filename(name)
            if parsed is None or parsed[2] in known:
                continue
            path = os.path.join(history, name)
            try:
                with open(path, "rb") as handle:
                    node = decode_node(handle.read(), path)
            except (OSError, StoreError):
                continue  # unreadable: the store reports it; this turn uses the archive's order
            known[node.id] = node.predecessor
        return known


def surroundings(
    turns: Sequence[tuple[int, str, str]], links: Mapping[str, str | None],
    changed: Iterable[int],
) -> dict[int, str]:
    """The ``around`` words of each turn whose surroundings ``changed`` turns may have moved.

    ``turns`` are ``(seq, node id, text)`` of one archive (all of them, or a
    window of seqs when ``links`` is empty); ``links`` maps node ids to
    their predecessors. A turn whose node id ``links`` knows is surrounded
    by its :data:`REACH` nearest archived ancestors (skipping nodes the
    archive does not hold, such as tool calls) and its descendants down a
    chain with no fork: below a fork, which branch follows depends on the
    branch asked from, so none does. Neither a rewound sibling nor the turns
    below it are ever a turn's neighbours. A turn ``links`` does not know
    is surrounded by the :data:`REACH` turns either side of it in the
    archive, as before. Pure.
    """
    by_seq = {seq: (node, text) for seq, node, text in turns}
    seq_of = {node: seq for seq, node, _ in turns}
    parent: dict[int, int | None] = {}
    children: dict[int, list[int]] = {}
    for seq, node, _ in turns:
        if node not in links:
            continue
        above, steps = links[node], 0
        while above is not None and above not in seq_of and above in links and steps < 64:
            above, steps = links[above], steps + 1  # past nodes the archive does not hold
        parent[seq] = seq_of.get(above) if above is not None else None
        if parent[seq] is not None:
            children.setdefault(parent[seq] or 0, []).append(seq)

    def ancestors(seq: int) -> list[int]:
        found: list[int] = []
        above = parent.get(seq)
        while above is not None and len(found) < REACH:
            found.append(above)
            above = parent.get(above)
        return found[::-1]

    def descendants(seq: int) -> list[int]:
        found: list[int] = []
        below = children.get(seq, [])
        while len(below) == 1 and len(found) < REACH:
            found.append(below[0])
            below = children.get(below[0], [])
        return found

    def near(seq: int) -> list[int]:
        if seq in parent:
            return ancestors(seq) + descendants(seq)
        return [n for n in range(seq - REACH, seq + REACH + 1) if n != seq]

    changed = [seq for seq in changed if seq in by_seq]
    affected = {n for seq in changed for n in range(seq - REACH, seq + 1)}
    for seq in changed:  # whose ancestors or fork-free descendants a new turn may be
        step = [seq]
        for _ in range(REACH):
            step = [n for m in step for n in (*children.get(m, []), parent.get(m)) if n is not None]
            affected.update(step)
    return {seq: " ".join(by_seq[n][1] for n in near(seq) if n in by_seq)
            for seq in sorted(affected) if seq in by_seq}


class RecallIndex:
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
        self.private: OSError | sqlite3.OperationalError | None = None

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
        """The connection; a missing, unreadable or old-schema index is made anew."""
        try:
            db = self._connect()
            row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            model = db.execute("SELECT value FROM meta WHERE key='embedder'").fetchone()
            if (row is not None and row[0] == SCHEMA_VERSION and model is not None
                    and model[0] == self._model()):
                db.execute("SELECT count(*) FROM fts WHERE fts MATCH 'x'").fetchone()
                return db
            db.close()
        except sqlite3.DatabaseError:
            pass
        return self._create()

    def _create(self) -> sqlite3.Connection:
        self._delete_files()
        db = self._connect(fresh=True)
        db.execute("BEGIN IMMEDIATE")
        for statement in _SCHEMA:
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
            if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
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
        lock = (workspace_lock if self.private is None else reading_lock)
        with lock(self.memory_dir, self.files, timeout=self._wait):
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
            self._surround(relative, session, first, first + len(tail.frames) - 1)
            self._record_file(relative, "archive", signature, digest, len(data),
                              first + len(tail.frames), True)
            return
        counts[2] += self._delete_units(relative)
        scan = parse_archive(data, session)
        counts[1] += self._insert(source_units(relative, session, scan))
        self._surround(relative, session, 0, len(scan.frames) - 1)
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

    def _surround(self, relative: str, session: str, first: int, last: int) -> None:
        """Set the ``around`` column (the adjacent turns' words) after turns ``first..last`` came.

        Adjacent in the session's DAG (:func:`surroundings`) when the store
        says each turn's predecessor; in the archive's order for a turn it
        does not know (an archive without its session store).
        """
        db = self.db
        links = self.predecessors.of(session)
        if not links:
            rows = list(db.execute(
                "SELECT id, seq, node_id, text FROM unit WHERE path=? AND seq BETWEEN ? AND ?"
                " ORDER BY seq", (relative, first - 2 * REACH, last + REACH)))
        else:
            rows = list(db.execute("SELECT id, seq, node_id, text FROM unit WHERE path=?"
                                   " ORDER BY seq", (relative,)))
        turns = [(int(seq), str(node), str(text)) for _, seq, node, text in rows]
        idents = {int(seq): int(ident) for ident, seq, _, _ in rows}
        for seq, around in surroundings(turns, links, range(first, last + 1)).items():
            db.execute("UPDATE fts SET around=? WHERE rowid=?", (around, idents[seq]))

    # -- reading -----------------------------------------------------------------

    def common_terms(self, expressions: Sequence[str], fraction: float,
                     floor: int = 0) -> set[str]:
        """Those of ``expressions`` (one quoted term each) matching over ``fraction`` of the units.

        And over ``floor`` units: a term in fewer costs little to score.

        Counted with a ``LIMIT`` inside the subquery, so a term costs at most
        that many postings to read, not its whole doclist (fts5vocab's ``doc``
        reads the whole doclist, as an unlimited ``count(*)`` does); and once
        per revision of the index: the words a workspace is asked about
        recur (a name, "near" in every question), and a common one costs
        the most to count.
        """
        total = self.total()
        bound = max(int(total * fraction), floor, 1)
        if total < bound:
            return set()
        known = self._common
        if len(known) > 10_000:  # a long quiet spell of ever new words
            known.clear()
        for expression in expressions:
            if (expression, bound) not in known:
                known[expression, bound] = self.db.execute(
                    "SELECT count(*) FROM (SELECT rowid FROM fts WHERE fts MATCH ? LIMIT ?)",
                    (expression, bound)).fetchone()[0] >= bound
        return {expression for expression in expressions if known[expression, bound]}

    def total(self) -> int:
        """How many units the index holds (counted once per revision)."""
        row = self.db.execute("SELECT value FROM meta WHERE key='revision'").fetchone()
        revision = "" if row is None else str(row[0])
        if self._total is None or self._total[0] != revision:
            self._total = (revision, self.count())
            self._common = {}
        return self._total[1]

    def search(self, expression: str, limit: int) -> list[tuple[int, float]]:
        """``(row id, bm25 score)`` of the best ``limit`` matches (lower score is better)."""
        return list(self.db.execute(
            "SELECT rowid, rank FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?",
            (expression, limit)))

    def bounded(self, expression: str, bound: SqlBound) -> Iterator[tuple[Unit, float, float]]:
        """``(unit, bm25 score, bound)`` of every match, best ``bound`` first (both lower better).

        Lazy: SQLite scores and sorts the matches once, and a unit's row is
        read only when the caller takes it, so a caller that stops early
        reads few rows.
        """
        # Only the id and the numbers go through the sort; a unit's row is
        # read when the caller takes it.
        cursor = self.db.execute(
            f"SELECT fts.rowid, fts.rank, {bound.order} AS bound FROM fts"
            f" JOIN unit ON unit.id = fts.rowid WHERE fts MATCH ? AND {bound.where}"
            " ORDER BY bound", (*bound.order_params, expression, *bound.where_params))
        while batch := cursor.fetchmany(16):
            units = self.units([row[0] for row in batch])
            self.rows_read += len(batch)
            for ident, rank, order_value in batch:
                yield units[ident], float(rank), float(order_value)

    def search_within(self, expression: str, start: float, end: float,
                      limit: int) -> list[tuple[int, float]]:
        """:meth:`search` among the units whose time overlaps ``[start, end)``."""
        return list(self.db.execute(
            "SELECT fts.rowid, fts.rank FROM fts JOIN unit ON unit.id = fts.rowid"
            " WHERE fts MATCH ? AND unit.start < ? AND unit.finish > ?"
            " ORDER BY fts.rank LIMIT ?", (expression, end, start, limit)))

    def nearest(self, text: str, limit: int) -> list[int]:
        """The ids of the ``limit`` units nearest ``text`` by the embedder (none without one).

        A scan of every vector: the backend is for workspaces an agent can
        read, not a vector database.
        """
        if self.embedder is None:
            return []
        query = unit_vector(self.embedder.embed([text])[0])
        scored: list[tuple[float, int]] = []
        for ident, blob in self.db.execute("SELECT id, v FROM vector"):
            vector = unpack_vector(blob)
            if len(vector) == len(query):
                scored.append((-sum(a * b for a, b in zip(query, vector, strict=True)), ident))
        scored.sort()
        return [ident for _, ident in scored[:limit]]

    def units(self, ids: Sequence[int]) -> dict[int, Unit]:
        found: dict[int, Unit] = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start:start + 500])
            marks = ",".join("?" * len(chunk))
            for row in self.db.execute(f"SELECT * FROM unit WHERE id IN ({marks})", chunk):
                found[row[0]] = _unit(row)
        return found

    def neighbours(self, path: str, seq: int, reach: int = 1) -> list[Unit]:
        """The turns of the same archive within ``reach`` frames of ``seq`` (itself left out)."""
        return [_unit(row) for row in self.db.execute(
            "SELECT * FROM unit WHERE path=? AND seq BETWEEN ? AND ? AND seq != ? ORDER BY seq",
            (path, seq - reach, seq + reach, seq))]

    def by_anchor(self, keys: Iterable[str]) -> dict[str, Unit]:
        """The archived turns behind ``<sid>#source-<16hex>`` keys (those that exist)."""
        by_session: dict[str, list[str]] = {}
        for key in keys:
            session, _, anchor = key.partition("#")
            by_session.setdefault(session, []).append(anchor)
        found: dict[str, Unit] = {}
        for session, anchors in by_session.items():
            for start in range(0, len(anchors), 500):
                chunk = anchors[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for row in self.db.execute(
                        f"SELECT * FROM unit WHERE session=? AND anchor IN ({marks})"
                        " ORDER BY id DESC", (session, *chunk)):
                    found[f"{session}#{row[13]}"] = _unit(row)  # the first row wins
        return found

    def dump(self) -> list[tuple[object, ...]]:
        """Every unit and its indexed words without the row id, sorted (to compare indexes)."""
        return sorted(row[1:] for row in self.db.execute(
            "SELECT unit.*, fts.text, fts.speaker, fts.heading, fts.around"
            " FROM unit JOIN fts ON fts.rowid = unit.id"))

    def count(self) -> int:
        row = self.db.execute("SELECT count(*) FROM unit").fetchone()
        return int(row[0])

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction: everything read inside sees one state of the index."""
        db = self.db
        db.execute("BEGIN")
        try:
            yield
        finally:
            db.execute("COMMIT")


def _unit(row: tuple[object, ...]) -> Unit:
    (_, kind, path, seq, text, when, start, finish, block_id, heading, sources, session,
     node_id, anchor, speaker, trust) = row
    return Unit(
        kind=str(kind), path=str(path), seq=int(str(seq)), text=str(text), when=str(when),
        start=None if start is None else float(str(start)),
        end=None if finish is None else float(str(finish)),
        block_id=str(block_id), heading=str(heading),
        sources=tuple(json.loads(str(sources))), session=str(session), node_id=str(node_id),
        anchor=str(anchor), speaker=str(speaker), trust=str(trust),
    )
