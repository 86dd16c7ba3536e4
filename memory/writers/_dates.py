"""Relative dates in a turn, resolved against the turn's own day.

"I went to a support group yesterday" means nothing once the turn is a
paragraph in a topic file read months later: memory must say which day.
The extractive writer knows when each turn was said (its ``created_at``),
so it can write the day down. :func:`resolve_relative_dates` keeps the
turn's words and adds the absolute date after each relative expression, in
parentheses: "yesterday (7 May 2023)". The original words stay quotable
and the date is there for a reader and for search.

Pure and deterministic: ``today`` is passed in (the turn's date), nothing
reads a clock. Resolved, case-insensitive:

* ``today``/``tonight``/``this morning|afternoon|evening``, ``yesterday``,
  ``last night``, ``tomorrow``, ``the day before yesterday``, ``the day after
  tomorrow``: that day, "7 May 2023";
* ``last|this|next week`` (and ``this past week``, ``the past week``): "the
  week of <its Monday>";
* ``last|this|next weekend`` (``this past weekend``): "the weekend of <its
  Saturday>" (``this`` is the coming one, or the one under way; ``next`` the
  one after it);
* ``last|this|next month``, ``...year``: "June 2023", "2022";
* ``last|next|this|this coming|coming <weekday>`` (full names and the
  abbreviations ``mon``, ``tue(s)``, ``wed``, ``thu(r(s))``, ``fri``):
  that day; ``last Friday`` said on a Friday is a week before;
* ``<n> days|weeks|weekends|months|years ago`` and ``in <n> days|weeks|...``
  (``n`` a number or a number word; "a"/"an" only with ``ago``).

Left alone, on purpose: a bare weekday ("on Friday": past or future is the
verb's business), vague spans ("recently", "a few days ago"), seasons, and
"the last week of June" (a week of a named month, not a relative one).
Weeks start on Monday.
"""

from __future__ import annotations

import datetime
import re

__all__ = ["absolute_day", "resolve_relative_dates"]

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
            "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
            "a couple of": 2, "couple of": 2}
_WEEKDAYS = {"mon": 0, "tue": 1, "wed": 2, "thu": 3, "fri": 4, "sat": 5, "sun": 6}
_WEEKDAY = (r"(?:monday|mon|tuesday|tues|tue|wednesday|wed|thursday|thurs|thur|thu|friday|fri|"
            r"saturday|sunday)")
_COUNT = r"(?:\d{1,3}|a couple of|couple of|an|a|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(?:day|weekend|week|month|year)s?"
# One alternation, longest phrases first, so "the day before yesterday" is one
# expression and "last weekend" never reads as "last week". A possessive stays
# with its phrase: "yesterday's game" -> "yesterday's (7 May 2023) game".
_RELATIVE = re.compile(
    r"\b(?:"
    r"(?P<before>the day before yesterday)|(?P<after>the day after tomorrow)"
    r"|(?P<ago>(?P<ago_n>" + _COUNT + r") (?P<ago_unit>" + _UNIT + r") ago)"
    r"|(?P<ahead>in (?P<ahead_n>" + _COUNT.replace("|an|a|", "|") + r") (?P<ahead_unit>"
    + _UNIT + r"))"
    r"|(?P<span>(?<!the )(?P<which>this past|the past|this coming|last|this|next|coming) "
    r"(?P<what>weekend|week|month|year|" + _WEEKDAY + r")(?! of\b))"
    r"|(?P<yesterday>yesterday|last night)|(?P<tomorrow>tomorrow)"
    r"|(?P<today>today|tonight|this morning|this afternoon|this evening)"
    r")\b(?:'s|’s)?",
    re.IGNORECASE,
)


def absolute_day(day: datetime.date) -> str:
    """``7 May 2023``: the form dates take in memory (no locale, no leading zero)."""
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


def _month(year: int, month: int) -> str:
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    return f"{_MONTHS[month - 1]} {year}"


def _week_of(day: datetime.date) -> str:
    return "the week of " + absolute_day(day - datetime.timedelta(days=day.weekday()))


def _weekend_of(saturday: datetime.date) -> str:
    return "the weekend of " + absolute_day(saturday)


