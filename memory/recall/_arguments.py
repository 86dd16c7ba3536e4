"""The arguments of a recall a caller can get wrong, checked before anything is read.

``rt.recall(q, k=0)`` or ``since=float("nan")`` used to answer with no hit,
which reads as "memory holds nothing on that": a wrong argument must say so
instead (:class:`~memory._errors.RecallArgumentError`, naming it). Pure
functions; the CLI's flags have their own ranges on top.
"""

from __future__ import annotations

import math
from datetime import datetime

from memory._errors import RecallArgumentError

__all__ = ["check_context_arguments", "check_recall_arguments"]


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RecallArgumentError(name, value, "a positive integer")


def _time(name: str, value: object) -> float | None:
    """``value`` as seconds since the epoch (None: no bound), or the error naming it."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RecallArgumentError(
            name, value, "None, a datetime or a finite number of seconds since the epoch")
    return float(value)


def check_recall_arguments(k: object, since: object, until: object) -> None:
    """Raise :class:`RecallArgumentError` for a ``k`` or a time bound that asks for nothing."""
    _positive_int("k", k)
    start, end = _time("since", since), _time("until", until)
    if start is not None and end is not None and end < start:
        raise RecallArgumentError("until", until, f"at or after since ({since!r})")


def check_context_arguments(budget_tokens: object, as_of: object) -> None:
    """Raise :class:`RecallArgumentError` for a budget or an ``as_of`` that cannot be used."""
    _positive_int("budget_tokens", budget_tokens)
    _time("as_of", as_of)
