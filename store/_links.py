"""The symbolic-link rule of the state directory, in one place.

People move parts of ``<state>`` elsewhere and link them back (``topics/``
into a synced folder, above all). If reads and writes treat such a link
differently, memory is lost: a walk that does not follow ``topics ->`` sees
no topic, the next commit writes new files through the link over the old
ones, and the facts they held are gone. So there is one rule
(docs/decisions.md, "Symbolic links in the state directory"):

* a link to a **directory** is followed, by every read and every write
  alike, wherever it points (inside the state or not): the directory behind
  it is the one the user meant;
* a link in place of a **file** scriptorium replaces is never replaced:
  ``os.replace`` would put a regular file where the link was and leave its
  target stale, so :func:`refuse_file_link` raises instead (every durable
  write checks it, :mod:`store._durable`); reading through it is fine;
* a directory reached a second time (a loop, or two names for one
  directory) is refused: its files would count twice, and a session under
  two ids would be written twice.

:func:`walk_files` is the one walk over a tree of the state (the workspace
revision, the topic scans, the audit use it).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ._errors import UnsafeLinkError

__all__ = ["LinkedFiles", "refuse_file_link", "refuse_session_alias", "walk_files"]

LinkedFiles = set[str]
"""Relative paths of the files :func:`walk_files` reached through a file link."""


def walk_files(
    directory: str,
    *,
    skip: Callable[[str], bool] = lambda name: False,
    prefix: str = "",
    linked: LinkedFiles | None = None,
    shown: str | None = None,
) -> list[tuple[str, os.stat_result]]:
    """Every file under ``directory`` as ``(prefix + relative posix path, stat)``, unsorted.

    Directory links are followed; the stat of a linked file is its
    target's, and its path is added to ``linked``. ``skip(name)`` drops an
    entry (file or directory) by name. A missing ``directory`` is empty; a
    dangling link is no file. Raises :class:`UnsafeLinkError` (naming
    ``shown``, default ``directory``, plus the relative path) when a
    directory is reached twice: a loop, or two names for one directory.
    """
    found: list[tuple[str, os.stat_result]] = []
    try:
        top = os.stat(directory)
    except (FileNotFoundError, NotADirectoryError):
        return found
    seen = {(top.st_dev, top.st_ino): prefix or "."}
    stack = [(prefix, directory)]
    where = shown if shown is not None else directory
    while stack:
        relative, path = stack.pop()
        try:
            entries = list(os.scandir(path))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            name = entry.name
            if skip(name):
                continue
            try:
                is_dir = entry.is_dir()
                is_file = not is_dir and entry.is_file()
            except OSError:  # a loop of links (ELOOP) or one we may not follow
                is_dir = is_file = False
                if entry.is_symlink():
                    raise UnsafeLinkError(
                        f"{where}/{relative}{name}", "a symbolic link that cannot be resolved",
                        "Point the link at a real directory or file, or remove it.",
                    ) from None
            if is_dir:
                stat = entry.stat()
                identity = (stat.st_dev, stat.st_ino)
                first = seen.get(identity)
                if first is not None:
                    raise UnsafeLinkError(
                        f"{where}/{relative}{name}",
                        f"the same directory as {where}/{first} (a link loop or a second "
                        "name for one directory)",
                        "Remove one of the two links so each directory has one name.",
                    )
                seen[identity] = relative + name
                stack.append((relative + name + "/", entry.path))
            elif is_file:
                if entry.is_symlink() and linked is not None:
                    linked.add(relative + name)
                found.append((relative + name, entry.stat()))
    return found


def refuse_file_link(path: str) -> None:
    """Raise :class:`UnsafeLinkError` if ``path`` is a symbolic link (it is about to be replaced)."""
    if os.path.islink(path):
        raise UnsafeLinkError(
            path,
            "a symbolic link in place of a file scriptorium rewrites (replacing it would put "
            "a regular file there and leave the link's target stale)",
            "Move the file itself into place (or link its directory instead).",
        )


def refuse_session_alias(sessions_dir: str, session: str) -> None:
    """Raise :class:`UnsafeLinkError` if ``sessions_dir/session`` is a second name of another session.

    A linked session directory is followed like any directory link, but one
    session under two ids would have every turn archived and written twice,
    so a link that resolves to the directory of another session id of the
    same state is refused: a link to a sibling directory, or the later (by
    name) of two links to one directory elsewhere. Costs one ``lstat``
    unless the directory is a link.
    """
    path = os.path.join(sessions_dir, session)
    if not os.path.islink(path):
        return
    real = os.path.realpath(path)
    twins: list[str] = []
    if os.path.dirname(real) == os.path.realpath(sessions_dir):
        twins.append(os.path.basename(real))  # a link to a sibling: the common case
    else:
        try:
            names = sorted(os.listdir(sessions_dir))
        except FileNotFoundError:
            names = []
        twins.extend(  # an earlier link (by name) to the same directory: that one is the id
            name for name in names
            if name < session and os.path.islink(os.path.join(sessions_dir, name))
            and os.path.realpath(os.path.join(sessions_dir, name)) == real
        )
    for name in twins:
        if name != session:
            raise UnsafeLinkError(
                f"sessions/{session}",
                f"a link to the directory of session {name!r}: one session under two ids "
                "would have every turn written twice",
                f"Remove the link sessions/{session} (the session is {name!r}).",
            )
