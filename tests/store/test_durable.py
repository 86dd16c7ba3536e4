"""The durable seam: atomic replacement, crash at every step, owner-only modes."""

from __future__ import annotations

import ctypes
import errno
import stat
import tempfile
import threading
from pathlib import Path

import pytest

from store import _durable as durable_module
from store import _linux as linux_module
from store._durable import TEMP_SUFFIX, DurableFiles, SharedFilesystemSync, run_durable
from tests.faults import FaultyFiles, FlushTracking, SimulatedCrash, count_steps


def _no_temp_files(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if p.name.endswith(TEMP_SUFFIX)]


def test_write_atomic_replaces_and_is_owner_only(tmp_path: Path) -> None:
    target = tmp_path / "node.json"
    DurableFiles().write_atomic(str(target), b"old")
    DurableFiles().write_atomic(str(target), b"new")
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert _no_temp_files(tmp_path)


def test_crash_at_every_step_leaves_old_or_new(tmp_path: Path) -> None:
    files = [(str(tmp_path / f"f{i}"), f"new{i}".encode()) for i in range(3)]
    probe = tmp_path / "probe"
    probe.mkdir()
    total = count_steps(
        lambda fs: fs.write_atomic_many([(str(probe / f"f{i}"), b"x") for i in range(3)])
    )
    assert total > 0
    for k in range(total + 1):
        for path, _ in files:
            Path(path).write_bytes(b"old")
        faulty = FaultyFiles(crash_at=k)
        try:
            faulty.write_atomic_many(files)
            crashed = False
        except SimulatedCrash:
            crashed = True
        contents = [Path(p).read_bytes() for p, _ in files]
        for (path, new), content in zip(files, contents):
            assert content in (b"old", new), (k, path, content)
        if not crashed:
            assert contents == [d for _, d in files]
        assert _no_temp_files(tmp_path)
    # the crash loop did run past the last step at least once
    assert not crashed


def test_injected_error_propagates_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "x"
    target.write_bytes(b"old")
    with pytest.raises(OSError):
        FaultyFiles(fail_at=2).write_atomic(str(target), b"new")
    assert target.read_bytes() == b"old"
    assert _no_temp_files(tmp_path)


def test_create_exclusive_has_one_winner(tmp_path: Path) -> None:
    target = str(tmp_path / "id")
    assert DurableFiles().create_exclusive(target, b"first")
    assert not DurableFiles().create_exclusive(target, b"second")
    assert Path(target).read_bytes() == b"first"
    assert _no_temp_files(tmp_path)


