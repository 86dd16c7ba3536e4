"""The oracle of ``scriptorium simulate``: every invariant checked against the files.

A stress run is worth only what its final check is worth. After the
workload, the harness runs the session boundary for every session and
drains; then this module reads the state directory *from disk* (not from
the runtime's memory) and decides, per invariant, PASS or FAIL:

``head_branches_written``
    every recordable turn of every head branch carries this workspace's
    marker (SPEC §6.6: the head branch is written completely; an unmarked
    turn below a marked one would be an omission the ledger never repairs).
``no_owed_tail_at_threshold``
    no tip owes a tail of ``threshold`` tokens or more (SPEC §6.6).
``marked_turns_archived``
    every marked turn's source id is in its session's archive (SPEC §6.4:
    archive, install, then mark).
``citations_resolve``
    every topic file parses strictly and every citation points at an
    archive file and an anchor of one of its frames.
``metadata_keys_kept``
    no node file lost a metadata key the runtime acknowledged writing
    (appends, rewinds, spawns, summaries, markers, outside merges): the
    lost-marker race of SPEC §1.
``updated_at_not_moved_by_marking``
    the boundary (which only marks) left every ``updated_at`` as it was,
    and each session's ``updated_at`` is its last append's.
``duplicates_only_after_crashes``
    a batch repeating already-written turns appears only in a session a
    crash could have interrupted, at most one batch per crash.
``no_turn_appended_twice``
    every turn an agent issued is one node of its session: an append (its
    ``sim_turn``), a spawn root (caller and tagged prompt), a summary (tagged
    text). A crash after a durable effect must not repeat it (issue 10).
``no_outside_write_reverted``
    every write of the unlocked reference agent (``agent-writes``) is still
    on disk: each metadata key it merged, each ``rewound`` stamp of its
    rewinds, and the head its last rewind of a session set (nothing moves a
    head after the workload, so any other head is a reverted write): no
    marker merge, journal replay or checkpoint of ours undid them.

The agent's rewinds change what the other checks see, as SPEC §4 says they
should: rewound turns drop out of every branch walk, so the head branch
(``head_branches_written``) and the tips (``no_owed_tail_at_threshold``)
are judged without them, and turns written before the rewind keep their
archive frames (``marked_turns_archived``). One check is adjusted:
``metadata_keys_kept`` does not count a marker missing from a turn the
agent rewound. The agent's rewind rewrites those node files from its own
earlier read, so it can drop a marker we merged meanwhile (its side of the
race, which no lock of ours reaches), and a rewound turn is invisible to
memory: it owes nothing, and re-marking it would write a node the agent
owns for no reader. A marker the agent drops from a visible turn still
fails that check and ``head_branches_written``.

Plain synchronous code over the files and the harness's records; no runtime.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memory._errors import TopicError
from memory.ledger._ledger import owed_tokens, records_from_branch, unwritten_turns
from memory.ledger._records import MARKER_KEY, source_anchor
from memory.ledger._tokens import TokenCounter
from memory.simulate._agents import SIM_TURN
from memory.workspace._archive import parse_archive
from memory.workspace._topics import decode_topic, parse_topic
from store import Node, SessionCore, StoreError
from store.lowlevel import walk_files

__all__ = ["INVARIANTS", "Evidence", "Verdict", "check_invariants"]

INVARIANTS = (
    "head_branches_written",
    "no_owed_tail_at_threshold",
    "marked_turns_archived",
    "citations_resolve",
    "metadata_keys_kept",
    "updated_at_not_moved_by_marking",
    "duplicates_only_after_crashes",
    "no_turn_appended_twice",
    "no_outside_write_reverted",
)

# updated_at and the last node's created_at come from two clock reads in one append.
_APPEND_SLACK = 0.5


@dataclass
class Evidence:
    """What the harness saw while running, for the checks the files alone cannot make."""

    acknowledged: Mapping[tuple[str, str], Iterable[str]]
    updated_before_boundary: Mapping[str, float]
    updated_after_boundary: Mapping[str, float]
    written_batches: list[tuple[str, tuple[str, ...]]]
    process_crashes: int
    actor_crashes: Mapping[str, int]
    summarised: Mapping[str, float] = field(default_factory=dict)
    # agent-writes: keys the unlocked agent merged, per (session, node); per
    # session the nodes its rewinds stamped and the head its last rewind set
    outside_keys: Mapping[tuple[str, str], Iterable[str]] = field(default_factory=dict)
    outside_rewinds: Mapping[str, tuple[tuple[str, ...], str | None]] = field(
        default_factory=dict)


@dataclass
class Verdict:
    passed: bool
    checked: int
    problems: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "FAIL"


class _Check:
    def __init__(self) -> None:
        self.checked = 0
        self.problems: list[str] = []

    def count(self, n: int = 1) -> None:
        self.checked += n

    def fail(self, problem: str) -> None:
        self.problems.append(problem)

    def verdict(self) -> Verdict:
        return Verdict(not self.problems, self.checked, self.problems[:20])


def check_invariants(
    state_dir: str,
    workspace_id: str,
    *,
    threshold: int,
    counter: TokenCounter,
    evidence: Evidence,
) -> dict[str, Verdict]:
    """Every invariant of the module docstring, in :data:`INVARIANTS` order."""
    memory_dir = os.path.join(state_dir, "memory")
    checks = {name: _Check() for name in INVARIANTS}
    archives: dict[str, frozenset[str]] = {}
    for session in sorted(os.listdir(os.path.join(state_dir, "sessions"))):
        archived = _archived(memory_dir, session)
        archives[session] = archived
        try:
            core = SessionCore.open(state_dir, session)
        except StoreError as exc:
            checks["head_branches_written"].fail(f"session {session} unreadable: {exc}")
            continue
        _check_session(core, workspace_id, threshold, counter, archived, evidence, checks)
        _check_turns_once(core, checks["no_turn_appended_twice"])
    _check_citations(memory_dir, checks["citations_resolve"])
    _check_duplicates(evidence, checks["duplicates_only_after_crashes"])
    _check_outside_writes(state_dir, evidence, checks["no_outside_write_reverted"])
    return {name: check.verdict() for name, check in checks.items()}


def _archived(memory_dir: str, session: str) -> frozenset[str]:
    path = os.path.join(memory_dir, "sources", "openprogram", "_v2", f"{session}.md")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return frozenset()
    return frozenset(frame.source_id for frame in parse_archive(data, session).frames)


def _check_session(
    core: SessionCore,
    workspace_id: str,
    threshold: int,
    counter: TokenCounter,
    archived: frozenset[str],
    evidence: Evidence,
    checks: Mapping[str, _Check],
) -> None:
    session = core.session
    head = core.head
    if head is not None:
        records = records_from_branch(session, core.get_branch(head), counter=counter)
        check = checks["head_branches_written"]
        check.count(len(records))
        for record in records:
            if record.marker != workspace_id:
                check.fail(f"session {session}: head-branch turn {record.message_id} unwritten")
    check = checks["no_owed_tail_at_threshold"]
    for row in core.list_branches():
        tip = row["head_msg_id"]
        records = records_from_branch(session, core.get_branch(tip), counter=counter)
        owed = owed_tokens(unwritten_turns(records, workspace_id))
        check.count()
        if owed >= threshold:
            check.fail(f"session {session}: tip {tip} owes {owed} tokens (threshold {threshold})")
    nodes = {node.id: node for node in core.nodes()}
    check = checks["marked_turns_archived"]
    for node in nodes.values():
        if node.metadata.get(MARKER_KEY) == workspace_id:
            check.count()
            if f"openprogram/{session}/{node.id}" not in archived:
                check.fail(f"session {session}: marked turn {node.id} is not archived")
    check = checks["metadata_keys_kept"]
    for (owner, node_id), keys in evidence.acknowledged.items():
        if owner != session:
            continue
        check.count()
        found = nodes.get(node_id)
        if found is None:
            check.fail(f"session {session}: acknowledged node {node_id} is gone")
            continue
        lost = sorted(set(keys) - set(found.metadata) - _excused(evidence, session, found))
        if lost:
            check.fail(f"session {session}: node {node_id} lost metadata keys {lost}")
    check = checks["updated_at_not_moved_by_marking"]
    check.count()
    updated_at = core.meta().get("updated_at")
    before = evidence.updated_before_boundary.get(session)
    after = evidence.updated_after_boundary.get(session)
    if before is not None and after != before:
        check.fail(f"session {session}: the boundary moved updated_at from {before} to {after}")
    # A summary's created_at is backdated before what it covers; when it was
    # appended is what the harness saw (``summarised``).
    newest = max((n.created_at for n in nodes.values() if not n.is_summary), default=None)
    latest = max(newest or 0.0, evidence.summarised.get(session, 0.0))
    if isinstance(updated_at, (int, float)) and newest is not None and not (
        newest <= updated_at <= latest + _APPEND_SLACK
    ):
        check.fail(f"session {session}: updated_at {updated_at} is not its last append's "
                   f"({latest})")


def _check_citations(memory_dir: str, check: _Check) -> None:
    topics = os.path.join(memory_dir, "topics")
    scans: dict[str, frozenset[str]] = {}
    # The same walk as the transactions (directory links followed, store/_links.py).
    for relative_in_topics, _ in sorted(walk_files(topics)):
        if not relative_in_topics.endswith(".md"):
            continue
        path = os.path.join(topics, relative_in_topics)
        directory = os.path.dirname(path)
        relative = os.path.relpath(path, memory_dir)
        try:
            with open(path, "rb") as handle:
                topic = parse_topic(decode_topic(handle.read(), relative), relative)
        except TopicError as exc:
            check.fail(f"{relative} does not parse: {exc}")
            continue
        for footnote in topic.footnotes.values():
            for link in footnote.sources:
                check.count()
                problem = _resolve(memory_dir, directory, link.target, scans)
                if problem:
                    check.fail(f"{relative} [^{footnote.label}] {link.target}: {problem}")


def _resolve(memory_dir: str, directory: str, target: str,
             scans: dict[str, frozenset[str]]) -> str | None:
    file_part, _, anchor = target.partition("#")
    path = os.path.normpath(os.path.join(directory, file_part))
    if not path.startswith(os.path.join(memory_dir, "sources") + os.sep):
        return "points outside sources/"
    if path not in scans:
        session = os.path.basename(path).removesuffix(".md")
        try:
            with open(path, "rb") as handle:
                frames = parse_archive(handle.read(), session).frames
        except FileNotFoundError:
            return "no such archive"
        scans[path] = frozenset(source_anchor(frame.source_id) for frame in frames)
    if anchor not in scans[path]:
        return "no frame with that anchor"
    return None


def _check_duplicates(evidence: Evidence, check: _Check) -> None:
    seen: set[tuple[str, str]] = set()
    repeats: Counter[str] = Counter()
    for session, node_ids in evidence.written_batches:
        check.count()
        keys = {(session, node) for node in node_ids}
        if keys & seen:
            repeats[session] += 1
        seen |= keys
    for session, count in sorted(repeats.items()):
        allowed = evidence.process_crashes + evidence.actor_crashes.get(session, 0)
        if count > allowed:
            check.fail(f"session {session}: {count} batches rewrote written turns, "
                       f"{allowed} crash(es) could explain")


def _check_turns_once(core: SessionCore, check: _Check) -> None:
    """``no_turn_appended_twice``: each agent-issued turn is one node, whatever its id."""
    copies: Counter[tuple[object, ...]] = Counter()
    first: dict[tuple[object, ...], str] = {}
    for node in core.nodes():
        identity = _turn_identity(node)
        if identity is None:
            continue
        copies[identity] += 1
        first.setdefault(identity, node.id)
    for identity, count in copies.items():
        check.count()
        if count > 1:
            check.fail(f"session {core.session}: turn {first[identity]} ({identity[0]}) is "
                       f"in the session {count} times")


def _turn_identity(node: Node) -> tuple[object, ...] | None:
    """What a repeat of the same agent request would share (never the node id)."""
    turn = node.metadata.get(SIM_TURN)
    if isinstance(turn, str):
        return ("append", turn)
    if node.is_spawn_root:
        return ("spawn", node.caller, repr(node.output))
    if node.is_summary:
        return ("summary", repr(node.output))
    return None
def outside_evidence(report: Mapping[str, object]) -> dict[str, Any]:
    """The ``outside_keys``/``outside_rewinds`` of :class:`Evidence` from the agent's report."""
    keys: dict[tuple[str, str], set[str]] = {}
    merged = report.get("merged")
    for session, node, key in merged if isinstance(merged, list) else []:
        keys.setdefault((str(session), str(node)), set()).add(str(key))
    rewinds: dict[str, tuple[tuple[str, ...], str | None]] = {}
    rewound = report.get("rewound")
    for session, stamped, head in rewound if isinstance(rewound, list) else []:
        earlier = rewinds.get(str(session), ((), None))[0]
        rewinds[str(session)] = (
            (*earlier, *map(str, stamped)), head if isinstance(head, str) else None)
    return {"outside_keys": keys, "outside_rewinds": rewinds}


