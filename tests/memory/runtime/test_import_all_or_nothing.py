"""An import into a new session is all or nothing, whatever step the disk fills at.

The disk is full from step ``k`` of the import on, for good (not once: the
runtime redelivers an append, which would ride over one failure), for
every ``k`` the import takes. Afterwards the sessions list cleanly (no
directory without meta.json), the session is absent or whole, and the
error names a file; with space freed, the same import makes the session
exactly as an undisturbed import does.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

import store._durable as durable_module
from memory._errors import ImportFailedError
from memory.runtime import import_jsonl
from memory.runtime._runtime import RuntimeConfig, open_runtime
from store import DurableFiles, SessionCore, list_sessions

NOW = 1_780_000_000.0
LINES = [
    {"role": "user", "content": "My bicycle is a red Gazelle.", "created_at": NOW - 60},
    {"role": "assistant", "content": "Noted.", "created_at": NOW - 50},
    {"role": "user", "content": "It has a basket.", "created_at": NOW - 40},
]


class FullFrom(DurableFiles):
    """Every durable step from the ``full_at``-th (counted once armed) fails with ENOSPC."""

    def __init__(self, full_at: int | None = None) -> None:
        super().__init__()
        self.full_at, self.armed, self.steps = full_at, False, 0

    def _step(self, step: str, path: str) -> None:
        if not self.armed:
            return
        self.steps += 1
        if self.full_at is not None and self.steps >= self.full_at:
            raise OSError(errno.ENOSPC, "No space left on device (injected)", path)


def _config(files: DurableFiles) -> RuntimeConfig:
    return RuntimeConfig(clock=lambda: NOW, files=files)


def _turns(state: Path) -> list[tuple[str, str, float]]:
    return [(n.id, n.output, n.created_at) for n in SessionCore.open(state, "s").nodes()]


async def _import(state: Path, source: Path, files: FullFrom) -> ImportFailedError | None:
    async with open_runtime(state, config=_config(files)) as rt:
        files.armed = True
        try:
            await import_jsonl(rt, source, session="s")
        except ImportFailedError as error:
            return error
        finally:
            files.armed = False
    return None


async def test_a_new_session_is_imported_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A failed syncfs turns the shared filesystem sync off for the process (store._durable):
    # the injected failures get their own table, so later tests still see the real one.
    monkeypatch.setattr(durable_module, "_SYNCS", {})
    source = tmp_path / "history.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    counting = FullFrom()
    assert await _import(tmp_path / "clean", source, counting) is None
    whole = _turns(tmp_path / "clean")
    assert len(whole) == 3
    for full_at in range(1, counting.steps + 1):
        state = tmp_path / f"full-{full_at}"
        error = await _import(state, source, FullFrom(full_at))
        unlisted: dict[str, object] = {}
        rows = list_sessions(state, unlisted)  # type: ignore[arg-type]
        assert unlisted == {}, f"disk full at step {full_at}: {unlisted}"
        if error is None or not error.installed:
            assert rows == [], f"disk full at step {full_at}: a session was left"
            assert error is not None and "No space left on device" in str(error)
            assert "no session was made" in str(error) and "/" in str(error)  # names a file
        else:
            assert _turns(state) == whole
        assert await _import(state, source, FullFrom()) is None  # space freed: run it again
        assert _turns(state) == whole

