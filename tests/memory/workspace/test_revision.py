"""workspace_revision: what it counts, what it skips, and that it does not re-read."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from memory.workspace._revision import RACY_NS, RevisionCache, revision_paths, workspace_revision

LATER = 10**9 * 10**10  # a "now" far past every file's mtime: nothing is racily clean


def make(root: Path, files: dict[str, bytes]) -> None:
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def expected(root: Path, relatives: list[str]) -> str:
    total = hashlib.sha256()
    for relative in sorted(relatives, key=lambda r: r.encode()):
        digest = hashlib.sha256((root / relative).read_bytes()).digest()
        total.update(relative.encode() + b"\0" + digest + b"\0")
    return total.hexdigest()[:32]


def test_counts_memory_and_runtime_json_but_not_machinery(tmp_path: Path) -> None:
    make(tmp_path, {
        "topics/a.md": b"a", "topics/sub/b.md": b"b", "sources/openprogram/_v2/s.md": b"s",
        ".scriptorium/runtime.json": b"{}", ".scriptorium/workspace-id": b"w-00000000",
        ".scriptorium/write.lock": b"", ".scriptorium-other/x": b"x", ".git/HEAD": b"ref",
        "topics/.a.md.1234.scriptorium-tmp": b"torn",
    })
    counted = [relative for relative, _ in revision_paths(str(tmp_path))]
    assert counted == [
        ".scriptorium/runtime.json", "sources/openprogram/_v2/s.md", "topics/a.md",
        "topics/sub/b.md",
    ]
    assert workspace_revision(str(tmp_path)) == expected(tmp_path, counted)
    assert len(workspace_revision(str(tmp_path))) == 32


def test_every_counted_change_moves_the_revision(tmp_path: Path) -> None:
    make(tmp_path, {"topics/a.md": b"a", ".scriptorium/runtime.json": b"{}"})
    before = workspace_revision(str(tmp_path))
    for relative, data in [("topics/a.md", b"A"), (".scriptorium/runtime.json", b"{ }"),
                           ("timeline/x.md", b"x")]:
        make(tmp_path, {relative: data})
        after = workspace_revision(str(tmp_path))
        assert after != before
        before = after
    make(tmp_path, {".scriptorium/session-end.json": b"{}", ".git/x": b"y"})
    assert workspace_revision(str(tmp_path)) == before


def test_unchanged_files_are_not_read_again(tmp_path: Path) -> None:
    make(tmp_path, {f"topics/t{i}.md": b"x" * i for i in range(50)})
    cache = RevisionCache(str(tmp_path))
    first = cache.revision(now_ns=LATER)
    assert cache.reads == 50
    assert cache.revision(now_ns=LATER) == first
    assert cache.reads == 50
    make(tmp_path, {"topics/t7.md": b"changed"})
    assert cache.revision(now_ns=LATER) != first
    assert cache.reads == 51
    os.unlink(tmp_path / "topics/t8.md")
    assert cache.revision(now_ns=LATER) == expected(
        tmp_path, [f"topics/t{i}.md" for i in range(50) if i != 8])
    assert cache.reads == 51


def test_a_racily_clean_file_is_read_again(tmp_path: Path) -> None:
    make(tmp_path, {"topics/a.md": b"a"})
    cache = RevisionCache(str(tmp_path))
    mtime = (tmp_path / "topics/a.md").stat().st_mtime_ns
    cache.revision(now_ns=mtime + RACY_NS // 2)
    cache.revision(now_ns=mtime + RACY_NS // 2)
    assert cache.reads == 2  # too young to trust its signature
    # Same size, same timestamps, different bytes: only the re-read notices.
    stat = (tmp_path / "topics/a.md").stat()
    (tmp_path / "topics/a.md").write_bytes(b"b")
    os.utime(tmp_path / "topics/a.md", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert cache.revision(now_ns=mtime + RACY_NS // 2) == expected(tmp_path, ["topics/a.md"])


def test_revision_after_a_known_change_equals_a_full_scan(tmp_path: Path) -> None:
    make(tmp_path, {f"topics/t{i}.md": b"x" for i in range(5)})
    cache = RevisionCache(str(tmp_path))
    cache.revision(now_ns=LATER)
    make(tmp_path, {"topics/t1.md": b"changed", "topics/new.md": b"n"})
    os.unlink(tmp_path / "topics/t2.md")
    after = cache.revision_after(["topics/t1.md", "topics/new.md", "topics/t2.md"], now_ns=LATER)
    assert after == workspace_revision(str(tmp_path))
