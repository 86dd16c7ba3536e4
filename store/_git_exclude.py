"""Scriptorium's private session files kept out of the reference agent's git history.

The reference agent keeps each session directory in a git repository of its
own and commits it after every turn with ``git add -A``. That would sweep
``.lock``, ``.claim``, ``.journal`` and a crash's leftover temp files into
its history. They are scriptorium's alone (a journal holds whole node
files), so before scriptorium creates any of them in a session directory
that is inside a git work tree (the directory itself or an ancestor up to
the state directory), it lists them in that repository's
``.git/info/exclude``: the one ignore file that is local to a clone, never
committed, and read by every git command. The agent's own files, its
``.gitignore`` and its history are left alone.

The lock, claim and journal patterns are anchored at the work tree, with
``*`` standing for the session directory when the repository holds several
sessions, so no file of the agent's with those names elsewhere is hidden;
temp files match at any depth (their suffix is scriptorium's alone).
"""

from __future__ import annotations

import os

from ._durable import TEMP_SUFFIX, DurableFiles
from ._index import CLAIM_NAME
from ._journal import JOURNAL_NAME
from ._lock import LOCK_NAME

__all__ = ["HEADER", "exclude_patterns", "find_git_dir", "keep_out_of_git"]

HEADER = "# scriptorium: its private session files (lock, claim, journal, temp files)"


def find_git_dir(session_dir: str, state_dir: str) -> tuple[str, str] | None:
    """``(work tree, git dir)`` of the repository holding ``session_dir``, up to ``state_dir``.

    A ``.git`` directory, or a ``.git`` file naming one (``gitdir: ...``,
    as linked work trees and submodules have). Repositories above the state
    directory are not the agent's session store and are not looked at.
    """
    directory = os.path.abspath(session_dir)
    top = os.path.abspath(state_dir)
    while True:
        dot_git = os.path.join(directory, ".git")
        if os.path.isdir(dot_git):
            return directory, dot_git
        if os.path.isfile(dot_git):
            try:
                with open(dot_git, encoding="utf-8") as handle:
                    line = handle.readline().strip()
            except (OSError, UnicodeDecodeError):
                return None
            if line.startswith("gitdir:"):
                return directory, os.path.join(directory, line[len("gitdir:"):].strip())
            return None
        if directory == top or os.path.dirname(directory) == directory:
            return None
        directory = os.path.dirname(directory)


def _common_dir(git_dir: str) -> str:
    """Where ``info/exclude`` lives: a linked work tree's git dir names it in ``commondir``."""
    try:
        with open(os.path.join(git_dir, "commondir"), encoding="utf-8") as handle:
            common = handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return git_dir
    return os.path.join(git_dir, common) if common else git_dir


def exclude_patterns(session_dir: str, work_tree: str) -> list[str]:
    """The ``info/exclude`` lines for the private files of ``session_dir`` in ``work_tree``."""
    relative = os.path.relpath(os.path.abspath(session_dir), work_tree)
    if relative == ".":
        prefix = "/"
    else:
        parts = relative.split(os.sep)
        prefix = "/" + "/".join([*parts[:-1], "*"]) + "/"
    return [
        f"{prefix}{LOCK_NAME}",
        f"{prefix}{CLAIM_NAME}",
        f"{prefix}{JOURNAL_NAME}",
        f".*{TEMP_SUFFIX}",  # the suffix is scriptorium's alone: at any depth
    ]


def keep_out_of_git(session_dir: str, state_dir: str, files: DurableFiles) -> bool:
    """Add the missing exclude lines when ``session_dir`` is in a git work tree; True if it is.

    Idempotent: lines already there are not added again. Blocking; the
    caller runs it in its worker-thread hop. An exclude file that cannot be
    read or written is left as it is: the cost is the agent's repository
    seeing our files, never a session that cannot be opened.
    """
    found = find_git_dir(session_dir, state_dir)
    if found is None:
        return False
    work_tree, git_dir = found
    path = os.path.join(_common_dir(git_dir), "info", "exclude")
    wanted = exclude_patterns(session_dir, work_tree)
    try:
        try:
            with open(path, "rb") as handle:
                current = handle.read().decode("utf-8", "replace")
        except FileNotFoundError:
            current = ""
        present = set(current.splitlines())
        missing = [line for line in wanted if line not in present]
        if not missing:
            return True
        lines = ([] if HEADER in present else [HEADER]) + missing
        text = current + ("" if not current or current.endswith("\n") else "\n")
        files.make_dirs(os.path.dirname(path))
        files.write_atomic(path, (text + "\n".join(lines) + "\n").encode("utf-8"))
    except OSError:
        pass  # see the docstring: a hint for the agent's repository, not our state
    return True
