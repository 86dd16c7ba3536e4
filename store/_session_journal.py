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

The index and meta.json cache are not kept here: the owner drops them when
it adopts (a foreign write may fall in the same timestamp tick, which the
index fingerprint cannot see; the journal's stamp can).
"""

from __future__ import annotations

import os

from ._durable import DurableFiles
from ._errors import JournalFileError
from ._index import FileStamp, file_stamp
from ._journal import JOURNAL_NAME, encode_record, latest_per_file, read_journal
from ._links import refuse_file_link

__all__ = ["CHECKPOINT_BYTES", "CHECKPOINT_RECORDS", "SessionJournal"]

# Records accumulate in the journal until the owner is idle or closes; past
# either bound the next write checkpoints first, bounding what a replay
# has to read and install.
CHECKPOINT_RECORDS = 64
CHECKPOINT_BYTES = 8 * 1024 * 1024


class SessionJournal:
    """``<sid>/.journal`` and what its owner knows about it; every method runs under the lock.

    ``rel`` is the session directory relative to the state directory (for
    error messages). The files a record names are relative to the session
    directory.
    """

    def __init__(self, directory: str, rel: str, files: DurableFiles) -> None:
        self.directory = directory
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
        latest = latest_per_file(journal.records)
        for rel, data in latest.items():
            path = self._path(rel)
            if _read_or_none(path) != data:
                self._files.replace_unsynced(path, data)
        self.outstanding = dict.fromkeys(latest)
        self.records = len(journal.records)
        self._bytes = journal.valid_end
        self.stamp = file_stamp(self.path)
        if journal.torn_bytes:
            self.checkpoint(torn=True)

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

    def write(self, entries: list[tuple[str, bytes]]) -> None:
        """Make ``entries`` durable with one journal record, then install each unsynced."""
        if self.records >= CHECKPOINT_RECORDS or self._bytes >= CHECKPOINT_BYTES:
            self.checkpoint()
        for rel, _ in entries:  # before the record: a refused link must leave no record behind
            refuse_file_link(self._path(rel))
        record = encode_record(entries)
        self._files.append_synced(self.path, record)
        self.records += 1
        self._bytes += len(record)
        for rel, data in entries:
            self.outstanding[rel] = None
            self._files.replace_unsynced(self._path(rel), data)
        self.stamp = file_stamp(self.path)

    def _path(self, rel: str) -> str:
        return os.path.join(self.directory, rel)


def _read_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
