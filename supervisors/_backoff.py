"""Restart backoff: exponential, with jitter, reset after a quiet period.

Restarting a crashed child instantly is right for a one-off fault, and
wrong when the fault is outside (a full disk, a dead service): hot restarts
then hammer it. So the first restart after a quiet period is immediate, and
each further restart in a streak waits longer (``initial * factor**k``, at
most ``maximum``), spread by jitter so that many children crashing together
do not come back together. A streak ends once ``reset_after`` seconds pass
without a restart.

A pure rule: the caller passes ``now`` and a ``random.Random``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    initial: float = 0.05
    factor: float = 2.0
    maximum: float = 5.0
    jitter: float = 0.25  # the delay is scaled by a uniform factor in [1 - jitter, 1 + jitter]
    reset_after: float = 10.0

    def __post_init__(self) -> None:
        if self.initial < 0 or self.factor < 1 or self.maximum < 0 or not 0 <= self.jitter <= 1:
            raise ValueError(
                f"invalid backoff {self!r}: need initial, maximum >= 0, factor >= 1, "
                "0 <= jitter <= 1"
            )

    def delay(self, attempt: int, rng: random.Random) -> float:
        """The wait before retry number ``attempt`` (1-based) of a streak, jittered."""
        try:
            grown = self.initial * self.factor ** (attempt - 1)
        except OverflowError:  # a very long streak: the cap applies anyway
            grown = self.maximum
        delay = min(self.maximum, grown)
        if self.jitter:
            delay *= 1.0 + self.jitter * (2.0 * rng.random() - 1.0)
        return delay

    @classmethod
    def none(cls) -> Backoff:
        """Restart immediately, always (OTP's behaviour)."""
        return cls(initial=0.0, maximum=0.0, jitter=0.0)


@dataclass
class BackoffStreak:
    """One child's restart streak under a ``Backoff`` policy."""

    streak: int = 0
    last: float | None = None

    def next_delay(self, policy: Backoff, now: float, rng: random.Random) -> float:
        """The wait before the restart happening at ``now``, and count it."""
        if self.last is None or now - self.last >= policy.reset_after:
            self.streak = 0
        self.last = now
        self.streak += 1
        if self.streak == 1:
            return 0.0
        return policy.delay(self.streak - 1, rng)
