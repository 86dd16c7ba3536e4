"""The workspace id: the value every marker of this memory workspace carries.

SPEC §1 and §5: after a batch is in memory, each of its nodes gets
``memory_written_scriptorium = <workspace id>``, and a branch owes everything
after its last node marked with *this* id. Two ids for one workspace would
split the ledger: turns marked under the loser's id would be owed again (and
written twice) from then on. So the id is created once, atomically, and every
first user, whether another thread or another process, must end up reading
the same value.

How: each contender writes its own candidate under a private temp name and
hard-links it into place with :meth:`DurableFiles.create_exclusive`; the link
fails for everyone but the first, and the losers read the winner's file, which
is complete the moment it is visible. The file is never rewritten afterwards:
a corrupt file raises :class:`CorruptWorkspaceIdError` instead of being replaced.

Format (as written by the reference agent): ``w-`` + 8 lowercase hex + LF.
"""

from __future__ import annotations

import os
import re
import secrets
import time

from memory._errors import CorruptWorkspaceIdError
from store import DurableFiles

__all__ = [
    "WORKSPACE_ID_PATH",
    "load_or_create_workspace_id",
    "new_workspace_id",
    "parse_workspace_id",
    "read_workspace_id",
]

# Relative to ``<state>/memory``.
WORKSPACE_ID_PATH = os.path.join(".scriptorium", "workspace-id")
_STATE_RELATIVE = "memory/.scriptorium/workspace-id"  # how error messages name it

_ID = re.compile(rb"w-[0-9a-f]{8}\n?")

# A filesystem without hard links falls back to O_EXCL + write in
# ``create_exclusive``, where a loser can see the winner's file before its
# bytes land. These bound how long a loser waits for them.
_EMPTY_READ_RETRIES = 200
_EMPTY_READ_PAUSE = 0.005


def new_workspace_id() -> str:
    """A fresh random id: ``w-`` + 8 lowercase hex (32 random bits)."""
    return "w-" + secrets.token_hex(4)


def parse_workspace_id(data: bytes) -> str | None:
    """The id in a workspace-id file's bytes, or None if they are not one."""
    if _ID.fullmatch(data) is None:
        return None
    return data.rstrip(b"\n").decode("ascii")


def read_workspace_id(memory_dir: str) -> str | None:
    """The existing id, or None if the file does not exist yet.

    Raises :class:`CorruptWorkspaceIdError` if it exists and holds anything else.
    """
    path = os.path.join(memory_dir, WORKSPACE_ID_PATH)
    data = _read(path)
    if data is None:
        return None
    for _ in range(_EMPTY_READ_RETRIES):
        if data:
            break
        time.sleep(_EMPTY_READ_PAUSE)  # only on the no-hard-link fallback (see above)
        data = _read(path) or b""
    value = parse_workspace_id(data)
    if value is None:
        raise CorruptWorkspaceIdError(_STATE_RELATIVE, data)
    return value


def load_or_create_workspace_id(memory_dir: str, files: DurableFiles) -> str:
    """The workspace's id, creating it durably on first use.

    Safe under concurrent first use by threads and processes: all callers
    return the same value, the one whose exclusive create won. One durable
    operation; run it in one thread hop (``run_durable``).
    """
    existing = read_workspace_id(memory_dir)
    if existing is not None:
        return existing
    path = os.path.join(memory_dir, WORKSPACE_ID_PATH)
    files.make_dirs(os.path.dirname(path))
    candidate = new_workspace_id()
    if files.create_exclusive(path, candidate.encode("ascii") + b"\n"):
        return candidate
    winner = read_workspace_id(memory_dir)
    if winner is None:  # the winner's file vanished between its link and our read
        raise CorruptWorkspaceIdError(_STATE_RELATIVE, b"")
    return winner


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(64)
    except FileNotFoundError:
        return None
