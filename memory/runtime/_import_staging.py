"""A new session's import built aside and moved into place whole (see :mod:`memory.runtime._import`).

Appending a file's turns one by one into a new session leaves, when the
disk fills or the process dies part way, a session that is half there: a
directory without ``meta.json`` (which ``session list`` reports as broken)
or a session holding the first turns only. So a new session is made and
filled under ``<state>/.scriptorium/import/<random>/`` by the store itself
(the same seam and clock as the runtime's), closed (its journal
checkpointed: every file synced), and then moved to ``<state>/sessions/<sid>``
by one rename (:meth:`store.DurableFiles.install_dir`): the session is there
whole, or not at all. The staging directory is removed either way (a crash
leaves it behind, where no listing looks).
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from store import DurableFiles, SessionCore, SessionOptions
from store.lowlevel import install_staged_session

__all__ = ["STAGING_DIR", "import_new_session"]

STAGING_DIR = os.path.join(".scriptorium", "import")


def import_new_session(
    state_dir: str, session: str, title: str,
    turns: Sequence[tuple[Mapping[str, Any], float | None]], head: str | None, *,
    files: DurableFiles, clock: Callable[[], float],
    progress: Callable[[int, int], None] | None = None, merged_heads: Sequence[str] = (),
) -> bool:
    """Create ``session`` holding ``turns`` (message, created_at) with ``head``; blocking.

    ``merged_heads``: node ids to name in meta ``merged_heads`` (SPEC §4).

    ``progress(done, total)`` is called after each turn staged (from this thread).

    False (nothing installed) when a session of that id appeared meanwhile.
    Any error leaves no trace of the session under ``<state>/sessions``.
    """
    staging = os.path.join(state_dir, STAGING_DIR, secrets.token_hex(8))
    try:
        core = SessionCore.create(staging, session, title=title,
                                  options=SessionOptions(files=files, clock=clock))
        try:
            for done, (message, created_at) in enumerate(turns, 1):
                core.append(message, created_at=created_at)
                if progress is not None:
                    progress(done, len(turns))
            if head is not None:
                core.set_head(head)
            if merged_heads:  # a sub-agent's branch: written completely at a boundary
                core.merge_heads(merged_heads)
        finally:
            core.close()
        try:
            install_staged_session(core, state_dir, files)
        except OSError as error:
            if error.errno in (errno.EEXIST, errno.ENOTEMPTY):
                return False
            raise
        return True
    finally:
        shutil.rmtree(staging, ignore_errors=True)
