"""The workspace id: one value, created once, even when first used concurrently."""

from __future__ import annotations

import multiprocessing
import os
import re
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from memory._errors import CorruptWorkspaceIdError
from memory.workspace._workspace_id import (
    WORKSPACE_ID_PATH,
    load_or_create_workspace_id,
    new_workspace_id,
    parse_workspace_id,
    read_workspace_id,
)
from store._durable import DurableFiles
from tests.memory._fixture import FIXTURE

_FORMAT = re.compile(r"w-[0-9a-f]{8}")


def test_created_once_in_the_reference_format(tmp_path: Path) -> None:
    value = load_or_create_workspace_id(str(tmp_path), DurableFiles())
    assert _FORMAT.fullmatch(value)
    path = tmp_path / WORKSPACE_ID_PATH
    assert path.read_bytes() == value.encode() + b"\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_or_create_workspace_id(str(tmp_path), DurableFiles()) == value
    assert read_workspace_id(str(tmp_path)) == value


def test_reads_the_reference_agents_id() -> None:
    assert read_workspace_id(str(FIXTURE / "memory")) == "w-aa116220"


def test_missing_is_none_and_corrupt_is_an_error(tmp_path: Path) -> None:
    assert read_workspace_id(str(tmp_path)) is None
    path = tmp_path / WORKSPACE_ID_PATH
    path.parent.mkdir()
    path.write_bytes(b"w-XYZ\n")
    with pytest.raises(CorruptWorkspaceIdError, match=r"workspace-id holds b'w-XYZ\\n'"):
        load_or_create_workspace_id(str(tmp_path), DurableFiles())
    assert path.read_bytes() == b"w-XYZ\n"  # never replaced


@pytest.mark.parametrize("data", [b"w-0123abcd", b"w-0123abcd\n"])
def test_parse_accepts_with_or_without_lf(data: bytes) -> None:
    assert parse_workspace_id(data) == "w-0123abcd"


@pytest.mark.parametrize(
    "data", [b"", b"w-0123ABCD\n", b"w-0123abc\n", b" w-0123abcd", b"w-0123abcd\n\n"]
)
def test_parse_rejects_anything_else(data: bytes) -> None:
    assert parse_workspace_id(data) is None


def test_new_ids_are_random() -> None:
    assert len({new_workspace_id() for _ in range(50)}) == 50


# -- concurrent first use -------------------------------------------------------------


class _MeetBeforeLink(DurableFiles):
    """Holds every contender just before its exclusive create until all have arrived.

    So every thread has already seen "no file" and picked its own candidate:
    the worst interleaving, forced rather than hoped for.
    """

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier

    def _step(self, step: str, path: str) -> None:
        if step in ("link", "rename"):
            self.barrier.wait(timeout=10)


def _naive_create(memory_dir: str, files: DurableFiles) -> str:
    """The planted fault: check, then replace. Two first users both "win"."""
    existing = read_workspace_id(memory_dir)
    if existing is not None:
        return existing
    path = os.path.join(memory_dir, WORKSPACE_ID_PATH)
    files.make_dirs(os.path.dirname(path))
    value = new_workspace_id()
    files.write_atomic(path, value.encode() + b"\n")
    return value


def _race(create: Callable[[str, DurableFiles], str], root: Path, n: int) -> set[str]:
    barrier = threading.Barrier(n)
    results: list[str] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(create(str(root), _MeetBeforeLink(barrier)))
        except BaseException as exc:  # noqa: BLE001 (reported to the test thread)
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert not errors, errors
    assert len(results) == n
    return set(results)


def test_threads_racing_on_first_use_agree_on_one_id(tmp_path: Path) -> None:
    agreed = _race(load_or_create_workspace_id, tmp_path, 6)
    assert len(agreed) == 1
    assert read_workspace_id(str(tmp_path)) in agreed


def test_the_race_harness_catches_a_check_then_write_creator(tmp_path: Path) -> None:
    # Proof that the test above can fail: the same forced interleaving splits
    # a naive creator into several ids.
    assert len(_race(_naive_create, tmp_path, 6)) > 1


def _process_contender(root: str, start: object, out: object) -> None:
    start.wait(10)  # type: ignore[attr-defined]
    out.put(load_or_create_workspace_id(root, DurableFiles()))  # type: ignore[attr-defined]


def test_processes_racing_on_first_use_agree_on_one_id(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    start = context.Event()
    out = context.Queue()
    processes = [
        context.Process(target=_process_contender, args=(str(tmp_path), start, out))
        for _ in range(4)
    ]
    for process in processes:
        process.start()
    start.set()
    values = {out.get(timeout=20) for _ in processes}
    for process in processes:
        process.join(timeout=20)
        assert process.exitcode == 0
    assert len(values) == 1
    assert read_workspace_id(str(tmp_path)) in values
