"""The quarantine file: tolerant reading, durable replace, release by updated_at."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.workspace._quarantine import (
    QUARANTINE_PATH,
    QuarantineEntry,
    QuarantineProblem,
    is_quarantined,
    parse_quarantine,
    read_quarantine,
    render_quarantine,
    write_quarantine,
)
from store._durable import DurableFiles
from tests.faults import FaultyFiles, SimulatedCrash, count_steps

ENTRY = QuarantineEntry("s1", ("m1", "m2"), "WriterFailedError: boom", 5, 1755000000.5, 1755000000.25)

entries = st.builds(
    QuarantineEntry,
    st.text(min_size=1),
    st.tuples(st.text()).map(tuple) | st.lists(st.text(), max_size=4).map(tuple),
    st.text(),
    st.integers(min_value=0, max_value=2**62),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none() | st.floats(allow_nan=False, allow_infinity=False),
)


@given(st.lists(entries, max_size=5))
def test_render_parse_round_trip(items: list[QuarantineEntry]) -> None:
    parsed, problems = parse_quarantine(render_quarantine(items))
    assert parsed == items
    assert problems == []


def test_write_then_read(tmp_path: Path) -> None:
    write_quarantine(str(tmp_path), [ENTRY], DurableFiles())
    assert read_quarantine(str(tmp_path)) == [ENTRY]
    path = tmp_path / QUARANTINE_PATH
    assert path.read_bytes().count(b"\n") == 1
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_missing_file_has_no_entries(tmp_path: Path) -> None:
    assert read_quarantine(str(tmp_path)) == []


def test_bad_lines_are_skipped_and_reported(tmp_path: Path) -> None:
    good = render_quarantine([ENTRY])
    data = (
        b"{not json\n"
        + good
        + b"[1, 2]\n"
        + b'{"session": "s2", "node_ids": [1], "failures": 1, "at": 1}\n'
        + b'{"session": "s3", "node_ids": [], "failures": true, "at": 1}\n'
        + b'{"session": "s4", "node_ids": [], "failures": 1, "at": 1, "updated_at": "x"}\n'
        + b"\xff\xfe\n\n"
        + good
    )
    (tmp_path / ".scriptorium").mkdir()
    (tmp_path / QUARANTINE_PATH).write_bytes(data)
    problems: list[QuarantineProblem] = []
    assert read_quarantine(str(tmp_path), problems=problems) == [ENTRY, ENTRY]
    assert [p.line for p in problems] == [1, 3, 4, 5, 6, 7]
    assert "quarantine.jsonl:1" in str(problems[0])


def test_unknown_error_field_reads_as_empty_text() -> None:
    [entry], _ = parse_quarantine(b'{"session":"s","node_ids":["a"],"failures":2,"at":3}\n')
    assert entry == QuarantineEntry("s", ("a",), "", 2, 3.0, None)


def test_entry_blocks_only_while_updated_at_is_unchanged() -> None:
    other = QuarantineEntry("s2", ("x",), "e", 5, 1.0, 7.0)
    assert is_quarantined([other, ENTRY], "s1", ENTRY.updated_at) is ENTRY
    # An append bumps updated_at: the batch is released without touching the file.
    assert is_quarantined([other, ENTRY], "s1", 1755000000.2500002) is None
    assert is_quarantined([other, ENTRY], "s3", ENTRY.updated_at) is None
    unknown = QuarantineEntry("s5", ("x",), "e", 5, 1.0, None)
    assert is_quarantined([unknown], "s5", None) is unknown
    assert is_quarantined([unknown], "s5", 2.0) is None


def test_a_crash_at_any_step_leaves_old_or_new(tmp_path: Path) -> None:
    memory = str(tmp_path)
    write_quarantine(memory, [ENTRY], DurableFiles())
    new = [ENTRY, QuarantineEntry("s2", ("y",), "e", 5, 2.0, 3.0)]
    steps = count_steps(lambda files: write_quarantine(memory, new, files))
    assert steps > 0
    for k in range(steps):
        write_quarantine(memory, [ENTRY], DurableFiles())
        with pytest.raises(SimulatedCrash):
            write_quarantine(memory, new, FaultyFiles(crash_at=k))
        assert read_quarantine(memory) in ([ENTRY], new)
