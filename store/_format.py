"""The on-disk format of node files and meta.json, byte-compatible with the reference agent.

The reference agent writes each node as ``json.dumps(record,
ensure_ascii=False)`` encoded as UTF-8, with the default separators
(``", "`` and ``": "``), Python's shortest round-trip float repr and no
trailing newline; meta.json the same way. Scriptorium encodes exactly so,
which is what lets a node whose metadata did not change be rewritten
byte-identically (tested on every fixture file), and the agent keep reading
what scriptorium wrote.

Decoding uses orjson (several times faster than :mod:`json`, which matters
for a cold load of hundreds of nodes) and refuses everything the encoder
could not reproduce: invalid UTF-8, lone surrogates, NaN and infinities,
nesting beyond orjson's limit, integers beyond 64 bits (orjson silently
turns them into floats, so a file holding a float that large is checked
again with :mod:`json`), files over a size cap, and records whose fields are not the
node's fields. Each refusal is a :class:`~store._errors.NodeFileError` naming
the file; the caller skips the file and never rewrites it.

Encoding refuses what could not be read back identically: lone surrogates,
NaN, integers beyond 64 bits, non-string keys, nesting deeper than
:data:`MAX_DEPTH`, and nodes larger than the cap.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

from ._errors import (
    MetaFileError,
    NodeFileError,
    OversizedContentError,
    UnencodableValueError,
)
from ._ids import is_safe_id
from ._node import NODE_FIELDS, ROLE_LETTERS, ROLES, Node

__all__ = [
    "DEFAULT_MAX_NODE_BYTES",
    "MAX_DEPTH",
    "check_value",
    "decode_meta",
    "decode_node",
    "encode_meta",
    "encode_node",
    "encode_with_metadata",
    "node_filename",
    "parse_filename",
]

DEFAULT_MAX_NODE_BYTES = 32 * 1024 * 1024
# orjson refuses nesting of 1024 levels; the encoder stays far below so that
# whatever scriptorium writes, it can read back.
MAX_DEPTH = 256
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1  # orjson reads unsigned 64-bit integers exactly
_WIDE = float(2**63)
_FIELD_SET = frozenset(NODE_FIELDS)
_FILENAME = re.compile(r"^(\d{4,})-([ulc])-(.+)\.json\Z", re.DOTALL)


def node_filename(node: Node) -> str:
    """``history/`` file name of ``node``: ``{seq:04d}-{role letter}-{id}.json``."""
    return f"{node.seq:04d}-{ROLE_LETTERS[node.role]}-{node.id}.json"


def parse_filename(name: str) -> tuple[int, str, str] | None:
    """``(seq, role letter, id)`` of a history file name, or None for anything else."""
    match = _FILENAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2), match.group(3)


# -- encoding ----------------------------------------------------------------


def check_value(value: Any, session: str, node: str, depth: int = 0) -> None:
    """Raise :class:`UnencodableValueError` unless ``value`` round-trips through the format."""
    if depth > MAX_DEPTH:
        raise UnencodableValueError(session, node, f"nesting deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise UnencodableValueError(session, node, f"integer {value} is beyond 64 bits")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UnencodableValueError(session, node, f"{value} is not a JSON number")
        return
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise UnencodableValueError(session, node, "a string holds a lone surrogate") from None
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            check_value(item, session, node, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise UnencodableValueError(session, node, f"object key {key!r} is not a string")
            check_value(key, session, node, depth + 1)
            check_value(item, session, node, depth + 1)
        return
    raise UnencodableValueError(session, node, f"a {type(value).__name__} is not JSON")


def _dumps(record: object) -> bytes:
    return json.dumps(record, ensure_ascii=False, allow_nan=False).encode("utf-8")


def encode_node(node: Node, session: str = "", cap: int = DEFAULT_MAX_NODE_BYTES) -> bytes:
    """The node file's bytes. Values must already have passed :func:`check_value`."""
    record = {name: getattr(node, name) for name in NODE_FIELDS}
    try:
        data = _dumps(record)
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise UnencodableValueError(session, node.id, str(exc)) from None
    if len(data) > cap:
        raise OversizedContentError(session, node.id, len(data), cap)
    return data


