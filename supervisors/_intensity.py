"""Restart intensity: how many restarts a supervisor tolerates before giving up.

A child that crashes on every start would otherwise be restarted forever,
hiding the fault and burning the machine. OTP's rule: if more than
``max_restarts`` restarts happen within ``within`` seconds, the supervisor
stops its children and fails upward, letting a higher level (with a wider
view) decide. Default: 5 restarts in 10 s (SPEC §7).

Two parts, as ``Backoff``/``BackoffStreak``: ``Intensity`` is the frozen
policy, validated once; ``RestartHistory`` is one child's (or one
supervisor's) mutable record of restart times, judged against a policy.

A pure rule: no clock, no I/O; the caller passes ``now``. ``allows`` checks
without changing anything; ``record`` changes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Intensity:
    """At most ``max_restarts`` restarts inside any window of ``within`` seconds."""

    max_restarts: int = 5
    within: float = 10.0

    def __post_init__(self) -> None:
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int):
            raise TypeError(f"max_restarts must be a whole number, got {self.max_restarts!r}")
        if self.max_restarts < 0 or not self.within > 0:
            raise ValueError(
                f"restart intensity needs max_restarts >= 0 and within > 0 seconds, got "
                f"{self.max_restarts} in {self.within} s; Intensity(0, ...) never restarts"
            )


@dataclass
class RestartHistory:
    """The restart times of one child (or of a whole supervisor), oldest first."""

    times: deque[float] = field(default_factory=deque, repr=False)

    def recent(self, policy: Intensity, now: float) -> int:
        """Restarts inside the window of ``policy`` that ends at ``now``."""
        # Times are recorded in order and pruned on record, so only a few
        # leading ones can have left the window since: O(1) in practice.
        stale = 0
        for t in self.times:
            if now - t < policy.within:
                break
            stale += 1
        return len(self.times) - stale

    def allows(self, policy: Intensity, now: float) -> bool:
        """Whether one more restart at ``now`` stays within ``policy``."""
        return self.recent(policy, now) + 1 <= policy.max_restarts

    def record(self, policy: Intensity, now: float) -> None:
        """Count a restart at ``now``; forget the ones outside ``policy``'s window."""
        times = self.times
        times.append(now)
        while times and now - times[0] >= policy.within:
            times.popleft()
