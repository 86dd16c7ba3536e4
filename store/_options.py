"""SessionOptions: how the owner of a session touches the disk, as one value.

Every place that opens a session (``SessionCore.create`` and ``open``, a
``SessionActor``, the recovery of a dead runtime's log, memory's session
actor) takes the same five knobs. Passed one by one they were written out
five times in the store alone, each copy with its own defaults to keep in
step; one frozen value keeps the defaults and the checks in one place, and
a variant is ``dataclasses.replace(options, lock_timeout=0.0)``, checked again
(as ``actors.MailboxOptions``).

Contract: an invalid ``SessionOptions`` raises ``ValueError`` (``TypeError``
for a wrong type) when it is made, saying what to pass instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from ._durable import DurableFiles
from ._format import DEFAULT_MAX_NODE_BYTES
from ._lock import LOCK_TIMEOUT
from ._runtime_log import RuntimeLog

__all__ = ["SessionOptions"]


@dataclass(frozen=True)
class SessionOptions:
    """The options of one session's owner (see the module doc).

    - ``files``: the durable seam (``None``: a fresh ``DurableFiles`` per
      session; tests pass a fault-injecting double).
    - ``clock``: seconds since the epoch, for ``created_at``/``updated_at``.
    - ``max_node_bytes``: the largest node file written or read.
    - ``lock_timeout``: seconds a mutation waits for ``<sid>/.lock`` held by
      another process (``SessionLockTimeoutError``); ``None`` waits forever.
    - ``log``: a runtime log (``journal = "shared"``) every mutation goes
      through, instead of the session's own journal.
    """

    files: DurableFiles | None = None
    clock: Callable[[], float] = time.time
    max_node_bytes: int = DEFAULT_MAX_NODE_BYTES
    lock_timeout: float | None = LOCK_TIMEOUT
    log: RuntimeLog | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_node_bytes, bool) or not isinstance(self.max_node_bytes, int):
            raise TypeError(f"max_node_bytes must be a whole number, got {self.max_node_bytes!r}")
        if self.max_node_bytes < 1:
            raise ValueError(
                f"max_node_bytes must be at least 1, got {self.max_node_bytes}; a cap of "
                f"{DEFAULT_MAX_NODE_BYTES} is the default"
            )
        timeout = self.lock_timeout
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float))
        ):
            raise TypeError(f"lock_timeout must be seconds or None, got {timeout!r}")
        if timeout is not None and (math.isnan(timeout) or timeout < 0):
            raise ValueError(
                f"lock_timeout must be 0 or more seconds, or None to wait forever, got {timeout}"
            )
        if not callable(self.clock):
            raise TypeError(f"clock must be a callable returning seconds, got {self.clock!r}")
