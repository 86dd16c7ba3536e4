"""The store's warnings (``logging.getLogger("store")``) as ``scriptorium run`` events.

The store reports what it drops without stopping (a damaged journal tail,
:mod:`store._damage`) on the standard logging tree, since it has no event
hook of its own. ``scriptorium run`` prints its events one way (text, or
JSON lines with ``--log-json``), so while it runs those warnings are routed
through the same printer instead of Python's bare last-resort line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["store_warnings_to"]

_FIELDS = ("file", "offset", "dropped_bytes")


class _EventHandler(logging.Handler):
    def __init__(self, log: Callable[[dict[str, Any]], None]) -> None:
        super().__init__(logging.WARNING)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        event: dict[str, Any] = {"event": getattr(record, "event", "store_warning"),
                                 "level": record.levelname.lower(),
                                 "message": record.getMessage()}
        event.update({key: getattr(record, key) for key in _FIELDS if hasattr(record, key)})
        self.log(event)


@contextmanager
def store_warnings_to(log: Callable[[dict[str, Any]], None]) -> Iterator[None]:
    """Within the block, each warning of the ``store`` logger is one ``log(event)`` call."""
    logger = logging.getLogger("store")
    handler = _EventHandler(log)
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
