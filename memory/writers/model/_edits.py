"""What a model is asked to write, and the strict reading of what it answers.

A model sees the workspace's outline and the full text of a few related
files, never all of it, so it cannot send whole files for everything it
touches. It sends *actions* (SPEC §5's writer form inside them):

* ``append``: paragraphs (with ``[^eN]`` labels and their footnote
  definitions citing raw handles) added under ``section`` of ``path``; the
  section is created when missing, the file when absent;
* ``write``: the whole new text of ``path`` (a file it was shown, or a new
  one), keeping the ``^id`` of every paragraph it keeps;
* ``delete``: remove ``path``.

:func:`parse_actions` is strict: one JSON object ``{"edits": [...]}`` (a
single surrounding code fence is tolerated, since text-mode models add
one), every field typed, no unknown key. Any departure is an
:class:`ActionsUnreadableError` whose message goes back to the model in the
repair loop. :func:`to_topic_edits` turns the actions into one
:class:`~memory.workspace.TopicEdit` per file against a snapshot; the
transaction validator then judges them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memory.workspace import TopicEdit

__all__ = [
    "EDITS_SCHEMA",
    "EDITS_TOOL",
    "ActionsUnreadableError",
    "EditAction",
    "parse_actions",
    "to_topic_edits",
]

EDITS_TOOL = "write_memory"

EDITS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["edits"],
    "properties": {
        "edits": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["action", "path", "section", "text", "delete_blocks"],
                "properties": {
                    "action": {"type": "string", "enum": ["append", "write", "delete"]},
                    "path": {"type": "string"},
                    "section": {"type": "string"},
                    "text": {"type": "string"},
                    "delete_blocks": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}

_FIELDS = frozenset(EDITS_SCHEMA["properties"]["edits"]["items"]["properties"])
_FENCED = re.compile(r"\A```(?:json)?[ \t]*\n(?P<body>.*)\n```\Z", re.DOTALL)
_BLOCK_ID = re.compile(r"[0-9a-f]{8}")
_DEFINITION = re.compile(r"\[\^(?P<label>[A-Za-z0-9_-]+)\]:")
_LABEL = re.compile(r"\[\^(?P<label>[A-Za-z0-9_-]+)\]")
_HEADING = re.compile(r"(?P<hashes>#{1,6}) +\S")


class ActionsUnreadableError(ValueError):
    """The model's answer is not the edits object; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class EditAction:
    action: str  # "append" | "write" | "delete"
    path: str
    section: str = ""
    text: str = ""
    delete_blocks: tuple[str, ...] = ()


