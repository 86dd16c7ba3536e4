"""Relative dates ("yesterday", "last week", "two months ago") as spans of days.

A turn that says "last week" means nothing once it is read months later,
and a query that says "last week" means nothing without the moment it was
asked: both the writer (which writes the day down next to the words) and
recall (which favours the turns of the time a query names, and shows a
quoted turn's dates resolved) need the same arithmetic. This module is that
arithmetic, once: :func:`relative_dates` finds each relative expression in
a text and resolves it against ``today`` (the day the text was said) to a
:class:`DaySpan`; :meth:`DaySpan.describe` writes the span the way memory
writes dates ("7 May 2023", "the week of 29 May 2023", "June 2023");
:func:`resolve_relative_dates` is the writer's rendering (each expression
followed by its span in parentheses).

Pure and deterministic: ``today`` is passed in, nothing reads a clock.
Found, case-insensitive:

* ``today``/``tonight``/``this morning|afternoon|evening``, ``yesterday``,
  ``last night``, ``tomorrow``, ``the day before yesterday``, ``the day after
  tomorrow``: that day;
* ``last|this|next week`` (and ``this past week``, ``the past week``): the
  Monday-to-Sunday week;
* ``last|this|next weekend`` (``this past weekend``): its Saturday and
  Sunday (``this`` is the coming one, or the one under way; ``next`` the
  one after it);
* ``last|this|next month``, ``...year``: the calendar month or year;
* ``last|next|this|this coming|coming <weekday>`` (full names and the
  abbreviations ``mon``, ``tue(s)``, ``wed``, ``thu(r(s))``, ``fri``):
  that day; ``last Friday`` said on a Friday is a week before;
* ``<n> days|weeks|weekends|months|years ago`` and ``in <n> days|weeks|...``
  (``n`` a number or a number word; "a"/"an" only with ``ago``): the day,
  week, weekend, month or year that far away.

Left alone, on purpose: a bare weekday ("on Friday": past or future is the
verb's business), vague spans ("recently", "a few days ago"), seasons, and
"the last week of June" (a week of a named month, not a relative one).
Weeks start on Monday; a span past the end of the calendar is not found.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "DaySpan",
    "RelativeDate",
    "absolute_day",
    "annotate_relative_dates",
    "describe_from",
    "relative_dates",
    "resolve_relative_dates",
]

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
# Every expression above contains one of these: most sentences contain none,
# and a substring test is far cheaper than the pattern.
_CUES = ("day", "night", "tomorrow", "last", "next", "this", "past", "coming", "week", "month",
         "year")
_STEPS = {"last": -1, "this past": -1, "the past": -1, "this": 0, "next": 1, "coming": 1,
          "this coming": 1}
_ONE_DAY = datetime.timedelta(days=1)


def absolute_day(day: datetime.date) -> str:
    """``7 May 2023``: the form dates take in memory (no locale, no leading zero)."""
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


@dataclass(frozen=True, slots=True)
class DaySpan:
    """The days ``first`` to ``last`` (both included); ``unit`` says what span it is.

    ``unit`` is ``"day"``, ``"week"`` (Monday to Sunday), ``"weekend"``
    (Saturday and Sunday), ``"month"`` or ``"year"`` (calendar ones).
    """

    first: datetime.date
    last: datetime.date
    unit: str

    def describe(self) -> str:
        """The span as memory writes it: ``7 May 2023``, ``the week of 29 May 2023``, ..."""
        if self.unit == "week":
            return "the week of " + absolute_day(self.first)
        if self.unit == "weekend":
            return "the weekend of " + absolute_day(self.first)
        if self.unit == "month":
            return f"{_MONTHS[self.first.month - 1]} {self.first.year}"
        if self.unit == "year":
            return str(self.first.year)
        return absolute_day(self.first)

    def seconds(self) -> tuple[float, float]:
        """``[start, end)`` in seconds since the epoch, the days taken in UTC."""
        start = datetime.datetime.combine(self.first, datetime.time(), datetime.UTC)
        end = datetime.datetime.combine(self.last, datetime.time(), datetime.UTC) + _ONE_DAY
        return start.timestamp(), end.timestamp()


@dataclass(frozen=True, slots=True)
class RelativeDate:
    """One relative expression of a text: where it is, what it says, the days it means.

    ``start``/``end`` index the text (``text[start:end]`` is ``words``, a
    possessive ``'s`` included). ``step`` is its direction from the day
    said: -1 a past span ("last week", "yesterday", "two days ago"), 0 the
    current one ("this week", "today"), 1 a coming one. ``counted`` says
    that it counts units away ("two days ago", "in three weeks") rather than
    naming the adjacent one ("last week"). ``weekday`` is the day a
    weekday expression names ("last Friday": 4; Monday is 0), else None.
    """

    start: int
    end: int
    words: str
    span: DaySpan
    step: int
    counted: bool = False
    weekday: int | None = None


def _day(day: datetime.date) -> DaySpan:
    return DaySpan(day, day, "day")


def _week_of(day: datetime.date) -> DaySpan:
    monday = day - datetime.timedelta(days=day.weekday())
    return DaySpan(monday, monday + datetime.timedelta(days=6), "week")


def _weekend_of(saturday: datetime.date) -> DaySpan:
    return DaySpan(saturday, saturday + _ONE_DAY, "weekend")


def _month(year: int, month: int) -> DaySpan:
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    following = datetime.date(year + 1, 1, 1) if month == 12 else datetime.date(
        year, month + 1, 1)
    return DaySpan(datetime.date(year, month, 1), following - _ONE_DAY, "month")


def _year(year: int) -> DaySpan:
    return DaySpan(datetime.date(year, 1, 1), datetime.date(year, 12, 31), "year")


def _last_saturday(today: datetime.date) -> datetime.date:
    """The Saturday of the weekend before ``today``'s (on a weekend day, the one before it)."""
    back = (today.weekday() - 5) % 7
    if today.weekday() >= 5:
        back += 7
    return today - datetime.timedelta(days=back)


def _shift(today: datetime.date, count: int, unit: str) -> DaySpan:
    """The day, week, weekend, month or year ``count`` units away from ``today``."""
    unit = unit.lower().rstrip("s")
    if unit == "day":
        return _day(today + datetime.timedelta(days=count))
    if unit == "week":
        return _week_of(today + datetime.timedelta(weeks=count))
    if unit == "weekend":
        if count < 0:
            return _weekend_of(_last_saturday(today) + datetime.timedelta(weeks=count + 1))
        ahead = (5 - today.weekday()) % 7 or 7
        return _weekend_of(today + datetime.timedelta(days=ahead, weeks=count - 1))
    if unit == "month":
        return _month(today.year, today.month + count)
    return _year(today.year + count)


def _count(text: str) -> int:
    text = " ".join(text.lower().split())
    return int(text) if text.isdigit() else _NUMBERS[text]


def _span(which: str, what: str, today: datetime.date) -> DaySpan:
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
        return _day(today - datetime.timedelta(days=back))
    if step > 0 or which == "this coming":
        ahead = (weekday - today.weekday()) % 7 or 7
        return _day(today + datetime.timedelta(days=ahead))
    # "this Friday": the Friday of this Monday-to-Sunday week
    return _day(today + datetime.timedelta(days=weekday - today.weekday()))


def _resolve(match: re.Match[str], today: datetime.date) -> tuple[DaySpan, int, bool]:
    """The span ``match`` means said on ``today``, its direction, whether it counts units."""
    groups = match.groupdict()
    if groups["before"]:
        return _day(today - 2 * _ONE_DAY), -1, False
    if groups["after"]:
        return _day(today + 2 * _ONE_DAY), 1, False
    if groups["ago"]:
        return _shift(today, -_count(groups["ago_n"]), groups["ago_unit"]), -1, True
    if groups["ahead"]:
        return _shift(today, _count(groups["ahead_n"]), groups["ahead_unit"]), 1, True
    if groups["span"]:
        return (_span(groups["which"], groups["what"], today),
                _STEPS[" ".join(groups["which"].lower().split())], False)
    if groups["yesterday"]:
        return _day(today - _ONE_DAY), -1, False
    if groups["tomorrow"]:
        return _day(today + _ONE_DAY), 1, False
    return _day(today), 0, False


def relative_dates(text: str, today: datetime.date) -> list[RelativeDate]:
    """Every relative expression of ``text``, in order, resolved as said on ``today``."""
    lowered = text.lower()
    if not any(word in lowered for word in _CUES):
        return []
    found: list[RelativeDate] = []
    for match in _RELATIVE.finditer(text):
        try:
            span, step, counted = _resolve(match, today)
        except (OverflowError, ValueError):  # "in 900 years" near the end of the calendar
            continue
        what = (match.group("what") or "").lower()
        weekday = None if what in ("", "week", "weekend", "month", "year") else _WEEKDAYS[
            what[:3]]
        found.append(RelativeDate(match.start(), match.end(), match.group(0), span, step,
                                  counted, weekday))
    return found


def annotate_relative_dates(
    text: str, today: datetime.date, render: Callable[[RelativeDate], str],
) -> str:
    """``text`` with ``render(date)`` in parentheses after each relative date of it.

    Nothing else of ``text`` changes; text without a relative date is
    returned as it is.
    """
    found = relative_dates(text, today)
    if not found:
        return text
    parts: list[str] = []
    at = 0
    for date in found:
        parts += [text[at:date.end], f" ({render(date)})"]
        at = date.end
    parts.append(text[at:])
    return "".join(parts)


_WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def describe_from(date: RelativeDate, said: datetime.date) -> str:
    """``date`` as seen from the day it was ``said``, in the speaker's own unit.

    A reader who sees a turn long after it was said needs the span, but the
    speaker chose its size: "last week" is a week, not a day of it, and
    "the week of 29 May 2023" makes the reader do the calendar to relate it
    to the turn. So a week or a weekend is related to the day said: "the
    week before 9 June 2023", "the weekend after 3 June 2023", "the week of
    9 June 2023" (this week), a counted one "two weekends before 17 July
    2023" (the speaker's count); a weekday is too, with its day: "the
    Friday before 15 July 2023, 14 July 2023". A single day (yesterday, two
    days ago), a month or a year is :meth:`DaySpan.describe`: "5 July 2023",
    "May 2023", "2022".
    """
    day = absolute_day(said)
    span = date.span
    side = "before" if span.last < said else "after" if span.first > said else "of"
    if date.weekday is not None:
        if side == "of":
            return span.describe()
        return f"the {_WEEKDAY_NAMES[date.weekday]} {side} {day}, {span.describe()}"
    if span.unit not in ("week", "weekend"):
        return span.describe()
    if date.counted and side != "of":
        words = date.words.split()
        count = " ".join(words[:-1] if date.step < 0 else words[1:])  # "two weeks (ago)"
        return f"{count} {side} {day}"
    return f"the {span.unit} {side} {day}"


def resolve_relative_dates(text: str, today: datetime.date) -> str:
    """The writer's form: each relative date followed by its span, ``yesterday (7 May 2023)``.

    ``today`` is the day the text was said.
    """
    return annotate_relative_dates(text, today, lambda date: date.span.describe())
