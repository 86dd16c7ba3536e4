"""Appending a plan: a turn the log changed since is reported, a bad plan appends nothing."""

from __future__ import annotations

import errno
import json
from pathlib import Path

from memory.importers import LogImporter
from memory.runtime import RuntimeConfig, open_runtime
from tests.faults import RefusingFiles
from tests.memory.importers._logs import append_line, iso, pi_sessions, raw_pi

NOW = 2_000_000_000.0


def _assistant(uuid: str, parent: str, text: str, minute: int = 1) -> dict[str, object]:
    return {"type": "assistant", "uuid": uuid, "parentUuid": parent, "sessionId": "s",
            "timestamp": iso(minute), "message": {"id": "m1", "role": "assistant",
                                                  "content": [{"type": "text", "text": text}]}}


async def test_a_response_that_grew_after_its_import_is_reported_and_kept(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "s.jsonl"
    log.parent.mkdir()
    append_line(log, {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s",
                      "timestamp": iso(0), "message": {"role": "user", "content": "Hi."}})
    append_line(log, _assistant("a1", "u1", "Part one."))
    async with open_runtime(tmp_path / "state", config=RuntimeConfig(clock=lambda: NOW)) as rt:
        first = await LogImporter("claude-code", [log]).run(rt)
        assert first.imported == 2
        append_line(log, _assistant("a1b", "a1", "Part two."))
        second = await LogImporter("claude-code", [log]).run(rt)
        (row,) = second.sessions
        assert (row.imported, row.changed) == (0, ("a1",))
        branch = await rt.sessions.get_branch("claude-code-s")
        assert branch[-1]["content"] == "Part one."


async def test_a_turn_in_the_future_refuses_the_whole_session(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    append_line(log, {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s",
                      "timestamp": iso(0), "message": {"role": "user", "content": "Hi."}})
    append_line(log, json.loads(json.dumps(_assistant("a1", "u1", "Later."))) |
                {"timestamp": "2099-01-01T00:00:00.000Z"})
    async with open_runtime(tmp_path / "state", config=RuntimeConfig(clock=lambda: NOW)) as rt:
        importer = LogImporter("claude-code", [log])
        report = await importer.run(rt)
        again = await importer.run(rt)  # following: said once, until the file changes
    assert not again.errors
    assert report.errors == [(f"{log}:2: its time 4070908800.0 is in the future; nothing of "
                             "the file was imported: fix that line and run the import again")]
    assert not (tmp_path / "state" / "sessions" / "claude-code-s").exists()


async def test_a_new_session_the_disk_refuses_is_not_made_and_the_others_are(
        tmp_path: Path) -> None:
    first = pi_sessions(tmp_path / "logs")[0]
    refused = "pi-11111111-aaaa-4aaa-8aaa-000000000001"
    other = "pi-22222222-aaaa-4aaa-8aaa-000000000002"
    files = RefusingFiles()
    files.under, files.error = refused, errno.ENOSPC
    config = RuntimeConfig(clock=lambda: NOW, files=files)
    async with open_runtime(tmp_path / "state", config=config) as rt:
        report = await LogImporter("pi", [tmp_path / "logs"]).run(rt)
        assert report.interrupted and len(report.errors) == 1
        assert refused in report.errors[0] and "run the same import again" in report.errors[0]
        assert [s.session for s in report.sessions] == [other]
        assert not (tmp_path / "state" / "sessions" / refused).exists()  # no half session
        files.error = None
        again = await LogImporter("pi", [tmp_path / "logs"]).run(rt)
    assert not again.errors and not again.interrupted
    imported = {s.session: s.imported for s in again.sessions}
    raw = raw_pi(first)
    assert imported == {refused: len(raw.turns) + raw.summaries, other: 0}
