"""The model consolidator: a model proposes merges, rewrites, supersedes; they are checked like a write.

With a model writer configured, the model reads the paragraphs (one JSON
line each: block id, file, date, statement) and answers
``{"edits": [...]}`` of small edits:

* ``{"action": "merge", "blocks": [ids...], "text": "..."}``: one paragraph
  saying ``text`` in place of the first block, keeping every block's ids;
* ``{"action": "rewrite", "block": id, "text": "..."}``;
* ``{"action": "supersede", "current": id, "older": [ids...]}``: the older
  statements become the current paragraph's dated history;
* ``{"action": "remove", "block": id, "reason": "..."}``.

The model never handles citations: the text it writes is one line without
``[^...]`` or ``^id``, and :func:`apply_proposals` (pure) attaches every
citation of the paragraphs it replaces. What it proposes then passes the
same :func:`~._plan.losses` check as the offline pass: a removal that would
leave a source uncited, an id that would vanish, a removal without a reason,
refuse the pass whole; an unreadable answer or an edit naming an unknown
block refuses it too (:class:`ProposalError`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memory._errors import ProposalError
from memory.consolidation._facts import HISTORY_PREFIX, paragraph_when
from memory.consolidation._offline import _relabel
from memory.consolidation._plan import Action, Plan
from memory.workspace._topics import CITATION, Footnote, Heading, Paragraph, Topic

__all__ = ["RULES", "ProposalError", "apply_proposals", "parse_proposals", "render_prompt"]

RULES = """You consolidate the long-term memory of an agent. Its paragraphs follow, one JSON \
object per line: "block" (its id), "path", "when" (the latest date it cites), "text".
Propose small edits that make memory smaller and truer without losing any fact:
- merge paragraphs that state the same fact: {"action": "merge", "blocks": [ids], "text": \
"the fact, once"}
- rewrite a paragraph more concisely: {"action": "rewrite", "block": id, "text": "..."}
- when a newer statement replaces older ones about the same thing: {"action": "supersede", \
"current": newer id, "older": [older ids]}
- remove a paragraph only if it holds no fact at all: {"action": "remove", "block": id, \
"reason": "why"}
Write each text as one line, without citations or ids (they are kept for you).
Answer with one JSON object {"edits": [...]} and nothing else; {"edits": []} if nothing helps."""

_ACTIONS = ("merge", "rewrite", "supersede", "remove")


def render_prompt(topics: Mapping[str, Topic]) -> str:
    lines = ["## Paragraphs"]
    for path in sorted(topics):
        topic = topics[path]
        for paragraph in topic.paragraphs:
            first = paragraph.body.split("\n", 1)[0]
            lines.append(json.dumps({
                "block": paragraph.ids[0], "path": path,
                "when": paragraph_when(paragraph, topic.footnotes) or "undated",
                "text": CITATION.sub("", first).strip()}, ensure_ascii=False))
    return "\n".join(lines)


def parse_proposals(answer: str | Mapping[str, Any]) -> list[dict[str, Any]]:
    """The edits of the model's answer, strictly; :class:`ProposalError` naming what is wrong."""
    try:
        document = json.loads(answer) if isinstance(answer, str) else dict(answer)
    except ValueError as error:
        raise ProposalError(f"the answer is not JSON ({error})") from None
    edits = document.get("edits") if isinstance(document, dict) else None
    if not isinstance(edits, list):
        raise ProposalError('the answer has no "edits" list')
    for number, edit in enumerate(edits, start=1):
        if not isinstance(edit, dict) or edit.get("action") not in _ACTIONS:
            raise ProposalError(f"edit {number} has no action of {', '.join(_ACTIONS)}")
        for key in ("text", "block", "current", "reason"):
            if key in edit and not isinstance(edit[key], str):
                raise ProposalError(f"edit {number}: {key!r} must be a string")
        for key in ("blocks", "older"):
            if key in edit and not (isinstance(edit[key], list)
                                    and all(isinstance(i, str) for i in edit[key])):
                raise ProposalError(f"edit {number}: {key!r} must be a list of block ids")
        text = edit.get("text")
        if text is not None and ("\n" in text or "[^" in text or " ^" in text
                                 or not text.strip()):
            raise ProposalError(f"edit {number}: the text must be one non-empty line without "
                                "citations or ids")
    return edits


