"""The restart backoff: the pure rule, and as a supervisor applies it, measured on virtual time.

The rule is the one of docs/decisions.md ("Backoff defaults"): the first
restart after a quiet period is immediate, then 50 ms doubling to at most
5 s, each scaled by a jitter within ±25 %, and a streak ends after 10 s
without a restart. The expected waits below are written down from that
text, not computed with the implementation's formula.
"""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest

from actors import Actor, MailboxOptions, open_actor
from supervisors import Backoff, BackoffStreak, ChildSpec, Intensity, Supervisor, get_child

# The wait before each restart of a streak of crashes in quick succession.
STREAK = [0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
JITTER = 0.25
QUIET = 10.0


class Crasher(Actor[object]):
    """Crashes on "crash"; the times of its starts and crashes go to ``log``."""

    def __init__(self, log: dict[str, Any]) -> None:
        self.log = log

    async def on_start(self) -> None:
        self.log["starts"].append(anyio.current_time())
        self.log["started"].set()

    async def handle(self, message: Any) -> Any:
        if message == "crash":
            self.log["crashes"].append(anyio.current_time())
            raise RuntimeError("crashed on purpose")
        return message


async def waits_before_restarts(crashes: int, *, quiet_first: bool = False) -> list[float]:
    """Crash the one child ``crashes`` times in a row; the waits the supervisor put in."""
    log: dict[str, Any] = {"starts": [], "crashes": [], "started": anyio.Event()}
    spec = ChildSpec("c", lambda: Crasher(log), options=MailboxOptions(poison_threshold=1))
    sup_actor = Supervisor([spec], intensity=Intensity(100, 1000.0), backoff=Backoff(),
                           rng=random.Random(5))
    async with open_actor(sup_actor, name="sup") as sup:
        child = await get_child(sup, spec)
        await log["started"].wait()
        for _ in range(crashes):
            log["started"] = anyio.Event()
            await child.cast("crash")
            await log["started"].wait()  # the restart, however long the backoff
        if quiet_first:
            await anyio.sleep(QUIET)  # a quiet period: the next streak starts afresh
            for _ in range(2):
                log["started"] = anyio.Event()
                await child.cast("crash")
                await log["started"].wait()
    starts, crashed = log["starts"][1:], log["crashes"]
    return [start - crash for start, crash in zip(starts, crashed, strict=True)]


@pytest.mark.virtual_time
async def test_a_streak_waits_zero_then_50_ms_doubling_to_5_s_each_within_25_percent() -> None:
    waits = await waits_before_restarts(len(STREAK))
    assert waits[0] == 0.0  # the first restart after a quiet period is immediate
    for wait, written in zip(waits, STREAK, strict=True):
        assert written * (1 - JITTER) - 1e-9 <= wait <= written * (1 + JITTER) + 1e-9, (
            waits, STREAK)
    # The jitter is there: the waits are not the bare doubling.
    assert any(abs(wait - written) > 1e-6 for wait, written in zip(waits, STREAK, strict=True))


@pytest.mark.virtual_time
async def test_after_10_quiet_seconds_the_next_restart_is_immediate_again() -> None:
    waits = await waits_before_restarts(4, quiet_first=True)
    assert waits[4] == 0.0
    assert STREAK[1] * (1 - JITTER) - 1e-9 <= waits[5] <= STREAK[1] * (1 + JITTER) + 1e-9, waits


# -- the pure rule (BackoffStreak), no event loop -------------------------------


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


def test_the_same_seed_gives_the_same_delays() -> None:
    policy = Backoff()

    def run(seed: int) -> list[float]:
        streak, rng = BackoffStreak(), random.Random(seed)
        return [streak.next_delay(policy, float(i), rng) for i in range(6)]

    assert run(7) == run(7)
