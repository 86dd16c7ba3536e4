"""Transactions: a writer's edits installed all-or-nothing, or not at all.

Markers are set on a batch's turns only after its topics are durably in
memory (SPEC §6.4), so an install that half-happens would be worse than
none: some statements written, the batch owed again, duplicates piling up.
A commit therefore validates every edit, normalises ids, and installs the
surviving files as one unit that survives a crash at any instruction.

Validation (SPEC §5, per edit, each failure recorded in the audit with its
reason and the edit dropped):

- the path is a ``.md`` file under ``topics/`` (no ``..``, no hidden parts);
- the file on disk parses strictly, and the draft parses as a draft;
- every raw handle it cites is archived (``archived(handle)`` is not None),
  trusted (True), and belongs to this batch or is already cited somewhere in
  the workspace; a kept archive link must already be cited;
- no block id of the edited file disappears unless listed in
  ``delete_blocks`` or kept by another accepted edit of this commit, and no
  kept id stays behind in a file that is not edited.

The surviving files are installed under the workspace lock through the
install journal (:mod:`memory.workspace._install_journal`: the protocol's
steps, its commit point and the recovery that rolls an install forward or
back).

Every durable step goes through one :class:`DurableFiles`, and
:meth:`Transactions.commit` is synchronous so the caller runs it in one
worker-thread hop (``run_durable``).

Normalising the drafts is most of a commit's CPU (parse, bind, render), and
in a worker thread it still holds the interpreter lock that the event loop
needs. Given a ``run_cpu`` (:class:`~memory.workspace._edits.CpuRunner`),
that one pure step, :func:`~memory.workspace._topic_facts.normalise_drafts`,
runs there (a worker process): the same calls in the same order on the same
inputs, so the same result.
Every check that reads the disk or the archive, the lock and every durable
step stay here.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memory._errors import (
    ConcurrentUpdateError,
    ConsolidationRefusedError,
    EditRejectedError,
    TopicError,
)
from memory.workspace._edits import CpuRunner, TopicEdit, WorkspaceSnapshot
from memory.workspace._install_journal import (
    JOURNAL,
    encode_journal,
    install_changes,
    replay_journal,
    workspace_lock,
)
from memory.workspace._revision import RevisionCache
from memory.workspace._runtime_state import (
    RUNTIME_FILE,
    RUNTIME_FILES,
    StateUpdate,
    is_record_path,
    runtime_changes,
)
from memory.workspace._topic_facts import (
    LINKED_TOPIC,
    TopicFacts,
    TopicIndex,
    check_topic_path,
    facts_of,
    is_topic_file,
    join_lines,
    normalise_drafts,
    unpack_normalised,
)
from memory.workspace._topic_ids import NormalisedTopic, handle_key, normalise_topic
from memory.workspace._topics import decode_topic
from store import LOCK_TIMEOUT, DurableFiles

__all__ = ["Archived", "CommitResult", "TopicReader", "Transactions"]

Archived = Callable[[str], bool | None]
"""``archived(source_id)``: True trusted, False pending, None not archived."""


@dataclass(frozen=True, slots=True)
class CommitResult:
    """The audit list, the changed topic files (sorted) and the revision after the commit.

    ``created_blocks`` are the block ids this commit assigned, in path then file
    order (what ``runtime.json``'s ``creation_order`` counts).
    """

    audit: tuple[dict[str, Any], ...]
    changed_files: tuple[str, ...]
    revision: str
    created_blocks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicReader:
    """A snapshot's ``read``: a topic's text by its path; :class:`TopicError` for one to avoid.

    That is a file that is not UTF-8 (the error names the byte) or a linked
    file (its edits would be refused), exactly as for a file that fails the
    strict parse. It holds only the directory, so another process can read
    through it too (a writer's extraction in a worker process).
    """

    memory_dir: str

    def __call__(self, path: str) -> str:
        check_topic_path(path)
        target = os.path.join(self.memory_dir, path)
        if os.path.islink(target):
            raise TopicError(path, 0, LINKED_TOPIC)
        with open(target, "rb") as handle:
            return decode_topic(handle.read(), path)


class Transactions:
    """Commits topic edits in ``<state>/memory``; one instance per workspace owner.

    ``run_cpu``: where to normalise the drafts (see the module docstring); None: here.
    """

    def __init__(
        self, memory_dir: str, *, archived: Archived, files: DurableFiles | None = None,
        lock_timeout: float | None = LOCK_TIMEOUT, run_cpu: CpuRunner | None = None,
    ) -> None:
        self.memory_dir = memory_dir
        self.run_cpu = run_cpu
        self.lock_timeout = lock_timeout
        self._swept = False  # temp files of a crashed install swept (recover, or a commit)
        self.archived = archived
        self.files = files if files is not None else DurableFiles()
        self.revisions = RevisionCache(memory_dir)
        self._index = TopicIndex(memory_dir)

    # -- reading -------------------------------------------------------------

    def revision(self) -> str:
        return self.revisions.revision()

    def all_cited(self, sources: Sequence[str]) -> bool:
        """Whether every source handle in ``sources`` is cited by some topic file.

        The write cycle's proof that a batch which changed nothing is
        nevertheless in memory (a re-delivery after a crash between install
        and mark, with a writer that merges repeated facts).
        """
        return self.all_cited_each([sources])[0]

    def all_cited_each(self, groups: Sequence[Sequence[str]]) -> list[bool]:
        """:meth:`all_cited` for several groups of sources, reading the topics once."""
        cited = self.cited_keys()
        return [all(handle_key(source) in cited for source in group) for group in groups]

    def cited_keys(self) -> frozenset[str]:
        """The ``<sid>#source-<16hex>`` keys cited by every topic file now."""
        self.revisions.revision()  # rescans by stat; unchanged files are not re-read
        facts = self._index.refresh(self.revisions.last_scan)
        return frozenset().union(*(f.cited for f in facts.values()))

    def snapshot(self) -> WorkspaceSnapshot:
        """The revision and topic paths now, for a writer.

        ``read`` reads the file when called; if it changed after the snapshot,
        the commit's revision check refuses the edits (``ConcurrentUpdateError``).
        """
        revision = self.revisions.revision()
        paths = tuple(path for path, _ in self.revisions.last_scan if is_topic_file(path))
        return WorkspaceSnapshot(revision, paths, TopicReader(self.memory_dir))

    # -- recovery ------------------------------------------------------------

    def recover(self) -> bool:
        """Finish (or discard) an interrupted install; True if a journal was replayed.

        Run once at start: it also sweeps temp files a crash left behind.
        Raises :class:`~memory._errors.WorkspaceLockTimeoutError` if another process
        holds the lock past the bound; the caller may start anyway, since the
        first commit recovers (and sweeps) under the lock before installing.
        """
        with workspace_lock(self.memory_dir, self.files, timeout=self.lock_timeout):
            replayed = self._recover_locked(sweep=True)
            self._swept = True
            return replayed

    def _recover_locked(self, *, sweep: bool) -> bool:
        return replay_journal(self.memory_dir, self.files, sweep=sweep)

    # -- committing ----------------------------------------------------------

    def commit(
        self,
        edits: Sequence[TopicEdit],
        *,
        base_revision: str,
        batch_sources: frozenset[str] | set[str],
        update_state: StateUpdate | None = None,
        whole: bool = False,
        records: Sequence[tuple[str, str]] = (),
    ) -> CommitResult:
        """Validate, normalise and install ``edits`` made against ``base_revision``.

        Raises :class:`ConcurrentUpdateError` if memory moved since the base (nothing
        is installed). Rejected edits are reported in the audit, not raised.
        ``update_state(state, created)``: the runtime state after this
        commit, computed from the files under the lock and installed with the
        topics (only if a topic changed). ``whole``: one rejected edit refuses
        them all (:class:`ConsolidationRefusedError`, nothing installed).
        ``records``: new files under ``.scriptorium/consolidation/`` (a pass's
        record) installed with the topics.
        """
        with workspace_lock(self.memory_dir, self.files, timeout=self.lock_timeout):
            # Another process may have crashed mid-install; the sweep is owed
            # if the start's recovery met a held lock.
            self._recover_locked(sweep=not self._swept)
            self._swept = True
            current = self.revisions.revision()
            if current != base_revision:
                raise ConcurrentUpdateError(base_revision, current)
            facts = self._index.refresh(self.revisions.last_scan, self.revisions.last_linked)
            audit, accepted, after = self._validate(edits, facts, frozenset(batch_sources))
            refused = [f"{e.get('path')}: {e.get('error')}" for e in audit if e["status"] != "ok"]
            if whole and refused:
                raise ConsolidationRefusedError(refused)
            changes = self._changes(accepted)
            changed_set = {path for path, _ in changes}
            created = tuple(
                block_id
                for normalised in sorted(accepted.values(), key=lambda n: n.path)
                if normalised.path in changed_set
                for block_id in normalised.new_ids
            )
            topic_changes = list(changes)
            # The counters and the record go first: a crash part way through the install
            # (before recovery rolls it forward) never shows a new block without its order.
            if changes and update_state is not None:
                changes[:0] = runtime_changes(
                    self.memory_dir, update_state, created,
                    lambda: [i for path in sorted(facts) for i in sorted(facts[path].block_ids)])
            if changes:
                changes[:0] = [(path, text) for path, text in records if is_record_path(path)]
            if changes:
                self._prepare_directories(changes)
                self.files.write_atomic(
                    os.path.join(self.memory_dir, JOURNAL), encode_journal(changes),
                )
                install_changes(self.memory_dir, self.files, changes)
            changed = tuple(sorted(path for path, _ in topic_changes))
            audit.append({
                "tool": "commit", "status": "ok", "count": len(changed),
                "topic_paths": list(changed),
            })
            # runtime.json counts in the revision; its floor does not (SPEC §5).
            revision = self.revisions.revision_after(
                [path for path, _ in changes if path not in RUNTIME_FILES or path == RUNTIME_FILE])
            self._index.installed(self.revisions.last_scan, {
                normalised.path: after.get(normalised.path) if normalised.topic is None
                else facts_of(normalised.path, normalised.topic)
                for normalised in accepted.values() if normalised.path in changed_set})
            return CommitResult(tuple(audit), changed, revision, created)

    def check(
        self, edits: Sequence[TopicEdit], *, batch_sources: frozenset[str] | set[str],
        base_revision: str | None = None,
    ) -> tuple[dict[str, Any], ...]:
        """The per-edit audit :meth:`commit` would give now, installing nothing.

        A writer's dry run (a model writer repairs refused edits before it
        commits). Advisory: the commit validates again under the lock. Edits
        made against ``base_revision`` are judged only while memory is still
        there: once another commit landed, their files no longer hold what the
        writer read, and the audit would blame the writer for that commit's
        blocks. :class:`ConcurrentUpdateError` then, as :meth:`commit` raises.
        """
        current = self.revisions.revision()
        if base_revision is not None and current != base_revision:
            raise ConcurrentUpdateError(base_revision, current)
        facts = self._index.refresh(self.revisions.last_scan, self.revisions.last_linked)
        audit, _, _ = self._validate(edits, facts, frozenset(batch_sources))
        return tuple(audit)

    def _validate(
        self, edits: Sequence[TopicEdit], facts: dict[str, TopicFacts],
        batch_sources: frozenset[str],
    ) -> tuple[list[dict[str, Any]], dict[int, NormalisedTopic], dict[str, TopicFacts]]:
        """The audit, the accepted drafts normalised, and the facts of those a worker made."""
        existing_ids = {i for f in facts.values() for i in f.block_ids}
        owner = {i: path for path, f in facts.items() for i in f.block_ids}
        used_ids = set(existing_ids)
        used_labels = {label for f in facts.values() for label in f.labels}
        cited = {key for f in facts.values() for key in f.cited}
        last_edit = {edit.path: index for index, edit in enumerate(edits)}
        errors: dict[int, str] = {}
        accepted: dict[int, NormalisedTopic] = {}
        after: dict[str, TopicFacts] = {}
        drafts: list[tuple[int, tuple[str, str, bytes | None]]] = []  # for run_cpu, in order
        # Normalise in path order so the id counters do not depend on edit order.
        for index in sorted(range(len(edits)), key=lambda i: (edits[i].path, i)):
            edit = edits[index]
            try:
                if last_edit[edit.path] != index:
                    raise EditRejectedError(edit.path, "superseded by a later edit of the same file")
                deleted = self._precheck(edit, facts)
                if deleted is not None:
                    accepted[index] = deleted
                    continue
                assert edit.text is not None  # a deletion is handled above
                if self.run_cpu is not None:
                    drafts.append((index, (edit.path, edit.text, self._base_bytes(edit, facts))))
                else:
                    normalised = normalise_topic(
                        edit.path, edit.text,
                        base=self._index.topic(edit.path, facts.get(edit.path)),
                        existing_ids=existing_ids, used_ids=used_ids, used_labels=used_labels,
                    )
                    self._postcheck(edit, normalised, cited, batch_sources)
                    accepted[index] = normalised
            except (EditRejectedError, TopicError) as error:
                errors[index] = error.reason
        if drafts and self.run_cpu is not None:
            results = self.run_cpu(normalise_drafts, self.memory_dir,
                                   [job for _, job in drafts], join_lines(existing_ids),
                                   join_lines(used_labels))
            for (index, (path, _, _)), result in zip(drafts, results, strict=True):
                if isinstance(result, str):
                    errors[index] = result
                    continue
                normalised, made = unpack_normalised(path, result)
                try:
                    self._postcheck(edits[index], normalised, cited, batch_sources)
                except EditRejectedError as error:
                    errors[index] = error.reason
                    continue
                accepted[index] = normalised
                if made is not None:
                    after[path] = made

        # Cross-file rules, repeated until no more edits fall out.
        while True:
            kept_anywhere = {i for n in accepted.values() for i in n.block_ids}
            by_path = {n.path: n for n in accepted.values()}
            fallen: dict[int, str] = {}
            for index, normalised in accepted.items():
                edit = edits[index]
                base = facts.get(edit.path)
                before = base.block_ids if base is not None else frozenset()
                lost = sorted(before - kept_anywhere - edit.delete_blocks)
                if lost:
                    fallen[index] = (
                        f"block ids {', '.join('^' + i for i in lost)} would vanish; "
                        "keep them or list them in delete_blocks"
                    )
                    continue
                for block_id in sorted(normalised.kept_ids - before):
                    home = owner.get(block_id)
                    if home is None:
                        continue
                    if home not in by_path or block_id in by_path[home].block_ids:
                        fallen[index] = (
                            f"block id ^{block_id} still lives in {home}; move it by "
                            "removing it there in the same commit"
                        )
                        break
            if not fallen:
                break
            for index, reason in fallen.items():
                del accepted[index]
                errors[index] = reason

        audit: list[dict[str, Any]] = []
        for index, edit in enumerate(edits):
            entry: dict[str, Any] = {"tool": edit.tool, "path": edit.path}
            if index in errors:
                entry.update(status="error", error=errors[index])
            else:
                entry["status"] = "ok"
            audit.append(entry)
        return audit, accepted, after

    def _precheck(self, edit: TopicEdit, facts: dict[str, TopicFacts]) -> NormalisedTopic | None:
        """The checks before normalising; a deletion's result, None for a draft to normalise."""
        check_topic_path(edit.path)
        self._check_place(edit.path)
        base = facts.get(edit.path)
        if base is not None and base.error is not None:
            raise EditRejectedError(
                edit.path, f"the file on disk fails the strict parse ({base.error.reason})",
            )
        if edit.text is not None:
            try:
                edit.text.encode("utf-8")
            except UnicodeEncodeError:
                raise EditRejectedError(
                    edit.path, "text cannot be stored as UTF-8 (lone surrogate)",
                ) from None
        if edit.text is None:
            return NormalisedTopic(
                edit.path, None, frozenset(), frozenset(), frozenset(), frozenset(),
            )
        return None

    def _base_bytes(self, edit: TopicEdit, facts: dict[str, TopicFacts]) -> bytes | None:
        """The file a draft replaces, as a worker process parses it (None: a new file)."""
        if edit.path not in facts:
            return None
        with open(os.path.join(self.memory_dir, edit.path), "rb") as handle:
            return handle.read()

    def _postcheck(
        self, edit: TopicEdit, normalised: NormalisedTopic, cited: set[str],
        batch_sources: frozenset[str],
    ) -> None:
        """The checks of a normalised draft: what it cites is archived, trusted and allowed."""
        for handle in sorted(normalised.handles):
            trusted = self.archived(handle)
            if trusted is None:
                raise EditRejectedError(edit.path, f"cites {handle}, which is not archived")
            if not trusted:
                raise EditRejectedError(edit.path, f"cites {handle}, which is pending (not trusted)")
            if handle not in batch_sources and handle_key(handle) not in cited:
                raise EditRejectedError(
                    edit.path, f"cites {handle}, which is neither in this batch nor cited before",
                )
        unknown = sorted(normalised.linked - cited)
        if unknown:
            raise EditRejectedError(
                edit.path,
                f"links to {unknown[0]}, which no topic cited before; cite its raw handle",
            )

    def _check_place(self, path: str) -> None:
        """The path must be installable: no parent is a file, the path is not a directory."""
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = os.path.join(self.memory_dir, *parts[:depth])
            if os.path.exists(parent) and not os.path.isdir(parent):
                raise EditRejectedError(path, f"{'/'.join(parts[:depth])} is a file, not a directory")
        target = os.path.join(self.memory_dir, path)
        if os.path.islink(target):
            raise EditRejectedError(path, LINKED_TOPIC)
        if os.path.isdir(target):
            raise EditRejectedError(path, "a directory has that name")

    def _changes(self, accepted: dict[int, NormalisedTopic]) -> list[tuple[str, str | None]]:
        changes: list[tuple[str, str | None]] = []
        for normalised in sorted(accepted.values(), key=lambda n: n.path):
            target = os.path.join(self.memory_dir, normalised.path)
            try:
                with open(target, "rb") as handle:
                    current: bytes | None = handle.read()
            except FileNotFoundError:
                current = None
            new = normalised.text.encode("utf-8") if normalised.text is not None else None
            if new != current:
                changes.append((normalised.path, normalised.text))
        return changes

    def _prepare_directories(self, changes: list[tuple[str, str | None]]) -> None:
        parents = {posixpath.dirname(path) for path, text in changes if text is not None}
        for parent in sorted(parents):
            self.files.make_dirs(os.path.join(self.memory_dir, parent))
