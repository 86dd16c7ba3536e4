"""The v2 source archive: the evidence a topic paragraph cites.

SPEC §5. Every recorded turn is archived, before any topic may cite it, as one
frame of ``sources/openprogram/_v2/<sid>.md``::

    <!-- openprogram-source-archive:v2 -->
    <empty line>
    <a id="source-<16hex>"></a>
    <!-- source-id:openprogram/<sid>/<node-id> -->
    <!-- speaker-id:<percent-encoded> -->        optional
    <!-- source-meta:<base64url, no padding> --> optional
    <!-- record-lines:N -->
    N body lines: "[<time>] <speaker>: <content...>"
    <empty line, between frames>

Why so strict: the content is whatever a person typed, so it can contain
text that looks exactly like a frame. The body is skipped by its declared
line count and never looked at for headers, and the parser stops at the
first frame that is malformed, truncated or repeated: it returns the valid
prefix and ``complete=False`` and never resynchronises, so no byte of a body
can ever be read as a source id. Lines are split on LF only; a CR is content
and survives byte for byte.

Appending rewrites the whole file atomically through :class:`DurableFiles`
(temp, fsync, rename, dir fsync; see docs/decisions.md for why not
``O_APPEND``). Frames whose source id is already present are skipped, so
archiving the same batch twice leaves the file byte-identical, and a file
whose scan was incomplete is never appended to (:class:`IncompleteArchiveError`).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from urllib.parse import quote, unquote_to_bytes

from memory._errors import IncompleteArchiveError, UnframeableRecordError
from memory.ledger._records import SourceMeta, SourceRecord, normalize_label, source_anchor
from store import DurableFiles

__all__ = [
    "PROVIDER",
    "V2_MARKER",
    "AppendResult",
    "ArchiveFrame",
    "ArchiveScan",
    "append_records",
    "archive_relpath",
    "decode_source_meta",
    "encode_source_meta",
    "encode_speaker_id",
    "format_timestamp",
    "is_canonical_speaker_id",
    "parse_archive",
    "plan_append",
    "read_archive",
    "render_frame",
]

V2_MARKER = "<!-- openprogram-source-archive:v2 -->"
PROVIDER = "openprogram"

_HEADER = (V2_MARKER + "\n\n").encode("ascii")
_ANCHOR = re.compile(rb'<a id="(source-[0-9a-f]{16})"></a>')
_SOURCE = re.compile(rb"<!-- source-id:([^>]+) -->")
_SPEAKER = re.compile(rb"<!-- speaker-id:([^>]*) -->")
_META = re.compile(rb"<!-- source-meta:([A-Za-z0-9_-]+) -->")
_LINES = re.compile(rb"<!-- record-lines:([1-9][0-9]{0,8}) -->")
# The first body line: "[<time>] <speaker>: <content>" (the rest is not looked at).
_FIRST_LINE = re.compile(r"\[([^\]]*)\]\s+.+?: .*")
# Characters a source id may not contain: they would end or fake the comment or link.
_UNSAFE_IN_ID = re.compile(r"[\[\]<>\r\n]")
_META_KEYS = frozenset({"authority_tier", "principal_id", "speaker_kind", "trust_state", "version"})
TRUST_STATES = frozenset({"trusted", "pending"})


def archive_relpath(session_id: str) -> str:
    """``sources/openprogram/_v2/<sid>.md``, the session id quoted as the reference agent does."""
    return f"sources/{PROVIDER}/_v2/{quote(session_id, safe='-_.')}.md"


# -- header fields ------------------------------------------------------------


def encode_speaker_id(value: str) -> str:
    """Canonical percent encoding: ``quote(value, safe="")`` with ``-`` written ``%2D``."""
    return quote(value, safe="").replace("-", "%2D")


def is_canonical_speaker_id(encoded: str) -> bool:
    """True iff ``encoded`` is exactly what :func:`encode_speaker_id` writes for some value."""
    try:
        decoded = unquote_to_bytes(encoded).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return encode_speaker_id(decoded) == encoded


def _meta_json(meta: SourceMeta) -> bytes:
    document = {
        "authority_tier": meta.authority_tier,
        "principal_id": meta.principal_id,
        "speaker_kind": meta.speaker_kind,
        "trust_state": meta.trust_state,
        "version": 1,
    }
    return json.dumps(document, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode(
        "utf-8"
    )


def encode_source_meta(meta: SourceMeta) -> str:
    """Compact key-sorted JSON with ``version: 1``, base64url without padding."""
    if meta.trust_state not in TRUST_STATES:
        raise ValueError(f"trust_state must be 'trusted' or 'pending', not {meta.trust_state!r}")
    return base64.urlsafe_b64encode(_meta_json(meta)).decode("ascii").rstrip("=")


def decode_source_meta(token: str) -> SourceMeta | None:
    """The meta in a ``source-meta`` token, or None unless it is exactly canonical."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        document = json.loads(raw)
    except (ValueError, binascii.Error, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(document, dict) or set(document) != _META_KEYS:
        return None
    tier = document["authority_tier"]
    if document["version"] != 1 or document["trust_state"] not in TRUST_STATES:
        return None
    if not (tier is None or isinstance(tier, str)):
        return None
    if not isinstance(document["principal_id"], str) or not isinstance(
        document["speaker_kind"], str
    ):
        return None
    meta = SourceMeta(
        authority_tier=tier,
        principal_id=document["principal_id"],
        speaker_kind=document["speaker_kind"],
        trust_state=document["trust_state"],
    )
    # Canonical means: re-encoding gives the very same token (key order,
    # spacing, escapes, version spelled 1 not 1.0 or true).
    return meta if encode_source_meta(meta) == token else None


def format_timestamp(timestamp: float, tz: tzinfo | None = None) -> str:
    """ISO-8601 local time with offset (``tz=None``: this machine's zone)."""
    moment = datetime.fromtimestamp(timestamp, UTC)
    return (moment.astimezone(tz) if tz is not None else moment.astimezone()).isoformat()


# -- rendering ---------------------------------------------------------------


def _check_source(record: SourceRecord, session_id: str | None = None) -> str:
    source = record.source_id
    if session_id is not None and record.session_id != session_id:
        raise UnframeableRecordError(
            source,
            f"it belongs to session {record.session_id!r}, not to the archive of {session_id!r}",
        )
    if not record.session_id or "/" in record.session_id or not record.message_id:
        raise UnframeableRecordError(source, "session and node ids must be non-empty, sid without '/'")
    if not _safe_source_id(source):
        raise UnframeableRecordError(source, "the source id holds a control character or one of []<>")
    return source


def _safe_source_id(source: str) -> bool:
    return source.isprintable() and _UNSAFE_IN_ID.search(source) is None


def render_frame(record: SourceRecord, *, tz: tzinfo | None = None) -> str:
    """One frame's text, ending with LF (frames are separated by one more LF)."""
    source = _check_source(record)
    label = normalize_label(record.speaker)
    if not label:
        raise UnframeableRecordError(source, "the speaker label is empty")
    try:
        when = format_timestamp(record.timestamp, tz)
    except (OverflowError, OSError, ValueError):  # NaN, or beyond datetime's years
        raise UnframeableRecordError(source, f"timestamp {record.timestamp!r} is not a time") from None
    body = f"[{when}] {label}: {record.content}"
    lines = [f'<a id="{source_anchor(source)}"></a>', f"<!-- source-id:{source} -->"]
    if record.speaker_id is not None:
        lines.append(f"<!-- speaker-id:{encode_speaker_id(record.speaker_id)} -->")
    if record.meta is not None:
        lines.append(f"<!-- source-meta:{encode_source_meta(record.meta)} -->")
    lines.append(f"<!-- record-lines:{body.count(chr(10)) + 1} -->")
    lines.append(body)
    return "\n".join(lines) + "\n"


# -- parsing -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArchiveFrame:
    """One valid frame. ``text`` is the body exactly as archived (LF-joined lines)."""

    source_id: str
    message_id: str
    speaker_id: str | None  # decoded
    meta: SourceMeta | None
    text: str
    timestamp: str  # what the first body line holds between its brackets

    @property
    def anchor(self) -> str:
        return source_anchor(self.source_id)

    @property
    def trusted(self) -> bool:
        """Frames without ``source-meta`` predate trust metadata and count as trusted."""
        return self.meta is None or self.meta.trust_state == "trusted"


@dataclass(frozen=True, slots=True)
class ArchiveScan:
    """The valid prefix of an archive.

    ``complete`` is False when the scan stopped early; ``stop_reason`` and
    ``stop_line`` (1-based) say where and why. ``valid_bytes`` is the length
    of the prefix the frames came from. ``open_ended`` says a complete file
    already ends with an empty line (no frame yet, or one trailing empty line
    after the last frame), so the next frame needs no separator.
    """

    frames: tuple[ArchiveFrame, ...]
    complete: bool
    valid_bytes: int
    stop_reason: str | None = None
    stop_line: int | None = None
    source_ids: frozenset[str] = field(default=frozenset(), repr=False)
    open_ended: bool = False

    @property
    def trusted_ids(self) -> frozenset[str]:
        return frozenset(f.source_id for f in self.frames if f.trusted)


def parse_archive(data: bytes, session_id: str) -> ArchiveScan:
    """Scan ``data`` (the archive of ``session_id``) strictly; see the module docstring.

    An empty ``data`` is an archive with no frames yet (complete).
    """
    if not data:
        return ArchiveScan((), True, 0, open_ended=True)
    lines = data.split(b"\n")
    frames: list[ArchiveFrame] = []
    # A session has few speakers: decode each distinct header token once.
    speakers: dict[bytes, str | None] = {}
    metas: dict[bytes, SourceMeta | None] = {}
    seen: set[str] = set()
    prefix = f"{PROVIDER}/{session_id}/"

    def stop(reason: str, line: int, valid: int) -> ArchiveScan:
        return ArchiveScan(tuple(frames), False, valid, reason, line + 1, frozenset(seen))

    if len(lines) < 3 or lines[0] != _HEADER[:-2] or lines[1] != b"":
        return stop("the file does not start with the v2 marker and an empty line", 0, 0)
    valid = len(_HEADER)  # end of the valid prefix so far
    position = valid  # byte offset of lines[i]
    open_ended = False
    i = 2
    while i < len(lines):
        if i == len(lines) - 1 and lines[i] == b"":
            open_ended = True  # end of file after the marker, or one trailing empty line
            break
        if i + 2 >= len(lines):
            return stop("truncated frame header", i, valid)
        anchor = _ANCHOR.fullmatch(lines[i])
        source = _SOURCE.fullmatch(lines[i + 1])
        if anchor is None or source is None:
            return stop("expected an anchor line and a source-id line", i, valid)
        try:
            source_id = source.group(1).decode("utf-8")
        except UnicodeDecodeError:
            return stop("source id is not UTF-8", i + 1, valid)
        if not source_id.startswith(prefix) or len(source_id) == len(prefix):
            return stop(
                f"source id {source_id!r} is not a turn of session {session_id!r}", i + 1, valid
            )
        if not _safe_source_id(source_id):
            return stop(f"source id {source_id!r} holds an unsafe character", i + 1, valid)
        if anchor.group(1).decode("ascii") != source_anchor(source_id):
            return stop(f"anchor does not match the hash of {source_id!r}", i, valid)
        if source_id in seen:
            return stop(f"duplicate frame for {source_id!r}", i, valid)
        cursor = i + 2
        speaker_id: str | None = None
        speaker = _SPEAKER.fullmatch(lines[cursor])
        if speaker is not None:
            token = speaker.group(1)
            if token not in speakers:
                speakers[token] = _decode_speaker_id(token)
            speaker_id = speakers[token]
            if speaker_id is None:
                return stop("speaker-id is not canonically encoded", cursor, valid)
            cursor += 1
        meta: SourceMeta | None = None
        meta_match = _META.fullmatch(lines[cursor]) if cursor < len(lines) else None
        if meta_match is not None:
            token = meta_match.group(1)
            if token not in metas:
                metas[token] = decode_source_meta(token.decode("ascii"))
            meta = metas[token]
            if meta is None:
                return stop("source-meta is not canonical", cursor, valid)
            cursor += 1
        count = _LINES.fullmatch(lines[cursor]) if cursor < len(lines) else None
        if count is None:
            return stop("expected a record-lines line", cursor, valid)
        first = cursor + 1
        end = first + int(count.group(1))
        if end >= len(lines) or lines[end] != b"":
            return stop("truncated frame body", first, valid)
        try:
            text = b"\n".join(lines[first:end]).decode("utf-8")
        except UnicodeDecodeError:
            return stop("frame body is not UTF-8", first, valid)
        head = _FIRST_LINE.fullmatch(text.split("\n", 1)[0])
        if head is None:
            return stop("first body line is not '[<time>] <speaker>: <content>'", first, valid)
        frames.append(
            ArchiveFrame(source_id, source_id[len(prefix) :], speaker_id, meta, text, head.group(1))
        )
        seen.add(source_id)
        valid = position + sum(map(len, lines[i:end])) + (end - i)
        position = valid + 1  # past the empty line after the body
        i = end + 1
    return ArchiveScan(tuple(frames), True, len(data), None, None, frozenset(seen), open_ended)


def _decode_speaker_id(token: bytes) -> str | None:
    encoded = token.decode("utf-8", "replace")
    if not is_canonical_speaker_id(encoded):
        return None
    return unquote_to_bytes(encoded).decode("utf-8")


# -- appending -------------------------------------------------------------------


def plan_append(
    existing: bytes,
    session_id: str,
    records: Iterable[SourceRecord],
    *,
    tz: tzinfo | None = None,
    scan: ArchiveScan | None = None,
) -> tuple[bytes, tuple[str, ...]]:
    """The archive after appending ``records`` and the source ids actually added.

    Pure. Records already archived (or repeated in ``records``) are skipped;
    nothing to add returns ``existing`` unchanged. Raises
    :class:`IncompleteArchiveError` if ``existing`` does not scan completely and
    :class:`UnframeableRecordError` for a record the grammar cannot hold, before
    anything is decided. ``scan`` is ``parse_archive(existing, session_id)``
    when the caller already has it (:class:`~memory.workspace._archive_cache.ArchiveCache`).
    """
    if scan is None:
        scan = parse_archive(existing, session_id)
    if not scan.complete:
        # Messages name paths relative to the state directory (<state>/memory/...).
        raise IncompleteArchiveError(
            f"memory/{archive_relpath(session_id)}",
            f"{scan.stop_reason} at line {scan.stop_line}",
            len(scan.frames),
        )
    known = scan.source_ids  # not copied: the archive may hold thousands of ids
    fresh: set[str] = set()
    added: list[str] = []
    frames: list[bytes] = []
    for record in records:
        source = _check_source(record, session_id)
        if source in known or source in fresh:
            continue
        try:
            frames.append(render_frame(record, tz=tz).encode("utf-8"))
        except UnicodeEncodeError:
            raise UnframeableRecordError(
                source, "its text is not valid Unicode (lone surrogate)"
            ) from None
        fresh.add(source)
        added.append(source)
    if not frames:
        return existing, ()
    if not existing:
        parts = [_HEADER]
    elif scan.open_ended:
        parts = [existing]
    else:
        # Not ``endswith(b"\n\n")``: a body's own last line may be empty.
        parts = [existing, b"\n"]
    # One join: a large archive is copied once, not once per concatenation.
    return b"".join([*parts, b"\n".join(frames)]), tuple(added)


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What one append did: the ids it added and those that were already there."""

    path: str  # relative to <state>/memory
    added: tuple[str, ...]
    present: tuple[str, ...]


def read_archive(memory_dir: str, session_id: str) -> ArchiveScan:
    """Scan the session's v2 archive; a missing file is an empty, complete archive."""
    return parse_archive(_read(os.path.join(memory_dir, archive_relpath(session_id))), session_id)


def append_records(
    memory_dir: str,
    session_id: str,
    records: Sequence[SourceRecord],
    files: DurableFiles,
    *,
    tz: tzinfo | None = None,
) -> AppendResult:
    """Archive ``records`` durably: one whole-file atomic replace, or nothing if all are present.

    One durable operation (run it in one thread hop with ``run_durable``).
    Readers and crashes see the old file or the new one, never a torn frame.
    """
    relpath = archive_relpath(session_id)
    path = os.path.join(memory_dir, relpath)
    existing = _read(path)
    new, added = plan_append(existing, session_id, records, tz=tz)
    fresh = set(added)
    present = tuple(r.source_id for r in records if r.source_id not in fresh)
    if added:
        files.make_dirs(os.path.dirname(path))
        files.write_atomic(path, new)
    return AppendResult(relpath, added, present)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return b""
