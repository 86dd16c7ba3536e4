"""Relative dates resolved against the day a turn was said (memory/ledger/_dates.py)."""

from __future__ import annotations

import datetime

import pytest

from memory.ledger import (
    RelativeDate,
    absolute_day,
    annotate_relative_dates,
    describe_from,
    relative_dates,
    resolve_relative_dates,
)

MONDAY = datetime.date(2023, 5, 8)  # 8 May 2023 was a Monday
FRIDAY = datetime.date(2023, 6, 9)
SUNDAY = datetime.date(2023, 7, 16)

# (said on, text, what memory writes)
TABLE = [
    (MONDAY, "I went to a support group yesterday.",
     "I went to a support group yesterday (7 May 2023)."),
    (MONDAY, "Last night was amazing.", "Last night (7 May 2023) was amazing."),
    (MONDAY, "The party is tomorrow.", "The party is tomorrow (9 May 2023)."),
    (MONDAY, "I start today.", "I start today (8 May 2023)."),
    (MONDAY, "We met this morning.", "We met this morning (8 May 2023)."),
    (MONDAY, "It was the day before yesterday.", "It was the day before yesterday (6 May 2023)."),
    (MONDAY, "I lost it two days ago.", "I lost it two days ago (6 May 2023)."),
    (MONDAY, "I lost it 3 days ago.", "I lost it 3 days ago (5 May 2023)."),
    (MONDAY, "We moved a week ago.", "We moved a week ago (the week of 1 May 2023)."),
    (MONDAY, "We moved two months ago.", "We moved two months ago (March 2023)."),
    (MONDAY, "A friend made it ten years ago.", "A friend made it ten years ago (2013)."),
    (FRIDAY, "I gave a talk last week.", "I gave a talk last week (the week of 29 May 2023)."),
    (FRIDAY, "I was ill the past week.", "I was ill the past week (the week of 29 May 2023)."),
    (FRIDAY, "It is busy this week.", "It is busy this week (the week of 5 June 2023)."),
    (FRIDAY, "We fly next week.", "We fly next week (the week of 12 June 2023)."),
    (FRIDAY, "I ran a race last Saturday.", "I ran a race last Saturday (3 June 2023)."),
    (FRIDAY, "I met her last Friday.", "I met her last Friday (2 June 2023)."),
    (FRIDAY, "I joined a group last Tues.", "I joined a group last Tues (6 June 2023)."),
    (FRIDAY, "The exam is next Monday.", "The exam is next Monday (12 June 2023)."),
    (FRIDAY, "The exam is this coming Wednesday.",
     "The exam is this coming Wednesday (14 June 2023)."),
    (FRIDAY, "I called this Tuesday.", "I called this Tuesday (6 June 2023)."),
    (FRIDAY, "We went camping last weekend.",
     "We went camping last weekend (the weekend of 3 June 2023)."),
    (FRIDAY, "We go camping this weekend.",
     "We go camping this weekend (the weekend of 10 June 2023)."),
    (FRIDAY, "We go camping this coming weekend.",
     "We go camping this coming weekend (the weekend of 10 June 2023)."),
    (SUNDAY, "We rest this weekend.", "We rest this weekend (the weekend of 15 July 2023)."),
    (FRIDAY, "We go camping next weekend.",
     "We go camping next weekend (the weekend of 17 June 2023)."),
    (SUNDAY, "The trip this past weekend was wild.",
     "The trip this past weekend (the weekend of 8 July 2023) was wild."),
    (SUNDAY, "We camped two weekends ago.",
     "We camped two weekends ago (the weekend of 1 July 2023)."),
    (FRIDAY, "I got hurt last month.", "I got hurt last month (May 2023)."),
    (FRIDAY, "The show is next month.", "The show is next month (July 2023)."),
    (datetime.date(2023, 12, 20), "The show is next month.", "The show is next month (January 2024)."),
    (FRIDAY, "I went to the conference this month.",
     "I went to the conference this month (June 2023)."),
    (FRIDAY, "We had a blast last year.", "We had a blast last year (2022)."),
    (FRIDAY, "We marry next year.", "We marry next year (2024)."),
    (FRIDAY, "The move is in two weeks.", "The move is in two weeks (the week of 19 June 2023)."),
    (FRIDAY, "The results come in 3 days.", "The results come in 3 days (12 June 2023)."),
    (FRIDAY, "Yesterday's game was close.", "Yesterday's (8 June 2023) game was close."),
    (FRIDAY, "YESTERDAY I quit.", "YESTERDAY (8 June 2023) I quit."),
    # left alone: no relative date, a named month's week, a bare weekday, vague spans
    (FRIDAY, "I prefer tea.", "I prefer tea."),
    (FRIDAY, "The last week of June is free.", "The last week of June is free."),
    (FRIDAY, "I swim on Friday.", "I swim on Friday."),
    (FRIDAY, "I went there recently, a few days ago.", "I went there recently, a few days ago."),
    (FRIDAY, "I ran three times in a week.", "I ran three times in a week."),
    (FRIDAY, "Holidays are the best days.", "Holidays are the best days."),
]


