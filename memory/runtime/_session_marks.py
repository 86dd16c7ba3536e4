"""The markers side of a session's owner: a finished job's markers, a chunk at a time.

:class:`MarkerOwner` is the part of the memory session actor
(:mod:`memory.runtime._session_actor`) that writes markers: the markers of
a written batch (SPEC §6.4, only its nodes, only once it is in memory),
merged a chunk at a time behind the appends (the lanes of
docs/architecture.md), and the repair of markers another writer dropped
(:mod:`memory.ledger._lost_markers`). Both merge in this mailbox, so a merge
and an append of the session never interleave (the lost-marker race, SPEC
§1). The planner that decides what is written is the subclass's; a
finished job hands back to it (``_plan``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import anyio

from actors import ActorError
from memory._errors import describe_error
from memory.ledger._claim import Claim
from memory.ledger._lost_markers import lost_markers, stranded_records
from memory.ledger._plan import MARKER_CHUNK, marker_chunks, span
from memory.ledger._records import MARKER_KEY
from memory.ledger._tails import ConsistentSince, NodeRecords, OwedTails, listed_branches
from memory.runtime._claims import SessionClaims
from memory.runtime._jobs import WriteJob
from memory.runtime._session_outcomes import SessionOutcomes
from memory.runtime._session_state import (
    SESSION_ERRORS,
    BoundaryOutcome,
    MarkNext,
    MemorySessionMessage,
    SessionParts,
)
from memory.runtime._workspace_actor import SourcesInMemory
from memory.writers._cycle import FailureKind, WriteOutcome
from store import SessionActor, SessionOptions
from store.lowlevel import mark_lane, run_durable

__all__ = ["MarkerOwner", "cycle_reason"]


class MarkerOwner(SessionActor[MemorySessionMessage]):
    """See the module docstring; the session's ledger state lives in ``parts.ledgers``."""

    def __init__(self, parts: SessionParts, session: str) -> None:
        config = parts.config
        super().__init__(parts.state_dir, session, options=SessionOptions(
            files=config.files, clock=config.clock, lock_timeout=config.lock_timeout,
            log=parts.runtime_log,
        ))
        self.parts = parts
        self.ledger = parts.ledgers.of(session)
        self.outcomes = SessionOutcomes(parts, session, self.ledger)
        self.records = NodeRecords(session, counter=config.counter)
        self.tails = OwedTails(self.records, parts.workspace_id())
        self._consistent: ConsistentSince | None = None  # see _repair_markers
        self._claims: SessionClaims | None = None
        # Another runtime's claim as read in this message (see _claim_holder).
        self._holder: Claim | None = None
        self._holder_read = False

    @property
    def claims(self) -> SessionClaims:
        """This session's claim file, decided under the lock of the current incarnation's core."""
        core = self.core
        if self._claims is None or self._claims.core is not core:
            self._claims = SessionClaims(core, self.parts.config.files)
        return self._claims

    def _claim_holder(self) -> Claim | None:
        """Another runtime's live claim: a hint read without the lock, once per message.

        The stat behind it is a syscall on the event loop's thread; one per
        message is as fresh as one per read (a claim written during the
        message is ordered after it), and the decision itself is always
        taken under the session lock (``claim_batch`` reads the file
        again). A claim or release of ours (a thread hop) forgets it.
        """
        if not self._holder_read:
            self._holder = self.claims.holder(self.parts.claims.instance_id,
                                              self.parts.config.clock())
            self._holder_read = True
        return self._holder

    def _forget_holder(self) -> None:
        self._holder, self._holder_read = None, False

    async def _release_claim(self) -> None:
        self._forget_holder()
        await run_durable(self.claims.release, self.parts.claims.instance_id)
        self.parts.claims.released(self.session)

    async def _plan(self) -> str | None:
        """Plan the session's next job (the subclass's planner)."""
        raise NotImplementedError

    async def _job_finished(self, job_id: int, outcome: WriteOutcome) -> None:
        ledger = self.ledger
        job = ledger.in_flight
        if job is None or job.id != job_id:
            # A report for a job this session no longer waits for, or this very
            # report delivered again after a crash past its merge: plan again
            # (idempotent), since the crash may have cut the planning short.
            await self._plan()
            return
        if ledger.unmarked is not None:  # delivered again: its markers are being merged
            self._mark_later()
            return
        ledger.jobs += 1
        if outcome.failure is None:
            # The job stays in flight until its markers are durable: if this
            # incarnation crashes mid-merge, the next one merges the chunks left
            # (idempotent) instead of the batch being written twice.
            ledger.unmarked, ledger.marks_done = outcome, 0
            self._mark_later()
            return
        ledger.in_flight = None
        self.parts.jobs.done(job)
        with contextlib.suppress(*SESSION_ERRORS):  # a hint: its lease ends it otherwise
            await self._release_claim()
        error = cycle_reason(outcome)
        ledger.last_result, ledger.last_reason = outcome.failure.value, error
        kind = (BoundaryOutcome.NO_PROGRESS if outcome.failure is FailureKind.EMPTY
                else BoundaryOutcome.FAILED)
        await self.outcomes.job_failed(job, kind, error, self.core.meta().get("updated_at"))

    # -- the markers of a finished job, a chunk at a time ---------------------------

    def _mark_later(self) -> None:
        """Queue the next chunk of markers behind what the mailbox holds (appends first)."""
        ledger = self.ledger
        if ledger.mark_queued:
            return
        try:
            self.ref.cast_nowait(MarkNext())
        except ActorError:  # a full mailbox: the retry timer merges them
            if not ledger.retry_pending:
                ledger.retry_pending = True
                self.parts.timers.retry(self.session, ledger.failures + 1)
            return
        ledger.mark_queued = True

    async def _mark_next(self) -> None:
        """Merge the next chunk of the written job's markers (:func:`marker_chunks`).

        One chunk per message, oldest first: an append that arrives meanwhile
        waits for one chunk, not for the whole batch; a crash between chunks
        leaves a marked prefix of the batch. After the last chunk (merged with
        the claim's release in one hop) the job is done and the session plans.
        """
        ledger = self.ledger
        ledger.mark_queued = False
        job, outcome = ledger.in_flight, ledger.unmarked
        if job is None or outcome is None:  # delivered again after the last chunk
            await self._plan()
            return
        chunks = marker_chunks(outcome.marks, self.parts.workspace_id(), MARKER_CHUNK) or [{}]
        index = min(ledger.marks_done, len(chunks) - 1)
        last = index == len(chunks) - 1
        if not await self._merge_marks(job, chunks[index], release=last):
            return
        ledger.marks_done = index + 1
        if not last:
            self._mark_later()
            return
        if not ledger.merge_failed:
            self.parts.jobs.done(job)
        ledger.unmarked, ledger.in_flight, ledger.merge_failed = None, None, False
        ledger.last_result, ledger.last_reason, ledger.reported_error = "written", None, None
        self.parts.claims.released(self.session)
        ledger.failures = 0
        if ledger.boundary is not None:
            ledger.boundary.batches += 1
        await self._plan()

    async def _merge_marks(self, job: WriteJob, marks: dict[str, dict[str, str]], *,
                           release: bool, attempts: int = 2) -> bool:
        """Merge ``marks`` (and release the claim with the last chunk); True once durable.

        A refused merge (a full or read-only disk, a stuck session lock) is
        tried ``attempts`` times; then the batch is *unmarked*: written to
        memory, its markers owed. The job stays this session's job in flight
        (nothing plans the batch again) but no longer counts for ``drain``;
        the open boundary ends with ERROR, and the merge alone is retried
        after a backoff or at the next plan, never the write.
        """
        ledger = self.ledger
        started = anyio.current_time()
        error: BaseException | None = None
        for _ in range(attempts):
            try:
                self._forget_holder()
                # The marks lane: many sessions' merges at once never take
                # the threads their appends wait for (store.lowlevel.mark_lane).
                merge = self._mark_and_release if release else self.core.merge_node_metadata_batch
                await run_durable(merge, marks, limiter=mark_lane())
                break
            except SESSION_ERRORS as exc:
                error = exc
        else:
            assert error is not None
            if not ledger.merge_failed:
                ledger.merge_failed = True
                self.parts.jobs.done(job)
            ledger.failures += 1
            reason = (f"session {self.session!r}: batch {span(job.batch.node_ids)} is written "
                      f"to memory but its markers could not be saved: {describe_error(error)}; "
                      "the markers are retried, the batch is not written again")
            ledger.last_result, ledger.last_reason = "unmarked", reason
            if ledger.reported_error != reason:
                ledger.reported_error = reason
                self.parts.events.emit("skipped", session=self.session, reason=reason)
            await self.outcomes.finish_boundary(BoundaryOutcome.ERROR, reason, error)
            if not ledger.retry_pending:
                ledger.retry_pending = True
                self.parts.timers.retry(self.session, ledger.failures)
            return False
        self._marked(list(marks), anyio.current_time() - started)
        if release:  # one checkpoint per batch, not per chunk (a checkpoint syncs the disk)
            self._queue_checkpoint()
        return True

    def _mark_and_release(self, marks: dict[str, dict[str, str]]) -> None:
        """One thread hop: the markers first, then the claim (a reader after it sees them)."""
        self.core.merge_node_metadata_batch(marks)
        self.claims.release(self.parts.claims.instance_id)

    # -- lost markers ------------------------------------------------------------------

    async def _repair_markers(self) -> list[str]:
        """Set again the markers another writer dropped (:mod:`memory.ledger._lost_markers`).

        Only records behind an own marker are candidates, found on the
        index; the workspace is asked about them only when there are any, so
        a consistent session costs one walk of its branches. The markers go
        through the same merge as a finished job's, in this mailbox; nothing
        is archived or written. A branch that cannot be walked is skipped
        (its error belongs to whoever reads it).
        """
        core = self.core
        workspace_id = self.parts.workspace_id()
        consistent = self._consistent
        if consistent is not None and consistent.still(core, workspace_id):
            return []
        self._consistent = None
        version, merged = core.index_version, core.meta().get("merged_heads")
        branches, walked = listed_branches(core, self.records)
        candidates = sorted({record.source_id for records in branches
                             for record in stranded_records(records, workspace_id)})
        if not candidates:
            if core.index_version == version:
                self._consistent = ConsistentSince(version, merged, walked)
            return []
        archived, cited = await self.parts.workspace().call(
            SourcesInMemory(tuple(candidates)))
        lost = sorted({node for b in branches
                       for node in lost_markers(b, workspace_id, archived, cited)})
        if not lost:
            return []
        started = anyio.current_time()
        await run_durable(core.merge_node_metadata_batch,
                          {node: {MARKER_KEY: workspace_id} for node in lost},
                          limiter=mark_lane())
        self._marked(lost, anyio.current_time() - started)
        self._queue_checkpoint()
        self.parts.events.emit("markers_repaired", session=self.session, nodes=lost)
        return lost


    def _marked(self, node_ids: Sequence[str], seconds: float) -> None:
        """Markers of ``node_ids`` are durable, merged in ``seconds`` (an instrument's event)."""
        self.parts.events.emit("marked", session=self.session, node_ids=list(node_ids),
                          seconds=seconds)


def cycle_reason(outcome: WriteOutcome) -> str:
    if outcome.error is not None:
        return str(outcome.error)
    return outcome.failure.value if outcome.failure is not None else "failed"
