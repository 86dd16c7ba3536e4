"""Backfill: hand every archived source that no topic cites yet to the writer.

SPEC §6.8. Markers say a batch was *delivered* to a writer, not that
anything it said reached a topic (a writer may fold five turns into one
paragraph citing one). History written by an older runtime, or marked by a
migration, can therefore be archived and marked and still absent from
memory. Backfill answers a different question than the ledger, so it
ignores markers entirely: its candidates are the **trusted** frames of
every v2 archive's valid prefix whose source no topic cites yet (pending
sources may never be cited, so they are never candidates). It neither sets
nor removes markers.

The candidates go through the normal write cycle in batches (one session
per batch, archive order, cut at the token threshold like ``first_batch``),
so every rule of a commit applies. Re-archiving a batch changes no byte
(its frames are present), and a source a topic cites after one run is no
candidate in the next: running backfill again only offers what the writer
chose not to cite. A batch is settled when its cycle installed something or
when the writer had nothing to add (no edit at all); it is unsettled when
the cycle failed (raised, timed out, refused, or every edit was rejected).
The report succeeds only when nothing is unsettled.

Frames hold the rendered turn (``[<time>] <label>: <content>``), not the
node, so a record rebuilt from a frame takes its content after the first
``": "`` of the first line and its role from the label. That is what the
writer reads; the source id, which is what a topic cites, is exact.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio.to_thread

from memory.ledger._ledger import DEFAULT_THRESHOLD, first_batch
from memory.ledger._records import SourceRecord
from memory.ledger._tokens import TokenCounter, estimate_tokens
from memory.maintenance._migrate import archive_files
from memory.workspace._archive import PROVIDER, ArchiveFrame, ArchiveScan, read_archive
from memory.writers._cycle import FailureKind, WriteOutcome
from memory.writers._prompt import render_observations
from memory.writers._writer import Batch

__all__ = [
    "BackfillReport",
    "backfill",
    "backfill_batches",
    "frame_record",
    "read_archives",
    "settled",
]

Progress = Callable[[int, int], None]
"""``progress(done, total)`` in candidate sources: once before the first batch, then after each."""


def frame_record(
    session_id: str, frame: ArchiveFrame, counter: TokenCounter = estimate_tokens
) -> SourceRecord:
    """Pure: the record a writer sees for an archived frame (see the module docstring)."""
    first, _, rest = frame.text.partition("\n")
    after_time = first[len(frame.timestamp) + 2 :].lstrip()  # past "[<time>]"
    label, _, content = after_time.partition(": ")
    if rest:
        content = f"{content}\n{rest}"
    try:
        timestamp = datetime.fromisoformat(frame.timestamp).timestamp()
    except (ValueError, OverflowError, OSError):
        timestamp = 0.0
    speaker_kind = frame.meta.speaker_kind if frame.meta is not None else ""
    role = "assistant" if "assistant" in (label, speaker_kind) else "user"
    return SourceRecord(
        session_id=session_id,
        message_id=frame.message_id,
        role=role,
        content=content,
        timestamp=timestamp,
        speaker=label,
        speaker_id=frame.speaker_id,
        meta=frame.meta,
        tokens=counter(content),
    )


def backfill_batches(
    archives: Mapping[str, ArchiveScan],
    cited: Callable[[str], bool],
    *,
    threshold: int = DEFAULT_THRESHOLD,
    counter: TokenCounter = estimate_tokens,
) -> list[tuple[str, list[SourceRecord]]]:
    """Pure: ``(session id, records)`` batches of every trusted, uncited frame.

    Sessions in id order, frames in archive order, each session cut at
    ``threshold`` tokens (the record that crosses it closes the batch).
    """
    batches: list[tuple[str, list[SourceRecord]]] = []
    for sid in sorted(archives):
        owed = [
            frame_record(sid, frame, counter)
            for frame in archives[sid].frames
            if frame.trusted and not cited(frame.source_id)
        ]
        while owed:
            batch = first_batch(owed, threshold)
            batches.append((sid, batch))
            owed = owed[len(batch) :]
    return batches


def settled(outcome: WriteOutcome) -> bool:
    """Installed something, or the writer proposed nothing for these sources."""
    if outcome.ok:
        return True
    return outcome.failure is FailureKind.EMPTY and not any(
        entry.get("status") == "error" for entry in outcome.audit
    )


def read_archives(memory_dir: str) -> tuple[dict[str, ArchiveScan], list[str]]:
    """Every v2 archive's scan, and what was passed over (blocking I/O)."""
    odd: list[str] = []
    files = archive_files(os.path.join(memory_dir, "sources", PROVIDER, "_v2"), odd)
    scans = {sid: read_archive(memory_dir, sid) for sid in sorted(files)}
    problems = [
        f"memory/{os.path.relpath(path, memory_dir)}: not a quoted session id; ignored"
        for path in odd
    ]
    problems.extend(
        f"memory/sources/{PROVIDER}/_v2/{sid}.md: scan stopped at line {scan.stop_line} "
        f"({scan.stop_reason}); only the {len(scan.frames)} frame(s) before it are backfilled"
        for sid, scan in scans.items()
        if not scan.complete
    )
    return scans, problems


@dataclass(frozen=True, slots=True)
class BackfillReport:
    """SPEC §8's document is :meth:`as_json`; ``errors`` and ``problems`` explain a shortfall."""

    candidates: int
    processed: int
    remaining: int
    revision: str
    errors: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.remaining == 0

    def as_json(self) -> dict[str, Any]:
        return {
            "status": "ok" if self.ok else "incomplete",
            "candidates": self.candidates,
            "processed": self.processed,
            "remaining": self.remaining,
            "revision": self.revision,
        }


async def backfill(
    memory_dir: str,
    *,
    write_batch: Callable[[Batch], Awaitable[WriteOutcome]],
    cited: Callable[[str], bool],
    revision: Callable[[], Awaitable[str]],
    threshold: int = DEFAULT_THRESHOLD,
    counter: TokenCounter = estimate_tokens,
    prompt: Callable[[Sequence[SourceRecord]], str] = render_observations,
    progress: Progress | None = None,
) -> BackfillReport:
    """Write every trusted archived source no topic cites yet; see the module docstring.

    * ``write_batch(batch)``: one write cycle (archive, writer, commit); its
      :class:`WriteOutcome` decides whether the batch is settled. An
      exception counts as unsettled and the next batch still runs.
    * ``cited(source_id)``: whether a topic cites it now (asked once per
      frame, before the first batch).
    * ``revision()``: ``workspace_revision`` after the last batch.

    Markers are neither read nor written.
    """
    archives, problems = await anyio.to_thread.run_sync(read_archives, memory_dir)
    batches = backfill_batches(archives, cited, threshold=threshold, counter=counter)
    total = sum(len(records) for _, records in batches)
    done = processed = 0
    errors: list[str] = []
    if progress is not None:
        progress(0, total)
    for sid, records in batches:
        batch = Batch(sid, tuple(records), prompt(records))
        try:
            outcome = await write_batch(batch)
        except Exception as error:  # noqa: BLE001 (a failed batch stays remaining)
            errors.append(f"session {sid!r}, {len(records)} source(s): {error!r}")
        else:
            if settled(outcome):
                processed += len(records)
            else:
                errors.append(f"{outcome.error}" if outcome.error else f"session {sid!r} failed")
        done += len(records)
        if progress is not None:
            progress(done, total)
    return BackfillReport(
        total, processed, total - processed, await revision(), tuple(errors), tuple(problems)
    )
