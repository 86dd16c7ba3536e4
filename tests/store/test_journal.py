"""The journal's framing, its replay by whoever takes the lock next, and the splice encoder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import SessionOptions
from store._errors import JournalFileError
from store._format import decode_node, encode_node, encode_with_metadata
from store._journal import (
    ABSENT,
    JOURNAL_NAME,
    JournalEntry,
    decode_entries,
    encode_entries,
    encode_record,
    latest_per_file,
    scan,
)
from store._session import SessionCore
from tests.store.conftest import DEMO_HISTORY

ENTRIES = [JournalEntry("history/0001-l-a1.json", b'{"x": "a\nb"}', "0" * 32, b'{"m": 1}'),
           JournalEntry("meta.json", b"", ABSENT)]
entries_strategy = st.lists(
    st.builds(JournalEntry,
              st.sampled_from(["meta.json", "history/0001-l-a1.json", "history/0002-u-b.json"]),
              st.binary(max_size=40),
              st.sampled_from([ABSENT, "0123456789abcdef" * 2]),
              st.binary(max_size=12)),
    min_size=1, max_size=3,
)


def test_framing_round_trips() -> None:
    assert decode_entries(encode_entries(ENTRIES), "j", 0) == ENTRIES


@given(st.lists(entries_strategy, max_size=4), st.data())
def test_any_cut_yields_the_records_wholly_inside_it(
    records: list[list[JournalEntry]], data: st.DataObject
) -> None:
    encoded = [encode_record(r) for r in records]
    journal = b"".join(encoded)
    cut = data.draw(st.integers(0, len(journal)))
    ends = [sum(len(e) for e in encoded[: i + 1]) for i in range(len(encoded))]
    whole = sum(1 for end in ends if end <= cut)
    found = scan(journal[:cut], "j")
    assert found.records == records[:whole]
    assert found.valid_end == (ends[whole - 1] if whole else 0)


@settings(max_examples=300)
@given(st.lists(entries_strategy, min_size=1, max_size=3), st.data())
def test_a_flipped_byte_ends_the_valid_prefix_at_its_record(
    records: list[list[JournalEntry]], data: st.DataObject
) -> None:
    """Damage never yields a record that was not written, and never resynchronises."""
    encoded = [encode_record(r) for r in records]
    journal = bytearray(b"".join(encoded))
    at = data.draw(st.integers(0, len(journal) - 1))
    journal[at] ^= data.draw(st.integers(1, 255))
    damaged = next(i for i in range(len(encoded)) if sum(map(len, encoded[: i + 1])) > at)
    # crc32 catches every error burst of up to 32 bits, so no flip passes as a record
    assert scan(bytes(journal), "j").records == records[:damaged]


def test_a_checksummed_record_naming_a_foreign_file_is_refused() -> None:
    for target in ["../escape.json", "history/../../x.json", "history/a.txt", "index.json",
                   "/etc/passwd"]:
        with pytest.raises(JournalFileError, match="sessions/s/.journal"):
            scan(encode_record([JournalEntry(target, b"{}", ABSENT)]), "sessions/s/.journal")


def test_the_last_record_naming_a_file_wins_and_orders_it_last() -> None:
    records = [[JournalEntry("history/0000-u-a.json", b"a", ABSENT),
                JournalEntry("meta.json", b"1", ABSENT)],
               [JournalEntry("history/0001-u-b.json", b"b", ABSENT),
                JournalEntry("meta.json", b"2", ABSENT)]]
    assert list(latest_per_file(records).items()) == [
        ("history/0000-u-a.json", b"a"), ("history/0001-u-b.json", b"b"), ("meta.json", b"2")]


def test_another_owners_journal_is_replayed_by_the_next_lock_holder(tmp_path: Path) -> None:
    first = SessionCore.create(tmp_path, "s")
    first.append({"id": "u1", "content": "q"})
    first.merge_node_metadata_batch({"u1": {"marker": "w-1"}})
    assert first.statistics().journal_records == 2
    # the installed file is lost (say, power loss before the sync) ...
    node_file = tmp_path / "sessions" / "s" / "history" / "0000-u-u1.json"
    node_file.write_bytes(encode_node(first.node("u1").with_metadata({})))
    # ... and the next owner to take the lock replays the journal
    second = SessionCore.open(tmp_path, "s")
    assert second.node("u1").metadata == {"marker": "w-1"}
    assert (tmp_path / "sessions" / "s" / JOURNAL_NAME).stat().st_size == 0
    # the first owner sees that someone else checkpointed, and goes on
    first.append({"id": "a1", "role": "assistant", "content": "r"})
    first.close()
    assert decode_node(node_file.read_bytes(), "n").metadata == {"marker": "w-1"}
    assert [n.id for n in SessionCore.open(tmp_path, "s").nodes()] == ["u1", "a1"]


def test_records_of_two_owners_in_turn_replay_in_order(tmp_path: Path) -> None:
    """Each owner replays what the other left before writing: the journal stays one sequence."""
    first = SessionCore.create(tmp_path, "s")
    second = SessionCore.open(tmp_path, "s")
    previous = "ROOT"
    for i in range(6):
        owner = (first, second)[i % 2]
        previous = owner.append({"id": f"n{i}", "content": str(i), "predecessor": previous})["id"]
    third = SessionCore.open(tmp_path, "s")
    assert third.head == "n5" and len(third.nodes()) == 6


def test_a_foreign_record_in_the_journal_refuses_changes_and_is_left_alone(
    tmp_path: Path,
) -> None:
    core = SessionCore.create(tmp_path, "s")
    core.append({"id": "u1", "content": "q"})  # its record is still outstanding
    journal = tmp_path / "sessions" / "s" / JOURNAL_NAME
    bad = encode_record([JournalEntry("index.json", b"{}", ABSENT)])
    journal.write_bytes(bad)
    core.close()  # its checkpoint finds the foreign record and must not truncate it
    assert journal.read_bytes() == bad
    reopened = SessionCore.open(tmp_path, "s")
    assert [getattr(p, "path", "") for p in reopened.problems] == ["sessions/s/.journal"]
    assert reopened.get_branch()[0]["id"] == "u1"  # reads still work
    with pytest.raises(JournalFileError):
        reopened.merge_node_metadata_batch({"u1": {"m": 1}})
    reopened.close()
    assert journal.read_bytes() == bad
    journal.unlink()  # the operator moves it away: the session is usable again
    reopened.merge_node_metadata_batch({"u1": {"m": 1}})
    assert reopened.problems == []


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


def test_owners_taking_turns_keep_one_flush_per_mutation(tmp_path: Path) -> None:
    """A second owner adopts the first one's records instead of checkpointing them."""
    from tests.faults import FaultyFiles

    first = SessionCore.create(tmp_path, "s")
    counting = FaultyFiles(only=frozenset({"fsync", "fsync_dir"}))
    second = SessionCore.open(tmp_path, "s", options=SessionOptions(files=counting))
    first.append({"id": "u1", "content": "q"})
    second.append({"id": "a1", "role": "assistant", "content": "r"})
    first.append({"id": "u2", "content": "q2"})
    second.merge_node_metadata_batch({"u1": {"m": 1}})
    assert [step for step, _ in counting.steps] == ["fsync", "fsync"]
    assert second.statistics().journal_records == 4  # all four, in order, until the checkpoint
    second.close()
    third = SessionCore.open(tmp_path, "s")
    assert [m["id"] for m in third.get_branch()] == ["u1", "a1", "u2"]
    assert third.node("u1").metadata == {"m": 1}


