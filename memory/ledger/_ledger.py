"""The ledger rules: which turns are records, which a branch owes, when to write.

SPEC §1 and §6. The ledger lives on the turns themselves: once a batch is in
memory each of its nodes carries ``memory_written_scriptorium = <workspace
id>``, and what a branch still owes is the unmarked tail found by walking
back from its tip. Everything here is a pure function of a branch (message
dicts, root to tip), a workspace id and, for the trigger, ``now``;
:mod:`memory.ledger._tails` applies them to a session's index, and
:mod:`memory.ledger._plan` decides from them what the session actor does.

The shape of the failure this prevents decides the details. Omitting a turn
is unrecoverable, duplicating one is not (consolidation merges it). So a
marker with another workspace's id does not count (a copied session is
written from scratch), a recordable message without an id is an error
rather than skipped, and the trigger errs towards writing.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memory._errors import (
    InvalidThresholdError,
    MissingAuthorityError,
    ReferenceThresholdWarning,
    UncitableIdError,
    UnidentifiedMessageError,
)
from memory.ledger._records import MARKER_KEY, SourceMeta, SourceRecord, normalize_label
from memory.ledger._tokens import TokenCounter, estimate_tokens
from store.lowlevel import citable_id_problem

__all__ = [
    "ALLOWED_THRESHOLDS",
    "APPENDING_TIERS",
    "AUTHORITY_FIELDS",
    "AUTHORITY_TIERS",
    "DEFAULT_IDLE_AFTER",
    "DEFAULT_THRESHOLD",
    "RUNTIME_SOURCES",
    "ReferenceThresholdWarning",
    "WritePolicy",
    "batch_due_at",
    "first_batch",
    "is_runtime_turn",
    "may_write",
    "message_text",
    "owed_tail",
    "owed_tokens",
    "record_of",
    "records_from_branch",
    "should_write",
    "should_write_at_boundary",
    "source_meta",
    "speaker_authority",
    "speaker_label",
    "threshold_warning",
    "uncitable",
    "unwritten_turns",
    "warn_threshold",
]

# SPEC §6.1: turns the runtime scheduled itself, not anything anybody said.
RUNTIME_SOURCES = frozenset({"job_followup", "merge_turn"})
ALLOWED_THRESHOLDS = (8_000, 16_000, 32_000)
DEFAULT_THRESHOLD = 16_000
DEFAULT_IDLE_AFTER = 3600.0  # seconds


def threshold_warning(threshold: int) -> str | None:
    """The one-line warning for a threshold the reference agent would not accept, or None."""
    if threshold in ALLOWED_THRESHOLDS:
        return None
    allowed = ", ".join(str(t) for t in ALLOWED_THRESHOLDS)
    return (f"token threshold {threshold} is not one of {allowed}: scriptorium uses it, "
            f"but the reference agent would not accept it")


def warn_threshold(threshold: int, *, stacklevel: int = 2) -> None:
    message = threshold_warning(threshold)
    if message is not None:
        warnings.warn(message, ReferenceThresholdWarning, stacklevel=stacklevel + 1)


# SPEC §6.1, the reference agent's speaker authority: the six fields, the
# tiers, and the tiers holding the capability memory.source.append.
AUTHORITY_FIELDS = ("speaker_kind", "speaker_id", "speaker_display", "principal_id",
                    "authority_tier", "interaction")
AUTHORITY_TIERS = frozenset({"owner", "paired", "mcp_browser"})
APPENDING_TIERS = frozenset({"owner", "paired"})
# Fields whose presence makes a legacy turn archive a source-meta.
_META_FIELDS = ("authority_tier", "principal_id", "speaker_kind", "trust_state")


def message_text(message: Mapping[str, Any]) -> str:
    """A message's text: its ``content`` string, or the ``text`` parts of a content list.

    Parts are joined with LF; the result is stripped (as the reference agent
    does, so the archived bytes match).
    """
    content = message.get("content")
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        parts = [
            part["text"]
            for part in content
            if isinstance(part, Mapping)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
            and part["text"]
        ]
        return "\n".join(parts).strip()
    return ""


def is_runtime_turn(message: Mapping[str, Any]) -> bool:
    """A turn the runtime wrote to drive itself (``display == "runtime"`` or a runtime source)."""
    return message.get("display") == "runtime" or message.get("source") in RUNTIME_SOURCES


def _text_field(message: Mapping[str, Any], key: str) -> str | None:
    value = message.get(key)
    if not isinstance(value, str):
        return None
    return normalize_label(value) or None


def speaker_label(message: Mapping[str, Any]) -> str:
    """``Display (speaker/id)``, or whichever of the two exists, or the role."""
    return _label(
        _text_field(message, "speaker_display"),
        _text_field(message, "speaker_id"),
        message.get("role"),
    )


def _label(display: str | None, ident: str | None, role: object) -> str:
    if display and ident:
        return f"{display} ({ident})"
    return display or ident or str(role)


def speaker_authority(message: Mapping[str, Any]) -> dict[str, str] | None:
    """SPEC §6.1: the message's six authority fields, or None when it has no complete authority.

    Complete means every field is a non-empty string and the tier is one of
    ``owner``, ``paired``, ``mcp_browser``.
    """
    found: dict[str, str] = {}
    for key in AUTHORITY_FIELDS:
        value = message.get(key)
        if not isinstance(value, str) or not value:
            return None
        found[key] = value
    if found["authority_tier"] not in AUTHORITY_TIERS:
        return None
    return found


def _missing_authority(message: Mapping[str, Any]) -> str:
    missing = [key for key in AUTHORITY_FIELDS
               if not isinstance(message.get(key), str) or not message.get(key)]
    if missing:
        return "has no " + ", ".join(missing)
    return f"its authority_tier {message.get('authority_tier')!r} is not a known tier"


def source_meta(message: Mapping[str, Any]) -> SourceMeta | None:
    """The trust metadata to archive, or None when the message carries none.

    SPEC §6.1: session records are always trusted. A message with complete
    authority archives its tier, principal and kind; legacy history (no
    complete authority, no ``authority_schema``) that carries any speaker
    field archives kind and principal ``unknown`` and no tier. A message
    with no such field at all gets no ``source-meta`` (it reads as trusted).
    """
    authority = speaker_authority(message)
    if authority is not None:
        return SourceMeta(
            authority_tier=authority["authority_tier"],
            principal_id=authority["principal_id"],
            speaker_kind=authority["speaker_kind"],
            trust_state="trusted",
        )
    if not any(key in message for key in _META_FIELDS):
        return None
    return SourceMeta(authority_tier=None, principal_id="unknown", speaker_kind="unknown",
                      trust_state="trusted")


def _timestamp(message: Mapping[str, Any]) -> float:
    value = message.get("timestamp")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return 0.0


def records_from_branch(
    session_id: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    counter: TokenCounter = estimate_tokens,
) -> list[SourceRecord]:
    """SPEC §6.1: the branch's records, root to tip, with tokens counted.

    Kept: role ``user`` or ``assistant``, not a runtime turn, non-empty
    text, and a speaker whose tier may append to memory. Raises
    :class:`UnidentifiedMessageError` for a kept message without an id (it could
    never be marked, so it would be owed forever) and
    :class:`MissingAuthorityError` for a turn stamped ``authority_schema``
    without complete authority.
    """
    records: list[SourceRecord] = []
    for position, message in enumerate(messages):
        record = record_of(session_id, message, position, counter=counter)
        if record is not None:
            records.append(record)
    return records


def record_of(
    session_id: str,
    message: Mapping[str, Any],
    position: int = 0,
    *,
    counter: TokenCounter = estimate_tokens,
) -> SourceRecord | None:
    """SPEC §6.1 for one message: its record, or None when it is not one.

    ``position`` (in its branch) names a message without an id in the error.
    """
    role = message.get("role")
    if role not in ("user", "assistant") or is_runtime_turn(message):
        return None
    text = message_text(message)
    if not text:
        return None
    message_id = message.get("id")
    authority = speaker_authority(message)
    if authority is not None and authority["authority_tier"] not in APPENDING_TIERS:
        return None  # a speaker without memory.source.append: never a record
    if authority is None and "authority_schema" in message:
        node = message_id if isinstance(message_id, str) and message_id else f"#{position}"
        raise MissingAuthorityError(session_id, node, _missing_authority(message))
    if not isinstance(message_id, str) or not message_id:
        raise UnidentifiedMessageError(session_id, position)
    display = _text_field(message, "speaker_display")
    ident = _text_field(message, "speaker_id")
    marker = message.get(MARKER_KEY)
    return SourceRecord(
        session_id=session_id,
        message_id=message_id,
        role=role,
        content=text,
        timestamp=_timestamp(message),
        speaker=_label(display, ident, role),
        # The reference writes a speaker-id header whenever it knows
        # either half of the speaker (an empty id if only the name).
        speaker_id=ident if ident is not None else ("" if display else None),
        meta=source_meta(message),
        marker=marker if isinstance(marker, str) else None,
        tokens=counter(text),
    )


def unwritten_turns(records: Sequence[SourceRecord], workspace_id: str) -> list[SourceRecord]:
    """SPEC §6.2: the contiguous tail after the last record marked with *this* workspace's id."""
    for index in range(len(records) - 1, -1, -1):
        if records[index].marker == workspace_id:
            return list(records[index + 1 :])
    return list(records)


