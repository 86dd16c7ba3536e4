"""Leased claims: which runtime is writing a session's batch right now.

SPEC §2 keeps at most one write job per session in flight, and SPEC §1
allows a duplicate delivery only after a crash. Inside one process the
session actor's ledger enforces the first; two runtimes (two processes) on
one state directory do not see each other's ledger, so each would compute
the same unmarked tail and hand it to its writer. ``<sid>/.claim`` is the
missing piece: the runtime about to submit a batch records it there, under
the session lock, and another runtime that finds a live claim of someone
else waits instead of writing the same turns again.

A claim is a hint, not evidence. It is written unsynced (a crash may lose
it, which costs at most the one duplicate batch the spec allows), it never
decides what is marked, and it dies with its holder:

- past ``expires`` (wall clock) it is void: a holder on another machine
  that died, or a job that outlived its lease, no longer blocks anyone;
- a holder on this host whose pid is gone is void at once (a killed
  ``scriptorium run`` does not block the next one for a whole lease);
- an unreadable or malformed file is no claim.

Format (one JSON object, LF-terminated)::

    {"owner": "r-1a2b3c4d", "pid": 4242, "host": "box", "nodes": ["m1", "m2"],
     "expires": 1764476000.5}

A released claim is the empty object ``{}``: releasing rewrites the file
instead of unlinking it, because an unlink syncs the directory and the
claim stays off the durable path.

The rules (:class:`Claim`, :func:`decode_claim`, :meth:`Claim.live`) are
plain functions. :class:`ClaimFile` reads and writes the file; its owner
(:class:`~store._session.SessionCore`) calls :meth:`ClaimFile.take` and
:meth:`ClaimFile.give_back` only while holding ``<sid>/.lock``, so a claim
decision and the index refresh that goes with it see one consistent disk.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import orjson

from ._durable import DurableFiles
from ._index import FileStamp, file_stamp
from ._lock import SessionLock

__all__ = [
    "CLAIM_NAME",
    "Claim",
    "ClaimFile",
    "decode_claim",
    "encode_claim",
    "pid_alive",
    "release_claim",
]

CLAIM_NAME = ".claim"
RELEASED = b"{}\n"


@dataclass(frozen=True, slots=True)
class Claim:
    """One runtime's lease on writing ``nodes`` of a session."""

    owner: str
    pid: int
    host: str
    nodes: tuple[str, ...]
    expires: float

    def live(self, now: float, *, host: str, alive: Callable[[int], bool]) -> bool:
        """Still binding at wall time ``now``, judged from ``host`` (see the module docstring)."""
        if now >= self.expires:
            return False
        return self.host != host or alive(self.pid)


def encode_claim(claim: Claim) -> bytes:
    return orjson.dumps({
        "owner": claim.owner, "pid": claim.pid, "host": claim.host,
        "nodes": list(claim.nodes), "expires": claim.expires,
    }) + b"\n"


def decode_claim(data: bytes) -> Claim | None:
    """The claim ``data`` holds, or None when it holds none (released, torn, malformed)."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(raw, dict):
        return None
    owner, pid, host = raw.get("owner"), raw.get("pid"), raw.get("host")
    nodes, expires = raw.get("nodes"), raw.get("expires")
    if not (isinstance(owner, str) and owner and isinstance(host, str)):
        return None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        return None
    if not isinstance(expires, (int, float)) or isinstance(expires, bool):
        return None
    if not math.isfinite(expires):
        return None
    return Claim(owner, pid, host, tuple(nodes), float(expires))


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
    """``<sid>/.claim`` of one session; see the module docstring.

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
