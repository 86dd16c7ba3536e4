"""Complete lines of a log being written: a half line waits, a bad line names its number."""

from __future__ import annotations

import pytest

from memory.importers import read_lines
from memory.runtime import ImportLineError


def test_blank_lines_are_skipped_and_numbers_count_every_line() -> None:
    log = read_lines(b'\xef\xbb\xbf{"a": 1}\n\n{"b": 2}\n', "f.jsonl")
    assert log.records == [(1, {"a": 1}), (3, {"b": 2})] and not log.waiting


def test_a_half_written_last_line_waits_and_a_whole_one_without_newline_is_read() -> None:
    half = read_lines(b'{"a": 1}\n{"b": ', "f.jsonl")
    assert half.records == [(1, {"a": 1})] and half.waiting
    whole = read_lines(b'{"a": 1}\n{"b": 2}', "f.jsonl")
    assert whole.records == [(1, {"a": 1}), (2, {"b": 2})] and not whole.waiting


@pytest.mark.parametrize(("data", "problem"), [
    (b'{"a": 1}\n{oops\n{"c": 3}\n', "f.jsonl:2: not JSON"),
    (b'{"a": 1}\n[1, 2]\n', "f.jsonl:2: not a JSON object"),
])
def test_a_complete_bad_line_is_an_error_naming_file_and_line(data: bytes, problem: str) -> None:
    with pytest.raises(ImportLineError) as caught:
        read_lines(data, "f.jsonl")
    assert str(caught.value).startswith(problem)
    assert "nothing of the file was imported" in str(caught.value)