class _Applier:
    def __init__(self, topics: Mapping[str, Topic]) -> None:
        self.topics = topics
        self.edited = {path: list(topic.blocks) for path, topic in topics.items()}
        self.footnotes = {path: dict(topic.footnotes) for path, topic in topics.items()}
        self.where = {p.ids[0]: path for path, t in topics.items() for p in t.paragraphs}
        self.changed: set[str] = set()

    def paragraph(self, block: str, number: int) -> tuple[str, Paragraph]:
        path = self.where.get(block)
        if path is None:
            raise ProposalError(f"edit {number} names block ^{block}, which is not a paragraph "
                                "shown (or was already merged away)")
        found = next(b for b in self.edited[path]
                     if isinstance(b, Paragraph) and b.ids[0] == block)
        return path, found

    def replace(self, path: str, old: Paragraph, new: Paragraph | None) -> None:
        blocks = self.edited[path]
        index = blocks.index(old)
        if new is None:
            del blocks[index]
            del self.where[old.ids[0]]
        else:
            blocks[index] = new
        self.changed.add(path)

    def cited_line(self, text: str, members: Sequence[tuple[str, Paragraph]], dest: str) -> str:
        labels: list[str] = []
        for path, paragraph in members:
            first = _relabel(paragraph.body.split("\n", 1)[0], path, dest, self.topics,
                             self.footnotes)
            labels.extend(CITATION.findall(first))
        return text.strip() + "".join(f"[^{label}]" for label in dict.fromkeys(labels))

    def extras(self, members: Sequence[tuple[str, Paragraph]], dest: str) -> list[str]:
        return [_relabel(line, path, dest, self.topics, self.footnotes)
                for path, paragraph in members for line in paragraph.body.split("\n")[1:]]


def apply_proposals(topics: Mapping[str, Topic], edits: Sequence[Mapping[str, Any]]) -> Plan:
    """Pure: the plan the edits make of ``topics`` (checked by the caller with ``losses``)."""
    state = _Applier(topics)
    actions: list[Action] = []
    removed: dict[str, str] = {}
    for number, edit in enumerate(edits, start=1):
        kind = edit["action"]
        if kind == "remove":
            path, paragraph = state.paragraph(edit.get("block", ""), number)
            state.replace(path, paragraph, None)
            removed.update((i, edit.get("reason", "")) for i in paragraph.ids)
            actions.append(Action("remove", path, paragraph.ids[0], edit.get("reason", ""),
                                  before=(paragraph.body,)))
            continue
        if kind == "rewrite":
            members = [state.paragraph(edit.get("block", ""), number)]
            ids_of = members
        elif kind == "merge":
            ids_of = members = [state.paragraph(b, number) for b in edit.get("blocks", [])]
            if len(members) < 2:
                raise ProposalError(f"edit {number}: a merge names at least two blocks")
        else:  # supersede
            current = state.paragraph(edit.get("current", ""), number)
            older = [state.paragraph(b, number) for b in edit.get("older", [])]
            if not older:
                raise ProposalError(f"edit {number}: a supersede names older blocks")
            members, ids_of = [current], [current, *older]
        if len({p.ids[0] for _, p in ids_of}) != len(ids_of):
            raise ProposalError(f"edit {number} names one block twice")
        dest, first = ids_of[0]
        text = edit.get("text") or CITATION.sub("", first.body.split("\n", 1)[0]).strip()
        lines = [state.cited_line(text, members, dest)]
        if kind == "supersede":
            for path, paragraph in ids_of[1:]:
                when = paragraph_when(paragraph, topics[path].footnotes) or "undated"
                old_text = CITATION.sub("", paragraph.body.split("\n", 1)[0]).strip()
                lines.append(f"{HISTORY_PREFIX} ({when}): "
                             + state.cited_line(old_text, [(path, paragraph)], dest))
        lines.extend(state.extras(ids_of, dest))
        ids = tuple(dict.fromkeys(i for _, p in ids_of for i in p.ids))
        new = Paragraph("\n".join(lines), ids)
        state.replace(dest, first, new)
        for path, paragraph in ids_of[1:]:
            state.replace(path, paragraph, None)
        state.where[ids[0]] = dest
        actions.append(Action(kind, dest, ids[0], "proposed by the model", absorbed=ids[1:],
                              before=tuple(p.body for _, p in ids_of), after=new.body))
    return Plan({path: _pruned(state.edited[path], state.footnotes[path])
                 for path in sorted(state.changed)}, tuple(actions), removed)


def _pruned(blocks: list[Heading | Paragraph], footnotes: dict[str, Footnote]) -> Topic:
    cited = {label for b in blocks if isinstance(b, Paragraph) for label in b.citations}
    return Topic(tuple(blocks), {k: v for k, v in footnotes.items() if k in cited})
