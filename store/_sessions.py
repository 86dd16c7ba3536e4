"""The ``sessions/`` directory of a state directory, and which sessions it holds.

Every session lives in ``<state>/sessions/<sid>/``. Listing them is a read
of each ``meta.json`` and nothing else: it takes no session lock and builds
no index, so a caller (the CLI, the watchdog, the stress harness) can list
thousands of sessions without opening any; one it then wants to read or
change is opened with :class:`~store._session.SessionCore`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ._errors import MetaMissingError, StoreError, UnsafeLinkError
from ._format import decode_meta
from ._ids import validate_id
from ._index import HISTORY, META
from ._links import refuse_session_alias

__all__ = ["SESSIONS", "list_sessions", "missing_meta", "state_path"]

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


def list_sessions(
    state_dir: str | os.PathLike[str], problems: dict[str, StoreError] | None = None,
    keep: Callable[[str], bool] | None = None,
) -> list[dict[str, Any]]:
    """Every session under ``state_dir/sessions`` with a readable meta.json, newest first.

    ``keep``: only the directories whose name it keeps are looked at (a
    sharded runtime's own sessions: the others' meta.json is never read).

    Rows are ``{id, title, created_at, updated_at, head_id}``. Directories
    whose name is not a safe id, or whose meta.json is missing or corrupt,
    have no row. Those that hold turns nobody would see otherwise (a
    ``history/`` beside a missing or corrupt meta.json) are added to
    ``problems`` (directory name -> typed error: :class:`MetaMissingError`,
    :class:`~store.MetaFileError`), so every caller can say so, as are
    links that give another session a second id (:class:`UnsafeLinkError`).
    """
    root = os.path.join(os.fspath(state_dir), SESSIONS)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    rows: list[dict[str, Any]] = []
    for name in names:
        if keep is not None and not keep(name):
            continue
        try:
            validate_id(name, "session id")
            refuse_session_alias(root, name)
            with open(os.path.join(root, name, META), "rb") as handle:
                meta = decode_meta(handle.read(), f"{SESSIONS}/{name}/{META}")
        except StoreError as error:
            if problems is not None and (
                isinstance(error, UnsafeLinkError)
                or os.path.isdir(os.path.join(root, name, HISTORY))
            ):
                problems[name] = error
            continue
        except OSError:
            if problems is not None:
                missing = missing_meta(root, name)
                if missing is not None:
                    problems[name] = missing
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


def missing_meta(sessions_dir: str, name: str) -> MetaMissingError | None:
    """The error for ``sessions_dir/name`` if it holds ``history/`` but no meta.json, else None."""
    directory = os.path.join(sessions_dir, name)
    if os.path.exists(os.path.join(directory, META)):
        return None
    try:
        files = [n for n in os.listdir(os.path.join(directory, HISTORY)) if n.endswith(".json")]
    except (FileNotFoundError, NotADirectoryError):
        return None
    return MetaMissingError(name, f"{SESSIONS}/{name}", len(files))
