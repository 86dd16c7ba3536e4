"""Restart intensity: how many restarts a supervisor tolerates before giving up.

A child that crashes on every start would otherwise be restarted forever,
hiding the fault and burning the machine. OTP's rule: if more than
``max_restarts`` restarts happen within ``within`` seconds, the supervisor
stops its children and fails upward, letting a higher level (with a wider
view) decide. Default: 5 restarts in 10 s (SPEC §7).

A pure rule: no clock, no I/O; the caller passes ``now``. ``allows`` checks
without changing anything; ``record`` changes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class RestartIntensity:
    max_restarts: int = 5
    within: float = 10.0
    _times: deque[float] = field(default_factory=deque, repr=False)

    def __post_init__(self) -> None:
        if self.max_restarts < 0 or self.within <= 0:
            raise ValueError(
                f"restart intensity needs max_restarts >= 0 and within > 0, got "
                f"{self.max_restarts} in {self.within} s"
            )

    def recent(self, now: float) -> int:
        """Restarts inside the window that ends at ``now``."""
        # Times are recorded in order and pruned on record, so only a few
        # leading ones can have left the window since: O(1) in practice.
        stale = 0
        for t in self._times:
            if now - t < self.within:
                break
            stale += 1
        return len(self._times) - stale

    def allows(self, now: float) -> bool:
        """Whether one more restart at ``now`` stays within the limit."""
        return self.recent(now) + 1 <= self.max_restarts

    def record(self, now: float) -> None:
        self._times.append(now)
        while self._times and now - self._times[0] >= self.within:
            self._times.popleft()

    def fresh(self) -> RestartIntensity:
        """The same limits with an empty history (for one more child)."""
        return RestartIntensity(self.max_restarts, self.within)
