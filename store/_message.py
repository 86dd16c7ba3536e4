"""The message view: how the API (and memory) sees a node.

Hosts and the ledger speak message dicts, not node records (SPEC §4): role
``user``/``assistant``/``tool`` for the node roles ``user``/``llm``/``code``,
``content`` for ``output``, ``timestamp`` for ``created_at``, and every
metadata key spread to the top level, so a marker
``memory_written_scriptorium`` reads as ``message["memory_written_scriptorium"]``.

That spreading is why :data:`~store._node.RESERVED_KEYS` can never be
metadata keys: they would be shadowed by (or shadow) the view's own fields.
Going the other way, every field the node has no place for goes into
``metadata``; an ``extra`` object is unpacked into it (keys already present
win), as the reference agent does.

Markers never come in through an append: every ``memory_written_<provider>``
key of the message (or of its ``extra``) is dropped. A marker says "this
turn is durably in that provider's memory", and only the provider's ledger
knows that: it merges the marker after the batch is installed (SPEC §6.4).
A message that carries one is a copy (a cloned conversation re-appends the
views ``get_branch`` returned, markers spread at the top level) or a forgery;
stored, it would stop the owed walk (SPEC §6.2) and the turn, with every
earlier turn of its branch, would never be written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._errors import InvalidNodeError, ReservedMetadataKeyError
from ._node import RESERVED_KEYS, ROOT, Node

__all__ = [
    "APPEND_IDENTITY",
    "MARKER_PREFIX",
    "MESSAGE_ROLES",
    "NODE_ROLES",
    "append_conflicts",
    "check_metadata_keys",
    "message_to_node",
    "node_to_message",
]

MESSAGE_ROLES = {"user": "user", "llm": "assistant", "code": "tool"}
NODE_ROLES = {"user": "user", "assistant": "llm", "tool": "code", "llm": "llm", "code": "code"}
# Fields of a message that map onto node fields rather than metadata.
_NATIVE = frozenset({
    "id", "session_id", "role", "content", "predecessor", "caller",
    "timestamp", "token_model", "function", "extra", "status",
    "name", "input", "reads",
})


# A provider's written marker; set only by its ledger's marker merge, never by an append.
MARKER_PREFIX = "memory_written_"


def _is_marker(key: object) -> bool:
    return isinstance(key, str) and key.startswith(MARKER_PREFIX)


# What makes a repeated append (same client id) the same turn, in message-view
# names. Not compared: ``timestamp`` (a retry may stamp anew), ``name``,
# ``input``, ``reads`` and metadata (markers, ``rewound`` and the reference
# agent's keys are merged into a node after its append, so the stored node
# legitimately differs from the message that created it).
APPEND_IDENTITY = ("role", "content", "predecessor", "caller")


def append_conflicts(existing: Node, requested: Node) -> tuple[str, ...]:
    """The :data:`APPEND_IDENTITY` fields in which ``requested`` is another turn than ``existing``.

    ``requested`` is the node the repeated message asks for, built with the
    existing node's predecessor as default: an append at the head names no
    predecessor, and the head has moved onto the existing node since.
    """
    pairs = (
        ("role", existing.role, requested.role),
        ("content", existing.output, requested.output),
        ("predecessor", existing.predecessor, requested.predecessor),
        ("caller", existing.caller, requested.caller),
    )
    return tuple(name for name, old, new in pairs if old != new)


def node_to_message(node: Node, session: str) -> dict[str, Any]:
    """The message dict of ``node``: view fields first, then every metadata key."""
    message: dict[str, Any] = {
        "id": node.id,
        "session_id": session,
        "role": MESSAGE_ROLES[node.role],
        "content": node.output,
        "predecessor": node.predecessor,
        "caller": node.caller,
        "timestamp": node.created_at,
    }
    if node.role == "llm":
        message["token_model"] = node.name
    elif node.role == "code":
        message["function"] = node.name
    for key, value in node.metadata.items():
        # A legacy file could hold a reserved key; the node's own field wins.
        message.setdefault(key, value)
    return message


def check_metadata_keys(
    metadata: Mapping[str, Any], session: str, node: str, role: str = "code"
) -> None:
    """Refuse a metadata key the message view would shadow.

    ``function`` is shadowed only on a code node (the view's ``function`` is
    its name); on a user or llm node it is the reference agent's own key
    (``metadata.function == "attach"`` marks an attach row, SPEC §4).
    """
    for key in metadata:
        if not isinstance(key, str):
            raise InvalidNodeError(session, node, f"metadata key {key!r} is not a string")
        if key in RESERVED_KEYS and not (key == "function" and role != "code"):
            raise ReservedMetadataKeyError(session, node, key)


def message_to_node(
    message: Mapping[str, Any],
    session: str,
    *,
    node_id: str,
    seq: int,
    now: float,
    default_predecessor: str | None = ROOT,
) -> Node:
    """The node a message asks to append (``id`` and ``seq`` decided by the caller).

    ``memory_written_<provider>`` keys are dropped (see the module docstring).
    """
    role = message.get("role", "user")
    if role not in NODE_ROLES:
        raise InvalidNodeError(
            session, node_id, f"role {role!r} is not one of {sorted(NODE_ROLES)}"
        )
    node_role = NODE_ROLES[role]
    metadata: dict[str, Any] = {
        k: v for k, v in message.items() if k not in _NATIVE and not _is_marker(k)
    }
    extra = message.get("extra")
    if extra is not None:
        if not isinstance(extra, Mapping):
            raise InvalidNodeError(session, node_id, "extra is not an object")
        for key, value in extra.items():
            if not _is_marker(key):
                metadata.setdefault(key, value)
    function = message.get("function")
    if node_role != "code" and function is not None:
        # No node field holds it on a user/llm node: it is metadata, as the
        # reference agent stores an attach row (SPEC §4), and the view spreads it back.
        metadata["function"] = function
    check_metadata_keys(metadata, session, node_id, node_role)
    name = message.get("name")
    if name is None:
        name = message.get("token_model") if node_role == "llm" else message.get("function")
    if name is None:
        name = ""
    timestamp = message.get("timestamp")
    if timestamp is None:
        timestamp = now
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)):
        raise InvalidNodeError(session, node_id, "timestamp is not a number")
    caller = message.get("caller") or ""
    if not isinstance(caller, str):
        raise InvalidNodeError(session, node_id, "caller is not a string")
    predecessor = message.get("predecessor", default_predecessor)
    if predecessor == "":
        predecessor = ROOT
    if predecessor is not None and not isinstance(predecessor, str):
        raise InvalidNodeError(session, node_id, "predecessor is neither a string nor null")
    reads = message.get("reads", [])
    if not isinstance(reads, list):
        raise InvalidNodeError(session, node_id, "reads is not a list")
    return Node(
        id=node_id, created_at=timestamp, seq=seq, role=node_role, name=name,
        input=message.get("input"), output=message.get("content"), caller=caller,
        predecessor=predecessor, reads=list(reads), metadata=metadata,
    )
