"""Finding damaged session journals and runtime-log segments again, reading only (see :mod:`store._damage`)."""

from __future__ import annotations

import os

from ._damage import DamagedLog
from ._errors import JournalFileError
from ._journal import JOURNAL_NAME, read_frames, scan
from ._runtime_log import MAGIC, WAL_DIR
from ._sessions import SESSIONS

__all__ = ["find_damaged_logs"]


def find_damaged_logs(state_dir: str | os.PathLike[str]) -> list[DamagedLog]:
    """Every session journal and runtime-log segment under ``state_dir`` with bytes past its records.

    Reads only (a read-only state is audited too); a file that cannot be
    read is left to the readers that report it.
    """
    state = os.fspath(state_dir)
    found: list[DamagedLog] = []
    sessions = os.path.join(state, SESSIONS)
    for sid in sorted(_names(sessions)):
        rel = f"{SESSIONS}/{sid}/{JOURNAL_NAME}"
        data = _read(os.path.join(sessions, sid, JOURNAL_NAME))
        if data is None:
            continue
        try:
            end = scan(data, rel).valid_end
        except JournalFileError as error:  # a record not ours: the store reports it as such
            end = error.offset
        if end < len(data):
            found.append(DamagedLog(rel, end, len(data) - end))
    wal = os.path.join(state, WAL_DIR)
    for name in sorted(_names(wal)):
        if not name.endswith(".log"):
            continue
        data = _read(os.path.join(wal, name))
        if data is None:
            continue
        _, end = read_frames(data, (MAGIC,))
        if end < len(data):
            found.append(DamagedLog(f"{WAL_DIR}/{name}", end, len(data) - end))
    return found


def _names(directory: str) -> list[str]:
    try:
        return [name for name in os.listdir(directory) if not name.startswith(".")]
    except OSError:
        return []


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None
