"""runtime.json and session-end.json: never block writing, keep what they do not know."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from memory.workspace._runtime_state import (
    RUNTIME_PATH,
    SESSION_END_PATH,
    RuntimeState,
    parse_runtime_state,
    parse_session_end,
    read_runtime_state,
    read_session_end,
    render_runtime_state,
    render_session_end,
    write_runtime_state,
    write_session_end,
)
from store._durable import DurableFiles
from tests.faults import FaultyFiles, SimulatedCrash, count_steps
from tests.memory._fixture import FIXTURE


def test_the_reference_file_round_trips_byte_for_byte() -> None:
    data = (FIXTURE / "memory" / RUNTIME_PATH).read_bytes()
    state = parse_runtime_state(data)
    assert state.creation_order == {"37913bbd": 0, "3216f7d0": 1}
    assert (state.local_batches, state.local_tokens, state.write_commits_since_global) == (1, 3, 0)
    assert state.last_global_at == "2026-11-30T02:40:05.376076+00:00"
    assert state.cursors is None and dict(state.extra) == {}
    assert render_runtime_state(state) == data


def test_unknown_keys_and_cursors_are_kept() -> None:
    document = {
        "local_batches": 4,
        "future_counter": {"nested": [1, 2]},
        "cursors": {"s1": {"message_id": "m9", "ordinal": 9}},
        "zeta": "é",
    }
    state = parse_runtime_state(json.dumps(document).encode())
    assert state.cursors == {"s1": {"message_id": "m9", "ordinal": 9}}
    again = json.loads(render_runtime_state(state))
    assert again["future_counter"] == {"nested": [1, 2]} and again["zeta"] == "é"
    assert again["cursors"] == document["cursors"] and again["local_batches"] == 4
    migrated = json.loads(render_runtime_state(state.without_cursors()))
    assert "cursors" not in migrated
    assert migrated["future_counter"] == {"nested": [1, 2]} and migrated["local_batches"] == 4


@pytest.mark.parametrize(
    "data", [None, b"", b"{", b"[]", b"null", b"\xff\xfe", b'"text"', b"{" * 5000]
)
def test_missing_or_corrupt_reads_as_the_default(data: bytes | None) -> None:
    assert parse_runtime_state(data) == RuntimeState()


def test_a_wrongly_typed_counter_reads_as_its_default_and_others_survive() -> None:
    state = parse_runtime_state(
        b'{"local_batches": "many", "local_tokens": -1, "write_commits_since_global": true,'
        b' "creation_order": {"a": "x"}, "last_global_at": 5, "local_batches_x": 1}'
    )
    assert state.local_batches == 0 and state.local_tokens == 0
    assert state.write_commits_since_global == 0 and dict(state.creation_order) == {}
    assert state.last_global_at is None and dict(state.extra) == {"local_batches_x": 1}


def test_a_corrupt_file_never_blocks_writing(tmp_path: Path) -> None:
    path = tmp_path / RUNTIME_PATH
    path.parent.mkdir()
    path.write_bytes(b"\x00garbage")
    state = read_runtime_state(str(tmp_path))
    assert state == RuntimeState()
    write_runtime_state(str(tmp_path), RuntimeState(local_batches=2), DurableFiles())
    assert read_runtime_state(str(tmp_path)).local_batches == 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_crash_at_every_step_of_a_write_leaves_old_or_new(tmp_path: Path) -> None:
    old, new = RuntimeState(local_batches=1), RuntimeState(local_batches=2)
    probe = tmp_path / "probe"
    write_runtime_state(str(probe), old, DurableFiles())
    total = count_steps(lambda fs: write_runtime_state(str(probe), new, fs))
    for k in range(total):
        root = tmp_path / f"k{k}"
        write_runtime_state(str(root), old, DurableFiles())
        with pytest.raises(SimulatedCrash):
            write_runtime_state(str(root), new, FaultyFiles(crash_at=k))
        assert read_runtime_state(str(root)) in (old, new)


def test_session_end_round_trips_exact_floats(tmp_path: Path) -> None:
    entries = {"s2": 1796006414.760596, "s1": 0.1 + 0.2, "s3": 17}
    write_session_end(str(tmp_path), entries, DurableFiles())
    assert read_session_end(str(tmp_path)) == entries
    data = (tmp_path / SESSION_END_PATH).read_bytes()
    assert data == render_session_end(entries) and data.endswith(b"}\n")
    assert list(json.loads(data)) == ["s1", "s2", "s3"]


@pytest.mark.parametrize("data", [None, b"", b"[1]", b"{bad", b"\xff"])
def test_session_end_corrupt_reads_empty(data: bytes | None) -> None:
    assert parse_session_end(data) == {}


def test_session_end_drops_only_the_bad_entries() -> None:
    assert parse_session_end(b'{"a": 1.5, "b": "x", "c": true, "d": NaN}') == {"a": 1.5}
