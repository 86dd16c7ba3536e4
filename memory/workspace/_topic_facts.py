"""What a transaction knows of each topic file, and the drafts' normalisation off the loop.

A commit's checks need every topic file's block ids, footnote labels and
cited sources; parsing the whole workspace per commit would make a commit
cost the size of memory, so :class:`TopicIndex` keeps those facts and
re-parses a file only when its stat changes. Normalising the drafts is most
of a commit's CPU (parse, bind, render), and in a worker thread it still
holds the interpreter lock the event loop needs: :func:`normalise_drafts`
is that one pure step, shaped (plain strings in and out) to run in a worker
process. Both live apart from :mod:`memory.workspace._transaction` because
neither reads the archive, takes the lock or writes anything.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from memory._errors import EditRejectedError, TopicError
from memory.workspace._topic_ids import NormalisedTopic, normalise_topic, source_key
from memory.workspace._topics import Topic, decode_topic, parse_topic

__all__ = [
    "LINKED_TOPIC", "TopicFacts", "TopicIndex", "check_topic_path", "facts_of",
    "is_topic_file", "join_lines", "normalise_drafts", "split_lines", "unpack_normalised",
]


@dataclass(frozen=True, slots=True)
class TopicFacts:
    # None with no error: normalised in a worker process, parsed here only if needed
    # (:meth:`TopicIndex.topic`).
    topic: Topic | None
    error: TopicError | None
    block_ids: frozenset[str]
    labels: frozenset[str]
    cited: frozenset[str]  # source keys


@dataclass
class TopicIndex:
    """Parsed facts of every topic file, re-parsed only when its stat changes."""

    memory_dir: str
    _files: dict[str, tuple[tuple[int, int, int, int], TopicFacts]] = field(default_factory=dict)

    def refresh(
        self, scan: list[tuple[str, os.stat_result]], linked: frozenset[str] = frozenset(),
    ) -> dict[str, TopicFacts]:
        """Bring the index up to ``scan`` (the revision's file list) and return it.

        A file in ``linked`` (a symbolic link) keeps its facts, so what it
        says and cites counts, but carries an error: it is never replaced.
        """
        current: dict[str, tuple[tuple[int, int, int, int], TopicFacts]] = {}
        for relative, stat in scan:
            if not is_topic_file(relative):
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
        self, scan: list[tuple[str, os.stat_result]], topics: dict[str, TopicFacts | None]
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

    def topic(self, relative: str, facts: TopicFacts | None) -> Topic | None:
        """The parsed file ``facts`` are of; parsed now if a worker process normalised it."""
        if facts is None or facts.topic is not None or facts.error is not None:
            return facts.topic if facts is not None else None
        topic = self._facts(relative).topic
        cached = self._files.get(relative)
        if topic is not None and cached is not None:
            self._files[relative] = (cached[0], replace(cached[1], topic=topic))
        return topic

    def _facts(self, relative: str) -> TopicFacts:
        with open(os.path.join(self.memory_dir, relative), "rb") as handle:
            raw = handle.read()
        try:
            topic = parse_topic(decode_topic(raw, relative), relative)
        except TopicError as error:
            return TopicFacts(None, error, frozenset(), frozenset(), frozenset())
        return facts_of(relative, topic)


def facts_of(relative: str, topic: Topic) -> TopicFacts:
    cited = {
        key
        for footnote in topic.footnotes.values()
        for link in footnote.sources
        if (key := source_key(relative, link.target)) is not None
    }
    return TopicFacts(
        topic, None, frozenset(topic.block_ids()), frozenset(topic.footnotes), frozenset(cited),
    )


def split_lines(joined: str) -> frozenset[str]:
    return frozenset(joined.split("\n")) if joined else frozenset()


def join_lines(values: frozenset[str] | set[str]) -> str:
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
    existing_ids = set(split_lines(existing))
    used_ids = set(existing_ids)
    used_labels = set(split_lines(labels))
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
            after = facts_of(path, normalised.topic)
            facts = (join_lines(after.block_ids), join_lines(after.labels), join_lines(after.cited))
            if len(_BASES) >= _BASES_LIMIT:
                _BASES.clear()
            _BASES[memory_dir, path] = (normalised.text, normalised.topic)
        results.append((
            normalised.text, join_lines(normalised.block_ids), join_lines(normalised.kept_ids),
            join_lines(normalised.handles), join_lines(normalised.linked), normalised.new_ids, facts,
        ))
    return results


def unpack_normalised(path: str, result: tuple[str | None, str, str, str, str, tuple[str, ...],
                                     tuple[str, str, str] | None]
            ) -> tuple[NormalisedTopic, TopicFacts | None]:
    text, block_ids, kept, handles, linked, new_ids, facts = result
    normalised = NormalisedTopic(path, text, split_lines(block_ids), split_lines(kept), split_lines(handles),
                                 split_lines(linked), new_ids)
    if facts is None:
        return normalised, None
    return normalised, TopicFacts(None, None, *(split_lines(part) for part in facts))


def _base_topic(memory_dir: str, path: str, raw: bytes) -> Topic:
    text = decode_topic(raw, path)
    cached = _BASES.get((memory_dir, path))
    if cached is not None and cached[0] == text:
        return cached[1]
    return parse_topic(text, path)


def _linked_facts(relative: str, facts: TopicFacts) -> TopicFacts:
    if facts.error is not None:
        return facts
    return replace(facts, error=TopicError(relative, 0, LINKED_TOPIC))


LINKED_TOPIC = (
    "a symbolic link to a file, which scriptorium never replaces (replacing it would leave "
    "the target stale): move the file itself into place, or link its directory instead"
)


def is_topic_file(relative: str) -> bool:
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
