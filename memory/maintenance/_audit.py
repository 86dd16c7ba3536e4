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
* **refused branches**: a branch the ledger cannot turn into records (a
  turn stamped ``authority_schema`` without complete authority, a record
  without an id, SPEC §6.1): nothing of it is written until it is repaired.
* **an interrupted install** (``interrupted_install``): the install
  journal (``.scriptorium/install.journal``) is still there, so a crash
  stopped a commit after its commit point and the topic files it names are
  part new, part old until the next recovery replays it.
* **a workspace no write accepts** (``unwritable_workspace``): the walk of
  every file under ``memory/`` that each commit's ``workspace_revision``
  makes refuses the directory (a directory reached twice, e.g. a
  ``topics`` link to a sibling directory): every write fails with it.
* **runtime.json** (``unordered_blocks``, ``runtime_backwards``): see
  :mod:`memory.maintenance._runtime_audit`.
* **damaged write-ahead files** (``damaged_logs``): a session journal or
  runtime-log segment ending in bytes that are no valid record, which
  replay skips (found before any session is opened: opening cuts them).
* **unreadable state** (``warnings``): whatever could not be read to check
  the above: a session without meta.json, a branch that cannot be walked (a
  broken chain, a cycle), a skipped node file, a refused symbolic link.

Any finding is a problem: ``ok`` is True only when nothing was found, and
``problems`` lists, per kind found, how many and what to do about it (one
entry per non-empty list, in :data:`WHAT_TO_DO` order, so a new kind of
finding is one more key there).
* **lost markers**: those stranded records that are nevertheless in memory
  (archived, and cited unless pending): written, but their marker was
  dropped by another writer's unlocked metadata merge
  (:mod:`memory.ledger._lost_markers`). The runtime sets them again at a session's
  activation and in the idle watchdog's scan; the audit only counts them.

Everything here is a pure function of the facts (:func:`audit`); reading the
facts from a state directory is one blocking function
(:func:`~memory.maintenance._audit_inputs.read_audit_inputs`) that the CLI runs.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory._errors import LedgerError, TopicError
from memory.ledger._ledger import records_from_branch
from memory.ledger._lost_markers import lost_markers
from memory.ledger._records import MARKER_KEY, source_anchor, source_id
from memory.maintenance._runtime_audit import (
    RUNTIME_WHAT_TO_DO,
    runtime_findings,
    topic_block_ids,
)
from memory.workspace._archive import ArchiveScan
from memory.workspace._legacy import LegacyHeader
from memory.workspace._runtime_state import Floor, RuntimeState
from memory.workspace._topic_ids import source_key
from memory.workspace._topics import parse_topic

__all__ = [
    "WHAT_TO_DO",
    "AuditInputs",
    "Citation",
    "SessionFacts",
    "audit",
    "topic_citations",
    "with_problems",
]

Message = Mapping[str, Any]

