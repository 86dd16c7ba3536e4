"""Every CLI error is one line naming the file and the cause, with a documented exit code.

0 ok, 1 a problem found, 2 usage (bad argument, unknown or unsafe id, --state
not a state), 3 the state could not be read or written. The traceback only
under ``scriptorium --debug``. Paths from the user are normalised where
they enter.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import TypeVar

import orjson
import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from actors import ActorCrashedError, ActorStoppedError, PoisonMessageError
from memory import open_runtime
from memory._errors import CorruptWorkspaceIdError
from memory.cli._cli import main
from memory.cli._cli_errors import (
    EXIT_FAILURE,
    EXIT_PROBLEMS,
    EXIT_USAGE,
    describe,
    root_cause,
)
from store import SessionCore
from store._durable import DurableFiles
from store._errors import MetaFileError
from supervisors import RestartIntensityExceededError
from tests.fixture import copy_fixture

ROOT = Path(__file__).resolve().parent.parent.parent.parent


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return copy_fixture(tmp_path / "state")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def assert_one_line(result: Result, code: int, *needles: str) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: ")
    for needle in needles:
        assert needle in line, line
    return line


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed entry point, in a real process."""
    return subprocess.run([sys.executable, "-c", "from memory.cli._cli import main; main()", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)


# -- unwrapping ---------------------------------------------------------------------


E = TypeVar("E", bound=BaseException)


def _caused(wrapper: E, cause: BaseException) -> E:
    wrapper.__cause__ = cause
    return wrapper


def test_kernel_wrappers_and_groups_unwrap_to_the_real_cause() -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/s/memory/topics/a.md")
    nested = _caused(ActorStoppedError("runtime/workspace"), _caused(
        RestartIntensityExceededError("runtime", "workspace", 5, 10.0),
        _caused(PoisonMessageError("runtime/workspace", object(), 3), full)))
    group = ExceptionGroup("tasks", [ActorStoppedError("runtime/watchdog"), nested])
    assert root_cause(group) is full
    line, code = describe(group)
    assert code == EXIT_FAILURE
    assert line == ("/s/memory/topics/a.md: No space left on device (ENOSPC); "
                    "free disk space, then run the command again")
    # A wrapper with no cause is itself the cause.
    alone = ActorCrashedError("runtime/x", object())
    assert root_cause(alone) is alone
    assert describe(alone)[1] == EXIT_FAILURE and "--debug" in describe(alone)[0]


def test_typed_errors_keep_their_message_and_name_the_state() -> None:
    corrupt = CorruptWorkspaceIdError("memory/.scriptorium/workspace-id", b"junk\n")
    line, code = describe(_caused(ActorStoppedError("runtime/workspace"), corrupt), "/srv/state")
    assert code == EXIT_FAILURE
    assert line.startswith("memory/.scriptorium/workspace-id holds b'junk\\n'")
    assert line.endswith("[state /srv/state]") and "\n" not in line
    meta = MetaFileError("sessions/demo/meta.json", "not valid JSON")
    assert describe(meta, "/srv/state")[1] == EXIT_FAILURE


@given(st.text(), st.sampled_from([RuntimeError, ValueError, KeyError]))
def test_any_error_is_exactly_one_line(text: str, kind: type[Exception]) -> None:
    for exc in (kind(text), OSError(errno.EIO, text, f"/s/{text}"),
                _caused(PoisonMessageError("runtime/w", text, 3), kind(text))):
        line, code = describe(ExceptionGroup("g", [exc]))
        assert code == EXIT_FAILURE
        assert len(line.splitlines()) <= 1 and line == line.strip()


# -- the real CLI --------------------------------------------------------------------


def test_a_corrupt_workspace_id_is_one_line_for_every_command(state: Path) -> None:
    (state / "memory" / ".scriptorium" / "workspace-id").write_text("garbage\n")
    for command in (["memory", "write", "demo", "--force"], ["run", "--once"],
                    ["memory", "pending", "demo"], ["session", "show", "demo"],
                    ["memory", "migrate"]):
        assert_one_line(invoke(*command, "--state", str(state)), EXIT_FAILURE,
                        "memory/.scriptorium/workspace-id", "not a workspace id", str(state))


def test_a_corrupt_meta_json_is_one_line_naming_it(state: Path) -> None:
    (state / "sessions" / "demo" / "meta.json").write_text("{garbage")
    for command in (["memory", "pending", "demo"], ["session", "branches", "demo"]):
        assert_one_line(invoke(*command, "--state", str(state)), EXIT_FAILURE,
                        "sessions/demo/meta.json", "not valid JSON")


def test_a_write_reports_a_corrupt_meta_json_as_that_sessions_outcome(state: Path) -> None:
    """memory write reports per session (docs/decisions.md): the cause on the session's line."""
    (state / "sessions" / "demo" / "meta.json").write_text("{garbage")
    for command in (["memory", "write", "demo", "--force"], ["memory", "write", "demo"]):
        result = invoke(*command, "--state", str(state))
        assert result.exit_code == 1, (result.exit_code, result.output)
        (line,) = result.stdout.splitlines()
        assert line.startswith("demo: error: ") and "Traceback" not in result.output
        assert "sessions/demo/meta.json" in line and "not valid JSON" in line


def test_debug_prints_the_traceback_too(state: Path) -> None:
    (state / "sessions" / "demo" / "meta.json").write_text("{garbage")
    process = cli("--debug", "memory", "pending", "demo", "--state", str(state))
    assert process.returncode == EXIT_FAILURE
    assert "Traceback" in process.stderr
    assert process.stderr.splitlines()[-1].startswith("Error: sessions/demo/meta.json")
    plain = cli("memory", "pending", "demo", "--state", str(state))
    assert plain.returncode == EXIT_FAILURE
    assert plain.stderr.count("\n") == 1 and "Traceback" not in plain.stderr


def test_a_full_disk_names_the_file_and_says_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC injected at the durable seam's write step (the runtime's first write is the id)."""
    state = tmp_path / "state"
    core = SessionCore.create(state, "demo")
    core.append({"role": "user", "content": "I prefer tea."})

    def full(self: DurableFiles, step: str, path: str) -> None:
        if step == "write":
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(DurableFiles, "_step", full)
    for command in (["memory", "write", "demo", "--force"], ["run", "--once"]):
        line = assert_one_line(invoke(*command, "--state", str(state)), EXIT_FAILURE,
                               "No space left on device (ENOSPC)", "free disk space")
        assert f"{state}/memory/.scriptorium/workspace-id:" in line


@pytest.mark.parametrize("command", [
    ["session", "list"], ["session", "show", "demo"], ["memory", "pending", "demo"],
    ["memory", "audit"], ["memory", "write"], ["memory", "release"], ["memory", "backfill"],
])
def test_a_state_that_is_not_there_is_a_usage_error(tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "nowhere"
    assert_one_line(invoke(*command, "--state", str(missing)), EXIT_USAGE,
                    str(missing), "does not exist", "--state")
    assert not missing.exists()  # a read command creates nothing
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line(invoke(*command, "--state", str(empty)), EXIT_USAGE,
                    "not a scriptorium state directory")
    assert os.listdir(empty) == []


def test_the_state_env_default_is_checked_too(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTORIUM_STATE", str(tmp_path / "gone"))
    assert_one_line(invoke("session", "list"), EXIT_USAGE, str(tmp_path / "gone"))


def test_run_creates_its_state(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    result = invoke("run", "--once", "--json", "--state", str(fresh))
    assert result.exit_code == 0, result.output
    assert (fresh / "sessions").is_dir()


@pytest.mark.parametrize("sid", ["../x", "", "a/b", "nosuch"])
def test_release_of_an_unsafe_or_unknown_session_is_an_error(state: Path, sid: str) -> None:
    assert_one_line(invoke("memory", "release", sid, "--state", str(state)), EXIT_USAGE,
                    repr(sid))


def test_memory_write_of_an_empty_id_writes_nothing(state: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in (state / "sessions").rglob("*")}
    assert_one_line(invoke("memory", "write", "", "--state", str(state)), EXIT_USAGE,
                    "session id ''", "it is empty")
    assert_one_line(invoke("memory", "write", "", "--force", "--state", str(state)), EXIT_USAGE)
    assert {p: p.stat().st_mtime_ns for p in (state / "sessions").rglob("*")} == before


def test_an_unsafe_session_argument_is_a_usage_error(state: Path) -> None:
    assert_one_line(invoke("session", "branch", "../etc", "--state", str(state)), EXIT_USAGE,
                    "'../etc'", "path separator")


def test_problems_found_are_exit_1(state: Path) -> None:
    SessionCore.open(state, "demo").merge_node_metadata_batch(
        {"a2b": {"memory_written_scriptorium": "w-aa116220"}})
    assert invoke("memory", "audit", "--state", str(state)).exit_code == EXIT_PROBLEMS


# -- paths normalised where they enter ---------------------------------------------------


def test_simulate_with_dotdot_in_state_passes_citations_resolve(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    state = f"{tmp_path}/x/../y/sim"
    process = cli("simulate", "--sessions", "3", "--turns", "6", "--json", "--state", state)
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-2000:]
    document = orjson.loads(process.stdout)
    assert document["invariants"]["citations_resolve"] == "PASS"
    assert document["state"] == str(tmp_path / "y" / "sim")


def test_relative_and_dotdot_states_are_the_same_state(state: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(state.parent)
    spelled = ["state", f"./state/../{state.name}", f"{state}/./sessions/.."]
    for spelling in spelled:
        result = invoke("memory", "pending", "demo", "--json", "--state", spelling)
        assert result.exit_code == 0, result.output
        assert orjson.loads(result.stdout)["pending"] == ["a1"]


async def test_open_runtime_normalises_its_state_dir(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    async with open_runtime(f"{tmp_path}/x/../y") as rt:
        assert rt.state_dir == str(tmp_path / "y")
        sid = await rt.sessions.create(session_id="demo")
        await rt.sessions.append(sid, {"role": "user", "content": "I prefer tea."})
        await rt.flush(sid)
        assert await rt.pending(sid) == []
        assert rt.memory_dir == str(tmp_path / "y" / "memory")
