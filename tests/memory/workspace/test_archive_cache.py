"""ArchiveCache: the cached scan is always the fresh scan, and appends skip the full scan."""

from __future__ import annotations

import os
import tempfile
from datetime import UTC
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory._errors import IncompleteArchiveError
from memory.ledger._records import SourceMeta, SourceRecord
from memory.workspace._archive import append_records, archive_relpath, parse_archive, plan_append
from memory.workspace._archive_cache import ArchiveCache
from store._durable import DurableFiles, run_durable
from tests.faults import FaultyFiles, SimulatedCrash, count_steps

PENDING = SourceMeta(None, "guest/1", "guest", "pending")


def rec(n: int, sid: str = "s1", text: str = "hello") -> SourceRecord:
    meta = PENDING if n % 3 == 2 else None
    return SourceRecord(sid, f"m{n}", "user", f"{text} {n}", 1755000000.0 + n, "Owner", None, meta)


def _bytes(memory: str, sid: str = "s1") -> bytes:
    try:
        with open(os.path.join(memory, archive_relpath(sid)), "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return b""


def _write(memory: str, data: bytes, sid: str = "s1") -> None:
    path = os.path.join(memory, archive_relpath(sid))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    DurableFiles().write_atomic(path, data)


ops = st.lists(
    st.tuples(
        st.sampled_from(["cache", "cache", "outside", "garbage", "truncate", "delete"]),
        st.lists(st.integers(0, 12), min_size=1, max_size=4),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_the_cached_scan_is_always_the_fresh_scan(steps: list[tuple[str, list[int]]]) -> None:
    with tempfile.TemporaryDirectory() as memory:
        cache = ArchiveCache(memory, tz=UTC)
        for op, numbers in steps:
            batch = [rec(n) for n in numbers]
            before = _bytes(memory)
            if op == "cache":
                try:
                    expected, _ = plan_append(before, "s1", batch, tz=UTC)
                except IncompleteArchiveError:
                    with pytest.raises(IncompleteArchiveError):
                        cache.append("s1", batch)
                    expected = before
                else:
                    cache.append("s1", batch)
                assert _bytes(memory) == expected  # byte-identical to the stateless append
            elif op == "outside":
                try:
                    append_records(memory, "s1", batch, DurableFiles(), tz=UTC)
                except IncompleteArchiveError:
                    pass
            elif op == "garbage":
                _write(memory, before + b"junk\n")
            elif op == "truncate":
                _write(memory, before[: len(before) * numbers[0] // 13])
            else:
                path = os.path.join(memory, archive_relpath("s1"))
                if os.path.exists(path):
                    os.unlink(path)
            assert cache.scan("s1") == parse_archive(_bytes(memory), "s1")


def test_appends_reuse_the_scan_until_someone_else_writes(tmp_path: Path) -> None:
    memory = str(tmp_path)
    cache = ArchiveCache(memory, tz=UTC)
    for n in range(10):
        cache.append("s1", [rec(n)])
    assert cache.statistics().scans == 1  # the first sight of a missing file
    assert cache.statistics().appends == 10
    append_records(memory, "s1", [rec(50)], DurableFiles(), tz=UTC)  # another process
    cache.append("s1", [rec(51)])
    assert cache.statistics().scans == 2
    scan = cache.scan("s1")
    assert [f.message_id for f in scan.frames] == [*(f"m{n}" for n in range(10)), "m50", "m51"]
    assert cache.statistics().scans == 2
    result = cache.append("s1", [rec(3), rec(4)])  # all present: nothing written
    assert result.added == () and cache.statistics().appends == 11


def test_a_stale_cache_would_be_caught(tmp_path: Path) -> None:
    """Without the stamp check the next append would drop the outside frame (m1)."""
    memory = str(tmp_path)
    cache = ArchiveCache(memory, tz=UTC)
    cache.append("s1", [rec(0)])
    append_records(memory, "s1", [rec(1)], DurableFiles(), tz=UTC)
    cache.append("s1", [rec(2)])
    assert {f.message_id for f in parse_archive(_bytes(memory), "s1").frames} == {"m0", "m1", "m2"}


def test_an_incomplete_archive_is_refused(tmp_path: Path) -> None:
    memory = str(tmp_path)
    cache = ArchiveCache(memory, tz=UTC)
    cache.append("s1", [rec(0)])
    _write(memory, _bytes(memory) + b"\ntrailing garbage\n")
    with pytest.raises(IncompleteArchiveError):
        cache.append("s1", [rec(1)])
    assert not cache.scan("s1").complete


def test_archived_lookup(tmp_path: Path) -> None:
    cache = ArchiveCache(str(tmp_path), tz=UTC)
    cache.append("s1", [rec(0), rec(2)])
    assert cache.archived("openprogram/s1/m0") is True
    assert cache.archived("openprogram/s1/m2") is False  # pending
    assert cache.archived("openprogram/s1/m9") is None
    assert cache.archived("openprogram/nosuch/m0") is None
    assert cache.archived("elsewhere/s1/m0") is None
    append_records(str(tmp_path), "s1", [rec(9)], DurableFiles(), tz=UTC)
    assert cache.archived("openprogram/s1/m9") is True  # an outside append is seen


def test_least_recently_used_scans_are_dropped(tmp_path: Path) -> None:
    cache = ArchiveCache(str(tmp_path), tz=UTC, max_sessions=2)
    for sid in ("a", "b", "a", "c"):
        cache.append(sid, [rec(0, sid)])
    assert cache.statistics().entries == 2
    scans = cache.statistics().scans
    cache.scan("a")
    cache.scan("c")
    assert cache.statistics().scans == scans
    cache.scan("b")
    assert cache.statistics().scans == scans + 1
    with pytest.raises(ValueError, match="max_sessions"):
        ArchiveCache(str(tmp_path), max_sessions=0)


def test_a_crash_at_any_step_leaves_a_consistent_cache(tmp_path: Path) -> None:
    memory = str(tmp_path)
    base = [rec(0), rec(1)]
    new = [rec(2), rec(3)]
    append_records(memory, "s1", base, DurableFiles(), tz=UTC)
    old = _bytes(memory)
    steps = count_steps(lambda f: ArchiveCache(memory, f, tz=UTC).append("s1", new))
    _write(memory, old)
    for k in range(steps):
        cache = ArchiveCache(memory, FaultyFiles(crash_at=k), tz=UTC)
        cache.scan("s1")
        with pytest.raises(SimulatedCrash):
            cache.append("s1", new)
        assert _bytes(memory) in (old, plan_append(old, "s1", new, tz=UTC)[0])
        assert cache.scan("s1") == parse_archive(_bytes(memory), "s1")
        _write(memory, old)


async def test_append_through_run_durable(tmp_path: Path) -> None:
    cache = ArchiveCache(str(tmp_path), tz=UTC)
    result = await run_durable(cache.append, "s1", [rec(0), rec(1)])
    assert result.added == ("openprogram/s1/m0", "openprogram/s1/m1")
    assert len((await run_durable(cache.scan, "s1")).frames) == 2


SESSIONS = ["a", "b", "c", "d", "e"]


def test_a_groups_appends_are_the_appends_one_by_one(tmp_path: Path) -> None:
    """Same files, same results, same cache as appending each session alone."""
    alone, together = str(tmp_path / "alone"), str(tmp_path / "together")
    batches = [(sid, [rec(i, sid) for i in range(3)]) for sid in SESSIONS]
    batches.append(("a", [rec(2, "a"), rec(3, "a")]))  # a session twice: on its first plan
    batches.append(("b", [rec(0, "b")]))  # nothing new
    one_by_one = ArchiveCache(alone, tz=UTC)
    expected = [one_by_one.append(sid, records) for sid, records in batches]
    grouped = ArchiveCache(together, tz=UTC)
    assert grouped.append_many(batches) == expected
    for sid in SESSIONS:
        assert _bytes(together, sid) == _bytes(alone, sid)
        assert grouped.scan(sid) == parse_archive(_bytes(together, sid), sid)


def test_a_group_append_crash_at_any_step_leaves_each_archive_old_or_new(tmp_path: Path) -> None:
    memory = str(tmp_path)
    for sid in SESSIONS:
        append_records(memory, sid, [rec(0, sid)], DurableFiles(), tz=UTC)
    old = {sid: _bytes(memory, sid) for sid in SESSIONS}
    batches = [(sid, [rec(1, sid), rec(2, sid)]) for sid in SESSIONS]
    new = {sid: plan_append(old[sid], sid, records, tz=UTC)[0] for sid, records in batches}
    steps = count_steps(lambda f: ArchiveCache(memory, f, tz=UTC).append_many(batches))
    for sid in SESSIONS:
        _write(memory, old[sid], sid)
    for k in range(steps):
        cache = ArchiveCache(memory, FaultyFiles(crash_at=k), tz=UTC)
        with pytest.raises(SimulatedCrash):
            cache.append_many(batches)
        for sid in SESSIONS:
            assert _bytes(memory, sid) in (old[sid], new[sid]), (k, sid)
            assert cache.scan(sid) == parse_archive(_bytes(memory, sid), sid)
            _write(memory, old[sid], sid)