def owed_tail(
    newest_first: Iterable[SourceRecord | None], workspace_id: str
) -> list[SourceRecord] | None:
    """SPEC §6.2 walking back from the tip: the records after the newest own-marked one.

    ``newest_first`` are the records of the branch's messages from the tip
    backwards (``None`` for a message that is no record), produced lazily:
    only the backlog and one marked record are read, so the cost follows
    what is owed, not the session's size. ``None`` when the walk ends
    without an own marker: then everything is owed and the caller applies
    :func:`unwritten_turns` to the whole, validated branch.
    """
    tail: list[SourceRecord] = []
    for record in newest_first:
        if record is None:
            continue
        if record.marker == workspace_id:
            tail.reverse()
            return tail
        tail.append(record)
    return None


def owed_tokens(records: Sequence[SourceRecord]) -> int:
    return sum(record.tokens for record in records)


def first_batch(records: Sequence[SourceRecord], threshold: int) -> list[SourceRecord]:
    """SPEC §6.3: the leading records whose cumulative tokens reach ``threshold`` (else all)."""
    total = 0
    for index, record in enumerate(records):
        total += record.tokens
        if total >= threshold:
            return list(records[: index + 1])
    return list(records)


@dataclass(frozen=True, slots=True)
class WritePolicy:
    """When a branch is written: ``threshold`` tokens owed, or owed and idle for ``idle_after`` s."""

    threshold: int = DEFAULT_THRESHOLD
    idle_after: float = DEFAULT_IDLE_AFTER

    def __post_init__(self) -> None:
        threshold: object = self.threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            raise InvalidThresholdError(self.threshold, ALLOWED_THRESHOLDS)
        # Outside 8,000 / 16,000 / 32,000: allowed, but the reference agent refuses it.
        warn_threshold(self.threshold, stacklevel=3)
        if not self.idle_after > 0:
            raise ValueError(
                f"idle_after must be a positive number of seconds, not {self.idle_after}"
            )


