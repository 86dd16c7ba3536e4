"""Leased claims, the rules: which runtime is writing a session's batch right now.

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

A released claim is the empty object ``{}`` (:data:`RELEASED`): releasing
rewrites the file instead of unlinking it, because an unlink syncs the
directory and the claim stays off the durable path.

This module holds the pure part (the record, its codec, its liveness);
the file and the lock around its decisions are the runtime's
(:mod:`memory.runtime._claims`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import orjson

__all__ = ["RELEASED", "Claim", "decode_claim", "encode_claim"]

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
