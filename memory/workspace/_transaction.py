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

Install protocol, under ``.scriptorium/write.lock`` (``fcntl.flock``, so it
holds across processes and threads; waited for at most ``lock_timeout``):

1. finish any earlier install (recovery, below);
2. check ``workspace_revision`` equals the base, else :class:`ConcurrentUpdateError`;
3. create missing topic directories (empty directories change nothing);
4. write ``.scriptorium/install.journal`` durably (temp, fsync, rename, dir
   fsync): the path and the full new text (or ``null`` for a deletion) of
   every changed file, and of ``runtime.json`` and its floor when the
   commit counts (``update_state``: issue 23, the counters move with the
   topics or not at all). **This rename is the commit point**;
5. replace each topic file unsynced (readers never see a torn file);
6. fsync every replaced file and its directory in one ``sync_paths`` call;
7. unlink the journal durably.

Recovery (:meth:`Transactions.recover` at start; the journal check also
runs before every commit, in case another process died mid-install): no
journal means the crash came before the commit point, so every topic file
is old; leftover temp files are deleted (roll back). A journal means every
new text is durable, so it is replayed from the top (steps 5-7; replaying is
idempotent, so a crash during recovery is recovered the same way) and then
removed (roll forward). At any crash each topic file is whole, old or new
(renames are atomic); once recovery ran, the set is all-old or all-new.

Every durable step goes through one :class:`DurableFiles`, and
:meth:`Transactions.commit` is synchronous so the caller runs it in one
worker-thread hop (``run_durable``).

Normalising the drafts is most of a commit's CPU (parse, bind, render), and
in a worker thread it still holds the interpreter lock that the event loop
needs. Given a ``run_cpu`` (:class:`~memory.workspace._edits.CpuRunner`),
that one pure step, :func:`normalise_drafts`, runs there (a worker process):
the same calls in the same order on the same inputs, so the same result.
Every check that reads the disk or the archive, the lock and every durable
step stay here.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from memory._errors import (
    ConcurrentUpdateError,
    ConsolidationRefusedError,
    EditRejectedError,
    InstallJournalCorruptError,
    TopicError,
    WorkspaceLockTimeoutError,
)
from memory.workspace._edits import CpuRunner, TopicEdit, WorkspaceSnapshot
from memory.workspace._revision import RevisionCache
from memory.workspace._runtime_state import (
    RUNTIME_FILE,
    RUNTIME_FILES,
    StateUpdate,
    is_record_path,
    runtime_changes,
)
from memory.workspace._topic_ids import (
    NormalisedTopic,
    handle_key,
    normalise_topic,
    source_key,
)
from memory.workspace._topics import Topic, decode_topic, parse_topic
from store import LOCK_TIMEOUT, DurableFiles, UnsafeLinkError
from store.lowlevel import FILE_MODE, TEMP_SUFFIX, wait_for_flock, walk_files

__all__ = [
    "JOURNAL", "LOCK", "Archived", "CommitResult", "TopicReader", "Transactions",
    "normalise_drafts", "read_install_journal",
]

JOURNAL = ".scriptorium/install.journal"
LOCK = ".scriptorium/write.lock"
# Temp files of the private files written only under LOCK: a crashed writer's are
# swept under it (a 242 KB runtime.json temp stayed behind before, issue 23).
_LOCKED_TEMPS = (".install.journal.", ".runtime.json.", ".runtime-floor.json.",
                 ".session-end.json.", ".quarantine.jsonl.")

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
class _TopicFacts:
    # None with no error: normalised in a worker process, parsed here only if needed
    # (:meth:`_TopicIndex.topic`).
    topic: Topic | None
    error: TopicError | None
    block_ids: frozenset[str]
    labels: frozenset[str]
    cited: frozenset[str]  # source keys


