"""The symbolic-link rule of the state directory (store/_links.py, docs/decisions.md).

Directory links are followed by reads and writes alike; a linked file is
read but never replaced; a loop or a second name for one session is refused
with a typed error. Every scenario is the one a user builds by hand: move a
directory elsewhere and link it back.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from memory.ledger._ledger import WritePolicy
from memory.ledger._records import MARKER_KEY
from memory.maintenance import audit, read_audit_inputs
from memory.runtime._events import EventTally
from memory.runtime._headless import run_once
from memory.runtime._runtime import RuntimeConfig, open_runtime
from memory.runtime._session_state import BoundaryOutcome
from memory.workspace._revision import RevisionCache
from store import SessionCore, UnsafeLinkError, list_sessions
from tests.memory._runtime import tally


def config() -> RuntimeConfig:
    return RuntimeConfig(policy=WritePolicy(threshold=8000), writer_workers=2,
                         on_event=EventTally())


async def write_turns(state: Path, sid: str, facts: list[str]) -> dict[tuple[str, str], int]:
    """Append one user turn per fact (plus a reply) and run the session boundary."""
    async with open_runtime(state, config=config()) as rt:
        if not (state / "sessions" / sid).exists():
            await rt.sessions.create(title=sid, session_id=sid)
        for fact in facts:
            await rt.sessions.append(sid, {"role": "user", "content": fact})
            await rt.sessions.append(sid, {"role": "assistant", "content": "Noted."})
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        return dict(tally(rt).deliveries)


def topic_text(state: Path) -> str:
    topics = state / "memory" / "topics"
    return "".join(p.read_text() for p in sorted(topics.rglob("*.md")))


def audit_of(state: Path) -> dict[str, Any]:
    memory = state / "memory"
    workspace = (memory / ".scriptorium" / "workspace-id").read_text().strip()
    return audit(read_audit_inputs(str(state), workspace))


async def test_a_linked_topics_directory_keeps_every_earlier_fact(tmp_path: Path) -> None:
    state = tmp_path / "state"
    await write_turns(state, "a", ["I prefer green tea.", "My sister is named Alice."])
    before = topic_text(state)
    assert "green tea" in before and "Alice" in before
    synced = tmp_path / "synced"
    synced.mkdir()
    shutil.move(state / "memory" / "topics", synced / "topics")
    os.symlink("../../synced/topics", state / "memory" / "topics")

    await write_turns(state, "b", ["I prefer black coffee.", "My brother is named Bob."])

    assert (state / "memory" / "topics").is_symlink()  # still the user's link
    after = "".join(p.read_text() for p in sorted((synced / "topics").rglob("*.md")))
    for fact in ("green tea", "Alice", "black coffee", "Bob"):
        assert fact in after, fact
    report = audit_of(state)
    assert report["ok"], report
    assert report["citations"] == after.count("](../")  # it reads through the link too


async def test_a_linked_topic_file_is_read_and_never_replaced(tmp_path: Path) -> None:
    state = tmp_path / "state"
    await write_turns(state, "a", ["I prefer green tea."])
    [path] = [p for p in (state / "memory" / "topics").rglob("*.md") if "green tea" in p.read_text()]
    elsewhere = tmp_path / "notes.md"
    shutil.move(path, elsewhere)
    os.symlink(elsewhere, path)
    kept = elsewhere.read_bytes()

    deliveries = await write_turns(state, "a", ["I prefer black coffee."])

    assert path.is_symlink() and elsewhere.read_bytes() == kept
    assert "black coffee" in topic_text(state)  # routed to another shard of the subject
    assert all(count == 1 for count in deliveries.values())
    report = audit_of(state)
    assert not report["ok"]
    [warning] = report["warnings"]
    assert path.relative_to(state).as_posix() in warning and "symbolic link" in warning


def test_a_durable_write_never_replaces_a_linked_file(tmp_path: Path) -> None:
    """A marker merge onto a linked node file is refused whole, before its journal record."""
    core = SessionCore.create(tmp_path, "s")
    first = core.append({"role": "user", "content": "hello"})
    second = core.append({"role": "assistant", "content": "hi"})
    history = tmp_path / "sessions" / "s" / "history"
    name = next(n for n in os.listdir(history) if n.endswith(f"-{second['id']}.json"))
    elsewhere = tmp_path / "node.json"
    shutil.move(history / name, elsewhere)
    os.symlink(elsewhere, history / name)
    kept = elsewhere.read_bytes()
    before = {p.name: p.read_bytes() for p in history.iterdir()}
    patch = {MARKER_KEY: "w-00000000"}
    with pytest.raises(UnsafeLinkError, match="symbolic link"):
        core.merge_node_metadata_batch({first["id"]: patch, second["id"]: patch})
    assert (history / name).is_symlink() and elsewhere.read_bytes() == kept
    assert {p.name: p.read_bytes() for p in history.iterdir()} == before  # all or nothing
    core.close()
    reopened = SessionCore.open(tmp_path, "s")  # no record left to replay over the link
    assert all(MARKER_KEY not in n.metadata for n in reopened.nodes())


async def test_a_session_under_a_second_name_is_refused_and_written_once(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    SessionCore.create(state, "a").append({"role": "user", "content": "I prefer green tea."})
    os.symlink("a", state / "sessions" / "alias")

    async with open_runtime(state, config=config()) as rt:
        outcomes = await run_once(rt)
        deliveries = dict(tally(rt).deliveries)
    assert {session for session, _ in deliveries} == {"a"}  # not once more as "alias"
    assert all(count == 1 for count in deliveries.values())
    assert outcomes["a"].outcome == "written"
    assert outcomes["alias"].outcome == "error"
    assert outcomes["alias"].reason.startswith("sessions/alias: a link to the directory")
    problems: dict[str, Any] = {}
    assert [row["id"] for row in list_sessions(state, problems)] == ["a"]
    assert isinstance(problems["alias"], UnsafeLinkError)
    with pytest.raises(UnsafeLinkError, match="session 'a'"):
        SessionCore.open(state, "alias")
    assert not audit_of(state)["ok"]  # the alias is reported


async def test_a_session_directory_linked_from_outside_is_followed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    outside = tmp_path / "agent-sessions" / "a"
    outside.parent.mkdir()
    SessionCore.create(outside.parent.parent / "agent", "a")
    shutil.move(tmp_path / "agent" / "sessions" / "a", outside)
    (state / "sessions").mkdir(parents=True)
    os.symlink(outside, state / "sessions" / "a")

    await write_turns(state, "a", ["I prefer green tea."])

    # The markers are in the directory behind the link, where the agent reads them.
    workspace = (state / "memory" / ".scriptorium" / "workspace-id").read_text().strip()
    marked = [p for p in (outside / "history").iterdir() if workspace in p.read_text()]
    assert len(marked) == 2
    assert (state / "sessions" / "a").is_symlink()
    assert [row["id"] for row in list_sessions(state)] == ["a"]
    assert audit_of(state)["ok"]


def test_a_link_loop_under_memory_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    topics = tmp_path / "memory" / "topics" / "people"
    topics.mkdir(parents=True)
    os.symlink("..", topics / "again")
    with pytest.raises(UnsafeLinkError, match="memory/topics/people/again"):
        RevisionCache(str(tmp_path / "memory")).revision()


def test_two_links_to_one_outside_directory_keep_the_first_name(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    SessionCore.create(outside, "x").close()
    (tmp_path / "state" / "sessions").mkdir(parents=True)
    for name in ("b", "a"):
        os.symlink(outside / "sessions" / "x", tmp_path / "state" / "sessions" / name)
    problems: dict[str, Any] = {}
    assert [row["id"] for row in list_sessions(tmp_path / "state", problems)] == ["a"]
    assert list(problems) == ["b"] and "session 'a'" in str(problems["b"])
