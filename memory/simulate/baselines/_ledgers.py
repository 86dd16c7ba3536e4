"""Four ledgers of "which turns are written", side by side on one workload.

SPEC §1 and the design doc's layer 1 and layer 3 compare these shapes; here
each is a small class with the same two operations, so one driver can feed
them the same forking sessions and count what each gets wrong:

* :class:`CursorLedger`: the replaced design. One position per session
  (``ordinal`` = the row's index in the unrolled branch, skipped rows
  included), pending = records past it, advanced after a write, and it
  refuses to move backwards. It omits turns at forks and rewinds.
* :class:`NaiveMarkerLedger`: markers on the nodes, but merged by a plain
  read-modify-write while another component (the host stamping a checkpoint
  on the turn it just finished) rewrites the same node. Whichever write lands
  second wipes the other's key: a lost marker re-delivers its turn, a lost
  stamp is the host's data gone.
* :class:`ExternalSetLedger`: every written id in a set outside the
  session (the codex-style ledger). Exact, but reading it costs the whole
  branch and it grows with every message forever.
* :class:`MarkerLedger`: scriptorium. Markers walked back from the tip
  (:func:`~memory.ledger._ledger.unwritten_turns`), merged through the session's
  one owner, so the concurrent stamp and the marker are applied one after
  the other and both survive.

A collision (a marker merge meeting a concurrent stamp on the same node) is
decided by a hash of the seed and the node id, so both marker ledgers meet
the same collisions, and each node collides at most once.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol

from memory.ledger import MARKER_KEY, SourceRecord, records_from_branch, unwritten_turns

from ._workload import SessionModel

__all__ = [
    "STAMP_KEY",
    "CursorLedger",
    "ExternalSetLedger",
    "Ledger",
    "MarkerLedger",
    "NaiveMarkerLedger",
    "collision",
]

# What the concurrent component stamps: the host's checkpoint of a finished turn.
STAMP_KEY = "checkpoint"


class Ledger(Protocol):
    name: str
    lost_keys: int

    def owed(self, model: SessionModel, tip: str) -> list[SourceRecord]: ...

    def record(self, model: SessionModel, batch: Sequence[SourceRecord]) -> None: ...

    def stored_outside(self) -> int: ...


def collision(seed: int, node_id: str, rate: float) -> str | None:
    """Whether marking ``node_id`` meets a concurrent stamp, and which write lands last.

    ``"stamp_last"``: the stamp's write lands second (the marker is lost
    under a naive merge); ``"marker_last"``: the marker's does (the stamp is
    lost); None: no collision.
    """
    rng = random.Random(f"{seed}/race/{node_id}")
    if rng.random() >= rate:
        return None
    return "stamp_last" if rng.random() < 0.5 else "marker_last"


class CursorLedger:
    """The replaced position cursor of SPEC §1: one ordinal per session."""

    name = "cursor"

    def __init__(self) -> None:
        self.lost_keys = 0
        self.refused = 0  # advances refused with "cursor cannot move backwards"
        self._cursors: dict[str, int] = {}
        self._ordinals: dict[str, int] = {}

    def owed(self, model: SessionModel, tip: str) -> list[SourceRecord]:
        messages = model.messages(tip)
        # The ordinal is the row's position in the list handed over, skipped rows included.
        self._ordinals = {m["id"]: position for position, m in enumerate(messages)}
        cursor = self._cursors.get(model.session, -1)
        records = records_from_branch(model.session, messages)
        return [r for r in records if self._ordinals[r.message_id] > cursor]

    def record(self, model: SessionModel, batch: Sequence[SourceRecord]) -> None:
        ordinal = self._ordinals[batch[-1].message_id]
        if ordinal < self._cursors.get(model.session, -1):
            self.refused += 1  # the batch is in memory, the cursor stays
            return
        self._cursors[model.session] = ordinal

    def stored_outside(self) -> int:
        return len(self._cursors)


class ExternalSetLedger:
    """A set of written ids kept outside the session, per session."""

    name = "external_set"

    def __init__(self) -> None:
        self.lost_keys = 0
        self._written: dict[str, set[str]] = {}

    def owed(self, model: SessionModel, tip: str) -> list[SourceRecord]:
        written = self._written.get(model.session, set())
        return [r for r in model.records(tip) if r.message_id not in written]

    def record(self, model: SessionModel, batch: Sequence[SourceRecord]) -> None:
        self._written.setdefault(model.session, set()).update(r.message_id for r in batch)

    def stored_outside(self) -> int:
        return sum(len(ids) for ids in self._written.values())


class _Markers:
    """Markers on the nodes, read by the SPEC §6.2 walk; subclasses decide how they are merged."""

    name = ""

    def __init__(self, workspace_id: str, seed: int, collide: float) -> None:
        self.workspace_id = workspace_id
        self.lost_keys = 0
        self.collisions = 0
        self._seed = seed
        self._collide = collide
        self._collided: set[str] = set()

    def owed(self, model: SessionModel, tip: str) -> list[SourceRecord]:
        return unwritten_turns(model.records(tip), self.workspace_id)

    def record(self, model: SessionModel, batch: Sequence[SourceRecord]) -> None:
        marker = {MARKER_KEY: self.workspace_id}
        for record in batch[:-1]:
            model.merge(record.message_id, marker)
        # The newest turn of a batch is the one the host may still be finishing.
        newest = batch[-1].message_id
        order = None
        if newest not in self._collided:
            order = collision(self._seed, newest, self._collide)
        if order is None:
            model.merge(newest, marker)
            return
        self._collided.add(newest)
        self.collisions += 1
        stamp = {STAMP_KEY: f"cp-{newest}"}
        self._merge_racing(model, newest, marker, stamp, order)
        # Measured on the node as it ends up, not assumed from the interleaving.
        metadata = model.index.nodes[newest].metadata
        self.lost_keys += sum(1 for k, v in {**marker, **stamp}.items() if metadata.get(k) != v)

    def _merge_racing(
        self, model: SessionModel, node_id: str, marker: dict[str, Any],
        stamp: dict[str, Any], order: str,
    ) -> None:
        raise NotImplementedError

    def stored_outside(self) -> int:
        return 0


class NaiveMarkerLedger(_Markers):
    """Markers merged by read-modify-write of the whole node, racing the host's stamp."""

    name = "naive_rmw"

    def _merge_racing(
        self, model: SessionModel, node_id: str, marker: dict[str, Any],
        stamp: dict[str, Any], order: str,
    ) -> None:
        # Both components read the node before either writes it back.
        seen = dict(model.index.nodes[node_id].metadata)
        first, last = (marker, stamp) if order == "stamp_last" else (stamp, marker)
        for patch in (first, last):
            model.index.replace(model.index.nodes[node_id].with_metadata({**seen, **patch}))


class MarkerLedger(_Markers):
    """Scriptorium: the session's owner applies both merges in turn, each on the current node."""

    name = "markers"

    def _merge_racing(
        self, model: SessionModel, node_id: str, marker: dict[str, Any],
        stamp: dict[str, Any], order: str,
    ) -> None:
        first, last = (marker, stamp) if order == "stamp_last" else (stamp, marker)
        model.merge(node_id, first)
        model.merge(node_id, last)