@dataclass
class _TopicIndex:
    """Parsed facts of every topic file, re-parsed only when its stat changes."""

    memory_dir: str
    _files: dict[str, tuple[tuple[int, int, int, int], _TopicFacts]] = field(default_factory=dict)

    def refresh(
        self, scan: list[tuple[str, os.stat_result]], linked: frozenset[str] = frozenset(),
    ) -> dict[str, _TopicFacts]:
        """Bring the index up to ``scan`` (the revision's file list) and return it.

        A file in ``linked`` (a symbolic link) keeps its facts, so what it
        says and cites counts, but carries an error: it is never replaced.
        """
        current: dict[str, tuple[tuple[int, int, int, int], _TopicFacts]] = {}
        for relative, stat in scan:
            if not _is_topic_file(relative):
                continue
            signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
            cached = self._files.get(relative)
            if cached is None or cached[0] != signature:
                cached = (signature, self._facts(relative))
            current[relative] = cached
        self._files = current
        return {
            relative: _linked_facts(relative, facts) if relative in linked else facts
            for relative, (_, facts) in current.items()
        }

    def installed(
        self, scan: list[tuple[str, os.stat_result]], topics: dict[str, _TopicFacts | None]
    ) -> None:
        """A commit just wrote files with these facts (None: deleted): take them without parsing.

        ``scan`` is the revision's file list after the install (its stats
        are the new files'); a file another writer replaced meanwhile has
        another stat and is parsed at the next :meth:`refresh` as usual.
        """
        stats = dict(scan)
        for relative, facts in topics.items():
            stat = stats.get(relative)
            if facts is None or stat is None:
                self._files.pop(relative, None)
                continue
            signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
            self._files[relative] = (signature, facts)

    def topic(self, relative: str, facts: _TopicFacts | None) -> Topic | None:
        """The parsed file ``facts`` are of; parsed now if a worker process normalised it."""
        if facts is None or facts.topic is not None or facts.error is not None:
            return facts.topic if facts is not None else None
        topic = self._facts(relative).topic
        cached = self._files.get(relative)
        if topic is not None and cached is not None:
            self._files[relative] = (cached[0], replace(cached[1], topic=topic))
        return topic

    def _facts(self, relative: str) -> _TopicFacts:
        with open(os.path.join(self.memory_dir, relative), "rb") as handle:
            raw = handle.read()
        try:
            topic = parse_topic(decode_topic(raw, relative), relative)
        except TopicError as error:
            return _TopicFacts(None, error, frozenset(), frozenset(), frozenset())
        return _facts_of(relative, topic)


def _facts_of(relative: str, topic: Topic) -> _TopicFacts:
    cited = {
        key
        for footnote in topic.footnotes.values()
        for link in footnote.sources
        if (key := source_key(relative, link.target)) is not None
    }
    return _TopicFacts(
        topic, None, frozenset(topic.block_ids()), frozenset(topic.footnotes), frozenset(cited),
    )


def _split(joined: str) -> frozenset[str]:
    return frozenset(joined.split("\n")) if joined else frozenset()


def _join(values: frozenset[str] | set[str]) -> str:
    """Ids, labels, keys and handles never hold a line break: one string pickles fast."""
    return "\n".join(values)


# A worker process's parsed bases: the text it last normalised for each file is the
# next commit's base for it, so that base is not parsed again (cleared when large).
_BASES: dict[tuple[str, str], tuple[str, Topic]] = {}
_BASES_LIMIT = 1024

# What normalise_drafts gives for one draft: the reason it was refused, or
# (text, block_ids, kept_ids, handles, linked, new_ids, facts), the sets joined by
# line breaks and ``facts`` the text's (block ids, labels, cited keys), None when pruned.
_Normalised = (str | tuple[str | None, str, str, str, str, tuple[str, ...],
                           tuple[str, str, str] | None])