def encode_with_metadata(
    data: bytes, node: Node, metadata: dict[str, Any], session: str = "",
    cap: int = DEFAULT_MAX_NODE_BYTES,
) -> bytes:
    """The bytes of ``node`` (whose file holds ``data``) with ``metadata`` in place of its own.

    ``metadata`` is the last field, so when ``data`` ends with the canonical
    encoding of the old metadata, everything before it is kept byte for
    byte and only the metadata is encoded: a marker merge does not re-encode
    a turn's content. Otherwise the whole node is encoded.
    """
    old = b'"metadata": ' + _dumps(node.metadata) + b"}"
    if not data.endswith(old):
        return encode_node(node.with_metadata(metadata), session, cap)
    try:
        new = _dumps(metadata)
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise UnencodableValueError(session, node.id, str(exc)) from None
    result = b"".join((data[: len(data) - len(old)], b'"metadata": ', new, b"}"))
    if len(result) > cap:
        raise OversizedContentError(session, node.id, len(result), cap)
    return result


def encode_meta(meta: dict[str, Any]) -> bytes:
    return _dumps(meta)


# -- decoding ----------------------------------------------------------------


def _parse(data: bytes, path: str, error: type[NodeFileError | MetaFileError]) -> Any:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise error(path, f"not valid JSON ({exc})") from None
    if type(value) in (dict, list) and _holds_wide_number(value):
        _reject_wide_integers(data, path, error)
    return value


def _holds_wide_number(value: Any) -> bool:
    """True if a float at or beyond 2**63 appears: possibly an integer orjson widened.

    Walking the parsed structure costs per container and number, not per
    byte (content is mostly long strings), so it is far cheaper than
    scanning the bytes for long digit runs.
    """
    stack = [value]
    while stack:
        container = stack.pop()
        items = container.values() if type(container) is dict else container
        for item in items:
            kind = type(item)
            if kind is float:
                if not -_WIDE < item < _WIDE:
                    return True
            elif kind is dict or kind is list:
                stack.append(item)
    return False


def _reject_wide_integers(
    data: bytes, path: str, error: type[NodeFileError | MetaFileError]
) -> None:
    def parse_int(text: str) -> int:
        number = int(text)
        if not _INT_MIN <= number <= _INT_MAX:
            raise error(path, f"integer {text[:40]} is beyond 64 bits")
        return number

    json.loads(data, parse_int=parse_int)


def decode_node(data: bytes, path: str, cap: int = DEFAULT_MAX_NODE_BYTES) -> Node:
    """Parse a node file; :class:`NodeFileError` naming ``path`` if it is not a valid node."""
    if len(data) > cap:
        raise NodeFileError(path, f"{len(data)} bytes, over the cap of {cap}")
    record = _parse(data, path, NodeFileError)
    if not isinstance(record, dict):
        raise NodeFileError(path, "the top level is not an object")
    if record.keys() != _FIELD_SET:
        found = sorted(record)
        raise NodeFileError(path, f"fields {found} are not the node fields {list(NODE_FIELDS)}")
    node_id, created_at, seq, role = (
        record["id"], record["created_at"], record["seq"], record["role"]
    )
    predecessor, caller = record["predecessor"], record["caller"]
    if not is_safe_id(node_id):
        raise NodeFileError(path, f"id {str(node_id)[:80]!r} is not a safe id")
    if isinstance(created_at, bool) or not isinstance(created_at, (int, float)):
        raise NodeFileError(path, "created_at is not a number")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise NodeFileError(path, "seq is not a non-negative integer")
    if role not in ROLES:
        raise NodeFileError(path, f"role {role!r} is not one of {list(ROLES)}")
    if predecessor is not None and not isinstance(predecessor, str):
        raise NodeFileError(path, "predecessor is neither a string nor null")
    if not isinstance(caller, str):
        raise NodeFileError(path, "caller is not a string")
    if not isinstance(record["reads"], list) or not isinstance(record["metadata"], dict):
        raise NodeFileError(path, "reads is not a list or metadata is not an object")
    return Node(
        id=node_id, created_at=created_at, seq=seq, role=role, name=record["name"],
        input=record["input"], output=record["output"], caller=caller,
        predecessor=predecessor, reads=record["reads"], metadata=record["metadata"],
    )


def decode_meta(data: bytes, path: str) -> dict[str, Any]:
    meta = _parse(data, path, MetaFileError)
    if not isinstance(meta, dict):
        raise MetaFileError(path, "the top level is not an object")
    return meta
