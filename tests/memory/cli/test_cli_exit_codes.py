"""Exit codes as the README's table says, views that name what they could not show, EPIPE.

A new user's attack found bad flag values and a bad ``scriptorium.toml``
exiting 1 (README: 2, usage), ``session show`` and ``session branches``
silently leaving out a node file that is not JSON or a predecessor loop
(rc 0), and ``memory audit --json | head -c 100`` printing ``Error: Broken
pipe``. Each test runs the real command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from memory.cli._cli import main
from memory.cli._cli_errors import EXIT_PROBLEMS, EXIT_USAGE
from store import SessionCore

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as the README says
ROOT = Path(__file__).resolve().parent.parent.parent.parent


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def owing_state(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    core = SessionCore.create(state, "demo", title="demo")
    for fact in ("I prefer green tea.", "My sister is named Alice.", "The office is in Berlin."):
        core.append({"role": "user", "content": fact})
        core.append({"role": "assistant", "content": "Noted."})
    core.close()  # checkpoint: the journal would otherwise replay over the hand edits
    (state / "memory" / ".scriptorium").mkdir(parents=True)
    (state / "memory" / ".scriptorium" / "workspace-id").write_text("w-0000abcd\n")
    return state


@pytest.mark.parametrize("command", [["memory", "write", "demo"], ["run", "--once"]])
@pytest.mark.parametrize("flag", [
    ["--threshold", "0"], ["--threshold", "-1"], ["--idle-after", "-1"], ["--idle-after", "0"],
    ["--idle-after", "nan"], ["--session-idle", "inf"], ["--watchdog-poll", "0"],
])
def test_a_bad_flag_value_is_a_usage_error(
    tmp_path: Path, command: list[str], flag: list[str],
) -> None:
    state = owing_state(tmp_path)
    code, out, err = run(*command, *flag, "--state", str(state))
    assert code == EXIT_USAGE, (code, out, err)
    (line,) = err.splitlines()
    assert line.startswith(f"Error: {flag[0]}: ") and out == ""


def test_a_bad_simulate_flag_value_is_a_usage_error(tmp_path: Path) -> None:
    code, out, err = run("simulate", "--threshold", "0", "--state", str(tmp_path / "sim"))
    assert code == EXIT_USAGE and "--threshold" in err and out == ""


@pytest.mark.parametrize("content", [
    b'threshold = "many"\n', b"threshold = \n", b"colour = 3\n", b"idle_after = 60\n\xff\n",
])
def test_a_bad_settings_file_is_a_usage_error_naming_it(tmp_path: Path, content: bytes) -> None:
    state = owing_state(tmp_path)
    (state / "scriptorium.toml").write_bytes(content)
    code, out, err = run("memory", "write", "demo", "--state", str(state))
    assert code == EXIT_USAGE, (code, out, err)
    (line,) = err.splitlines()
    assert line.startswith(f"Error: {state / 'scriptorium.toml'}: ") and out == ""


def _break_a_node_file(state: Path) -> Path:
    path = max((state / "sessions" / "demo" / "history").iterdir())
    path.write_text("{not json")
    return path


def _loop_the_chain(state: Path) -> tuple[str, str]:
    nodes = SessionCore.open(state, "demo").nodes()
    first, last = nodes[0], nodes[-1]
    [path] = (state / "sessions" / "demo" / "history").glob(f"*-{first.id}.json")
    node = json.loads(path.read_text())
    node["predecessor"] = last.id
    path.write_text(json.dumps(node))
    return first.id, last.id


@pytest.mark.parametrize("view", ["show", "branches"])
@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_a_view_names_the_node_file_it_could_not_show(
    tmp_path: Path, view: str, as_json: list[str],
) -> None:
    state = owing_state(tmp_path)
    path = _break_a_node_file(state)
    code, out, err = run("session", view, "demo", "--state", str(state), *as_json)
    assert code == EXIT_PROBLEMS, (code, out, err)
    assert out  # the rest is shown
    warnings = [line for line in err.splitlines() if line.startswith("scriptorium: warning: ")]
    assert len(warnings) == 1 and path.name in warnings[0]


@pytest.mark.parametrize("view", ["show", "branches"])
def test_a_view_names_a_predecessor_loop(tmp_path: Path, view: str) -> None:
    state = owing_state(tmp_path)
    first, last = _loop_the_chain(state)
    code, out, err = run("session", view, "demo", "--state", str(state))
    assert code == EXIT_PROBLEMS, (code, out, err)
    (line,) = err.splitlines()
    assert "loops back on itself" in line and first in line and last in line


def test_an_intact_session_is_shown_with_exit_0(tmp_path: Path) -> None:
    state = owing_state(tmp_path)
    for view in ("show", "branches"):
        code, out, err = run("session", view, "demo", "--state", str(state))
        assert (code, err) == (0, "") and out


@pytest.mark.parametrize("command", [
    ["memory", "audit", "--json"], ["session", "show", "demo"], ["memory", "audit"],
])
def test_a_closed_stdout_exits_quietly(tmp_path: Path, command: list[str]) -> None:
    """``... | head -c 0``, made certain: the pipe's reader is closed before the command starts."""
    state = owing_state(tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-c", "from memory.cli._cli import main; main()", *command,
             "--state", str(state)],
            stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (EXIT_BROKEN_PIPE, "")