def normalise_drafts(
    memory_dir: str, jobs: Sequence[tuple[str, str, bytes | None]], existing: str, labels: str,
) -> list[_Normalised]:
    """:func:`normalise_topic` of each ``(path, draft, base file bytes)`` in order; pure CPU.

    The step of :meth:`Transactions.commit` that runs in a worker process:
    ``existing`` and ``labels`` are the workspace's block ids and footnote
    labels (joined by line breaks), and every draft takes its ids after the
    ones before it, exactly as the in-thread loop does.
    """
    existing_ids = set(_split(existing))
    used_ids = set(existing_ids)
    used_labels = set(_split(labels))
    results: list[_Normalised] = []
    for path, draft, raw in jobs:
        try:
            base = None if raw is None else _base_topic(memory_dir, path, raw)
            normalised = normalise_topic(path, draft, base=base, existing_ids=existing_ids,
                                         used_ids=used_ids, used_labels=used_labels)
        except (EditRejectedError, TopicError) as error:
            results.append(error.reason)
            continue
        facts: tuple[str, str, str] | None = None
        if normalised.text is not None and normalised.topic is not None:
            after = _facts_of(path, normalised.topic)
            facts = (_join(after.block_ids), _join(after.labels), _join(after.cited))
            if len(_BASES) >= _BASES_LIMIT:
                _BASES.clear()
            _BASES[memory_dir, path] = (normalised.text, normalised.topic)
        results.append((
            normalised.text, _join(normalised.block_ids), _join(normalised.kept_ids),
            _join(normalised.handles), _join(normalised.linked), normalised.new_ids, facts,
        ))
    return results


def _unpack(path: str, result: tuple[str | None, str, str, str, str, tuple[str, ...],
                                     tuple[str, str, str] | None]
            ) -> tuple[NormalisedTopic, _TopicFacts | None]:
    text, block_ids, kept, handles, linked, new_ids, facts = result
    normalised = NormalisedTopic(path, text, _split(block_ids), _split(kept), _split(handles),
                                 _split(linked), new_ids)
    if facts is None:
        return normalised, None
    return normalised, _TopicFacts(None, None, *(_split(part) for part in facts))


def _base_topic(memory_dir: str, path: str, raw: bytes) -> Topic:
    text = decode_topic(raw, path)
    cached = _BASES.get((memory_dir, path))
    if cached is not None and cached[0] == text:
        return cached[1]
    return parse_topic(text, path)


def _linked_facts(relative: str, facts: _TopicFacts) -> _TopicFacts:
    if facts.error is not None:
        return facts
    return replace(facts, error=TopicError(relative, 0, LINKED_TOPIC))


LINKED_TOPIC = (
    "a symbolic link to a file, which scriptorium never replaces (replacing it would leave "
    "the target stale): move the file itself into place, or link its directory instead"
)


def _is_topic_file(relative: str) -> bool:
    return (
        relative.startswith("topics/") and relative.endswith(".md")
        and "/." not in relative
    )


def check_topic_path(path: str) -> None:
    """Raise :class:`EditRejectedError` unless ``path`` is a plain ``topics/**.md`` path."""
    parts = path.split("/")
    if (
        len(parts) < 2 or parts[0] != "topics" or not path.endswith(".md")
        or any(not part or part in (".", "..") or part.startswith(".") for part in parts)
        or any(bad in path for bad in ("\\", "\0", "\n", "\r"))
    ):
        raise EditRejectedError(path, "edits may only write topics/**/<name>.md (relative, no '..')")


