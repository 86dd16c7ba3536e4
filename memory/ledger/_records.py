"""The unit of memory: one recordable turn of a branch.

SPEC §6.1: from a branch (message view, root to tip) only user and assistant
turns with non-empty text that are not runtime turns become records; tool
nodes, runtime turns and empty turns are never archived, written or marked.
A :class:`SourceRecord` is what the ledger walks, what the archive frames,
what a writer reads and what a marker is finally set on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = [
    "MARKER_KEY", "SourceMeta", "SourceRecord", "normalize_label", "source_anchor", "source_id",
]

# The per-provider marker key on node metadata (SPEC §1, §6.2).
MARKER_KEY = "memory_written_scriptorium"


def normalize_label(label: str) -> str:
    """A speaker label safe for the first body line: one line, single spaces, trimmed.

    A line break inside the label would move the ``<speaker>: `` part off
    the first body line and make the frame malformed.
    """
    if not label.isprintable():  # rare: only then look at each character
        label = "".join(ch if ch.isprintable() else " " for ch in label)
    return " ".join(label.split())


def source_id(session_id: str, message_id: str) -> str:
    """``openprogram/<sid>/<node-id>``: the stable name of a turn in memory (SPEC §5)."""
    return f"openprogram/{session_id}/{message_id}"


def source_anchor(source: str) -> str:
    """``source-`` + the first 16 hex of sha256 of the source id (SPEC §5)."""
    return "source-" + hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class SourceMeta:
    """Who said it and how far to trust it; archived as ``source-meta`` (SPEC §5)."""

    authority_tier: str | None  # None: no authority recorded (the reference writes null)
    principal_id: str
    speaker_kind: str
    trust_state: str  # "trusted" | "pending"; pending sources are archived, never cited


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One recordable turn. ``marker`` is this node's ``memory_written_scriptorium`` value."""

    session_id: str
    message_id: str
    role: str  # "user" | "assistant"
    content: str
    timestamp: float  # the node's created_at, unix seconds
    speaker: str  # the label archived after the timestamp, e.g. "Owner (owner/local)"
    speaker_id: str | None = None
    meta: SourceMeta | None = None
    marker: str | None = None
    tokens: int = 0

    @property
    def source_id(self) -> str:
        return source_id(self.session_id, self.message_id)

    @property
    def trusted(self) -> bool:
        return self.meta is None or self.meta.trust_state == "trusted"