def _check_outside_writes(state_dir: str, evidence: Evidence, check: _Check) -> None:
    sessions = {s for s, _ in evidence.outside_keys} | set(evidence.outside_rewinds)
    for session in sorted(sessions):
        try:
            core = SessionCore.open(state_dir, session)
        except StoreError as exc:
            check.fail(f"session {session} unreadable: {exc}")
            continue
        nodes = {node.id: node for node in core.nodes()}
        for (owner, node_id), keys in evidence.outside_keys.items():
            if owner != session:
                continue
            check.count()
            found = nodes.get(node_id)
            lost = sorted(set(keys) - set(found.metadata if found is not None else ()))
            if lost:
                check.fail(f"session {session}: node {node_id} lost the agent's keys {lost}")
        stamped, head = evidence.outside_rewinds.get(session, ((), None))
        for node_id in dict.fromkeys(stamped):
            check.count()
            found = nodes.get(node_id)
            if found is None or not found.rewound:
                check.fail(f"session {session}: the agent's rewind stamp on {node_id} is gone")
        if stamped:
            check.count()
            if core.head != head:
                check.fail(f"session {session}: the agent's rewind set head {head}, "
                           f"the head is {core.head}")


def _excused(evidence: Evidence, session: str, node: Node) -> set[str]:
    """Keys ``metadata_keys_kept`` does not ask of ``node``: see the module docstring."""
    stamped = evidence.outside_rewinds.get(session, ((), None))[0]
    return {MARKER_KEY} if node.rewound and node.id in stamped else set()