def _last_saturday(today: datetime.date) -> datetime.date:
    """The Saturday of the weekend before ``today``'s (on a weekend day, the one before it)."""
    back = (today.weekday() - 5) % 7
    if today.weekday() >= 5:
        back += 7
    return today - datetime.timedelta(days=back)


def _shift(today: datetime.date, count: int, unit: str) -> str:
    """The day, week, weekend, month or year ``count`` units away from ``today``."""
    unit = unit.lower().rstrip("s")
    if unit == "day":
        return absolute_day(today + datetime.timedelta(days=count))
    if unit == "week":
        return _week_of(today + datetime.timedelta(weeks=count))
    if unit == "weekend":
        if count < 0:
            return _weekend_of(_last_saturday(today) + datetime.timedelta(weeks=count + 1))
        ahead = (5 - today.weekday()) % 7 or 7
        return _weekend_of(today + datetime.timedelta(days=ahead, weeks=count - 1))
    if unit == "month":
        return _month(today.year, today.month + count)
    return str(today.year + count)


def _count(text: str) -> int:
    text = " ".join(text.lower().split())
    return int(text) if text.isdigit() else _NUMBERS[text]


# Every expression above contains one of these.
_CUES = ("day", "night", "tomorrow", "last", "next", "this", "past", "coming", "week", "month",
         "year")
_STEPS = {"last": -1, "this past": -1, "the past": -1, "this": 0, "next": 1, "coming": 1,
          "this coming": 1}


def _span(which: str, what: str, today: datetime.date) -> str:
    which, what = " ".join(which.lower().split()), what.lower()
    step = _STEPS[which]
    if what in ("week", "month", "year"):
        return _shift(today, step, what)
    if what == "weekend":
        if step < 0:
            return _shift(today, step, "weekend")
        # this (coming) weekend: the coming one, or the one under way; next: the one after
        step = 0 if which.endswith("coming") else step
        ahead = (5 - today.weekday()) % 7 if today.weekday() < 6 else -1
        return _weekend_of(today + datetime.timedelta(days=ahead + 7 * step))
    weekday = _WEEKDAYS[what[:3]]
    if step < 0:
        back = (today.weekday() - weekday) % 7 or 7
        return absolute_day(today - datetime.timedelta(days=back))
    if step > 0 or which == "this coming":
        ahead = (weekday - today.weekday()) % 7 or 7
        return absolute_day(today + datetime.timedelta(days=ahead))
    # "this Friday": the Friday of this Monday-to-Sunday week
    return absolute_day(today + datetime.timedelta(days=weekday - today.weekday()))


def _resolve(match: re.Match[str], today: datetime.date) -> str:
    groups = match.groupdict()
    if groups["before"]:
        return absolute_day(today - datetime.timedelta(days=2))
    if groups["after"]:
        return absolute_day(today + datetime.timedelta(days=2))
    if groups["ago"]:
        return _shift(today, -_count(groups["ago_n"]), groups["ago_unit"])
    if groups["ahead"]:
        return _shift(today, _count(groups["ahead_n"]), groups["ahead_unit"])
    if groups["span"]:
        return _span(groups["which"], groups["what"], today)
    if groups["yesterday"]:
        return absolute_day(today - datetime.timedelta(days=1))
    if groups["tomorrow"]:
        return absolute_day(today + datetime.timedelta(days=1))
    return absolute_day(today)


def resolve_relative_dates(text: str, today: datetime.date) -> str:
    """``text`` with each relative date followed by its absolute date in parentheses.

    ``today`` is the day the text was said. Nothing else of ``text`` changes;
    text without a relative date is returned as it is.
    """
    lowered = text.lower()
    if not any(word in lowered for word in _CUES):
        return text  # most sentences: a substring test is far cheaper than the pattern
    return _RELATIVE.sub(lambda match: _annotated(match, today), text)


def _annotated(match: re.Match[str], today: datetime.date) -> str:
    try:
        return f"{match.group(0)} ({_resolve(match, today)})"
    except (OverflowError, ValueError):  # "in 900 years" near the end of the calendar
        return match.group(0)
