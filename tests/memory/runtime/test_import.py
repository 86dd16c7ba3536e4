"""Importing history from a JSON-lines file: times kept, repeats skipped, nothing half-imported.

Issue 13, "Importing history": one message a line, appended to one session
through the embedded API; importing twice changes nothing; a bad line is
reported with its line number and nothing of the file is imported; an
import into an existing session that fails part way is completed by running
it again.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest

from memory._errors import ImportInterruptedError, ImportLineError
from memory.runtime import import_jsonl
from memory.runtime._import import derived_session_id
from memory.runtime._runtime import RuntimeConfig, open_runtime
from store import SessionCore
from store._durable import DurableFiles

NOW = 1_780_000_000.0
T0 = 1_683_554_160.0  # 8 May 2023

LINES: list[dict[str, Any]] = [
    {"role": "user", "content": "I went to a support group yesterday.", "created_at": T0,
     "id": "D1-1", "speaker": "Caroline", "img_url": "http://example.invalid/a.jpg"},
    {"role": "assistant", "content": "That sounds powerful.", "created_at": T0 + 10,
     "id": "D1-2", "speaker": "Melanie"},
    {"role": "user", "content": "It was. I want to study counseling.", "created_at": T0 + 20},
    {"role": "assistant", "content": "A fork from the first turn.", "predecessor": "D1-1",
     "id": "D1-4"},
]


def config(files: DurableFiles | None = None) -> RuntimeConfig:
    if files is None:
        return RuntimeConfig(clock=lambda: NOW)
    return RuntimeConfig(clock=lambda: NOW, files=files)


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line)
                              for line in lines) + "\n", encoding="utf-8")
    return path


def session_files(state: Path) -> dict[str, bytes]:
    """Every file under sessions/, by relative path (the journal left out: it is the store's)."""
    root = state / "sessions"
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".journal" not in p.name and p.name != ".lock"}


def turns(state: Path, sid: str) -> list[tuple[str, str, str, str | None, float, Any]]:
    core = SessionCore.open(state, sid)
    return [(n.id, n.role, n.output, n.predecessor, n.created_at,
             n.metadata.get("speaker_display")) for n in core.nodes()]


async def test_a_file_imports_with_its_times_ids_speakers_and_branches(tmp_path: Path) -> None:
    source = write_lines(tmp_path / "history.jsonl", LINES)
    state = tmp_path / "state"
    async with open_runtime(state, config=config()) as rt:
        report = await import_jsonl(rt, source)
        assert report.session == derived_session_id(source.read_bytes())
        assert (report.created_session, report.imported, report.skipped) == (True, 4, 0)
        branch = await rt.sessions.get_branch(report.session)
        # the head is the file's last line, here a fork from the first turn
        assert [m["id"] for m in branch] == ["D1-1", "D1-4"]
        assert branch[0]["img_url"] == "http://example.invalid/a.jpg"  # metadata kept
    found = turns(state, report.session)
    third = found[2][0]
    assert third.startswith("i") and len(third) == 13  # an id from what the line says
    assert found == [
        ("D1-1", "user", LINES[0]["content"], "ROOT", T0, "Caroline"),
        ("D1-2", "llm", LINES[1]["content"], "D1-1", T0 + 10, "Melanie"),
        (third, "user", LINES[2]["content"], "D1-2", T0 + 20, None),
        ("D1-4", "llm", LINES[3]["content"], "D1-1", NOW, None),  # no created_at: now
    ]


async def test_importing_twice_changes_nothing(tmp_path: Path) -> None:
    source = write_lines(tmp_path / "history.jsonl", LINES)
    state = tmp_path / "state"
    async with open_runtime(state, config=config()) as rt:
        first = await import_jsonl(rt, source, session="s1")
    before = session_files(state)
    async with open_runtime(state, config=config()) as rt:
        again = await import_jsonl(rt, source, session="s1")
        without_session = await import_jsonl(rt, source)  # its own session, once
        twice = await import_jsonl(rt, source)
    assert (first.imported, first.skipped) == (4, 0)
    assert (again.created_session, again.imported, again.skipped) == (False, 0, 4)
    assert (twice.created_session, twice.imported, twice.skipped) == (False, 0, 4)
    after = session_files(state)
    assert {k: v for k, v in after.items() if k.startswith("s1/")} == before
    assert without_session.session == twice.session != "s1"


