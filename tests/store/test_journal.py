"""The journal's framing, its replay by whoever takes the lock next, and the splice encoder."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store._errors import CorruptFileError
from store._format import decode_node, encode_node, encode_with_metadata
from store._journal import decode_journal, encode_journal, find_journals
from store._session import SessionCore
from tests.store.conftest import DEMO_HISTORY

ENTRIES = [("history/0001-l-a1.json", b'{"x": "a\nb"}'), ("meta.json", b"")]


def test_framing_round_trips() -> None:
    assert decode_journal(encode_journal(ENTRIES), "j") == ENTRIES


@pytest.mark.parametrize("cut", [0, 5, 30, -3, -1])
def test_a_damaged_journal_is_a_typed_error(cut: int) -> None:
    data = encode_journal(ENTRIES)
    with pytest.raises(CorruptFileError, match="sessions/s/.journal-x.json"):
        decode_journal(data[:cut], "sessions/s/.journal-x.json")


@pytest.mark.parametrize("target", ["../escape.json", "history/../../x.json", "history/a.txt",
                                    "index.json", "/etc/passwd"])
def test_a_journal_may_only_name_node_files_and_meta(target: str) -> None:
    with pytest.raises(CorruptFileError):
        decode_journal(encode_journal([(target, b"{}")]), "j")


def test_another_owners_journal_is_replayed_by_the_next_lock_holder(tmp_path: Path) -> None:
    first = SessionCore.create(tmp_path, "s")
    first.append({"id": "u1", "content": "q"})
    first.merge_node_metadata_batch({"u1": {"marker": "w-1"}})
    assert len(first.outstanding_journals) == 1
    # the installed file is lost (say, power loss before the sync) ...
    node_file = tmp_path / "sessions" / "s" / "history" / "0000-u-u1.json"
    node_file.write_bytes(encode_node(first.node("u1").with_metadata({})))
    # ... and the next owner to take the lock replays the journal
    second = SessionCore.open(tmp_path, "s")
    assert second.node("u1").metadata == {"marker": "w-1"}
    assert find_journals(str(tmp_path / "sessions" / "s")) == []
    first.close()  # its journal is gone: nothing to do, nothing breaks
    assert decode_node(node_file.read_bytes(), "n").metadata == {"marker": "w-1"}


def test_a_corrupt_journal_is_reported_and_left_alone(tmp_path: Path) -> None:
    core = SessionCore.create(tmp_path, "s")
    core.append({"id": "u1", "content": "q"})
    bad = tmp_path / "sessions" / "s" / ".journal-0000000000000000.json"
    bad.write_bytes(b"garbage")
    reopened = SessionCore.open(tmp_path, "s")
    assert [getattr(p, "path", "") for p in reopened.problems] == [
        "sessions/s/.journal-0000000000000000.json"]
    assert bad.read_bytes() == b"garbage"
    reopened.merge_node_metadata_batch({"u1": {"m": 1}})  # the session stays usable


FIXTURE_FILES = sorted(DEMO_HISTORY.glob("*.json"))


@given(st.sampled_from(FIXTURE_FILES),
       st.dictionaries(st.text(max_size=8), st.text(max_size=8) | st.integers(0, 9), max_size=3))
def test_the_splice_equals_a_full_encode(path: Path, patch: dict[str, object]) -> None:
    data = path.read_bytes()
    node = decode_node(data, path.name)
    merged = {**node.metadata, **patch}
    assert encode_with_metadata(data, node, merged) == encode_node(node.with_metadata(merged))


def test_the_splice_keeps_a_non_canonical_prefix_byte_for_byte() -> None:
    data = (DEMO_HISTORY / "0000-u-u1.json").read_bytes().replace(b'"seq": 0', b'"seq":0')
    node = decode_node(data, "n")
    result = encode_with_metadata(data, node, {"m": 1})
    assert result.startswith(data[: data.index(b'"metadata": ')])
    assert decode_node(result, "n") == node.with_metadata({"m": 1})


def test_the_splice_falls_back_when_the_metadata_is_not_canonical() -> None:
    data = (DEMO_HISTORY / "0000-u-u1.json").read_bytes().replace(
        b'{"speaker_kind": "owner"', b'{"speaker_kind":"owner"')
    node = decode_node(data, "n")
    result = encode_with_metadata(data, node, {"m": 1})
    assert result == encode_node(node.with_metadata({"m": 1}))
