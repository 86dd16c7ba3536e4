"""What the inspector shows, read from a state directory without changing a byte of it.

Every function here is a blocking read (the app runs it in a worker thread)
over the store's and the workspace's read functions: a session is read as
found (:func:`store.lowlevel.read_session_as_found`: no lock, no recovery, no
checkpoint), the audit reads as found too, and nothing here opens a file for
writing. What a turn *is* for memory (written, owed, stranded, not a
record and why) is the ledger's rules applied to the branches the store
walks, exactly as ``scriptorium session show`` and ``memory pending`` do.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory._errors import LedgerError, TopicError
from memory.ledger import MARKER_KEY, NodeRecords, records_from_branch
from memory.ledger._ledger import APPENDING_TIERS, is_runtime_turn, message_text, speaker_authority
from memory.maintenance import audit, read_audit_inputs
from memory.maintenance._audit_inputs import read_topics
from memory.workspace import (
    ArchiveFrame,
    Footnote,
    Heading,
    Paragraph,
    QuarantineEntry,
    parse_topic,
    read_archive,
    read_quarantine,
    read_runtime_state,
    read_workspace_id,
    source_key,
)
from store import (
    Node,
    SessionCore,
    StoreError,
    list_sessions,
    node_to_message,
)
from store.lowlevel import predecessor_cycles, read_session_as_found, unreplayed

__all__ = [
    "OWED",
    "STATUSES",
    "Citing",
    "Overview",
    "SessionRow",
    "SessionView",
    "TopicView",
    "Turn",
    "TurnDetail",
    "read_overview",
    "read_session",
    "read_topics_view",
    "read_turn",
]

WRITTEN, OWED, STRANDED, REWOUND, FOREIGN, NOT_RECORD, REFUSED = (
    "written", "owed", "stranded", "rewound", "foreign", "not-a-record", "refused")
# Every status a turn can have, in the legend's order, with what it means.
STATUSES = {
    WRITTEN: "in memory: marked by this workspace",
    OWED: "owed: on a branch's unwritten tail, the next write takes it",
    STRANDED: "a record no branch owes: a newer turn of its branches is marked, or no tip reaches it",
    REWOUND: "a record rewound off its branch: no live branch holds it, so it is never owed",
    FOREIGN: "marked by another workspace only (a copied session): owed here when on a tail",
    NOT_RECORD: "not a record (SPEC §6.1): never written, with the reason",
    REFUSED: "refused: its branch cannot be turned into records until it is repaired",
}


@dataclass(frozen=True, slots=True)
class Turn:
    """One node as the session page draws it."""

    node: Node
    status: str
    reason: str
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class SessionView:
    session: str
    title: str
    head: str | None
    tips: tuple[str, ...]
    turns: tuple[Turn, ...]
    workspace: str | None
    problems: tuple[str, ...]  # what could not be read or drawn, each naming its file or node

    def counts(self) -> dict[str, int]:
        found = dict.fromkeys(STATUSES, 0)
        for turn in self.turns:
            found[turn.status] += 1
        return found

    def owed_tokens(self) -> int:
        return sum(turn.tokens for turn in self.turns if turn.status == OWED)

    def oldest_owed(self) -> float | None:
        owed = [turn.node.created_at for turn in self.turns if turn.status == OWED]
        return min(owed) if owed else None


def _why_not_a_record(message: Mapping[str, Any]) -> str:
    """The rule of SPEC §6.1 that leaves ``message`` out (``record_of`` returned None)."""
    role = message.get("role")
    if role not in ("user", "assistant"):
        return f"role {role!r}: only user and assistant turns are records"
    if is_runtime_turn(message):
        return "a turn the runtime wrote to drive itself (display runtime or a runtime source)"
    if not message_text(message):
        return "no text"
    authority = speaker_authority(message)
    if authority is not None and authority["authority_tier"] not in APPENDING_TIERS:
        return f"its speaker's tier {authority['authority_tier']!r} may not append to memory"
    return "not a record"


def read_session(state_dir: str, session: str, workspace: str | None = None) -> SessionView:
    """Every node of ``session`` with its status for this workspace; raises ``StoreError``."""
    if workspace is None:
        workspace = read_workspace_id(os.path.join(state_dir, "memory"))
    core = read_session_as_found(state_dir, session)
    nodes = sorted(core.nodes(), key=lambda n: n.seq)
    problems = [str(p) for p in core.problems]
    if unreplayed(core):
        problems.append(f"sessions/{session}/.journal holds turns not replayed yet: "
                        "this view may be behind until the session is next opened")
    head = _head(core, problems)
    owed: set[str] = set()
    refused: dict[str, str] = {}
    records = NodeRecords(session)  # each node's record once: many tips share their turns
    try:
        rows = core.list_branches()
    except StoreError as error:
        rows = []
        problems.append(str(error))
    tips = [str(row["head_msg_id"]) for row in rows]
    for tip in [*tips, *([head] if head is not None and head not in tips else [])]:
        try:  # the runtime's own walk: back from the tip to its newest own marker
            tail = (records.owed(core.nodes_back(tip), functools.partial(core.branch_nodes, tip),
                                 workspace) if workspace is not None
                    else records_from_branch(session, core.get_branch(tip)))
        except LedgerError as error:
            problems.append(f"branch to {tip}: {error}")
            refused.update(dict.fromkeys((n.id for n in _branch_or_none(core, tip)), str(error)))
            continue
        except StoreError as error:
            problems.append(f"branch to {tip}: {error}")
            continue
        owed.update(record.message_id for record in tail)
    problems += [f"a predecessor loop: {' -> '.join(loop)}" for loop in predecessor_cycles(nodes)]
    turns = tuple(_turn(session, node, records, workspace, owed, refused) for node in nodes)
    return SessionView(session, _title(core), head, tuple(tips), turns, workspace,
                       tuple(problems))


def _branch_or_none(core: SessionCore, tip: str) -> list[Node]:
    try:
        return core.branch_nodes(tip)
    except StoreError:
        return []


def _head(core: SessionCore, problems: list[str]) -> str | None:
    try:
        return core.head
    except StoreError as error:
        problems.append(str(error))
        return None


def _title(core: SessionCore) -> str:
    try:
        title = core.meta().get("title", "")
    except (StoreError, AttributeError, OSError):
        return ""
    return title if isinstance(title, str) else ""


def _turn(session: str, node: Node, records: NodeRecords, workspace: str | None,
          owed: set[str], refused: Mapping[str, str]) -> Turn:
    marker = node.metadata.get(MARKER_KEY)
    try:
        record = records.of(node)
    except LedgerError as error:
        return Turn(node, REFUSED, str(error))
    if node.id in refused:
        return Turn(node, REFUSED, refused[node.id])
    if record is None:
        return Turn(node, NOT_RECORD, _why_not_a_record(node_to_message(node, session)))
    if workspace is not None and marker == workspace:
        return Turn(node, WRITTEN, f"marked {MARKER_KEY} = {workspace}", record.tokens)
    if node.id in owed:
        if marker is not None:
            return Turn(node, OWED, f"marked by another workspace ({marker}); owed here",
                        record.tokens)
        return Turn(node, OWED, "on the unwritten tail of a branch", record.tokens)
    if marker is not None:
        return Turn(node, FOREIGN, f"marked by another workspace ({marker})", record.tokens)
    if node.rewound:
        return Turn(node, REWOUND, "rewound: the walk from every tip skips it, so no branch "
                    "owes it (what was said before the rewind is kept only if written then)",
                    record.tokens)
    return Turn(node, STRANDED, "not marked, yet no branch owes it: a newer turn of each of "
                "its branches is marked (audit: non-prefix branch), or no tip reaches it",
                record.tokens)


# -- one turn ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Citing:
    """A topic paragraph that cites a turn (through its archive frame)."""

    topic: str
    block_id: str | None
    body: str


@dataclass(frozen=True, slots=True)
class TurnDetail:
    turn: Turn
    session: str
    frame: ArchiveFrame | None
    citing: tuple[Citing, ...]
    markers: Mapping[str, Any]  # every memory_written_* key of its metadata
    linked: frozenset[str] = frozenset()  # its predecessor and caller, where they are nodes


def read_turn(state_dir: str, view: SessionView, node_id: str) -> TurnDetail | None:
    """``node_id`` of the session ``view`` shows, with its frame and the paragraphs citing it."""
    turn = next((t for t in view.turns if t.node.id == node_id), None)
    if turn is None:
        return None
    memory_dir = os.path.join(state_dir, "memory")
    frame = next((f for f in read_archive(memory_dir, view.session).frames
                  if f.message_id == node_id), None)
    citing: list[Citing] = []
    if frame is not None:
        key = f"{view.session}#{frame.anchor}"
        for topic in read_topics_view(state_dir):
            citing += [Citing(topic.path, p.block_id, p.body) for p in topic.paragraphs()
                       if key in topic.keys_of(p)]
    markers = {k: v for k, v in turn.node.metadata.items() if k.startswith("memory_written")}
    ids = {t.node.id for t in view.turns}
    linked = frozenset(n for n in (turn.node.predecessor, turn.node.caller) if n in ids)
    return TurnDetail(turn, view.session, frame, tuple(citing), markers, linked)


# -- topics --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicView:
    """A topic file: its blocks, or the raw text and why it did not parse."""

    path: str  # relative to <state>/memory
    blocks: tuple[Heading | Paragraph, ...]
    footnotes: Mapping[str, Footnote]
    error: str | None = None
    raw: str = ""
    # footnote label -> [(link label, "<sid>#source-<hex>" or None)]
    links: Mapping[str, Sequence[tuple[str, str | None]]] = field(default_factory=dict)

    def paragraphs(self) -> list[Paragraph]:
        return [b for b in self.blocks if isinstance(b, Paragraph)]

    def keys_of(self, paragraph: Paragraph) -> set[str]:
        return {key for label in paragraph.citations for _, key in self.links.get(label, ())
                if key is not None}


def read_topics_view(state_dir: str) -> list[TopicView]:
    """Every topic file, parsed strictly; one that fails keeps its text and the error."""
    memory_dir = os.path.join(state_dir, "memory")
    undecodable: dict[str, str] = {}
    try:
        texts = read_topics(memory_dir, undecodable)
    except StoreError as error:  # a link loop under topics/
        return [TopicView("topics/", (), {}, str(error))]
    views = [TopicView(path, (), {}, error) for path, error in sorted(undecodable.items())]
    for path, text in sorted(texts.items()):
        try:
            topic = parse_topic(text, path)
        except TopicError as error:
            views.append(TopicView(path, (), {}, str(error), text))
            continue
        links = {label: [(link.label, source_key(path, link.target)) for link in note.sources]
                 for label, note in topic.footnotes.items()}
        views.append(TopicView(path, topic.blocks, topic.footnotes, links=links))
    return views


def frames_by_key(state_dir: str, sessions: Iterable[str]) -> dict[str, tuple[str, str]]:
    """``<sid>#source-<hex>`` -> (session, node id) for the archives of ``sessions``."""
    memory_dir = os.path.join(state_dir, "memory")
    found: dict[str, tuple[str, str]] = {}
    for session in sessions:
        for frame in read_archive(memory_dir, session).frames:
            found[f"{session}#{frame.anchor}"] = (session, frame.message_id)
    return found


