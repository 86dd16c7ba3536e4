"""Damaged write-ahead files: said out loud, and found again by the audit.

A session journal (:mod:`store._journal`) and a runtime-log segment
(:mod:`store._runtime_log`) are read up to their first record that is short
or fails its checksum, and never past it: bytes after a tear are never
trusted. That is right after a crash (the record was torn while written,
never acknowledged) and the only safe choice after damage, but dropping
bytes unannounced hides damage. So every drop is logged as a warning on the
``store`` logger naming the file (``scriptorium run`` prints it, as JSON
with ``--log-json``), and :func:`find_damaged_logs` finds the same files
again without changing anything, for ``scriptorium memory audit``
(:mod:`store._damaged_logs`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["LOGGER", "DamagedLog", "warn_damaged"]

LOGGER = logging.getLogger("store")


@dataclass(frozen=True, slots=True)
class DamagedLog:
    """``file`` (relative to the state directory) holds ``dropped`` bytes past ``offset`` that are no record."""

    file: str
    offset: int
    dropped: int

    def __str__(self) -> str:
        return (f"{self.file}: the {self.dropped} byte(s) after byte {self.offset} are not a "
                "valid record (torn by a crash, or damaged) and were not replayed")

    def as_json(self) -> dict[str, object]:
        return {"file": self.file, "offset": self.offset, "dropped_bytes": self.dropped}


def warn_damaged(file: str, offset: int, size: int) -> None:
    """Log that ``file``'s bytes from ``offset`` to ``size`` are dropped (no-op if none are)."""
    if size > offset:
        damaged = DamagedLog(file, offset, size - offset)
        LOGGER.warning("%s", damaged, extra={"event": "log_damaged", **damaged.as_json()})