def parse_actions(answer: str | dict[str, Any]) -> list[EditAction]:
    """The actions of a model's answer (text, or a tool call's already-decoded arguments)."""
    if isinstance(answer, str):
        text = answer.strip()
        if not text:
            raise ActionsUnreadableError("the answer is empty; send the JSON object {\"edits\": [...]}")
        fenced = _FENCED.match(text)
        if fenced is not None:
            text = fenced.group("body").strip()
        try:
            document: object = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ActionsUnreadableError(
                f"the answer is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                "send only the JSON object {\"edits\": [...]}") from None
    else:
        document = answer
    if not isinstance(document, dict) or set(document) != {"edits"}:
        raise ActionsUnreadableError("the answer must be an object with the single key \"edits\"")
    edits = document["edits"]
    if not isinstance(edits, list):
        raise ActionsUnreadableError("\"edits\" must be a list")
    return [_action(index, item) for index, item in enumerate(edits)]


def _action(index: int, item: object) -> EditAction:
    where = f"edits[{index}]"
    if not isinstance(item, dict):
        raise ActionsUnreadableError(f"{where} must be an object")
    unknown = sorted(set(item) - _FIELDS)
    if unknown:
        raise ActionsUnreadableError(f"{where} has unknown key(s) {', '.join(unknown)}")
    action = item.get("action")
    if action not in ("append", "write", "delete"):
        raise ActionsUnreadableError(f"{where}.action must be append, write or delete, not {action!r}")
    path = item.get("path")
    if not isinstance(path, str) or not path:
        raise ActionsUnreadableError(f"{where}.path must be a non-empty string")
    section = item.get("section", "")
    text = item.get("text", "")
    if not isinstance(section, str) or not isinstance(text, str):
        raise ActionsUnreadableError(f"{where}.section and .text must be strings")
    if action != "delete" and not text.strip():
        raise ActionsUnreadableError(f"{where} ({action} {path}) has no text")
    blocks = item.get("delete_blocks", [])
    if not isinstance(blocks, list) or not all(
            isinstance(b, str) and _BLOCK_ID.fullmatch(b.lstrip("^")) for b in blocks):
        raise ActionsUnreadableError(f"{where}.delete_blocks must be a list of 8-hex block ids")
    return EditAction(action, path, section.strip(), text,
                      tuple(b.lstrip("^") for b in blocks))


def to_topic_edits(
    actions: Sequence[EditAction], read: Callable[[str], str | None],
) -> list[TopicEdit]:
    """One edit per file: the actions applied in order to the text ``read(path)`` gives (None: absent).

    Appends to one file get their local labels renumbered, so two appends
    that both say ``[^e1]`` do not collide.
    """
    texts: dict[str, str | None] = {}
    deletes: dict[str, set[str]] = {}
    appended: dict[str, int] = {}
    for action in actions:
        current = texts[action.path] if action.path in texts else read(action.path)
        deletes.setdefault(action.path, set()).update(action.delete_blocks)
        if action.action == "delete":
            texts[action.path] = None
        elif action.action == "write":
            texts[action.path] = action.text
        else:
            count = appended.get(action.path, 0) + 1
            appended[action.path] = count
            texts[action.path] = _append(current, action.section, action.text, f"m{count}x")
    return [TopicEdit(path, text, frozenset(deletes[path])) for path, text in texts.items()]


def _append(current: str | None, section: str, text: str, prefix: str) -> str:
    """``text`` (paragraphs, then footnote definitions) added under ``section`` of ``current``."""
    body: list[str] = []
    definitions: list[str] = []
    for line in text.strip("\n").split("\n"):
        (definitions if _DEFINITION.match(line) else body).append(line)
    labels = {m.group("label") for line in definitions for m in [_DEFINITION.match(line)] if m}

    def relabel(line: str) -> str:
        return _LABEL.sub(lambda m: f"[^{prefix}{m.group('label')}]"
                          if m.group("label") in labels else m.group(0), line)

    body = [relabel(line) for line in body]
    definitions = [relabel(line) for line in definitions]
    while body and not body[-1].strip():
        body.pop()
    heading = section if not section or section.startswith("#") else f"## {section}"
    if current is None:
        lines = ([heading, ""] if heading and heading not in body else []) + body
        return "\n".join([*lines, "", *definitions]).rstrip("\n") + "\n"
    lines = current.rstrip("\n").split("\n")
    # Existing footnote definitions stay last: new paragraphs go above them.
    end = len(lines)
    while end > 0 and (not lines[end - 1].strip() or _DEFINITION.match(lines[end - 1])):
        end -= 1
    prose, notes = lines[:end], [line for line in lines[end:] if line.strip()]
    at = len(prose)
    if heading:
        match = next((i for i, line in enumerate(prose) if line.strip() == heading), None)
        if match is None:
            prose += ["", heading]
            at = len(prose)
        else:
            level = len(heading) - len(heading.lstrip("#"))
            at = next((i for i in range(match + 1, len(prose))
                       if (h := _HEADING.match(prose[i])) and len(h.group("hashes")) <= level),
                      len(prose))
    while at > 0 and not prose[at - 1].strip():
        at -= 1
    merged = [*prose[:at], "", *body, "", *prose[at:]]
    while merged and not merged[-1].strip():
        merged.pop()
    return "\n".join([*merged, "", *notes, *definitions]).rstrip("\n") + "\n"
