"""Validation of every id before it becomes part of a path.

Node ids and session ids end up in file names (``history/NNNN-r-<id>.json``,
``sessions/<sid>/``). An id holding ``/``, ``\\``, ``..`` or NUL could name a
file outside its directory; a control character can forge terminal output; a
leading ``.`` would collide with the store's own hidden files (temp files,
journals, ``.lock``). So an id is checked before any path is built, and a bad
one gets :class:`~store._errors.UnsafeIdError` with nothing touched.

New ids (a session being created, a node being appended) must also be
*citable*: memory cites a turn by its raw source handle
``openprogram/<sid>/<node-id>`` inside ``<!-- source-id:... -->`` archive
comments, footnote ``Sources:`` lists (split on commas and blanks) and
``[label](target#fragment)`` links. An id with whitespace, a non-printable
character, or one of ``# ( ) [ ] < > ,`` cannot be carried by those grammars,
so it is refused where it enters (:func:`validate_new_id`) instead of being
stored and then failing every write. Ids already on disk are only held to
the path rule, so such sessions stay readable; memory reports them.

Branch names are not paths, but they are shown in terminals and JSON, so
they get the same control-character and length checks.
"""

from __future__ import annotations

import re

from ._errors import UnsafeIdError

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_NAME_LENGTH",
    "citable_id_problem",
    "is_safe_id",
    "validate_id",
    "validate_name",
    "validate_new_id",
]

MAX_ID_LENGTH = 128
# A history file name is "NNNN-r-<id>.json"; 200 bytes of id keep it well
# under the 255-byte limit of common filesystems even with a long seq.
_MAX_ID_BYTES = 200
MAX_NAME_LENGTH = 256


# One C-level search rejects most unsafe ids; _id_problem then names the reason.
_SUSPECT = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029/\\\ud800-\udfff]|\.\.|^\.")


def _control(ch: str) -> bool:
    code = ord(ch)
    return code < 0x20 or 0x7F <= code < 0xA0 or code in (0x2028, 0x2029)


def _id_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}"
    if not value:
        return "it is empty"
    if len(value) > MAX_ID_LENGTH:
        return f"it is longer than {MAX_ID_LENGTH} characters"
    if "\x00" in value:
        return "it contains NUL"
    if "/" in value or "\\" in value:
        return "it contains a path separator"
    if ".." in value:
        return "it contains '..'"
    if value.startswith("."):
        return "it starts with '.' (reserved for the store's own files)"
    if any(_control(ch) for ch in value):
        return "it contains a control character"
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError:
        return "it is not valid Unicode (lone surrogate)"
    if len(encoded) > _MAX_ID_BYTES:
        return f"it is longer than {_MAX_ID_BYTES} bytes in UTF-8"
    return None


def is_safe_id(value: object) -> bool:
    """True when ``value`` may be used as a node or session id."""
    if (type(value) is str and 0 < len(value) <= MAX_ID_LENGTH
            and _SUSPECT.search(value) is None):
        return len(value) * 4 <= _MAX_ID_BYTES or len(value.encode("utf-8")) <= _MAX_ID_BYTES
    return _id_problem(value) is None


def validate_id(value: object, kind: str = "node id", session: str | None = None) -> str:
    """Return ``value`` if it is a safe id, else raise :class:`UnsafeIdError`."""
    if isinstance(value, str) and is_safe_id(value):  # one C-level search; an append checks several ids
        return value
    problem = _id_problem(value)
    if problem is not None:
        raise UnsafeIdError(kind, repr(value) if not isinstance(value, str) else value,
                            problem, session)
    assert isinstance(value, str)
    return value


# What a source handle, its archive comment and a footnote link cannot carry
# (str.isprintable() covers the other blanks and invisible characters).
_UNCITABLE = re.compile(r"[\s#()\[\]<>,]")


def citable_id_problem(value: str) -> str | None:
    """Why a path-safe id cannot be cited in memory, or None when it can."""
    match = _UNCITABLE.search(value)
    if match is not None:
        ch = match.group()
        return ("it contains whitespace" if ch.isspace()
                else f"it contains {ch!r}") + ", which a memory source handle cannot carry"
    if not value.isprintable():
        bad = next(ch for ch in value if not ch.isprintable())
        return f"it contains the non-printable character U+{ord(bad):04X}"
    return None


def validate_new_id(value: object, kind: str = "node id", session: str | None = None) -> str:
    """:func:`validate_id` plus the citable rule: for ids entering the store for the first time."""
    valid = validate_id(value, kind, session)
    problem = citable_id_problem(valid)
    if problem is not None:
        raise UnsafeIdError(kind, valid, problem, session)
    return valid


def validate_name(value: object, kind: str = "branch name", session: str | None = None) -> str:
    """Return ``value`` if it is a displayable name, else raise :class:`UnsafeIdError`."""
    if not isinstance(value, str):
        raise UnsafeIdError(kind, repr(value), f"expected a string, got {type(value).__name__}",
                            session)
    if len(value) > MAX_NAME_LENGTH:
        raise UnsafeIdError(kind, value, f"it is longer than {MAX_NAME_LENGTH} characters",
                            session)
    if any(_control(ch) for ch in value):
        raise UnsafeIdError(kind, value, "it contains a control character", session)
    return value