async def test_an_import_into_a_session_with_turns_follows_its_head(tmp_path: Path) -> None:
    source = write_lines(tmp_path / "more.jsonl", LINES[:2])
    state = tmp_path / "state"
    async with open_runtime(state, config=config()) as rt:
        sid = await rt.sessions.create(session_id="s1")
        await rt.sessions.append(sid, {"id": "old", "role": "user", "content": "before"})
        await import_jsonl(rt, source, session=sid)
        assert [m["id"] for m in await rt.sessions.get_branch(sid)] == ["old", "D1-1", "D1-2"]
        # and again: the first line names no predecessor, so the moved head is no conflict
        assert (await import_jsonl(rt, source, session=sid)).skipped == 2


BAD_LINES = [
    ("{not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ({"content": "no role"}, "role None"),
    ({"role": "system", "content": "x"}, "role 'system'"),
    ({"role": "user", "content": 5}, "content"),
    ({"role": "user", "content": "x", "created_at": T0 * 1000}, "in the future"),
    ({"role": "user", "content": "x", "created_at": "2023-05-08"}, "created_at"),
    ({"role": "user", "content": "x", "created_at": -1}, "created_at"),
    ({"role": "user", "content": "x", "id": "a/b"}, "'a/b'"),
    ({"role": "user", "content": "x", "id": "has space"}, "whitespace"),
    ({"role": "user", "content": "x", "id": "D1-1"}, "also line 1"),
    ({"role": "user", "content": "x", "predecessor": "nowhere"}, "'nowhere'"),
    ({"role": "user", "content": "x", "timestamp": T0}, "'timestamp'"),
    ({"role": "user", "content": "x", "caller": "D1-1"}, "'caller'"),
    ({"role": "user", "content": "x", "speaker": 3}, "speaker"),
    # the first turn's predecessor is no turn's id (every walk through it would loop)
    ({"role": "user", "content": "x", "id": "ROOT"}, "id 'ROOT' is the predecessor"),
    # a session has one first turn, and line 1 becomes it
    ({"role": "user", "content": "x", "predecessor": "ROOT"},
     "would start a second conversation after line 1"),
]


@pytest.mark.parametrize(("bad", "says"), BAD_LINES)
async def test_a_bad_line_is_named_and_nothing_of_the_file_is_imported(
    tmp_path: Path, bad: Any, says: str,
) -> None:
    source = write_lines(tmp_path / "history.jsonl", [*LINES[:2], "", bad, *LINES[2:]])
    state = tmp_path / "state"
    async with open_runtime(state, config=config()) as rt:
        sid = await rt.sessions.create(session_id="s1")
        before = session_files(state)
        for session in ("s1", None):  # an existing session, and a new one
            with pytest.raises(ImportLineError) as caught:
                await import_jsonl(rt, source, session=session)
            assert caught.value.line == 4 and caught.value.file == str(source)
            message = str(caught.value)
            assert message.startswith(f"{source}:4: ") and says in message, message
            assert "nothing of the file was imported" in message and "\n" not in message
        assert await rt.sessions.get_branch(sid) == []
    assert session_files(state) == before  # no session created, nothing appended


async def test_an_id_the_session_holds_as_another_turn_is_a_bad_line(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with open_runtime(state, config=config()) as rt:
        sid = await rt.sessions.create(session_id="s1")
        await rt.sessions.append(sid, {"id": "D1-2", "role": "user", "content": "other"})
        before = session_files(state)
        source = write_lines(tmp_path / "history.jsonl", LINES)
        with pytest.raises(ImportLineError, match=r":2: id 'D1-2' is already another turn"):
            await import_jsonl(rt, source, session=sid)
    assert session_files(state) == before


async def test_a_line_naming_root_in_a_session_with_its_first_turn_is_a_bad_line(
    tmp_path: Path,
) -> None:
    """The store refuses a second top-level turn; caught up front, not half way for good."""
    state = tmp_path / "state"
    async with open_runtime(state, config=config()) as rt:
        sid = await rt.sessions.create(session_id="s1")
        await rt.sessions.append(sid, {"id": "old", "role": "user", "content": "before"})
    before = session_files(state)
    source = write_lines(tmp_path / "history.jsonl", [
        {"role": "user", "content": "a", "predecessor": "old"},
        {"role": "user", "content": "b", "predecessor": "ROOT"}])
    async with open_runtime(state, config=config()) as rt:
        for _ in range(2):  # the same again: nothing half imported to finish
            with pytest.raises(ImportLineError,
                               match=r":2: predecessor 'ROOT' would start a second "
                                     r"conversation after session 's1'\'s first turn"):
                await import_jsonl(rt, source, session=sid)
    assert session_files(state) == before
    # a display root may start a chain at any time: the store takes it, so does the plan
    root = write_lines(tmp_path / "root.jsonl", [
        {"role": "user", "content": "", "predecessor": "ROOT", "display": "root"}])
    async with open_runtime(state, config=config()) as rt:
        assert (await import_jsonl(rt, root, session=sid)).imported == 1


async def test_the_head_moves_to_the_tip_of_an_imported_conversation(tmp_path: Path) -> None:
    """Lines equal to turns already there are shared; the new turns fork off, and are live.

    Recall ranks the head's branch first, so a head left at the old tip would
    treat every turn the second file adds as off-branch.
    """
    def line(n: int) -> dict[str, Any]:
        return {"role": ("user", "assistant")[n % 2], "content": f"turn {n}"}

    state = tmp_path / "state"
    first = write_lines(tmp_path / "first.jsonl", [line(0), line(1), line(2)])
    second = write_lines(tmp_path / "second.jsonl", [line(0), line(1), line(5), line(6)])
    async with open_runtime(state, config=config()) as rt:
        await import_jsonl(rt, first, session="s1")
        old_tip = (await rt.sessions.get_branch("s1"))[-1]["id"]
        report = await import_jsonl(rt, second, session="s1")
        assert (report.imported, report.skipped) == (2, 2)  # the shared prefix, once
        branch = await rt.sessions.get_branch("s1")
        assert [m["content"] for m in branch] == ["turn 0", "turn 1", "turn 5", "turn 6"]
        # importing it again changes nothing, also not a head moved elsewhere since
        await rt.sessions.set_head("s1", old_tip)
        before = session_files(state)
        assert (await import_jsonl(rt, second, session="s1")).imported == 0
        assert (await rt.sessions.get_branch("s1"))[-1]["id"] == old_tip
    assert session_files(state) == before


class DiskFullFromAppend(DurableFiles):
    """ENOSPC on every journal write from the ``fill_on``-th on, until space is freed.

    Full for good, not once: the runtime redelivers an append with an id to
    the restarted session actor, which would ride over a single failure.
    """

    def __init__(self, fill_on: int) -> None:
        super().__init__()
        self.fill_on, self.writes, self.freed = fill_on, 0, False

    def _step(self, step: str, path: str) -> None:
        if step == "write" and path.endswith(".journal") and not self.freed:
            self.writes += 1
            if self.writes >= self.fill_on:
                raise OSError(errno.ENOSPC, "No space left on device (injected)", path)


async def test_an_import_stopped_part_way_is_completed_by_running_it_again(
    tmp_path: Path,
) -> None:
    source = write_lines(tmp_path / "history.jsonl", LINES)
    clean = tmp_path / "clean"
    async with open_runtime(clean, config=config()) as rt:
        await import_jsonl(rt, source, session="s1")
    state = tmp_path / "state"
    files = DiskFullFromAppend(fill_on=3)
    async with open_runtime(state, config=config(files)) as rt:
        # into an existing session (a new one is all or nothing: test_import_all_or_nothing.py)
        await rt.sessions.create(session_id="s1")
        with pytest.raises(ImportInterruptedError) as caught:
            await import_jsonl(rt, source, session="s1")
        files.freed = True
    assert caught.value.line == 3 and caught.value.appended == 2
    assert "run the same import again" in str(caught.value)
    assert [t[0] for t in turns(state, "s1")] == ["D1-1", "D1-2"]
    async with open_runtime(state, config=config()) as rt:
        report = await import_jsonl(rt, source, session="s1")
    assert (report.imported, report.skipped) == (2, 2)
    assert turns(state, "s1") == turns(clean, "s1")