# -- the overview ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionRow:
    session: str
    title: str
    counts: Mapping[str, int]
    owed_tokens: int
    lag: float | None  # seconds since the oldest owed turn was appended
    problems: tuple[str, ...]


@dataclass(frozen=True)
class Overview:
    workspace: str | None
    sessions: tuple[SessionRow, ...]
    unlisted: tuple[str, ...]
    quarantined: tuple[QuarantineEntry, ...]
    memory_files: int
    memory_bytes: int
    paragraphs: int
    archived: int
    runtime: Mapping[str, Any]  # runtime.json's counters
    last_archived: tuple[tuple[str, ArchiveFrame], ...]  # the newest frames, newest first
    audit: Mapping[str, Any] | None

    def total(self, status: str) -> int:
        return sum(row.counts.get(status, 0) for row in self.sessions)

    @property
    def lag(self) -> float | None:
        lags = [row.lag for row in self.sessions if row.lag is not None]
        return max(lags) if lags else None


def read_overview(state_dir: str, *, now: float | None = None, last: int = 12) -> Overview:
    """The whole state at a glance: sessions, memory, quarantine, the audit's findings."""
    now = time.time() if now is None else now
    memory_dir = os.path.join(state_dir, "memory")
    workspace = read_workspace_id(memory_dir)
    unlisted: dict[str, StoreError] = {}
    rows = []
    for listed in list_sessions(state_dir, unlisted):
        sid = str(listed["id"])
        try:
            view = read_session(state_dir, sid, workspace)
        except StoreError as error:
            rows.append(SessionRow(sid, str(listed.get("title") or ""), {}, 0, None,
                                   (str(error),)))
            continue
        oldest = view.oldest_owed()
        rows.append(SessionRow(sid, view.title, view.counts(), view.owed_tokens(),
                               None if oldest is None else max(0.0, now - oldest), view.problems))
    topics = read_topics_view(state_dir)
    files, size = _size(memory_dir)
    frames = [(row.session, frame) for row in rows
              for frame in read_archive(memory_dir, row.session).frames]
    state = read_runtime_state(memory_dir)
    report = None if workspace is None else audit(
        read_audit_inputs(state_dir, workspace, as_found=True))
    return Overview(
        workspace, tuple(rows), tuple(f"{sid}: {error}" for sid, error in sorted(unlisted.items())),
        tuple(read_quarantine(memory_dir)), files, size,
        sum(len(t.paragraphs()) for t in topics), len(frames),
        {"local_batches": state.local_batches, "local_tokens": state.local_tokens,
         "write_commits_since_global": state.write_commits_since_global,
         "last_global_at": state.last_global_at},
        tuple(sorted(frames, key=lambda item: item[1].timestamp, reverse=True)[:last]), report,
    )


def _size(memory_dir: str) -> tuple[int, int]:
    """Files and bytes of memory a reader sees: topics and the source archive."""
    files = size = 0
    for part in ("topics", "sources"):
        for root, dirs, names in os.walk(os.path.join(memory_dir, part)):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in names:
                try:
                    size += os.stat(os.path.join(root, name)).st_size
                except OSError:
                    continue
                files += 1
    return files, size
