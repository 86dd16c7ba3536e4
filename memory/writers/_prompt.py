"""The prompt a model writer is given: new evidence plus the workspace's shape.

SPEC §8: a writer receives the batch with its rendered prompt text. Rendering
it here, once, means a model writer only has to call a model, and every
model writer sees the evidence the same way:

* ``## Observed <date>`` sections, one per local calendar date in batch
  order, each holding one JSON line per record:
  ``{"ref": "<source id>", "speaker": "<label>", "content": "<text>"}``.
  ``ref`` is the raw source handle a writer cites (the transaction expands
  it into a link); JSON keeps multi-line content on one line and makes
  every line parseable.
* ``## Workspace``: the existing topic files with their headings, so the
  model files new facts where related ones already are instead of inventing
  a parallel tree.

Pending records (``trust_state == "pending"``) are archived but may not be
cited (SPEC §5), so they are left out of the prompt rather than offered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import tzinfo

from memory._errors import TopicError
from memory.ledger._records import SourceRecord
from memory.workspace._archive import format_timestamp
from memory.workspace._edits import WorkspaceSnapshot

__all__ = [
    "TopicOutline",
    "outline_snapshot",
    "outline_topic",
    "render_observations",
    "render_prompt",
    "render_workspace",
]

_HEADING = re.compile(r"(#{1,6}) +(\S.*?)\s*$")
_FENCE = re.compile(r"(`{3,}|~{3,})")


@dataclass(frozen=True, slots=True)
class TopicOutline:
    """One topic file's path (relative to ``<state>/memory``) and its headings, in order."""

    path: str
    headings: tuple[str, ...]  # e.g. ("# Owner", "## Food")


def outline_topic(path: str, text: str) -> TopicOutline:
    """The ATX headings of a topic file (fenced code blocks skipped)."""
    headings: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        opener = _FENCE.match(line)
        if opener is not None:
            marker = opener.group(1)
            if fence is None:
                fence = marker[0] * 3
            elif marker.startswith(fence):
                fence = None
            continue
        if fence is not None:
            continue
        match = _HEADING.match(line)
        if match is not None:
            headings.append(f"{match.group(1)} {match.group(2)}")
    return TopicOutline(path, tuple(headings))


def outline_snapshot(snapshot: WorkspaceSnapshot) -> list[TopicOutline]:
    """The outline of every topic file of a snapshot (reads each file once).

    A file the snapshot cannot give as text (not UTF-8) is listed without headings.
    """
    outlines: list[TopicOutline] = []
    for path in snapshot.topic_paths:
        try:
            outlines.append(outline_topic(path, snapshot.read(path)))
        except TopicError:
            outlines.append(TopicOutline(path, ()))
    return outlines


def render_observations(records: Iterable[SourceRecord], *, tz: tzinfo | None = None) -> str:
    """The ``## Observed <date>`` sections for the trusted records, in the given order."""
    out: list[str] = []
    current: str | None = None
    for record in records:
        if not record.trusted:
            continue
        date = format_timestamp(record.timestamp, tz)[:10]
        if date != current:
            if out:
                out.append("")
            out.extend([f"## Observed {date}", ""])
            current = date
        line = {"ref": record.source_id, "speaker": record.speaker, "content": record.content}
        out.append(json.dumps(line, ensure_ascii=False))
    return "\n".join(out) + "\n" if out else ""


def render_workspace(topics: Sequence[TopicOutline]) -> str:
    """The ``## Workspace`` section: each topic path, its headings indented below it."""
    out = ["## Workspace", ""]
    if not topics:
        out.append("(no topic files yet)")
    for outline in sorted(topics, key=lambda t: t.path):
        out.append(f"- {outline.path}")
        out.extend(f"  - {heading}" for heading in outline.headings)
    return "\n".join(out) + "\n"


def render_prompt(
    records: Sequence[SourceRecord],
    topics: Sequence[TopicOutline],
    *,
    tz: tzinfo | None = None,
) -> str:
    """The whole prompt: the workspace's shape first, then what was observed."""
    observed = render_observations(records, tz=tz)
    return render_workspace(topics) + ("\n" + observed if observed else "")
