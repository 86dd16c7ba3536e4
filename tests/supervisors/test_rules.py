"""The pure restart rules: intensity window and backoff, no event loop needed."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisors import Backoff, BackoffStreak, RestartIntensity


def test_five_restarts_in_ten_seconds_are_allowed_the_sixth_is_not() -> None:
    rule = RestartIntensity()
    for t in (0.0, 1.0, 2.0, 3.0, 4.0):
        assert rule.allows(t)
        rule.record(t)
    assert not rule.allows(5.0)
    assert rule.recent(5.0) == 5


def test_allows_checks_without_changing_anything() -> None:
    rule = RestartIntensity(max_restarts=1, within=10.0)
    assert rule.allows(0.0) and rule.allows(0.0)
    rule.record(0.0)
    assert not rule.allows(9.99)
    assert rule.allows(10.0)  # the first restart has left the window


def test_zero_restarts_allowed_means_the_first_crash_escalates() -> None:
    assert not RestartIntensity(max_restarts=0).allows(0.0)


def test_invalid_limits_are_refused_with_the_values() -> None:
    with pytest.raises(ValueError, match="got 3 in 0 s"):
        RestartIntensity(max_restarts=3, within=0)


@given(st.lists(st.floats(min_value=0, max_value=1000), max_size=40), st.integers(0, 6))
def test_intensity_matches_a_sliding_window_count(times: list[float], limit: int) -> None:
    rule = RestartIntensity(max_restarts=limit, within=10.0)
    accepted: list[float] = []
    for now in sorted(times):
        in_window = [t for t in accepted if now - t < 10.0]
        assert rule.allows(now) == (len(in_window) + 1 <= limit)
        if rule.allows(now):
            rule.record(now)
            accepted.append(now)


def test_first_restart_is_immediate_then_exponential_then_capped() -> None:
    policy = Backoff(initial=0.1, factor=2.0, maximum=0.5, jitter=0.0, reset_after=10.0)
    streak = BackoffStreak()
    rng = random.Random(1)
    delays = [streak.next_delay(policy, now, rng) for now in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)]
    assert delays == [0.0, 0.1, 0.2, 0.4, 0.5, 0.5]


def test_a_streak_of_thousands_of_restarts_stays_at_the_cap() -> None:
    policy = Backoff(initial=0.1, factor=2.0, maximum=5.0, jitter=0.0)
    streak = BackoffStreak()
    rng = random.Random(1)
    delays = [streak.next_delay(policy, i * 1e-3, rng) for i in range(5000)]
    assert delays[-1] == 5.0


def test_a_quiet_period_resets_the_streak() -> None:
    policy = Backoff(initial=1.0, jitter=0.0, reset_after=30.0)
    streak = BackoffStreak()
    rng = random.Random(1)
    assert streak.next_delay(policy, 0.0, rng) == 0.0
    assert streak.next_delay(policy, 1.0, rng) == 1.0
    assert streak.next_delay(policy, 31.0, rng) == 0.0  # quiet for 30 s
    assert streak.next_delay(policy, 32.0, rng) == 1.0


# The jittered waits of a streak, as a supervisor applies them: tests/supervisors/test_backoff.py.


def test_the_same_seed_gives_the_same_delays() -> None:
    policy = Backoff()

    def run(seed: int) -> list[float]:
        streak, rng = BackoffStreak(), random.Random(seed)
        return [streak.next_delay(policy, float(i), rng) for i in range(6)]

    assert run(7) == run(7)
