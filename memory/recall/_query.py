"""What a recall query asks for: its words, the FTS5 expression, the times it names.

A query is whatever a person or a model typed, so nothing in it may reach
FTS5's query syntax: every word becomes a quoted string (``"it's"`` with the
quote doubled), operators (``AND``, ``NEAR``, ``*``, ``:``, ``^``) are just
words, and the expression is an ``OR`` of the distinct content words, so
BM25 ranks by how many (and how rare) of them a unit holds. A query is cut to
:data:`MAX_QUERY_CHARS` and :data:`MAX_TERMS` words before anything else
looks at it, so a 100 KB query costs what a short one does.

Times: a query naming a date, a month, a year or a relative time ("last
week", "yesterday", "3 days ago") favours units from then. Relative times are
resolved against ``as_of`` (seconds since the epoch) by the same rules the
writer resolves a turn's with (:mod:`memory.ledger._dates`), absolute ones in
UTC.
Every function here is pure.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from memory._errors import EmptyQueryError
from memory.ledger import RelativeDate, relative_dates

__all__ = [
    "MAX_QUERY_CHARS",
    "MAX_TERMS",
    "STOP_WORDS",
    "ParsedQuery",
    "TimeWindow",
    "fts_expression",
    "parse_query",
    "query_terms",
    "time_windows",
]

MAX_QUERY_CHARS = 4096
MAX_TERMS = 32

STOP_WORDS = frozenset(
    ["a", "an", "the", "of", "in", "on", "at", "to", "for", "and", "or", "is", "was", "were", "be", "been", "being", "by", "with", "from", "as", "that", "this", "it", "its", "i", "me", "my", "we", "our", "you", "your", "he", "him", "his", "she", "her", "they", "them", "their", "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "do", "does", "did", "done", "doing", "have", "has", "had", "having", "not", "no", "nor", "so", "than", "too", "very", "can", "could", "will", "would", "shall", "should", "may", "might", "must", "am", "are", "there", "here", "then", "also", "just", "about", "into", "over", "under", "again", "further", "once", "any", "all", "both", "each", "few", "more", "most", "other", "some", "such", "only", "own", "same", "s", "t", "don", "ve", "ll", "re", "d", "m", "o", "y", "ever"]
)

# Unicode letters and digits, with inner apostrophes ("didn't" is one word).
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")

_MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_name) if name}
_MONTHS.update(
    {name.lower(): number for number, name in enumerate(calendar.month_abbr) if name}
)
_MONTHS["sept"] = 9
_MONTH = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_ISO_MONTH = re.compile(r"\b(\d{4})-(\d{2})\b(?!-)")
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH},?\s+(\d{{4}})\b", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.IGNORECASE)
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b", re.IGNORECASE)
_MONTH_ALONE = re.compile(rf"\b(?:in|during|since|last|this|of)\s+{_MONTH}\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(19\d{2}|20\d{2})\b")
_DAY = 86400.0


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """``[start, end)`` in seconds since the epoch."""

    start: float
    end: float

    def overlaps(self, start: float, end: float) -> bool:
        return start < self.end and end > self.start


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """The bounded query: its content words (lower case, in order, distinct) and times."""

    text: str
    terms: tuple[str, ...]
    windows: tuple[TimeWindow, ...]


def query_terms(text: str) -> tuple[str, ...]:
    """Distinct content words of ``text`` (lower case), at most :data:`MAX_TERMS`.

    Stop words are dropped unless nothing else is left (a query of only
    stop words still searches for them).
    """
    words = [w.lower().replace("’", "'") for w in _WORD.findall(text[:MAX_QUERY_CHARS])]
    content = [w for w in words if w not in STOP_WORDS and w.split("'")[0] not in STOP_WORDS]
    return tuple(dict.fromkeys(content or words))[:MAX_TERMS]


def fts_expression(terms: tuple[str, ...]) -> str:
    """An FTS5 MATCH expression that is an OR of ``terms``, each a quoted string."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def parse_query(text: str, *, as_of: float) -> ParsedQuery:
    """Bound and parse ``text``; :class:`EmptyQueryError` if it holds no word at all."""
    if not isinstance(text, str):
        raise EmptyQueryError(f"a query is text, not {type(text).__name__}")
    bounded = text[:MAX_QUERY_CHARS]
    terms = query_terms(bounded)
    if not terms:
        raise EmptyQueryError("the query holds no word to search for; give a few words")
    return ParsedQuery(bounded, terms, time_windows(bounded, as_of=as_of))


