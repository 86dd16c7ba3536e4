"""When to call an endpoint again, and when a budget lets a batch through.

A model endpoint fails in ways that pass: a 429 while a rate window refills,
a 5xx while a replica restarts, a reset connection. Those are retried with
exponential backoff and jitter, honouring ``Retry-After``; every other 4xx
is the request's fault and would fail again, so it never is. Token budgets
bound what one batch may spend (the batch fails past it: the same batch
would overspend again) and what a UTC day may spend (batches then wait for
the next day: neither failed nor marked).

Pure functions of ``now`` (wall seconds) and a uniform draw, so the rules
are tested on virtual time; the transport does the sleeping.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import random
from dataclasses import dataclass

from supervisors import Backoff

__all__ = [
    "DailySpend",
    "RetryPolicy",
    "batch_budget_allows",
    "daily_wait",
    "parse_retry_after",
    "retry_delay",
    "retryable_status",
    "utc_day",
]

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``attempts`` tries in all, the pauses between them growing as ``backoff`` says."""

    attempts: int = 5
    backoff: Backoff = Backoff(initial=0.5, factor=2.0, maximum=30.0, jitter=0.25)
    # A server asking for longer than this is treated as this (a job has a timeout).
    max_retry_after: float = 120.0


def retryable_status(status: int) -> bool:
    """429 and 5xx pass; any other 4xx is the request's fault."""
    return status == 429 or 500 <= status <= 599


def parse_retry_after(value: str | None, now: float) -> float | None:
    """``Retry-After`` as seconds from ``now``: delta-seconds or an HTTP date; None if absent or bad."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        seconds = when.timestamp() - now
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def retry_delay(policy: RetryPolicy, retry: int, retry_after: float | None,
                rng: random.Random) -> float:
    """The pause before retry number ``retry`` (1 = the first), jittered with ``rng``.

    A server's ``Retry-After`` is a floor (capped by ``max_retry_after``): coming
    back earlier only earns another 429.
    """
    delay = policy.backoff.delay(max(1, retry), rng)
    if retry_after is not None:
        delay = max(delay, min(retry_after, policy.max_retry_after))
    return max(0.0, delay)


def batch_budget_allows(limit: int | None, spent: int, next_call: int) -> bool:
    """Whether a batch that spent ``spent`` tokens may make a call estimated at ``next_call``."""
    return limit is None or spent + next_call <= limit


def utc_day(now: float) -> str:
    return datetime.datetime.fromtimestamp(now, tz=datetime.UTC).strftime("%Y-%m-%d")


@dataclass(frozen=True, slots=True)
class DailySpend:
    """Tokens spent on ``day`` (UTC ``YYYY-MM-DD``)."""

    day: str = ""
    tokens: int = 0

    def add(self, tokens: int, now: float) -> DailySpend:
        today = utc_day(now)
        return DailySpend(today, (self.tokens if self.day == today else 0) + tokens)


def daily_wait(limit: int | None, spend: DailySpend, now: float) -> float:
    """Seconds until a batch may call the model: 0, or until the next UTC midnight."""
    if limit is None or spend.day != utc_day(now) or spend.tokens < limit:
        return 0.0
    return DAY - (now % DAY)
