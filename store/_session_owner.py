"""A session's ownership: its lock, its journal's steps, and the contract every mutation runs in.

SPEC §1: one owner per session, and a cross-process lock for owners in
other processes. This part of :class:`~store._session.SessionCore` holds
``<sid>/.lock`` (per mutation, or with a runtime log from a mutation to
the next checkpoint), catches up with other owners under it (adopting
their journal, recovering dead runtimes' records, refreshing the index),
makes a mutation's files durable through the journal in one record and
checkpoints it. The rules of each mutation (what an append, a rewind, a
metadata merge writes) are :mod:`store._session`'s; this module is the
order of the steps they all share.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ._durable import TEMP_SUFFIX
from ._errors import StoreError
from ._format import encode_meta
from ._index import HISTORY, META
from ._journal import JournalEntry, digest
from ._session_journal import LoggedJournal
from ._session_reads import SessionReads

__all__ = ["SessionOwner"]


class SessionOwner(SessionReads):
    """The lock and the journal beneath a session's mutations.

    The base of :class:`~store._session.SessionCore`; not used alone.
    """

    @contextmanager
    def _holding(self) -> Iterator[None]:
        """With a runtime log: :meth:`_hold` for the block, and let go if it fails."""
        if self._log is None:
            yield
            return
        self._hold()
        try:
            yield
        except BaseException:
            self._log.let_go(self.session, self._lock)
            raise

    def _hold(self) -> None:
        """With a runtime log: take the session's lock to keep until the next checkpoint lets go.

        The lock comes from the log, which hands over one a failed close left
        held; the journal then catches up in full at the next sync (dead
        runtimes' records, a session journal, this log's own live records).
        """
        if self._log is None or self._lock.held:
            return
        self._lock = self._log.hold(self.session, self.directory, self._lock.timeout)
        assert isinstance(self._journal, LoggedJournal)
        self._journal.rehold()

    def close(self) -> None:
        """Checkpoint the journal (the owner calls this when passivated)."""
        self.retire_journals()

    def _let_go(self) -> None:
        """With a runtime log: checkpoint, retire the session durably, then let go of its lock.

        If that fails, the lock stays held until the log closes (the next
        mutation, or the next core of this session in this process, takes it
        over and replays first).
        """
        assert self._log is not None and isinstance(self._journal, LoggedJournal)
        self._journal.closing = True
        try:
            with self._lock:
                self._sync_locked()
                if self._journal.problem is None:
                    self._checkpoint_locked()
        finally:
            self._journal.closing = False
            self._log.let_go(self.session, self._lock)

    def abandon(self) -> None:
        """The owner crashed and will not close: leave the lock to the session's next core.

        With a runtime log, a held lock is let go if nothing of the session is
        live in the log, else kept for the next core of this session in this
        process, which replays first. Without one there is nothing to do.
        """
        if self._log is not None and self._lock.held:
            self._log.let_go(self.session, self._lock)

    def retire_journals(self) -> None:
        """Checkpoint: make every file the journal names durable, then empty the journal.

        With a runtime log, also let go of the session's lock (:meth:`_let_go`):
        the session is held from its first mutation to its next checkpoint,
        so another process's owner waits for a burst, not for passivation.
        """
        if self._log is not None:
            if self._lock.held:
                self._let_go()
            return
        if not self._journal.records:
            return
        with self._lock:
            self._sync_locked()  # adopts what another owner (or a failed write) left
            if self._journal.problem is None:  # else the journal is evidence: untouched
                self._checkpoint_locked()

    @contextmanager
    def locked(self, *, catch_up: bool) -> Iterator[None]:
        """Hold ``<sid>/.lock`` for a decision about a file the caller keeps beside the session's.

        Other owners cannot write the session meanwhile. With ``catch_up``,
        first catch up with them exactly as a mutation does (adopt a journal,
        refresh the index): inside the block the index includes every write
        made before it. Memory's batch claims (``memory.runtime._claims``)
        decide here, so a claim and the index it is confirmed on see one
        consistent disk. Writes nothing itself.
        """
        self._hold()
        with self._lock:
            if catch_up:
                self._sync_locked()
            yield

    # -- the mutation contract -----------------------------------------------

    @contextmanager
    def _mutation(self) -> Iterator[None]:
        """Lock, catch up with other owners, and distrust the cache if the disk work failed.

        A refused request (a :class:`StoreError`) changed nothing. Any other
        failure (an ``OSError``, a crash) may have left a record in the
        journal and some files new: the index is reloaded on the next access
        and the journal is treated as foreign, so the next lock holder (this
        one included) replays it before anything else: the operation ends up
        whole or, if its record was torn, not at all.
        """
        self._hold()
        with self._lock:
            self._sync_locked()
            if self._journal.problem is not None:
                raise self._journal.problem
            try:
                yield
            except StoreError:
                raise
            except BaseException:
                self._fingerprint = None
                self._journal.disown()
                raise

    def _recover_locked(self) -> None:
        """Drop crash leftovers (temp files), replay the journal if one is found, checkpoint."""
        for folder in (self.directory, self._path(HISTORY)):
            try:
                names = os.listdir(folder)
            except FileNotFoundError:
                continue
            for name in names:
                if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                    self._files.unlink(os.path.join(folder, name))
        self._sync_locked()
        if self._journal.problem is None:
            self._checkpoint_locked()

    def _sync_locked(self) -> None:
        """Under the lock: recover dead runtimes' records, adopt a journal this owner did not write, refresh."""
        seen = self._journal.on_disk()
        if self._journal.recover_dead_owners() or seen != self._journal.stamp:
            self._forget_index()
            self._journal.adopt(seen)
        self._refresh(force=True)

    def _checkpoint_locked(self) -> None:
        """Checkpoint the journal; an index that was current stays current."""
        unchanged = self._fingerprint_now() == self._fingerprint
        self._journal.checkpoint()
        if unchanged:  # the truncation is ours: the index is as current as before
            self._mark_synced()

    def _journal_locked(self, entries: list[JournalEntry]) -> list[str]:
        """Make ``entries`` durable with one journal record, then install each unsynced.

        Every mutation's files reach the disk here and nowhere else.
        Returns the files now holding other bytes than the entry's (see
        :meth:`SessionJournal.write`).
        """
        try:
            differ = self._journal.write(entries)
        except BaseException:
            self._fingerprint = None  # some files may be installed: reload meta and index
            raise
        for entry in entries:
            if entry.rel == META:
                self._meta_bytes = entry.data
        return differ

    def _meta_entry(self, meta: dict[str, Any]) -> JournalEntry:
        """meta.json's entry: its new bytes, and the bytes it replaces as last read here."""
        return JournalEntry(META, encode_meta(meta), digest(self._meta_bytes))