def test_another_owners_write_is_seen_under_the_lock_even_within_one_timestamp_tick(
    tmp_path: Path,
) -> None:
    """Coarse timestamps: the foreign append leaves history/ and meta.json looking unchanged.

    The journal changed, so the next mutation reloads anyway and continues
    the foreign head instead of forking from a stale one.
    """
    def clock() -> float:
        return 1000.5

    ours = SessionCore.create(tmp_path, "s", options=SessionOptions(clock=clock))
    ours.append({"id": "u1", "content": "q"})
    session = tmp_path / "sessions" / "s"
    stats = {p: p.stat() for p in (session / "history", session / "meta.json")}
    SessionCore.open(tmp_path, "s", options=SessionOptions(
        clock=clock)).append({"id": "u2", "content": "q"})
    for path, before in stats.items():  # the same tick: nothing moved
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (session / "meta.json").stat().st_size == stats[session / "meta.json"].st_size
    assert not ours.is_stale()  # a lock-free read cannot tell (documented)
    ours.append({"id": "u3", "content": "q"})
    assert [m["id"] for m in SessionCore.open(tmp_path, "s").get_branch()] == ["u1", "u2", "u3"]


def test_the_tick_check_catches_an_owner_that_trusts_the_timestamps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plant the fault (no reload on a foreign journal): the test above must fail."""
    monkeypatch.setattr(SessionCore, "_forget_index", lambda self: None)
    with pytest.raises(AssertionError):
        test_another_owners_write_is_seen_under_the_lock_even_within_one_timestamp_tick(tmp_path)


def test_a_version_digit_flipped_to_the_older_format_is_damage_not_a_record() -> None:
    """Format 2 summed its payload alone: the checksum of format 3 covers the magic too."""
    record = bytearray(encode_record(ENTRIES))
    digit = record.index(b"3")
    record[digit] = ord("2")
    assert scan(bytes(record), "j").records == []
