"""A reload reads only the node files that may have changed since they were read (issue 20).

The lost-marker scan reloads every session whose files moved, and under load
our own appends move them all: reading every node file of every active
session at every poll was the largest share of a loaded runtime's busy
time. A file read once it had settled (its ctime older than SETTLED_NS
before the read) keeps its node unread while its stamp holds; any write
since moves its ctime, which no utime can set back.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import store._index as index_module
from store._session import SessionCore


def _settled_session(tmp_path: Path) -> SessionCore:
    core = SessionCore.create(tmp_path, "s")
    for turn in ("u1", "u2", "u3"):
        core.append({"id": turn, "content": "q"})
    time.sleep(index_module.SETTLED_NS / 1e9 + 0.05)  # file times, not a timing rule
    core.reload()  # every node from disk, each file settled when read
    return core


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    real = index_module.read_stamped

    def counting(path: str, rel: str, cap: int) -> tuple[bytes, index_module.NodeStamp | None]:
        reads.append(os.path.basename(path))
        return real(path, rel, cap)

    monkeypatch.setattr(index_module, "read_stamped", counting)
    return reads


def test_a_reload_does_not_read_settled_files_again(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    core = _settled_session(tmp_path)
    before = {node.id: node for node in core.nodes()}
    reads = _count_reads(monkeypatch)
    core.reload()
    assert reads == []
    assert all(node is before[node.id] for node in core.nodes())


def test_an_in_place_rewrite_with_its_mtime_restored_is_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    core = _settled_session(tmp_path)
    history = tmp_path / "sessions" / "s" / "history"
    target = next(history.glob("*-u2.json"))
    folder, own = os.stat(history), os.stat(target)
    data = target.read_bytes()
    target.write_bytes(data.replace(b'"q"', b'"Q"'))  # in place, same size: the same inode
    os.utime(target, ns=(own.st_atime_ns, own.st_mtime_ns))
    os.utime(history, ns=(folder.st_atime_ns, folder.st_mtime_ns))
    reads = _count_reads(monkeypatch)
    core.reload()
    assert reads == [target.name]  # its ctime moved; the settled others are not read
    assert core.node("u2").output == "Q"


def test_a_file_read_before_it_settled_is_read_again(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    core = SessionCore.create(tmp_path, "s")
    core.append({"id": "u1", "content": "q"})
    core.reload()  # at once: the file changed within SETTLED_NS of this read
    reads = _count_reads(monkeypatch)
    core.reload()
    assert len(reads) == 1
