"""Reading the audit's facts from a state directory: the one blocking part of the audit.

:func:`~memory.maintenance._audit.audit` is a pure function of
:class:`~memory.maintenance._audit.AuditInputs`; this module gathers them:
every session's branches and markers, the archives, the topics, the install
journal, damaged write-ahead logs. It reads a state as found (a read-only
or full state is still audited) and names on the way what it could not read.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import Any

from memory._errors import InstallJournalCorruptError, TopicError
from memory.maintenance._audit import AuditInputs, Message, SessionFacts
from memory.maintenance._migrate import archive_files
from memory.maintenance._runtime_audit import read_runtime_facts
from memory.workspace._archive import PROVIDER, read_archive
from memory.workspace._install_journal import JOURNAL, read_install_journal
from memory.workspace._legacy import read_legacy_first_header
from memory.workspace._revision import revision_paths
from memory.workspace._topic_facts import LINKED_TOPIC
from memory.workspace._topics import decode_topic
from store import (
    ChainCycleError,
    DurableFiles,
    SessionCore,
    SessionOptions,
    StoreError,
    UnsafeLinkError,
    list_sessions,
    node_to_message,
)
from store.lowlevel import (
    find_damaged_logs,
    predecessor_cycles,
    read_session_as_found,
    unreplayed,
    walk_files,
)

__all__ = ["read_audit_inputs", "read_topics"]

# Errors of a state the audit cannot write to (read-only, no permission, full): it reads as found.
_CANNOT_WRITE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT})


def read_topics(
    memory_dir: str,
    undecodable: dict[str, str] | None = None,
    linked: set[str] | None = None,
) -> dict[str, str]:
    """Every ``topics/**.md`` (hidden parts skipped), relative path -> text.

    Directory links are followed as the transactions follow them
    (:mod:`store._links`); linked files are added to ``linked``. A file that
    is not UTF-8 is left out and its error (file and byte) put in
    ``undecodable``. Raises :class:`~store.UnsafeLinkError` on a link loop.
    """
    topics: dict[str, str] = {}
    found = walk_files(
        os.path.join(memory_dir, "topics"), prefix="topics/", linked=linked,
        skip=lambda name: name.startswith("."), shown="memory",
    )
    for relative, _ in sorted(found):
        if not relative.endswith(".md"):
            continue
        with open(os.path.join(memory_dir, relative), "rb") as handle:
            raw = handle.read()
        try:
            topics[relative] = decode_topic(raw, relative)
        except TopicError as error:
            if undecodable is not None:
                undecodable[relative] = str(error)
    return topics


def read_audit_inputs(state_dir: str, workspace_id: str, *, files: DurableFiles | None = None,
                      as_found: bool = False) -> AuditInputs:
    """The facts of a state directory. Run it where no runtime writes (or accept a snapshot race).

    ``as_found``: no session is opened (no lock, no recovery), as for a read-only state.

    Sessions that cannot be opened or listed (no meta.json), heads and
    branches that cannot be walked, linked topic files and link loops are
    reported in ``problems`` (each line is the store's typed error: it names
    the file and says what to do).
    """
    memory_dir = os.path.join(state_dir, "memory")
    damaged = [log.as_json() for log in find_damaged_logs(state_dir)]  # before opening replays
    sessions: list[SessionFacts] = []
    unlisted: dict[str, StoreError] = {}
    rows = list_sessions(state_dir, unlisted)
    problems: list[str] = [str(error) for _, error in sorted(unlisted.items())]
    for row in rows:
        sid = row["id"]
        try:
            core = _open_for_audit(state_dir, sid, problems, files, as_found)
            try:
                core.head  # noqa: B018 - raises for an unusable head_id, as pending and write do
            except StoreError as error:
                problems.append(f"session {sid!r}: {error}")
            messages = [node_to_message(node, sid) for node in core.nodes()]
            branches: dict[str, Sequence[Message]] = {}
            for tip in core.list_branches():
                try:
                    branches[tip["head_msg_id"]] = core.get_branch(tip["head_msg_id"])
                except StoreError as error:
                    problems.append(f"session {sid!r}, tip {tip['head_msg_id']!r}: {error}")
            problems.extend(str(p) for p in core.problems)
            problems.extend(
                str(ChainCycleError(sid, loop[0], loop[-1], tuple(loop)))
                for loop in predecessor_cycles(core.nodes())
            )
        except StoreError as error:
            problems.append(f"session {sid!r}: {error}")
            continue
        sessions.append(SessionFacts(sid, messages, branches))
    # Archives of sessions that are gone still back citations.
    root = os.path.join(memory_dir, "sources", PROVIDER)
    odd: list[str] = []
    v2 = archive_files(os.path.join(root, "_v2"), odd)
    old = archive_files(root, odd, canonical=False)
    problems.extend(
        f"memory/{os.path.relpath(path, memory_dir)}: not a quoted session id; ignored"
        for path in odd
    )
    archives = {sid: read_archive(memory_dir, sid) for sid in sorted(v2)}
    legacy = {
        sid: header
        for sid in sorted(old)
        if (header := read_legacy_first_header(memory_dir, sid, old[sid])) is not None
    }
    undecodable: dict[str, str] = {}
    linked: set[str] = set()
    unwritable: list[str] = []
    if os.path.isdir(memory_dir):
        try:  # the very walk every commit's revision makes: what it refuses, writes fail on
            revision_paths(memory_dir)
        except UnsafeLinkError as error:
            unwritable.append(str(error))
    try:
        topics = read_topics(memory_dir, undecodable, linked)
    except UnsafeLinkError as error:
        if str(error) not in unwritable:
            problems.append(str(error))
        topics = {}
    problems.extend(f"memory/{path}: {LINKED_TOPIC}" for path in sorted(linked))
    runtime, floor = read_runtime_facts(memory_dir)
    return AuditInputs(
        workspace_id, sessions, archives, legacy, topics, problems, undecodable,
        _interrupted_install(memory_dir), unwritable, damaged, runtime, floor,
    )


def _open_for_audit(state_dir: str, sid: str, problems: list[str],
                    files: DurableFiles | None, as_found: bool) -> SessionCore:
    """The session opened (recovered); where that cannot write (read-only, full), read as found.

    Auditing must not need to write. Read as found (``as_found``: a look that changes nothing),
    a journal's records are not replayed, so what they hold is not checked: said in ``problems``.
    """
    reason = "read as found, as asked"
    try:
        if not as_found:
            return SessionCore.open(state_dir, sid, options=SessionOptions(files=files))
    except OSError as error:
        if error.errno not in _CANNOT_WRITE:
            raise
        reason = f"the state cannot be written here: {error.strerror or error}"
    if unreplayed(core := read_session_as_found(state_dir, sid)):
        problems.append(f"sessions/{sid}/.journal: not replayed ({reason}), so the turns it "
                        "holds were not checked; audit again where it can be written")
    return core


def _interrupted_install(memory_dir: str) -> list[dict[str, Any]]:
    journal = f"memory/{JOURNAL}"
    try:
        files = read_install_journal(memory_dir)
    except InstallJournalCorruptError as error:
        return [{"journal": journal, "error": str(error)}]
    if files is None:
        return []
    return [{"journal": journal, "files": [f"memory/{path}" for path in files]}]
