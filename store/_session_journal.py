"""One session's journal as its owner keeps it: adopt, write, checkpoint.

:mod:`store._journal` says what a record is and how a journal is read; this
module is what the owner of a session (:class:`~store._session.SessionCore`,
under ``<sid>/.lock``) does with ``<sid>/.journal`` to make its mutations
durable with one flush each:

- **write** a mutation as one record (``append_synced``: the one flush), then
  install its files unsynced (``replace_unsynced``), remembering which files
  still rest on the journal;
- **adopt** a journal this owner did not leave as it is (another process's
  records, or its own after a failed write): install each file as the last
  record naming it left it, and keep the records, so this owner's records
  follow them and replay order still holds;
- **checkpoint**: sync every file the journal names, then truncate it. The
  owner does it when idle or closing, and a write does it first once the
  journal passes a bound, so replay has a bounded amount to read.

How the owner tells its journal from a foreign one: after each of its own
writes it remembers the journal's *stamp* (inode, size, mtime). The journal
is written only under the session lock, so a different stamp under the lock
means another owner wrote, or this owner's write failed part-way; either way
only a replay knows what the journal holds.

Files the reference agent also writes, without the lock: a metadata patch
is installed with :meth:`~store._durable.DurableFiles.replace_unsynced_if`,
which re-reads the node file right before the rename; if it changed since
the record was made, the patch is merged again onto what is there now (our
patch's keys win: it is the newer write), so only the rename itself can
still lose the other writer's key. Replay never reverts a file someone else
changed after the record (see :mod:`store._journal`): it merges the
records' patch keys the file lacks, or leaves the file alone, and reports
each such file in :attr:`SessionJournal.conflicts`.

The index and meta.json cache are not kept here: the owner drops them when
it adopts (a foreign write may fall in the same timestamp tick, which the
index fingerprint cannot see; the journal's stamp can).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import Literal

from ._damage import warn_damaged
from ._durable import DurableFiles, ExchangeUnsupported
from ._errors import JournalFileError, NodeFileError, StoreError
from ._format import DEFAULT_MAX_NODE_BYTES, decode_node, encode_with_metadata
from ._index import META, FileStamp, file_stamp
from ._journal import (
    JOURNAL_NAME,
    JournalEntry,
    digest,
    encode_record,
    read_journal,
    replay_plan,
)
from ._links import refuse_file_link
from ._runtime_log import RuntimeLog, dead_live_records, discard_dead, retire_dead

__all__ = [
    "CHECKPOINT_BYTES",
    "CHECKPOINT_RECORDS",
    "JournalConflict",
    "LoggedJournal",
    "SessionJournal",
]

# Records accumulate in the journal until the owner is idle or closes; past
# either bound the next write checkpoints first, bounding what a replay
# has to read and install.
CHECKPOINT_RECORDS = 64
CHECKPOINT_BYTES = 8 * 1024 * 1024
# A file rewritten again at every re-read: after this many merges the other
# writer's version stands (a replay reports it; a live merge raises).
MERGE_ATTEMPTS = 8

MAX_CONFLICTS = 100  # the newest replay conflicts an owner remembers

Outcome = Literal["ours", "merged", "theirs"]


@dataclass(frozen=True)
class JournalConflict:
    """A file replay found changed by someone else since the record was written.

    ``outcome``: ``merged`` (the records' patch keys the file lacked were
    added to the other writer's version) or ``theirs`` (left as the other
    writer made it: meta.json, a file our append created, an unreadable
    node, or a patch with nothing left to add).
    """

    file: str  # relative to the state directory
    outcome: Outcome


class SessionJournal:
    """``<sid>/.journal`` and what its owner knows about it; every method runs under the lock.

    ``rel`` is the session directory relative to the state directory (for
    error messages). The files a record names are relative to the session
    directory.
    """

    def __init__(self, directory: str, rel: str, files: DurableFiles,
                 cap: int = DEFAULT_MAX_NODE_BYTES) -> None:
        self.directory = directory
        self._session = os.path.basename(directory)
        self._state_dir = os.path.dirname(os.path.dirname(directory))
        self._rel = rel
        self._cap = cap
        # Files the last replays found changed by another writer, and what became of them.
        self.conflicts: list[JournalConflict] = []
        self.path = os.path.join(directory, JOURNAL_NAME)
        self._rel_path = f"{rel}/{JOURNAL_NAME}"
        self._files = files
        # What the journal looked like after this owner's last write to it:
        # anything else means another owner wrote (or this owner failed).
        self.stamp: FileStamp | None = None
        self.records = 0  # records not yet checkpointed
        self._bytes = 0
        self.outstanding: dict[str, None] = {}  # rel paths awaiting the checkpoint
        # A record that is not ours: mutations are refused while it stands.
        self.problem: JournalFileError | None = None

    def on_disk(self) -> FileStamp | None:
        """The journal's stamp now (None: no journal): compare with :attr:`stamp`."""
        return file_stamp(self.path)

    def disown(self) -> None:
        """Treat the journal as foreign: after a failed write only a replay knows what it holds."""
        self.stamp = None

    def adopt(self, seen: FileStamp | None) -> None:
        """Take over a journal this owner did not leave; ``seen`` is its stamp as found.

        A record that is not ours (:class:`~store._errors.JournalFileError`)
        becomes :attr:`problem` and the journal is left untouched as
        evidence; the stamp is taken as ``seen`` so the same journal is not
        read again at every lock.
        """
        self.problem = None
        try:
            self._replay()
        except JournalFileError as exc:
            self.problem = exc
            self.stamp = seen

    def _replay(self) -> None:
        """Install each file as the journal's last record left it; keep the records.

        The records stay in the journal, and this owner's records follow them
        in the same sequence, so replay order still holds and two processes
        taking turns do not checkpoint at every turn. A torn tail is the
        exception: nothing may be appended after it, so the files are synced
        and the journal truncated at once.
        """
        journal = read_journal(self.directory, self._rel_path)
        warn_damaged(self._rel_path, journal.valid_end, journal.size)
        self.outstanding = dict.fromkeys(self.replay(journal.records))
        self.records = len(journal.records)
        self._bytes = journal.valid_end
        self.stamp = file_stamp(self.path)
        if journal.torn_bytes:
            self.checkpoint(torn=True)

    def replay(self, records: list[list[JournalEntry]]) -> list[str]:
        """Install each file as the last of ``records`` naming it left it; returns the files named.

        A file in a state the records account for gets the last record's
        bytes; in any other state it is someone else's newer write, which is
        kept (with the records' patch keys it lacks merged in) and reported
        in :attr:`conflicts`.
        """
        latest = replay_plan(records)
        for rel, plan in latest.items():
            patches = plan.patches if rel != META and plan.merge_only else []
            outcome = self._install(rel, plan.data, plan.known, patches, ours_win=False)
            if outcome != "ours":
                self.conflicts.append(JournalConflict(f"{self._rel}/{rel}", outcome))
        del self.conflicts[:-MAX_CONFLICTS]
        return list(latest)

    def recover_dead_owners(self, exclude: str | None = None) -> bool:
        """Replay this session's live records from dead runtime logs (:mod:`store._runtime_log`).

        Under the lock, before anything else: a runtime that died holding
        the session left them; they are installed, synced and retired in the
        dead log, so nobody replays them again over later writes. True if
        anything was found (the caller reloads its index).
        """
        found = dead_live_records(self._state_dir, self._session, self._files, exclude=exclude)
        for owner, records in found:
            paths = [self._path(rel) for rel in self.replay(records)]
            self._files.sync_paths([p for p in paths if os.path.exists(p)])
            retire_dead(self._state_dir, owner, [self._session], self._files)
        return bool(found)

    def discard_dead_owners(self) -> None:
        """Retire unreplayed what dead runtime logs hold under this id: a new session owns it now."""
        discard_dead(self._state_dir, self._session, self._files)

    def checkpoint(self, *, torn: bool = False) -> None:
        """Sync the outstanding files (then their directories) and empty the journal.

        An empty journal is left alone unless ``torn`` says its bytes past
        the valid prefix must go before anything is appended.
        """
        paths = [self._path(rel) for rel in self.outstanding]
        self._files.sync_paths([p for p in paths if os.path.exists(p)])
        stamp = file_stamp(self.path)
        if stamp is not None and (stamp[1] > 0 or torn):
            self._files.truncate(self.path)
        self.stamp = file_stamp(self.path)
        self.records = self._bytes = 0
        self.outstanding.clear()

    def write(self, entries: list[JournalEntry]) -> list[str]:
        """Make ``entries`` durable with one journal record, then install each unsynced.

        Returns the files (relative to the session) now holding other bytes
        than the record's: a metadata patch merged again onto another
        writer's version. :class:`~store._errors.NodeFileError` when a patch
        could not be installed (the file kept changing, or the other writer
        left it unreadable); every other file is installed first.
        """
        if self.records >= CHECKPOINT_RECORDS or self._bytes >= CHECKPOINT_BYTES:
            self.checkpoint()
        for entry in entries:  # before the record: a refused link must leave no record behind
            refuse_file_link(self._path(entry.rel))
        self._bytes += self._append_record(entries)
        self.records += 1
        differ: list[str] = []
        refused: list[str] = []
        for entry in entries:
            self.outstanding[entry.rel] = None
            if not entry.patch:
                self._files.replace_unsynced(self._path(entry.rel), entry.data)
                continue
            assert entry.before is not None
            outcome = self._install(entry.rel, entry.data, {entry.before}, [entry.patch],
                                    ours_win=True)
            if outcome != "ours":
                (differ if outcome == "merged" else refused).append(entry.rel)
        if refused:
            raise NodeFileError(
                f"{self._rel}/{refused[0]}",
                f"the metadata merge is not installed: another writer changed the file at "
                f"each of {MERGE_ATTEMPTS} re-reads or left it unreadable; retry the merge")
        return differ

    def _append_record(self, entries: list[JournalEntry]) -> int:
        """Make ``entries`` durable as one record (the one flush); returns its size.

        The journal's new stamp is this owner's (installs do not touch it).
        """
        record = encode_record(entries)
        self._files.append_synced(self.path, record)
        self.stamp = file_stamp(self.path)
        return len(record)

    def _install(
        self,
        rel: str,
        data: bytes,
        known: set[str] | None,
        patches: list[bytes],
        *,
        ours_win: bool,
    ) -> Outcome:
        """Install ``data`` over a file in a ``known`` state (None: any); else merge or leave it.

        The file is re-read right before each rename and the decision made
        again if it moved. A file in another state gets ``patches`` merged
        onto its metadata (``ours_win``: their values replace the file's; else
        only keys the file lacks are added), or, with no patches or an
        unreadable file, is left alone. Returns what the file holds now:
        ``ours`` (``data``), ``merged`` or ``theirs``.
        """
        path = self._path(rel)
        seen = [_read_or_none(path)]  # the newest version found, ours or another writer's
        on_disk = seen[0]  # what the file holds, as far as this owner knows
        for _ in range(MERGE_ATTEMPTS):
            basis = seen[0]
            target: bytes | None
            outcome: Outcome
            if known is None or digest(basis) in known:
                target, outcome = data, "ours"
            elif basis is not None and patches:
                merged = self._merged(rel, basis, patches, ours_win)
                target, outcome = (basis, "theirs") if merged is None else (merged, "merged")
            else:
                target, outcome = basis, "theirs"
            if outcome == "merged" and target == basis and not ours_win:
                outcome = "theirs"  # a replay added nothing to the other writer's version
            if target == on_disk:
                return outcome
            if target is None:  # the other writer removed the file: leave it so
                return "theirs"
            try:  # a swap needs a file to swap with; a new file is renamed into place
                if on_disk is None:
                    raise ExchangeUnsupported(path)
                displaced = self._files.exchange_unsynced(path, target)
            except ExchangeUnsupported:
                pass
            except FileNotFoundError:
                seen[0] = on_disk = None
                continue
            else:
                if displaced == on_disk:
                    return outcome
                # another writer installed ``displaced`` after our read: ours is on
                # disk now, built on the older version; merge onto theirs again
                seen[0], on_disk = displaced, target
                continue
            if self._files.replace_unsynced_if(
                path, target, functools.partial(_unchanged, path, on_disk, seen)
            ):
                return outcome
            on_disk = seen[0]
        if on_disk != seen[0] and seen[0] is not None:
            # giving up with ours on disk over the other writer's newest version:
            # put theirs back, unless they wrote again (on top of ours) meanwhile
            self._files.replace_unsynced_if(
                path, seen[0], functools.partial(_unchanged, path, on_disk, [on_disk]))
        return "theirs"

    def _merged(self, rel: str, data: bytes, patches: list[bytes], ours_win: bool) -> bytes | None:
        """``data`` (another writer's node file) with the patches merged in; None if impossible."""
        where = f"{self._rel}/{rel}"
        try:
            node = decode_node(data, where, self._cap)
            metadata = dict(node.metadata)
            for raw in patches:
                patch = json.loads(raw)
                if not isinstance(patch, dict):
                    return None
                for key, value in patch.items():
                    if ours_win or key not in node.metadata:
                        metadata[key] = value
            session = os.path.basename(self.directory)
            return encode_with_metadata(data, node, metadata, session, self._cap)
        except (NodeFileError, StoreError, ValueError):
            return None

    def _path(self, rel: str) -> str:
        return os.path.join(self.directory, rel)


