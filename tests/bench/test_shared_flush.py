"""The group-commit floor of bench/shared_flush.py: every record durable, flushes shared."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.bench._modules import bench_module

shared_flush = bench_module("shared_flush")


def test_group_commit_returns_each_record_flushed_and_shares_the_flushes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = shared_flush.GroupLog(str(tmp_path / "log"))
    flushed_sizes: list[int] = []
    real = os.fdatasync
    entered = threading.Barrier(8)

    def fdatasync(fd: int) -> None:
        flushed_sizes.append(os.fstat(fd).st_size)
        real(fd)

    monkeypatch.setattr(shared_flush.os, "fdatasync", fdatasync)
    returned: dict[int, int] = {}

    def commit(i: int) -> None:
        entered.wait()
        record = b"%02d" % i * 50
        log.commit(record)
        # by the time commit returns, a flush covered this record
        returned[i] = max(flushed_sizes)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log.close()
    data = (tmp_path / "log").read_bytes()
    assert len(data) == 8 * 100 and all(b"%02d" % i * 50 in data for i in range(8))
    for i in range(8):  # the flush seen on return reached past the record's end
        assert returned[i] >= data.index(b"%02d" % i * 50) + 100
    assert log.flushes == len(flushed_sizes) <= 8
