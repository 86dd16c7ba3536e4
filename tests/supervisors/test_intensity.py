"""The pure restart rules: intensity window and backoff, no event loop needed."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisors import Backoff, BackoffStreak, Intensity, RestartHistory


def test_five_restarts_in_ten_seconds_are_allowed_the_sixth_is_not() -> None:
    policy, history = Intensity(), RestartHistory()
    for t in (0.0, 1.0, 2.0, 3.0, 4.0):
        assert history.allows(policy, t)
        history.record(policy, t)
    assert not history.allows(policy, 5.0)
    assert history.recent(policy, 5.0) == 5


def test_allows_checks_without_changing_anything() -> None:
    policy, history = Intensity(max_restarts=1, within=10.0), RestartHistory()
    assert history.allows(policy, 0.0) and history.allows(policy, 0.0)
    history.record(policy, 0.0)
    assert not history.allows(policy, 9.99)
    assert history.allows(policy, 10.0)  # the first restart has left the window


def test_zero_restarts_allowed_means_the_first_crash_escalates() -> None:
    assert not RestartHistory().allows(Intensity(max_restarts=0), 0.0)


def test_invalid_limits_are_refused_with_the_values() -> None:
    with pytest.raises(ValueError, match="got 3 in 0 s"):
        Intensity(max_restarts=3, within=0)
    with pytest.raises(TypeError, match="whole number"):
        Intensity(max_restarts=2.5)  # type: ignore[arg-type]


@given(st.lists(st.floats(min_value=0, max_value=1000), max_size=40), st.integers(0, 6))
def test_intensity_matches_a_sliding_window_count(times: list[float], limit: int) -> None:
    policy, history = Intensity(max_restarts=limit, within=10.0), RestartHistory()
    accepted: list[float] = []
    for now in sorted(times):
        in_window = [t for t in accepted if now - t < 10.0]
        assert history.allows(policy, now) == (len(in_window) + 1 <= limit)
        if history.allows(policy, now):
            history.record(policy, now)
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
