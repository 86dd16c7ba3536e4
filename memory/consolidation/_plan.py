"""A consolidation pass as data: what it changes, why, and the check that nothing is lost.

Issue 23's promise is that consolidation cannot do what its users fear most,
delete facts. A consolidator (offline or a model) only *proposes* a
:class:`Plan`; :func:`losses` compares the topics before and after it and
the pass is refused whole (:class:`~memory._errors.ConsolidationRefusedError`)
unless:

* every source cited before is cited after (by source key, so a link
  rewritten for another directory still counts);
* every block id and alias that existed still exists (a merged paragraph
  keeps the ids it absorbed as aliases, so old citations and links still
  find it), except ids listed in ``removed`` with a non-empty reason.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memory.workspace._topic_ids import source_key
from memory.workspace._topics import Topic

__all__ = ["Action", "Plan", "cited_sources", "losses"]


@dataclass(frozen=True, slots=True)
class Action:
    """One change of a pass, as the record and ``memory history`` show it.

    ``kind``: ``merge`` (the same fact, several paragraphs into one),
    ``supersede`` (a newer value current, the older kept in the paragraph's
    history), ``fold`` (paragraphs about one subject moved together),
    ``rewrite`` or ``remove`` (a model's proposals). ``block`` is the
    surviving block id, ``absorbed`` the ids it took in (now its aliases),
    ``before`` the bodies it replaced and ``after`` the new body.
    """

    kind: str
    path: str
    block: str
    reason: str
    absorbed: tuple[str, ...] = ()
    before: tuple[str, ...] = ()
    after: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "block": self.block,
                "absorbed": list(self.absorbed), "reason": self.reason,
                "before": list(self.before), "after": self.after}


@dataclass(frozen=True, slots=True)
class Plan:
    """The topics a pass would leave (only the files it changes) and its actions.

    A file mapped to a topic without paragraphs is pruned by the commit.
    ``removed``: block id -> the recorded reason it may vanish.
    """

    topics: Mapping[str, Topic]
    actions: tuple[Action, ...]
    removed: Mapping[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.actions


def cited_sources(topics: Mapping[str, Topic]) -> set[str]:
    """Every source a topic cites: its key (``<sid>#source-<hex>``), else the link as written."""
    cited: set[str] = set()
    for path, topic in topics.items():
        for footnote in topic.footnotes.values():
            for link in footnote.sources:
                cited.add(source_key(path, link.target) or _resolved(path, link.target))
    return cited


def _resolved(path: str, target: str) -> str:
    if target.startswith("/") or "://" in target:
        return target
    return posixpath.normpath(posixpath.join(posixpath.dirname(path), target))


def _ids(topics: Mapping[str, Topic]) -> set[str]:
    return {block_id for topic in topics.values() for block_id in topic.block_ids()}


def losses(before: Mapping[str, Topic], plan: Plan) -> list[str]:
    """Why ``plan`` may not be installed over ``before`` (empty: it may). Pure."""
    after = {**before, **plan.topics}
    problems: list[str] = []
    for block_id, reason in sorted(plan.removed.items()):
        if not reason.strip():
            problems.append(f"block ^{block_id} is removed without a recorded reason")
    gone_sources = sorted(cited_sources(before) - cited_sources(after))
    if gone_sources:
        problems.append(f"{len(gone_sources)} cited source(s) would no longer be cited: "
                        + ", ".join(gone_sources[:5]))
    gone_ids = sorted(_ids(before) - _ids(after) - set(plan.removed))
    if gone_ids:
        problems.append(f"{len(gone_ids)} block id(s) would no longer resolve: "
                        + ", ".join("^" + i for i in gone_ids[:5]))
    duplicated = _duplicated_ids(after)
    if duplicated:
        problems.append("block id(s) on two paragraphs: "
                        + ", ".join("^" + i for i in duplicated[:5]))
    return problems


def _duplicated_ids(topics: Mapping[str, Topic]) -> list[str]:
    seen: set[str] = set()
    twice: list[str] = []
    for path in sorted(topics):
        for block_id in topics[path].block_ids():
            if block_id in seen:
                twice.append(block_id)
            seen.add(block_id)
    return twice
