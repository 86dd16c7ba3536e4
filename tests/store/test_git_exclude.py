"""The private session files listed in the agent's ``.git/info/exclude`` (see store._git_exclude)."""

from __future__ import annotations

from pathlib import Path

from store import DurableFiles
from store._git_exclude import HEADER, exclude_patterns, keep_out_of_git


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    state = tmp_path / "state"
    session = state / "sessions" / "s1"
    session.mkdir(parents=True)
    return state, session


def test_patterns_are_anchored_at_the_work_tree(tmp_path: Path) -> None:
    state, session = _layout(tmp_path)
    assert exclude_patterns(str(session), str(session))[:3] == ["/.lock", "/.claim", "/.journal"]
    assert exclude_patterns(str(session), str(session.parent))[0] == "/*/.lock"
    assert exclude_patterns(str(session), str(state))[0] == "/sessions/*/.lock"
    assert exclude_patterns(str(session), str(state))[-1] == ".*.scriptorium-tmp"


def test_lines_are_added_once_and_the_agents_own_lines_are_kept(tmp_path: Path) -> None:
    state, session = _layout(tmp_path)
    info = session / ".git" / "info"
    info.mkdir(parents=True)
    (info / "exclude").write_text("# the agent's\n*.bak")  # no final newline
    assert keep_out_of_git(str(session), str(state), DurableFiles())
    first = (info / "exclude").read_text()
    assert first.startswith("# the agent's\n*.bak\n" + HEADER + "\n/.lock\n")
    assert keep_out_of_git(str(session), str(state), DurableFiles())
    assert (info / "exclude").read_text() == first


def test_a_linked_work_tree_uses_its_common_dir(tmp_path: Path) -> None:
    state, session = _layout(tmp_path)
    common = tmp_path / "main.git"
    linked = common / "worktrees" / "s1"
    linked.mkdir(parents=True)
    (linked / "commondir").write_text("../..\n")
    (session / ".git").write_text(f"gitdir: {linked}\n")
    assert keep_out_of_git(str(session), str(state), DurableFiles())
    assert "/.journal" in (common / "info" / "exclude").read_text().splitlines()


def test_no_repository_or_one_above_the_state_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()  # a repository around the whole state: not the agent's
    state, session = _layout(tmp_path)
    assert not keep_out_of_git(str(session), str(state), DurableFiles())
    assert not (tmp_path / ".git" / "info").exists()
