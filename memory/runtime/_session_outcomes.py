"""How a session's memory work ends: boundaries finished, batches quarantined, errors told.

The session actor (:mod:`memory.runtime._session_actor`) decides; this part
carries out the endings that touch more than the session (SPEC §6.6, §7):
it settles whoever waits on the open boundary and records a terminal one
in the workspace's ``session-end.json``, parks a batch that kept failing
or a branch the ledger refuses, and reports a session's error once per
distinct reason. It is given the session's parts, not the actor: nothing
here reads the session's files.
"""

from __future__ import annotations

from collections.abc import Sequence

from memory._errors import LedgerError, MissingAuthorityError, describe_error
from memory.ledger._plan import after_failure
from memory.runtime._jobs import WriteJob
from memory.runtime._session_state import BoundaryOutcome, SessionLedger, SessionParts
from memory.runtime._workspace_actor import RecordSessionEnd
from memory.workspace._quarantine import QuarantineEntry, is_quarantined

__all__ = ["SessionOutcomes"]


class SessionOutcomes:
    """See the module docstring; one per session actor incarnation."""

    def __init__(self, parts: SessionParts, session: str, ledger: SessionLedger) -> None:
        self.parts = parts
        self.session = session
        self.ledger = ledger

    async def session_error(self, doing: str, error: BaseException,
                            unreadable: Sequence[str] = ()) -> str:
        """End the open boundary with ERROR; log the skipped session once per distinct reason.

        ``unreadable``: the session's files the store skipped (a broken
        chain often comes from these), named in the reason.
        """
        reason = f"session {self.session!r}: {doing} failed: {describe_error(error)}"
        if unreadable:
            reason += f" (unreadable, skipped: {', '.join(unreadable)})"
        ledger = self.ledger
        ledger.last_reason = reason
        if ledger.reported_error != reason:
            ledger.reported_error = reason
            self.parts.events.emit("skipped", session=self.session, reason=reason)
        await self.finish_boundary(BoundaryOutcome.ERROR, reason, error)
        return reason

    async def job_failed(self, job: WriteJob, kind: BoundaryOutcome, error: str,
                         updated_at: object) -> None:
        """A finished job marked nothing: back off, or quarantine after ``max_failures``."""
        ledger = self.ledger
        ledger.failures += 1
        if after_failure(ledger.failures, self.parts.config.max_failures):
            await self.quarantine_batch(job.batch.node_ids, error, ledger.failures, updated_at)
            await self.finish_boundary(BoundaryOutcome.QUARANTINED, error)
            return
        await self.finish_boundary(kind, error)
        ledger.retry_pending = True
        self.parts.timers.retry(self.session, ledger.failures)

    async def quarantine_batch(self, node_ids: tuple[str, ...], error: str, failures: int,
                               updated_at: object) -> None:
        """Park ``node_ids`` (SPEC §7); in memory only, and said so, if the workspace refuses."""
        entry = QuarantineEntry(
            session=self.session,
            node_ids=node_ids,
            error=error,
            failures=failures,
            at=self.parts.config.clock(),
            updated_at=updated_at if isinstance(updated_at, (int, float)) else None,
        )
        try:
            await self.parts.quarantine.park(entry)
        except Exception as exc:  # noqa: BLE001 - parked in memory all the same, and said so
            self.parts.quarantine.entries.append(entry)
            self.parts.events.emit("quarantine_unsaved", session=self.session,
                              nodes=list(entry.node_ids), error=describe_error(exc))
        self.ledger.failures = 0

    async def refuse(self, error: LedgerError, updated_at: object) -> None:
        """A branch the ledger refuses (SPEC §6.1): quarantine the session with the reason.

        Nothing can be batched until the node is repaired, and the repair is
        a change of the session only if it comes with an append; so the
        entry blocks until then or an operator's release, like a batch that
        kept failing.
        """
        updated = updated_at if isinstance(updated_at, (int, float)) else None
        if is_quarantined(self.parts.quarantine.entries, self.session, updated) is None:
            node = error.node if isinstance(error, MissingAuthorityError) else None
            await self.parts.quarantine.park(QuarantineEntry(
                session=self.session, node_ids=(node,) if node is not None else (),
                error=str(error), failures=0, at=self.parts.config.clock(),
                updated_at=updated,
            ))
        await self.finish_boundary(BoundaryOutcome.QUARANTINED, str(error))

    async def finish_boundary(
        self, outcome: BoundaryOutcome, error: str | None, cause: BaseException | None = None
    ) -> None:
        ledger = self.ledger
        if ledger.boundary is None:
            return
        batches = ledger.boundary.batches
        waiters, ledger.waiters, ledger.boundary = ledger.waiters, [], None
        record = outcome.terminal and any(w.updated_at is not None for w in waiters)
        for waiter in waiters:
            waiter.outcome = outcome
            waiter.error = error
            waiter.cause = cause
            waiter.batches = batches
            waiter.done.set()
        self.parts.events.emit("boundary", session=self.session, outcome=outcome.value,
                          batches=batches, reason=error)
        if record:
            updated_at = next(w.updated_at for w in waiters if w.updated_at is not None)
            try:
                await self.parts.workspace().call(RecordSessionEnd(self.session, updated_at))
                self.parts.events.emit("session_end", session=self.session, updated_at=updated_at)
            except Exception as exc:  # noqa: BLE001 - the watchdog only looks at it again
                self.parts.events.emit("session_end_unsaved", session=self.session,
                                  error=describe_error(exc))