@contextmanager
def workspace_lock(
    memory_dir: str, files: DurableFiles, *, timeout: float | None = LOCK_TIMEOUT,
) -> Iterator[None]:
    """``.scriptorium/write.lock``: every read-modify-write of the workspace, across processes.

    A stuck holder (a stopped process, a debugger) must not hang every write
    behind it: the lock is waited for at most ``timeout`` seconds (None:
    forever), by the session lock's poll (:func:`store.lowlevel.wait_for_flock`, on
    the event loop's clock from a worker thread), then
    :class:`~memory._errors.WorkspaceLockTimeoutError` names the lock file and,
    when ``/proc/locks`` tells, the holder's pid. Nothing was changed then.
    """
    # The lock file carries no data, so opening it read-only is enough for
    # flock and nothing but DurableFiles ever opens a file for writing.
    files.make_dirs(os.path.join(memory_dir, ".scriptorium"))
    path = os.path.join(memory_dir, LOCK)
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        wait_for_flock(fd, timeout,
                       lambda waited, holder: WorkspaceLockTimeoutError(path, waited, holder))
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


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
        self._index = _TopicIndex(memory_dir)

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
        paths = tuple(path for path, _ in self.revisions.last_scan if _is_topic_file(path))
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
        journal = os.path.join(self.memory_dir, JOURNAL)
        if sweep:
            self._remove_temp_files()
        try:
            with open(journal, "rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            return False
        self._install(_decode_journal(raw))
        return True

    def _remove_temp_files(self) -> None:
        try:
            found = walk_files(os.path.join(self.memory_dir, "topics"))
        except UnsafeLinkError:
            found = []  # a link loop: every commit reports it; recovery must not stop the start
        for relative, _ in found:
            if relative.endswith(TEMP_SUFFIX):
                self.files.unlink(os.path.join(self.memory_dir, "topics", relative))
        private = os.path.join(self.memory_dir, ".scriptorium")
        if os.path.isdir(private):
            for name in os.listdir(private):
                if name.startswith(_LOCKED_TEMPS) and name.endswith(TEMP_SUFFIX):
                    self.files.unlink(os.path.join(private, name))

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
                    os.path.join(self.memory_dir, JOURNAL), _encode_journal(changes),
                )
                self._install(changes)
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
                else _facts_of(normalised.path, normalised.topic)
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
        self, edits: Sequence[TopicEdit], facts: dict[str, _TopicFacts],
        batch_sources: frozenset[str],
    ) -> tuple[list[dict[str, Any]], dict[int, NormalisedTopic], dict[str, _TopicFacts]]:
        """The audit, the accepted drafts normalised, and the facts of those a worker made."""
        existing_ids = {i for f in facts.values() for i in f.block_ids}
        owner = {i: path for path, f in facts.items() for i in f.block_ids}
        used_ids = set(existing_ids)
        used_labels = {label for f in facts.values() for label in f.labels}
        cited = {key for f in facts.values() for key in f.cited}
        last_edit = {edit.path: index for index, edit in enumerate(edits)}
        errors: dict[int, str] = {}
        accepted: dict[int, NormalisedTopic] = {}
        after: dict[str, _TopicFacts] = {}
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
                                   [job for _, job in drafts], _join(existing_ids),
                                   _join(used_labels))
            for (index, (path, _, _)), result in zip(drafts, results, strict=True):
                if isinstance(result, str):
                    errors[index] = result
                    continue
                normalised, made = _unpack(path, result)
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

    def _precheck(self, edit: TopicEdit, facts: dict[str, _TopicFacts]) -> NormalisedTopic | None:
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

    def _base_bytes(self, edit: TopicEdit, facts: dict[str, _TopicFacts]) -> bytes | None:
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

    def _install(self, changes: list[tuple[str, str | None]]) -> None:
        """Steps 5-7: replace, sync once, retire the journal. Idempotent."""
        written: list[str] = []
        for path, text in changes:
            target = os.path.join(self.memory_dir, path)
            if text is None:
                self.files.unlink(target)
                continue
            self.files.make_dirs(os.path.dirname(target))
            self.files.replace_unsynced(target, text.encode("utf-8"))
            written.append(target)
        if written:
            self.files.sync_paths(written)
        self.files.unlink(os.path.join(self.memory_dir, JOURNAL))


def read_install_journal(memory_dir: str) -> list[str] | None:
    """The topic files of an interrupted install (its journal's paths), or None if there is none.

    A journal left in ``.scriptorium/`` means a crash (a full disk, a kill)
    came after the commit point: every new text is durable in it, some
    topic files are new and some still old until the next recovery replays
    it. Raises :class:`InstallJournalCorruptError` if it cannot be read.
    """
    try:
        with open(os.path.join(memory_dir, JOURNAL), "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return None
    return [path for path, _ in _decode_journal(raw)]


def _encode_journal(changes: list[tuple[str, str | None]]) -> bytes:
    return orjson.dumps({"version": 1, "files": [[path, text] for path, text in changes]})


def _decode_journal(raw: bytes) -> list[tuple[str, str | None]]:
    try:
        document = orjson.loads(raw)
        if not isinstance(document, dict) or document.get("version") != 1:
            raise ValueError("unknown journal version")
        changes: list[tuple[str, str | None]] = []
        for path, text in document["files"]:
            if not isinstance(path, str) or not (text is None or isinstance(text, str)):
                raise ValueError("malformed entry")
            if path not in RUNTIME_FILES and not is_record_path(path):
                check_topic_path(path)
            changes.append((path, text))
    except (ValueError, KeyError, TypeError, EditRejectedError) as error:
        raise InstallJournalCorruptError(JOURNAL, str(error)) from error
    return changes
