"""The consistency check: markers vs archive vs topics.

Three ledgers describe the same history and nothing forces them to agree
after a crash, a hand edit, a copied directory or a bug: the markers on the
turns (what was delivered, SPEC §6.2), the source archive (the evidence,
SPEC §5) and the topics' citations (what memory says and why). The audit
reads all three and reports every disagreement that can lose or
misattribute memory:

* **marked but not archived**: a turn marked with this workspace's id
  whose source is in neither the v2 archive's valid prefix nor the trusted
  first header of the legacy archive. The write cycle archives before it
  marks (SPEC §6.4), so this means the archive lost evidence.
* **unresolved citations**: a topic footnote link that does not point at an
  archived frame (a wrong anchor, a missing archive, a link outside
  ``sources/``), a link to a pending frame (never citable, SPEC §5), or a
  topic file that fails the strict parse.
* **non-prefix branches**: a branch whose own markers are not a contiguous
  prefix of its records. The walk back stops at the newest marker, so every
  unmarked record before it is stranded: never owed again, never written.
* **lost markers**: those stranded records that are nevertheless in memory
  (archived, and cited unless pending): written, but their marker was
  dropped by another writer's unlocked metadata merge
  (:mod:`memory._lost_markers`). The runtime sets them again at a session's
  activation and in the idle watchdog's scan; the audit only counts them.

Everything here is a pure function of the facts (:func:`audit`); reading the
facts from a state directory is one blocking function
(:func:`read_audit_inputs`) that the CLI runs.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory._archive import PROVIDER, ArchiveScan, read_archive
from memory._errors import LedgerError, TopicError
from memory._ledger import records_from_branch
from memory._legacy import LegacyHeader, read_legacy_first_header
from memory._lost_markers import lost_markers
from memory._migrate import archive_files
from memory._records import MARKER_KEY, source_anchor, source_id
from memory._topic_ids import source_key
from memory._topics import parse_topic
from store import SessionCore, StoreError, list_sessions, node_to_message

__all__ = [
    "AuditInputs",
    "Citation",
    "SessionFacts",
    "audit",
    "read_audit_inputs",
    "read_topics",
    "topic_citations",
]

Message = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Citation:
    """One link in one footnote of one topic file."""

    topic: str  # relative to <state>/memory
    footnote: str
    target: str
    key: str | None  # "<sid>#source-<16hex>" if it is an archive link, else None
    legacy: bool  # the link names the legacy archive, not the v2 one


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """One session as the audit needs it.

    ``messages``: every node in message view (markers are metadata spread to
    the top level), including nodes no branch reaches. ``branches``: tip ->
    that tip's path (``get_branch``), root to tip.
    """

    session_id: str
    messages: Sequence[Message]
    branches: Mapping[str, Sequence[Message]]


@dataclass(frozen=True, slots=True)
class AuditInputs:
    workspace_id: str
    sessions: Sequence[SessionFacts]
    archives: Mapping[str, ArchiveScan]  # sid -> v2 scan
    legacy: Mapping[str, LegacyHeader]  # sid -> trusted first header
    topics: Mapping[str, str]  # relative path -> text
    problems: Sequence[str] = field(default_factory=tuple)  # from reading the facts


def topic_citations(topics: Mapping[str, str]) -> tuple[list[Citation], list[dict[str, str]]]:
    """Pure: every source link of every topic, and the topics that fail the strict parse."""
    citations: list[Citation] = []
    unreadable: list[dict[str, str]] = []
    for path in sorted(topics):
        try:
            topic = parse_topic(topics[path], path)
        except TopicError as error:
            unreadable.append({"topic": path, "error": str(error)})
            continue
        for label, footnote in topic.footnotes.items():
            for link in footnote.sources:
                key = source_key(path, link.target)
                file_part = link.target.partition("#")[0]
                resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), file_part))
                legacy = key is not None and "/_v2/" not in f"/{resolved}"
                citations.append(Citation(path, label, link.target, key, legacy))
    return citations, unreadable


def _non_prefix(workspace_id: str, facts: SessionFacts) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for tip in sorted(facts.branches):
        try:
            records = records_from_branch(facts.session_id, facts.branches[tip])
        except LedgerError:
            continue  # reported by the ledger itself; nothing can be marked there
        flags = [r.marker == workspace_id for r in records]
        if True not in flags:
            continue
        last = len(flags) - 1 - flags[::-1].index(True)
        gaps = [
            r.message_id for r, flag in zip(records[:last], flags[:last], strict=True) if not flag
        ]
        if gaps:
            found.append(
                {
                    "session": facts.session_id,
                    "tip": tip,
                    "unmarked": gaps,  # stranded: before a marker, so never owed
                    "last_marked": records[last].message_id,
                }
            )
    return found


def _lost_markers(
    inputs: AuditInputs, archived: Mapping[str, set[str]], citations: Sequence[Citation]
) -> list[dict[str, str]]:
    """``{session, node}`` of every lost marker, by session, nodes sorted."""
    cited_keys = {c.key for c in citations if c.key is not None and not c.legacy}
    found: list[dict[str, str]] = []
    for facts in inputs.sessions:
        sid = facts.session_id
        cited = {
            source_id(sid, str(m["id"])) for m in facts.messages
            if isinstance(m.get("id"), str)
            and f"{sid}#{source_anchor(source_id(sid, m['id']))}" in cited_keys
        }
        nodes: set[str] = set()
        for tip in sorted(facts.branches):
            try:
                records = records_from_branch(sid, facts.branches[tip])
            except LedgerError:
                continue
            nodes.update(lost_markers(records, inputs.workspace_id,
                                      archived.get(sid, set()), cited))
        found.extend({"session": sid, "node": node} for node in sorted(nodes))
    return found


def audit(inputs: AuditInputs) -> dict[str, Any]:
    """Pure: the report. ``ok`` is True exactly when every problem list is empty."""
    wid = inputs.workspace_id
    archived: dict[str, set[str]] = {
        sid: {f.source_id for f in scan.frames} for sid, scan in inputs.archives.items()
    }
    marked_missing: list[dict[str, str]] = []
    non_prefix: list[dict[str, Any]] = []
    marked_total = 0
    for facts in inputs.sessions:
        sid = facts.session_id
        known = archived.get(sid, set())
        header = inputs.legacy.get(sid)
        for message in facts.messages:
            node = message.get("id")
            if message.get(MARKER_KEY) != wid or not isinstance(node, str):
                continue
            marked_total += 1
            source = source_id(sid, node)
            if source not in known and (header is None or header.source_id != source):
                marked_missing.append({"session": sid, "node": node})
        non_prefix.extend(_non_prefix(wid, facts))

    # sid -> anchor -> trusted
    anchors: dict[str, dict[str, bool]] = {
        sid: {f.anchor: f.trusted for f in scan.frames} for sid, scan in inputs.archives.items()
    }
    citations, unreadable = topic_citations(inputs.topics)
    unresolved: list[dict[str, str]] = []
    for citation in citations:
        if citation.key is None:
            reason = "not a link to a source archive"
        else:
            sid, _, anchor = citation.key.partition("#")
            trusted: bool | None = None
            if citation.legacy:
                # Legacy records carry no trust metadata: the first header is all there is.
                header = inputs.legacy.get(sid)
                if header is not None and source_anchor(header.source_id) == anchor:
                    trusted = True
            else:
                trusted = anchors.get(sid, {}).get(anchor)
            if trusted:
                continue
            reason = (
                "no archived frame has this anchor"
                if trusted is None
                else "the archived frame is pending (never citable)"
            )
        unresolved.append(
            {
                "topic": citation.topic,
                "footnote": citation.footnote,
                "target": citation.target,
                "reason": reason,
            }
        )
    lost = _lost_markers(inputs, archived, citations)
    ok = not (marked_missing or unresolved or non_prefix or unreadable or lost)
    return {
        "ok": ok,
        "workspace_id": wid,
        "sessions": len(inputs.sessions),
        "marked": marked_total,
        "citations": len(citations),
        "marked_not_archived": marked_missing,
        "unresolved_citations": unresolved,
        "unreadable_topics": unreadable,
        "non_prefix_branches": non_prefix,
        "lost_markers": lost,
        "warnings": list(inputs.problems),
    }


# -- reading the facts (blocking I/O) -----------------------------------------------


def read_topics(memory_dir: str) -> dict[str, str]:
    """Every ``topics/**.md`` (hidden parts skipped), relative path -> text (undecodable: replaced)."""
    topics: dict[str, str] = {}
    root = os.path.join(memory_dir, "topics")
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        relative = os.path.relpath(directory, memory_dir).replace(os.sep, "/")
        for name in sorted(names):
            if name.endswith(".md") and not name.startswith("."):
                with open(os.path.join(directory, name), "rb") as handle:
                    topics[f"{relative}/{name}"] = handle.read().decode("utf-8", "replace")
    return topics


def read_audit_inputs(state_dir: str, workspace_id: str) -> AuditInputs:
    """The facts of a state directory. Run it where no runtime writes (or accept a snapshot race).

    Sessions that cannot be opened, and branches that cannot be walked, are
    reported in ``problems`` (they are the store's to report in detail).
    """
    memory_dir = os.path.join(state_dir, "memory")
    sessions: list[SessionFacts] = []
    problems: list[str] = []
    for row in list_sessions(state_dir):
        sid = row["id"]
        try:
            core = SessionCore.open(state_dir, sid)
            messages = [node_to_message(node, sid) for node in core.nodes()]
            branches: dict[str, Sequence[Message]] = {}
            for tip in core.list_branches():
                try:
                    branches[tip["head_msg_id"]] = core.get_branch(tip["head_msg_id"])
                except StoreError as error:
                    problems.append(f"session {sid!r}, tip {tip['head_msg_id']!r}: {error}")
            problems.extend(str(p) for p in core.problems)
        except StoreError as error:
            problems.append(f"session {sid!r}: {error}")
            continue
        sessions.append(SessionFacts(sid, messages, branches))
    # Archives of sessions that are gone still back citations.
    root = os.path.join(memory_dir, "sources", PROVIDER)
    odd: list[str] = []
    v2 = archive_files(os.path.join(root, "_v2"), odd)
    old = archive_files(root, odd)
    problems.extend(
        f"memory/{os.path.relpath(path, memory_dir)}: not a quoted session id; ignored"
        for path in odd
    )
    archives = {sid: read_archive(memory_dir, sid) for sid in sorted(v2)}
    legacy = {
        sid: header
        for sid in sorted(old)
        if (header := read_legacy_first_header(memory_dir, sid)) is not None
    }
    return AuditInputs(workspace_id, sessions, archives, legacy, read_topics(memory_dir), problems)
