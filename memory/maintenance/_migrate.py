"""Migration from position cursors to markers on the turns themselves.

SPEC §6.7. An installation that used the old ledger has
``runtime.json["cursors"] = {sid: {message_id, ordinal}}`` and no marker on
any node, so every branch would be owed from its root. The archive under
``sources/`` says which turns were already delivered, but two of its
properties decide how little of it may be believed:

* **Only what cannot be forged is a candidate.** Every frame of a v2
  archive's valid prefix (bodies are skipped by their declared length, and
  the scan never resynchronises after garbage), and of a legacy archive
  only its first header: records there have no length, so later "headers"
  may be content.
* **A candidate set is not a set of marks.** The old ordinal bug archived a
  shared prefix, skipped a branch's middle and archived its tail. Marking
  that tail would make the walk stop there and strand the middle forever.
  So for each candidate, migration takes its real DAG path
  (``get_branch(sid, candidate)``), applies the record filter (SPEC §6.1),
  and keeps only the **contiguous prefix** of records present in the
  candidate set, stopping at the first gap. The prefixes are merged per
  session and marked.

Marking less than was delivered writes some turns again (a duplicate,
merged later by consolidation); marking more loses turns for good. Every
choice below errs towards less: a candidate whose path cannot be read
contributes nothing, and ``cursors`` leaves ``runtime.json`` (counters
kept) only after every session's marks were written, so a failure is
retried from the start next time. A workspace with no ``sources/`` has no
candidates: nothing is marked and everything is written from scratch.

Reading the archive bytes and computing the prefixes are pure
(:func:`session_candidates`, :func:`safe_prefix`, :class:`PrefixMerge`);
:func:`migrate` drives them against the runtime through injected async
callables (the session actor's walk and marker merge, the workspace
actor's ``runtime.json``).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

import anyio.to_thread

from memory._errors import LedgerError
from memory.ledger._ledger import records_from_branch
from memory.workspace._archive import PROVIDER, archive_relpath, parse_archive
from memory.workspace._legacy import legacy_relpath, parse_legacy_first_header
from memory.workspace._runtime_state import RuntimeState
from store import StoreError

__all__ = [
    "MigrationReport",
    "PrefixMerge",
    "Progress",
    "SessionCandidates",
    "migrate",
    "read_candidates",
    "safe_prefix",
    "session_candidates",
]

Message = Mapping[str, Any]
GetBranch = Callable[[str, str], Awaitable[Sequence[Message]]]
Mark = Callable[[str, Sequence[str]], Awaitable[object]]
Progress = Callable[[int, int], None]
"""``progress(done, total)``: called once before the first session and after each one."""


def _no_tokens(_: str) -> int:
    return 0  # migration never batches, so counting tokens would be wasted work


# -- candidates ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionCandidates:
    """The trusted archived node ids of one session, in archive order (legacy header first)."""

    session_id: str
    node_ids: tuple[str, ...]
    problems: tuple[str, ...] = ()


def session_candidates(
    session_id: str, v2: bytes | None, legacy: bytes | None
) -> SessionCandidates:
    """Pure: the candidates in one session's v2 archive bytes and legacy archive bytes.

    The v2 scan's valid prefix gives every frame; an incomplete scan is
    reported (the frames after the garbage are not candidates). The legacy
    file gives its first header only, if it checks out.
    """
    ids: dict[str, None] = {}
    problems: list[str] = []
    if legacy is not None:
        header = parse_legacy_first_header(legacy.decode("utf-8", "replace"), session_id)
        if header is None:
            problems.append(
                f"memory/{legacy_relpath(session_id)}: no trusted first header; "
                f"its records are written again"
            )
        else:
            ids[header.message_id] = None
    if v2 is not None:
        scan = parse_archive(v2, session_id)
        ids.update((frame.message_id, None) for frame in scan.frames)
        if not scan.complete:
            problems.append(
                f"memory/{archive_relpath(session_id)}: scan stopped at line {scan.stop_line} "
                f"({scan.stop_reason}); the {len(scan.frames)} frame(s) before it are "
                f"candidates, nothing after it"
            )
    return SessionCandidates(session_id, tuple(ids), tuple(problems))


def archive_files(directory: str, odd: list[str], *, canonical: bool = True) -> dict[str, str]:
    """``{session id: path}`` for every ``*.md`` file named as the archive names it.

    A file whose name is not the canonical quoting of a session id was not
    written by the archive, so it is not believed (its path is added to
    ``odd``). With ``canonical=False`` (the legacy archive, SPEC §5, written
    by the reference agent's own quoting) the session is the stem
    percent-decoded, however it was encoded; a second file decoding to the
    same session is odd.
    """
    try:
        names = sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return {}
    found: dict[str, str] = {}
    for name in names:
        path = os.path.join(directory, name)
        if not name.endswith(".md") or name.startswith(".") or not os.path.isfile(path):
            continue
        sid = unquote(name[:-3])
        named = quote(sid, safe="-_.") + ".md" == name or not canonical
        if not sid or "/" in sid or not named or sid in found:
            odd.append(path)
            continue
        found[sid] = path
    return found


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as handle:
        return handle.read()


def read_candidates(memory_dir: str) -> tuple[list[SessionCandidates], list[str]]:
    """Every session with an archive under ``sources/`` (sorted by id), and ignored files.

    Blocking I/O; the driver runs it in a worker thread.
    """
    root = os.path.join(memory_dir, "sources", PROVIDER)
    odd: list[str] = []
    v2 = archive_files(os.path.join(root, "_v2"), odd)
    legacy = archive_files(root, odd, canonical=False)
    sessions = [
        session_candidates(sid, _read(v2.get(sid)), _read(legacy.get(sid)))
        for sid in sorted(v2.keys() | legacy.keys())
    ]
    ignored = [
        f"memory/{os.path.relpath(path, memory_dir)}: the file name is not a quoted "
        f"session id; ignored"
        for path in odd
    ]
    return sessions, ignored


# -- the safe prefix -------------------------------------------------------------


def safe_prefix(
    session_id: str, branch: Sequence[Message], candidates: Collection[str]
) -> list[str]:
    """The node ids of the leading records of ``branch`` that are all candidates.

    Pure. ``branch`` is a real DAG path (message dicts, root to tip); tool
    nodes, runtime turns and empty turns are not records, so they neither
    count nor break the prefix. Stops at the first record that is not a
    candidate. Raises :class:`UnidentifiedMessageError` like the ledger does.
    """
    prefix: list[str] = []
    for record in records_from_branch(session_id, branch, counter=_no_tokens):
        if record.message_id not in candidates:
            break
        prefix.append(record.message_id)
    return prefix


@dataclass
class PrefixMerge:
    """The merged safe prefixes of one session, fed one DAG path at a time.

    Pure and incremental, so the driver can fetch each path however it
    likes. A node's DAG path is unique (one predecessor), so a candidate
    seen on a path already walked has a path that is a prefix of that one
    and a safe prefix inside the one already merged: it is never walked.
    Candidates are offered newest first, so a linear session takes one walk.
    """

    candidates: SessionCandidates
    marked: dict[str, None] = field(default_factory=dict)  # ordered set
    walks: int = 0
    problems: list[str] = field(default_factory=list)
    _seen: set[str] = field(default_factory=set, init=False, repr=False)
    _pending: list[str] = field(default_factory=list, init=False, repr=False)
    _members: frozenset[str] = field(default=frozenset(), init=False, repr=False)

    def __post_init__(self) -> None:
        self._members = frozenset(self.candidates.node_ids)
        self._pending = list(self.candidates.node_ids)  # popped from the end: newest first
        self.problems.extend(self.candidates.problems)

    def next_tip(self) -> str | None:
        """The next candidate whose path is still unknown, or None when done."""
        while self._pending:
            tip = self._pending.pop()
            if tip not in self._seen:
                return tip
        return None

    def add_path(self, tip: str, branch: Sequence[Message]) -> None:
        """Merge the safe prefix of ``tip``'s path (``get_branch(sid, tip)``)."""
        self.walks += 1
        sid = self.candidates.session_id
        try:
            prefix = safe_prefix(sid, branch, self._members)
        except LedgerError as error:
            self.skip(tip, str(error))
            return
        self._seen.update(m["id"] for m in branch if isinstance(m.get("id"), str))
        self._seen.add(tip)
        self.marked.update((node, None) for node in prefix)

    def skip(self, tip: str, reason: str) -> None:
        """``tip``'s path could not be read: it contributes no mark (marking less is safe)."""
        self._seen.add(tip)
        self.problems.append(
            f"session {self.candidates.session_id!r}, candidate {tip!r}: {reason}; "
            f"nothing is marked from it, its turns are written again"
        )

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(self.marked)


# -- the driver --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What a migration did. :meth:`as_json` is the SPEC §8 document.

    ``problems`` are candidates or archives that were passed over (they only
    mean some turns are written again); ``errors`` are failures that kept
    ``cursors`` for the next attempt.
    """

    marked: Mapping[str, tuple[str, ...]]
    cursors_removed: bool
    problems: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    had_cursors: bool = True

    def as_json(self) -> dict[str, Any]:
        return {
            "marked": {sid: list(ids) for sid, ids in self.marked.items()},
            "cursors_removed": self.cursors_removed,
        }


async def migrate(
    memory_dir: str,
    *,
    get_branch: GetBranch,
    mark: Mark,
    read_state: Callable[[], Awaitable[RuntimeState]],
    drop_cursors: Callable[[], Awaitable[object]],
    progress: Progress | None = None,
) -> MigrationReport:
    """Replace ``runtime.json``'s cursors by markers on the safe prefixes; see the module doc.

    * ``get_branch(sid, tip)``: the message dicts of ``tip``'s DAG path,
      root to tip (the session actor's walk). A :class:`StoreError` (no such
      session or node, a broken chain) passes the candidate over; any other
      exception is a failure.
    * ``mark(sid, node_ids)``: the runtime's marker merge for this workspace.
    * ``read_state()`` / ``drop_cursors()``: ``runtime.json`` through its
      owner; dropping is a read-modify-write under the workspace lock, so
      counters written meanwhile are kept (never a stale overwrite).

    Without ``cursors`` there is nothing to migrate and nothing is done.
    Every session is attempted even after a failure (more marks means less
    rewriting), but ``cursors`` is removed only if all of them succeeded.
    Cancellation propagates; marks already merged stay (they are correct).
    """
    state = await read_state()
    if state.cursors is None:
        return MigrationReport({}, False, had_cursors=False)
    sessions, ignored = await anyio.to_thread.run_sync(read_candidates, memory_dir)
    marked: dict[str, tuple[str, ...]] = {}
    problems: list[str] = list(ignored)
    errors: list[str] = []
    if progress is not None:
        progress(0, len(sessions))
    for done, candidates in enumerate(sessions, start=1):
        merge = PrefixMerge(candidates)
        failed = False
        while (tip := merge.next_tip()) is not None:
            try:
                branch = await get_branch(candidates.session_id, tip)
            except StoreError as error:
                merge.skip(tip, str(error))
                continue
            except Exception as error:  # noqa: BLE001 (any failure keeps cursors)
                errors.append(
                    f"session {candidates.session_id!r}: reading {tip!r} failed: {error!r}"
                )
                failed = True
                break
            merge.add_path(tip, branch)
        problems.extend(merge.problems)
        if not failed and merge.node_ids:
            try:
                await mark(candidates.session_id, merge.node_ids)
            except Exception as error:  # noqa: BLE001 (any failure keeps cursors)
                errors.append(
                    f"session {candidates.session_id!r}: marking {len(merge.node_ids)} "
                    f"turn(s) failed: {error!r}"
                )
            else:
                marked[candidates.session_id] = merge.node_ids
        if progress is not None:
            progress(done, len(sessions))
    removed = False
    if not errors:
        try:
            await drop_cursors()
            removed = True
        except Exception as error:  # noqa: BLE001 (any failure keeps cursors)
            errors.append(f"removing cursors from runtime.json failed: {error!r}")
    return MigrationReport(marked, removed, tuple(problems), tuple(errors))