# What on_disk() answers while a logged journal must catch up: no stamp looks like it.
_CATCH_UP: FileStamp = (-1, -1, -1)


class LoggedJournal(SessionJournal):
    """A session's journal when its records go to this process's :class:`RuntimeLog`.

    The core holds the session's lock from open to close, so nobody else
    writes the session meanwhile (the reference agent aside, which replay
    judges by each entry's ``before``), and there is nothing to re-check
    between mutations:

    - **write**: the record is committed to the runtime log (one flush shared
      with every session committing at the same time), then the files are
      installed as for a session journal;
    - **checkpoint**: the outstanding files are synced, then the session is
      retired in the log; durably when closing (the core lets go of the lock
      at every checkpoint), before the lock is let go;
    - **adopt**, once per hold and after a failed write: a session journal an
      owner of the per-session kind left is replayed and checkpointed (it is
      never written again here), live records of dead runtimes are recovered,
      and this log's own live records (a failed write, a previous core whose
      close failed) are replayed and checkpointed.
    """

    def __init__(self, directory: str, rel: str, files: DurableFiles, cap: int,
                 log: RuntimeLog) -> None:
        super().__init__(directory, rel, files, cap)
        self._log = log
        self._caught_up = False  # with dead runtimes' records, since the lock was taken
        # A write failed (or a previous core's close did): only a replay of
        # this log's live records knows what the session holds.
        self._failed = log.is_live(self._session)
        self._adopting = False
        self.closing = False

    def rehold(self) -> None:
        """The lock was taken again after a checkpoint let go: catch up at the next sync."""
        self._caught_up = False

    def on_disk(self) -> FileStamp | None:
        if self._failed:
            return _CATCH_UP
        # held since the last look: nobody else can have written the session journal
        return self.stamp if self._caught_up else file_stamp(self.path)

    def disown(self) -> None:
        super().disown()
        self._failed = True

    def recover_dead_owners(self, exclude: str | None = None) -> bool:
        if self._caught_up:
            return False
        found = super().recover_dead_owners(exclude=self._log.owner)
        self._caught_up = True
        return found

    def adopt(self, seen: FileStamp | None) -> None:
        self._adopting = True  # a torn session journal's checkpoint must not retire yet
        try:
            super().adopt(file_stamp(self.path))
        finally:
            self._adopting = False
        if self.problem is not None:
            return
        if self._log.is_live(self._session):
            self.outstanding.update(
                dict.fromkeys(self.replay(self._log.live_records(self._session))))
        if self.outstanding or self.records:
            self.checkpoint()
        self._failed = False

    def checkpoint(self, *, torn: bool = False) -> None:
        super().checkpoint(torn=torn)
        if not self._adopting:  # this log's own live files are synced only after adopt
            self._log.retire(self._session, durable=self.closing)

    def _append_record(self, entries: list[JournalEntry]) -> int:
        self._log.commit(self._session, entries)
        return sum(len(entry.data) for entry in entries)


def _read_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _unchanged(path: str, basis: bytes | None, seen: list[bytes | None]) -> bool:
    """Re-read ``path`` into ``seen[0]``: does it still hold ``basis``?"""
    seen[0] = _read_or_none(path)
    return seen[0] == basis