def should_write(
    owed: Sequence[SourceRecord], now: float, policy: WritePolicy = WritePolicy()
) -> bool:
    """SPEC §6.3 incremental trigger, checked after each turn on the head branch.

    True when the owed tokens reach the threshold, or when something is owed
    and the last owed message is at least ``idle_after`` seconds old.
    """
    tokens = owed_tokens(owed)
    if tokens >= policy.threshold:
        return True
    return tokens > 0 and now - owed[-1].timestamp >= policy.idle_after


def may_write(
    owed: Sequence[SourceRecord], now: float, policy: WritePolicy = WritePolicy()
) -> bool:
    """Whether :func:`should_write` can hold for ``owed`` or any part of it.

    False means no subsequence of ``owed`` triggers a write: its tokens are
    below the threshold and none of its records is idle. The runtime asks
    this before removing the records other jobs hold (which needs a read of
    the claim file), since after most appends the answer is no.
    """
    if sum(max(record.tokens, 0) for record in owed) >= policy.threshold:
        return True  # (a part's tokens never exceed the sum of the positive ones)
    return any(now - record.timestamp >= policy.idle_after for record in owed)


def batch_due_at(
    batch: Sequence[SourceRecord], policy: WritePolicy, boundary_at: float | None = None
) -> float:
    """When the rules first called for ``batch``: the start of its write-cycle latency.

    A latency measured from the batch's submission would hide the time it
    waited behind the session's job in flight; this is the moment
    :func:`should_write` (or the boundary) first held for it. A batch that
    reaches the threshold was due when its last record was appended
    (:func:`first_batch` ends at the record that reaches it); a shorter one
    when its last record had been idle for ``idle_after``, or when a boundary
    (started at ``boundary_at``) asked for it, whichever came first. A
    shorter non-head tip written at a boundary is dated by the idle clause
    too, which can only make its latency look longer, never shorter.
    """
    if not batch:
        raise ValueError("a batch has at least one record")
    last = batch[-1].timestamp
    if owed_tokens(batch) >= policy.threshold:
        return last
    idle = last + policy.idle_after
    return idle if boundary_at is None else min(idle, boundary_at)


def should_write_at_boundary(
    owed: Sequence[SourceRecord], *, head: bool, policy: WritePolicy = WritePolicy()
) -> bool:
    """SPEC §6.6: the head branch is written if it owes anything; another tip only at the threshold.

    A short abandoned branch is a retry someone rejected; the idle rule does
    not apply to it.
    """
    if head:
        return bool(owed)
    return owed_tokens(owed) >= policy.threshold


def uncitable(session_id: str, records: Iterable[SourceRecord]) -> UncitableIdError | None:
    """The first id in a batch that a source handle cannot carry, or None (see store._ids)."""
    reason = citable_id_problem(session_id)
    if reason is not None:
        return UncitableIdError(session_id, None, reason)
    for record in records:
        reason = citable_id_problem(record.message_id)
        if reason is not None:
            return UncitableIdError(session_id, record.message_id, reason)
    return None
