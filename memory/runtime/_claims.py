"""Batch claims between runtimes: the file, the lock around its decisions, the runtime's ledger.

The rules and the format are :mod:`memory.ledger._claim`. Here:

- :class:`ClaimFile` reads and writes ``<sid>/.claim`` (unsynced, through
  the durable seam's ``replace_unsynced``);
- :class:`SessionClaims` decides for one session, always under its
  ``<sid>/.lock`` (``SessionCore.locked``): a claim first brings the
  session's index up to date, so the batch is confirmed on one consistent
  disk (another runtime's markers written before the claim are seen);
- :class:`ClaimsLedger` is what one runtime remembers: its name in the
  claims it writes, the lease, and the sessions it may still hold a claim
  on, released when it exits.

The store only reserves the file's name (``store.lowlevel.CLAIM_NAME``) and lends
its lock; the concept is memory's (docs/decisions.md, "Runtime split").
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import socket
from collections.abc import Callable, Sequence

from memory.ledger._claim import RELEASED, Claim, decode_claim, encode_claim
from store import DurableFiles, SessionCore, StoreError
from store.lowlevel import CLAIM_NAME, FileStamp, SessionLock, file_stamp, validate_id

__all__ = [
    "UNBOUNDED_LEASE",
    "ClaimFile",
    "ClaimsLedger",
    "SessionClaims",
    "pid_alive",
    "release_claim",
]

# A claim's lease when the writer has no timeout: a holder on another host
# that died blocks its sessions at most this long.
UNBOUNDED_LEASE = 24 * 3600.0


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (signal 0 checks without sending)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


class ClaimFile:
    """``<sid>/.claim`` of one session.

    :meth:`holder` is the lock-free read an owner uses as a hint (which
    nodes another runtime is writing); it stats the file and decodes it
    again only when it changed. :meth:`take` and :meth:`give_back` decide,
    and the caller must hold the session lock around them.
    """

    def __init__(
        self,
        session_dir: str,
        files: DurableFiles,
        *,
        host: str | None = None,
        pid: int | None = None,
        alive: Callable[[int], bool] = pid_alive,
    ) -> None:
        self.path = os.path.join(session_dir, CLAIM_NAME)
        self._files = files
        self.host = host if host is not None else socket.gethostname()
        self.pid = pid if pid is not None else os.getpid()
        self._alive = alive
        self._stamp: FileStamp | None = None
        self._cached: Claim | None = None

    def holder(self, owner: str, now: float) -> Claim | None:
        """The live claim of a runtime other than ``owner``, if any (a hint: no lock)."""
        claim = self._read(fresh=False)
        if claim is None or claim.owner == owner:
            return None
        return claim if claim.live(now, host=self.host, alive=self._alive) else None

    def take(self, owner: str, nodes: Sequence[str], now: float, lease: float) -> bool:
        """Under the session lock: claim ``nodes`` for ``lease`` seconds unless someone else holds it.

        Returns False, changing nothing, when another owner's claim is live;
        replaces a void claim and renews ``owner``'s own.
        """
        if not (math.isfinite(lease) and lease > 0):
            raise ValueError(f"a claim lease must be a positive number of seconds, not {lease!r}")
        current = self._read(fresh=True)
        if current is not None and current.owner != owner and current.live(
            now, host=self.host, alive=self._alive
        ):
            return False
        self._write(Claim(owner, self.pid, self.host, tuple(nodes), now + lease))
        return True

    def give_back(self, owner: str) -> bool:
        """Under the session lock: release ``owner``'s claim; another owner's is left alone."""
        current = self._read(fresh=True)
        if current is None or current.owner != owner:
            return False
        self._files.replace_unsynced(self.path, RELEASED)
        self._remember(None)
        return True

    def _write(self, claim: Claim) -> None:
        self._files.replace_unsynced(self.path, encode_claim(claim))
        self._remember(claim)

    def _remember(self, claim: Claim | None) -> None:
        self._stamp = file_stamp(self.path)
        self._cached = claim

    def _read(self, *, fresh: bool) -> Claim | None:
        stamp = file_stamp(self.path)
        if stamp is None:
            self._stamp, self._cached = None, None
            return None
        if not fresh and stamp == self._stamp:
            return self._cached
        try:
            with open(self.path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            data = RELEASED
        self._stamp, self._cached = stamp, decode_claim(data)
        return self._cached


class SessionClaims:
    """One session's claim, decided under the session lock of its owner ``core``.

    Blocking (run each call in a worker thread, as the session actor does).
    """

    def __init__(self, core: SessionCore, files: DurableFiles, *, host: str | None = None,
                 pid: int | None = None, alive: Callable[[int], bool] = pid_alive) -> None:
        self.core = core
        self.file = ClaimFile(core.directory, files, host=host, pid=pid, alive=alive)

    def claim_batch(self, node_ids: Sequence[str], owner: str, now: float, lease: float) -> bool:
        """Claim the session's next batch for runtime ``owner``; False if another runtime holds it.

        Under the lock, and after catching up with other owners exactly as a
        mutation does: when this returns True the index includes every write
        made before the claim (markers of the batch another runtime just
        finished, above all), so the caller confirms its batch on it before
        submitting. Writes nothing but the claim file, unsynced.
        """
        for node_id in node_ids:
            validate_id(node_id, "node id", self.core.session)
        with self.core.locked(catch_up=True):
            return self.file.take(owner, node_ids, now, lease)

    def release(self, owner: str) -> bool:
        """Release ``owner``'s claim (under the lock); True if it held one."""
        with self.core.locked(catch_up=False):
            return self.file.give_back(owner)

    def holder(self, owner: str, now: float) -> Claim | None:
        """Another runtime's live claim, read without the lock: a hint for what is owed here."""
        return self.file.holder(owner, now)


def release_claim(
    state_dir: str | os.PathLike[str], session: str, owner: str, files: DurableFiles
) -> bool:
    """Release ``owner``'s claim on ``session`` without opening the session (a runtime's exit).

    ``session`` must be an id already validated by the caller that claimed.
    """
    directory = os.path.join(os.fspath(state_dir), "sessions", session)
    if not os.path.isdir(directory):
        return False
    with SessionLock(directory):
        return ClaimFile(directory, files).give_back(owner)


class ClaimsLedger:
    """One runtime's claims: its name in them, their lease, the sessions it may hold.

    ``lease`` is one write cycle's timeout and a margin (docs/decisions.md,
    "Claims between runtimes").
    """

    def __init__(self, state_dir: str, files: DurableFiles, *, writer_timeout: float,
                 margin: float) -> None:
        self.state_dir = state_dir
        self._files = files
        # Names this runtime in the claims it writes; new per open_runtime.
        self.instance_id = "r-" + secrets.token_hex(4)
        timeout = writer_timeout if math.isfinite(writer_timeout) else UNBOUNDED_LEASE
        self.lease = timeout + margin
        self._held: set[str] = set()  # sessions whose claim this runtime may still hold

    def taken(self, session: str) -> None:
        self._held.add(session)

    def released(self, session: str) -> None:
        self._held.discard(session)

    def release_all(self) -> None:
        """On exit: release every claim still held, so no other runtime waits out a lease.

        Synchronous (run it in a worker thread). A failure leaves that claim
        to expire; it is a hint, nothing is lost.
        """
        for session in sorted(self._held):
            with contextlib.suppress(OSError, StoreError):
                release_claim(self.state_dir, session, self.instance_id, self._files)
        self._held.clear()
