"""The query's pure parts: words, the escaped FTS5 expression, the times it names."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory._errors import EmptyQueryError
from memory.recall import MAX_QUERY_CHARS, fts_expression, parse_query, time_windows
from memory.recall._query import MAX_TERMS, query_terms


def at(year: int, month: int, day: int) -> float:
    return datetime(year, month, day, 12, tzinfo=UTC).timestamp()


def test_terms_are_the_distinct_content_words_in_order() -> None:
    assert query_terms("When did Caroline go to the LGBTQ support group, Caroline?") == (
        "caroline", "go", "lgbtq", "support", "group")
    assert query_terms("what is it") == ("what", "is", "it")  # only stop words: kept
    assert len(query_terms(" ".join(f"w{i}" for i in range(500)))) == MAX_TERMS
    with pytest.raises(EmptyQueryError):
        parse_query("?? -- **", as_of=0)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_a_valid_fts5_expression_or_an_empty_query(text: str) -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(a, tokenize='porter unicode61')")
    db.execute("INSERT INTO t VALUES('some words here')")
    try:
        parsed = parse_query(text, as_of=0)
    except EmptyQueryError:
        return
    db.execute("SELECT rowid FROM t WHERE t MATCH ?", (fts_expression(parsed.terms),)).fetchall()


def test_quotes_are_doubled_inside_the_quoted_words() -> None:
    assert fts_expression(('say"hi', "near")) == '"say""hi" OR "near"'


def test_a_long_query_is_cut_first() -> None:
    parsed = parse_query("tea " * 50_000, as_of=0)
    assert len(parsed.text) == MAX_QUERY_CHARS and parsed.terms == ("tea",)


def test_absolute_times() -> None:
    [day] = time_windows("what happened on 8 May, 2023?", as_of=0)
    assert day.start <= at(2023, 5, 8) < day.end and not day.overlaps(at(2023, 5, 12), at(2023, 5, 13))
    [month] = time_windows("in July 2023", as_of=0)
    assert month.overlaps(at(2023, 7, 1), at(2023, 7, 1) + 1)
    assert not month.overlaps(at(2023, 8, 2), at(2023, 8, 2) + 1)
    [iso] = time_windows("2023-07-20", as_of=0)
    assert iso.start <= at(2023, 7, 20) < iso.end
    [year] = time_windows("back in 2022", as_of=0)
    assert year.overlaps(at(2022, 12, 30), at(2022, 12, 30) + 1)
    assert not year.overlaps(at(2023, 1, 2), at(2023, 1, 2) + 1)


def test_relative_times_are_seen_from_as_of() -> None:
    now = at(2023, 7, 23)
    [week] = time_windows("what did we do last week", as_of=now)
    assert week.overlaps(at(2023, 7, 17), at(2023, 7, 17) + 1)
    assert not week.overlaps(at(2023, 5, 1), at(2023, 5, 1) + 1)
    [ago] = time_windows("3 days ago", as_of=now)
    assert ago.overlaps(at(2023, 7, 20), at(2023, 7, 20) + 1)
    [yesterday] = time_windows("yesterday", as_of=now)
    assert yesterday.overlaps(at(2023, 7, 22), at(2023, 7, 22) + 1)
    [may] = time_windows("in May", as_of=now)  # the latest May not after as_of
    assert may.overlaps(at(2023, 5, 15), at(2023, 5, 15) + 1)
    [december] = time_windows("in December", as_of=now)
    assert december.overlaps(at(2022, 12, 15), at(2022, 12, 15) + 1)


def test_a_query_reads_every_relative_time_the_writer_resolves() -> None:
    now = at(2023, 7, 23)  # a Sunday
    [friday] = time_windows("what did she do last Friday", as_of=now)
    assert friday.overlaps(at(2023, 7, 21), at(2023, 7, 21) + 1)
    assert not friday.overlaps(at(2023, 7, 14), at(2023, 7, 14) + 1)
    [before] = time_windows("the day before yesterday", as_of=now)
    assert before.overlaps(at(2023, 7, 21), at(2023, 7, 21) + 1)
    assert not before.overlaps(at(2023, 7, 18), at(2023, 7, 18) + 1)
    [weekends] = time_windows("two weekends ago", as_of=now)
    assert weekends.overlaps(at(2023, 7, 8), at(2023, 7, 8) + 1)
    assert not weekends.overlaps(at(2023, 7, 22), at(2023, 7, 22) + 1)
    [month] = time_windows("next month", as_of=now)
    assert month.overlaps(at(2023, 8, 15), at(2023, 8, 15) + 1)
    assert not month.overlaps(at(2023, 7, 10), at(2023, 7, 10) + 1)