def _utc(year: int, month: int = 1, day: int = 1) -> float:
    return datetime(year, month, day, tzinfo=UTC).timestamp()


def _month_window(year: int, month: int) -> TimeWindow:
    following = (year + 1, 1) if month == 12 else (year, month + 1)
    return TimeWindow(_utc(year, month), _utc(*following))


def _day_window(year: int, month: int, day: int) -> TimeWindow | None:
    try:
        start = _utc(year, month, day)
    except ValueError:
        return None
    return TimeWindow(start, start + _DAY)


def _relative_window(relative: RelativeDate, as_of: float) -> TimeWindow:
    """The window of a relative time of a query asked at ``as_of``.

    The span the writer would write down (:func:`memory.ledger.relative_dates`,
    the day of ``as_of`` in UTC), widened by a day either side as a named day
    is; and a past span named as the one before ("last week", "this past
    month") reaches on to ``as_of``: asked on a Sunday, "last week" often
    means the seven days just gone, and a favour is cheaper to give too
    widely than to miss.
    """
    start, end = relative.span.seconds()
    start, end = start - _DAY, end + _DAY
    if relative.step < 0 and not relative.counted and relative.span.unit != "day":
        end = max(end, as_of + _DAY)
    return TimeWindow(start, end)


def time_windows(text: str, *, as_of: float) -> tuple[TimeWindow, ...]:
    """Every time ``text`` names, as windows; relative ones against ``as_of``.

    A day is widened by a day either side (a conversation at midnight, a
    zone away); a month or a year is taken whole. Relative times are the
    spans :func:`memory.ledger.relative_dates` resolves (:func:`_relative_window`).
    """
    text = text[:MAX_QUERY_CHARS]
    found: list[TimeWindow] = []
    taken: list[tuple[int, int]] = []

    def free(match: re.Match[str] | RelativeDate) -> bool:
        span = match.span() if isinstance(match, re.Match) else (match.start, match.end)
        if any(span[0] < end and span[1] > start for start, end in taken):
            return False
        taken.append(span)
        return True

    def day(year: int, month: int, number: int) -> None:
        window = _day_window(year, month, number)
        if window is not None:
            found.append(TimeWindow(window.start - _DAY, window.end + _DAY))

    for match in _ISO_DATE.finditer(text):
        if free(match) and 1 <= int(match.group(2)) <= 12:
            day(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    for match in _DAY_MONTH_YEAR.finditer(text):
        if free(match):
            day(int(match.group(3)), _MONTHS[match.group(2).lower()], int(match.group(1)))
    for match in _MONTH_DAY_YEAR.finditer(text):
        if free(match):
            day(int(match.group(3)), _MONTHS[match.group(1).lower()], int(match.group(2)))
    for match in _ISO_MONTH.finditer(text):
        if free(match) and 1 <= int(match.group(2)) <= 12:
            found.append(_month_window(int(match.group(1)), int(match.group(2))))
    for match in _MONTH_YEAR.finditer(text):
        if free(match):
            found.append(_month_window(int(match.group(2)), _MONTHS[match.group(1).lower()]))
    moment = datetime.fromtimestamp(as_of, UTC)
    for match in _MONTH_ALONE.finditer(text):
        if free(match):
            month = _MONTHS[match.group(1).lower()]
            # The latest such month not after as_of.
            year = moment.year if month <= moment.month else moment.year - 1
            found.append(_month_window(year, month))
    for match in _YEAR.finditer(text):
        if free(match):
            year = int(match.group(1))
            found.append(TimeWindow(_utc(year), _utc(year + 1)))
    for relative in relative_dates(text, moment.date()):
        if free(relative):
            found.append(_relative_window(relative, as_of))
    return tuple(found)
