"""The ``sessions/`` directory of a state directory, and which sessions it holds.

Every session lives in ``<state>/sessions/<sid>/``. Listing them is a read
of each ``meta.json`` and nothing else: it takes no session lock and builds
no index, so a caller (the CLI, the watchdog, the stress harness) can list
thousands of sessions without opening any; one it then wants to read or
change is opened with :class:`~store._session.SessionCore`.
"""

from __future__ import annotations

import os
from typing import Any

from ._errors import StoreError
from ._format import decode_meta
from ._ids import validate_id
from ._index import META

__all__ = ["SESSIONS", "list_sessions", "state_path"]

SESSIONS = "sessions"


def state_path(state_dir: str | os.PathLike[str]) -> str:
    """A state directory as given by a user, normalised once where it enters.

    Absolute, with ``.``, ``..`` and repeated separators resolved
    lexically, so every path built from it compares equal to every other
    (``/x/../y/sim/memory/sources`` would not start with ``/y/sim/...``).
    Symlinks are not resolved: the user's name for the directory is kept,
    and links inside the state have their own rule.
    """
    return os.path.abspath(os.fspath(state_dir))


def list_sessions(state_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every session under ``state_dir/sessions`` with a readable meta.json, newest first.

    Rows are ``{id, title, created_at, updated_at, head_id}``. Directories
    whose name is not a safe id, or whose meta.json is missing or corrupt,
    are skipped (open them with :class:`~store._session.SessionCore` to get the typed
    error).
    """
    root = os.path.join(os.fspath(state_dir), SESSIONS)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    rows: list[dict[str, Any]] = []
    for name in names:
        try:
            validate_id(name, "session id")
            with open(os.path.join(root, name, META), "rb") as handle:
                meta = decode_meta(handle.read(), f"{SESSIONS}/{name}/{META}")
        except (StoreError, OSError):
            continue
        rows.append({
            "id": name,
            "title": meta.get("title", ""),
            "created_at": meta.get("created_at"),
            "updated_at": meta.get("updated_at"),
            "head_id": meta.get("head_id"),
        })
    rows.sort(key=lambda r: r["updated_at"] if isinstance(r["updated_at"], (int, float))
              else 0.0, reverse=True)
    return rows