WHAT_TO_DO: dict[str, str] = {
    "marked_not_archived": (
        "the archive lost evidence of these marked turns: restore memory/sources from a "
        "backup (their markers say memory holds them)"
    ),
    "unresolved_citations": (
        "fix or remove these footnote links in the named topic files (each must point at a "
        "trusted frame of sources/openprogram/_v2/<sid>.md)"
    ),
    "unreadable_topics": (
        "fix each named topic file at the named line or byte (or move it away): until then its "
        "edits are refused and writers route around it"
    ),
    "non_prefix_branches": (
        "these unmarked turns sit behind a marked one and are never owed again: remove the "
        "later markers (memory_written_scriptorium) so they are written"
    ),
    "lost_markers": (
        "these turns are in memory but another writer dropped their markers: run "
        "'scriptorium memory audit --repair' (or start 'scriptorium run') to mark them again "
        "without writing memory"
    ),
    "refused_branches": (
        "these branches hold a turn the ledger refuses (stamped authority_schema without "
        "complete authority, or a record without an id): repair the named node, then run "
        "'scriptorium memory release SID'"
    ),
    "interrupted_install": (
        "an install was interrupted (a full disk or a crash) and these topic files are part new, "
        "part old: run 'scriptorium run --once' (or any write), which completes it from "
        "memory/.scriptorium/install.journal; do not delete the journal"
    ),
    "unwritable_workspace": (
        "every write is refused until this is fixed: make each directory under memory/ "
        "reachable by one name only (e.g. move the linked directory back in place of the link)"
    ),
    **RUNTIME_WHAT_TO_DO,
    "damaged_logs": (
        "these session journals or runtime-log segments end in bytes that are no valid record "
        "(torn by a crash mid-write, or damaged): they were not replayed and are cut off at "
        "the next open; a crash explains one, a repeat means a failing disk: check it"
    ),
    "warnings": (
        "these files or branches could not be read, so what they hold was not checked and "
        "is not written: fix each as its line says, then run the audit again"
    ),
}


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
    undecodable: Mapping[str, str] = field(default_factory=dict)  # topic path -> the error
    # {journal, files} or {journal, error}: an install a crash stopped after its commit point
    interrupted_install: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    unwritable: Sequence[str] = field(default_factory=tuple)  # the revision walk's refusal
    # journals and runtime-log segments with bytes past their records (store.DamagedLog.as_json)
    damaged: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    runtime: RuntimeState | None = None  # runtime.json and its floor (issue 23); None: unchecked
    floor: Floor = field(default_factory=Floor)


def topic_citations(
    topics: Mapping[str, str], undecodable: Mapping[str, str] | None = None,
) -> tuple[list[Citation], list[dict[str, str]]]:
    """Pure: every source link of every topic, and the topics that fail the strict parse.

    ``undecodable`` (path -> error) are topic files that are not even text.
    """
    citations: list[Citation] = []
    unreadable = [{"topic": path, "error": error} for path, error in (undecodable or {}).items()]
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


def _non_prefix(
    workspace_id: str, facts: SessionFacts, refused: list[dict[str, str]]
) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for tip in sorted(facts.branches):
        try:
            records = records_from_branch(facts.session_id, facts.branches[tip])
        except LedgerError as error:  # refused: nothing can be marked there
            refused.append({"session": facts.session_id, "tip": tip, "error": str(error)})
            continue
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
    refused: list[dict[str, str]] = []
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
        non_prefix.extend(_non_prefix(wid, facts, refused))

    # sid -> anchor -> trusted
    anchors: dict[str, dict[str, bool]] = {
        sid: {f.anchor: f.trusted for f in scan.frames} for sid, scan in inputs.archives.items()
    }
    citations, unreadable = topic_citations(inputs.topics, inputs.undecodable)
    unreadable.sort(key=lambda entry: entry["topic"])
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
    report: dict[str, Any] = {
        "ok": True,
        "workspace_id": wid,
        "sessions": len(inputs.sessions),
        "marked": marked_total,
        "citations": len(citations),
        "marked_not_archived": marked_missing,
        "unresolved_citations": unresolved,
        "unreadable_topics": unreadable,
        "non_prefix_branches": non_prefix,
        "refused_branches": refused,
        "lost_markers": lost,
        "interrupted_install": [dict(entry) for entry in inputs.interrupted_install],
        "unwritable_workspace": list(inputs.unwritable),
        "damaged_logs": [dict(entry) for entry in inputs.damaged],
        "warnings": list(inputs.problems),
    }
    if inputs.runtime is not None:
        report.update(runtime_findings(inputs.runtime, inputs.floor,
                                       topic_block_ids(inputs.topics)))
    return with_problems(report)


def with_problems(report: dict[str, Any]) -> dict[str, Any]:
    """Pure: ``report`` with ``problems`` (kind, count, what to do) and ``ok`` derived from them."""
    problems = [
        {"kind": kind, "count": len(report[kind]), "what_to_do": what}
        for kind, what in WHAT_TO_DO.items()
        if report.get(kind)
    ]
    return {**report, "ok": not problems, "problems": problems}
