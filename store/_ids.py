"""Validation of every id before it becomes part of a path.

Node ids and session ids end up in file names (``history/NNNN-r-<id>.json``,
``sessions/<sid>/``). An id holding ``/``, ``\\``, ``..`` or NUL could name a
file outside its directory; a control character can forge terminal output; a
leading ``.`` would collide with the store's own hidden files (temp files,
journals, ``.lock``). So an id is checked before any path is built, and a bad
one gets :class:`~store._errors.UnsafeIdError` with nothing touched.

Branch names are not paths, but they are shown in terminals and JSON, so
they get the same control-character and length checks.
"""

from __future__ import annotations

import re

from ._errors import UnsafeIdError

__all__ = ["MAX_ID_LENGTH", "MAX_NAME_LENGTH", "is_safe_id", "validate_id", "validate_name"]

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
    problem = _id_problem(value)
    if problem is not None:
        raise UnsafeIdError(kind, repr(value) if not isinstance(value, str) else value,
                            problem, session)
    assert isinstance(value, str)
    return value


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