def test_make_dirs_is_owner_only(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    DurableFiles().make_dirs(str(deep))
    assert deep.is_dir()
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700


async def test_run_durable_is_one_hop(tmp_path: Path) -> None:
    target = tmp_path / "y"
    await run_durable(DurableFiles().write_atomic, str(target), b"data")
    assert target.read_bytes() == b"data"


def test_a_filesystem_sync_started_before_a_request_does_not_serve_it() -> None:
    """Two syncs for a caller who asks while one runs; later callers share one."""
    shared = SharedFilesystemSync()
    first_running, let_first_finish = threading.Event(), threading.Event()
    calls: list[int] = []

    def flush() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            first_running.set()
            let_first_finish.wait(10)

    first = threading.Thread(target=shared.sync, args=(flush,))
    first.start()
    assert first_running.wait(10)
    returned_after: list[int] = []

    def late() -> None:
        shared.sync(flush)
        returned_after.append(len(calls))

    waiting = [threading.Thread(target=late) for _ in range(3)]
    for thread in waiting:
        thread.start()
    let_first_finish.set()
    for thread in (first, *waiting):
        thread.join(10)
    # each late caller returned only after a sync that began after its request
    assert returned_after and all(n >= 2 for n in returned_after)
    assert shared.calls == len(calls) <= 4


def test_a_failed_filesystem_sync_fails_everyone_it_was_to_serve() -> None:
    """No second syncfs after a failed one: it may answer 0 for the error already reported."""
    shared = SharedFilesystemSync()
    leader_running, let_leader_fail = threading.Event(), threading.Event()
    calls: list[str] = []

    def failing() -> None:
        calls.append("failing")
        leader_running.set()
        let_leader_fail.wait(10)
        raise OSError(errno.EIO, "injected writeback error")

    answers: dict[str, BaseException | None] = {}
    leader = threading.Thread(target=lambda: answers.update(leader=shared.sync(failing)))
    leader.start()
    assert leader_running.wait(10)
    # asks while the failing sync runs: served by the next one, which must not
    # be a fresh syncfs standing in for data the failed one may have lost
    follower = threading.Thread(target=lambda: answers.update(
        follower=shared.sync(lambda: calls.append("second"))))
    follower.start()
    let_leader_fail.set()
    leader.join(10)
    follower.join(10)
    assert isinstance(answers["leader"], OSError)
    assert answers["follower"] is answers["leader"]
    # nor later: every caller flushes its own files from now on
    assert shared.sync(lambda: calls.append("later")) is answers["leader"]
    assert calls == ["failing"]


BULK_HERE = durable_module.bulk_sync_device([tempfile.gettempdir()]) is not None


@pytest.mark.skipif(not BULK_HERE, reason="syncfs on ext4, xfs or btrfs (Linux) only")
def test_a_refused_syncfs_falls_back_to_a_flush_per_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    paths = [tmp_path / f"f{i}" for i in range(durable_module.BULK_SYNC_FILES)]
    for path in paths:
        path.write_bytes(b"x")

    def refused(fd: int) -> int:
        ctypes.set_errno(errno.ENOSYS)
        return -1

    monkeypatch.setattr(linux_module, "_SYNCFS", refused)
    monkeypatch.setattr(linux_module, "_SYNCS", {})  # the refusal stays with this test
    files = FaultyFiles()
    files.sync_paths([str(p) for p in paths])  # no error: the per-file flushes ran
    steps = [step for step, _ in files.steps]
    assert steps == ["syncfs", *["fsync"] * len(paths), "fsync_dir"]
    assert linux_module._SYNCFS is None  # not asked again


@pytest.mark.parametrize("count", [1, 3, 8])
def test_several_files_are_each_flushed_before_their_rename(tmp_path: Path, count: int) -> None:
    files = FlushTracking()
    targets = [(str(tmp_path / f"f{i}"), b"new %d" % i) for i in range(count)]
    files.write_atomic_many(targets)
    assert files.renamed_unflushed == []
    assert all(Path(path).read_bytes() == data for path, data in targets)
    bulk = BULK_HERE and count >= durable_module.BULK_SYNC_FILES
    assert files.steps.count("syncfs") == (2 if bulk else 0)
    assert files.steps.count("fsync") == (0 if bulk else count)


def test_a_crash_at_any_step_of_a_bulk_install_leaves_each_file_old_or_new(
    tmp_path: Path,
) -> None:
    paths = [tmp_path / f"f{i}" for i in range(6)]

    def reset() -> None:
        for path in paths:
            path.write_bytes(b"old")

    def install(files: DurableFiles) -> None:
        files.write_atomic_many([(str(p), b"new") for p in paths])

    reset()
    total = count_steps(install)
    for k in range(total):
        reset()
        with pytest.raises(SimulatedCrash):
            install(FaultyFiles(crash_at=k))
        assert all(p.read_bytes() in (b"old", b"new") for p in paths)


@pytest.mark.skipif(not BULK_HERE, reason="syncfs on ext4, xfs or btrfs (Linux) only")
def test_files_on_two_filesystems_are_flushed_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One syncfs never stands for a file on another disk (a linked topics/, say)."""
    other = Path("/dev/shm")
    if not other.is_dir() or other.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second filesystem at /dev/shm")
    monkeypatch.setattr(linux_module, "_filesystem_type", lambda device: "ext4")
    here = [tmp_path / f"f{i}" for i in range(durable_module.BULK_SYNC_FILES)]
    there = Path(tempfile.mkdtemp(dir=other)) / "linked.md"
    try:
        for path in (*here, there):
            path.write_bytes(b"x")
        paths = [str(p) for p in (*here, there)]
        assert durable_module.bulk_sync_device(paths) is None
        assert durable_module.bulk_sync_device(paths[:-1]) is not None
        files = FaultyFiles()
        files.sync_paths(paths)
        flushed = [path for step, path in files.steps if step == "fsync"]
        assert "syncfs" not in [step for step, _ in files.steps] and str(there) in flushed
    finally:
        there.unlink()
        there.parent.rmdir()


def test_a_filesystem_without_a_trusted_syncfs_is_flushed_file_by_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(linux_module, "_filesystem_type", lambda device: "fuse.sshfs")
    paths = [tmp_path / f"f{i}" for i in range(durable_module.BULK_SYNC_FILES)]
    for path in paths:
        path.write_bytes(b"x")
    assert durable_module.bulk_sync_device([str(p) for p in paths]) is None


class FailingSyncfs(FaultyFiles):
    def _flush_filesystem(self, fd: int, path: str) -> None:
        raise OSError(errno.EIO, "injected writeback error", path)


@pytest.mark.skipif(not BULK_HERE, reason="syncfs on ext4, xfs or btrfs (Linux) only")
def test_after_a_failed_syncfs_the_files_are_flushed_each_then_and_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(linux_module, "_SYNCS", {})
    paths = [str(tmp_path / f"f{i}") for i in range(durable_module.BULK_SYNC_FILES)]
    for path in paths:
        Path(path).write_bytes(b"x")
    failing = FailingSyncfs()
    failing.sync_paths(paths)  # no error: each file's own fsync answered
    assert [step for step, _ in failing.steps] == ["syncfs", *["fsync"] * len(paths),
                                                   "fsync_dir"]
    later = FaultyFiles()
    later.sync_paths(paths)  # the device is not trusted to syncfs again
    assert "syncfs" not in [step for step, _ in later.steps]
