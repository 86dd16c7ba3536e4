"""The pure restart-intensity rule: at most N restarts in a sliding window, no event loop needed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisors import Intensity, RestartHistory


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