@pytest.mark.parametrize(("today", "text", "expected"), TABLE)
def test_relative_dates_are_resolved_against_the_day_they_were_said(
    today: datetime.date, text: str, expected: str,
) -> None:
    assert resolve_relative_dates(text, today) == expected


def test_an_expression_past_the_end_of_the_calendar_is_left_as_it_is() -> None:
    assert resolve_relative_dates("It ships in 3 days.", datetime.date(9999, 12, 30)) == (
        "It ships in 3 days.")


def test_dates_are_written_without_locale() -> None:
    assert absolute_day(datetime.date(2024, 2, 29)) == "29 February 2024"


def test_each_expression_is_found_where_it_is_with_the_days_it_means() -> None:
    text = "I ran last Saturday, and two weeks ago; next month we race."
    found = relative_dates(text, FRIDAY)
    assert [text[d.start:d.end] for d in found] == ["last Saturday", "two weeks ago",
                                                     "next month"]
    saturday, weeks, month = (d.span for d in found)
    assert (saturday.first, saturday.last, saturday.unit) == (
        datetime.date(2023, 6, 3), datetime.date(2023, 6, 3), "day")
    assert (weeks.first, weeks.last, weeks.unit) == (
        datetime.date(2023, 5, 22), datetime.date(2023, 5, 28), "week")
    assert (month.first, month.last) == (datetime.date(2023, 7, 1), datetime.date(2023, 7, 31))
    assert [(d.step, d.counted) for d in found] == [(-1, False), (-1, True), (1, False)]


def test_a_span_is_its_days_in_utc_seconds() -> None:
    [weekend] = relative_dates("last weekend", FRIDAY)
    start, end = weekend.span.seconds()
    assert start == datetime.datetime(2023, 6, 3, tzinfo=datetime.UTC).timestamp()
    assert end == datetime.datetime(2023, 6, 5, tzinfo=datetime.UTC).timestamp()
    [year] = relative_dates("last year", FRIDAY)
    assert year.span.seconds()[1] == datetime.datetime(2023, 1, 1,
                                                       tzinfo=datetime.UTC).timestamp()


def test_another_rendering_is_placed_where_the_writers_is() -> None:
    def render(date: RelativeDate) -> str:
        return f"{date.span.unit} {date.step}"

    assert annotate_relative_dates("Yesterday's game, then last week.", FRIDAY, render) == (
        "Yesterday's (day -1) game, then last week (week -1).")
    assert annotate_relative_dates("No dates here.", FRIDAY, render) == "No dates here."


# (said on, text, the span as seen from the day said: what a context block shows)
FROM_THE_DAY_SAID = [
    (FRIDAY, "I gave a talk last week.", "the week before 9 June 2023"),
    (FRIDAY, "We went camping last weekend.", "the weekend before 9 June 2023"),
    (SUNDAY, "We camped two weekends ago.", "two weekends before 16 July 2023"),
    (FRIDAY, "The move is in two weeks.", "two weeks after 9 June 2023"),
    (FRIDAY, "We go camping this weekend.", "the weekend after 9 June 2023"),
    (SUNDAY, "We rest this weekend.", "the weekend of 16 July 2023"),
    (FRIDAY, "It is busy this week.", "the week of 9 June 2023"),
    (FRIDAY, "I met her last Friday.", "the Friday before 9 June 2023, 2 June 2023"),
    (FRIDAY, "The exam is next Monday.", "the Monday after 9 June 2023, 12 June 2023"),
    (FRIDAY, "I swam this Friday.", "9 June 2023"),
    (FRIDAY, "I went to a support group yesterday.", "8 June 2023"),
    (FRIDAY, "I lost it two days ago.", "7 June 2023"),
    (FRIDAY, "I got hurt last month.", "May 2023"),
    (FRIDAY, "We had a blast last year.", "2022"),
]


@pytest.mark.parametrize(("said", "text", "expected"), FROM_THE_DAY_SAID)
def test_a_span_seen_from_the_day_said_keeps_the_speakers_unit(
    said: datetime.date, text: str, expected: str,
) -> None:
    [date] = relative_dates(text, said)
    assert describe_from(date, said) == expected
