"""The long commands draw their progress on a terminal's stderr, and only there.

``simulate --faults all`` spent a minute, and ``memory write`` against a
failing model half a minute, with nothing on the screen. Now each long
command draws what it does, how far and how fast on stderr, and a model
writer's retries and waits; nothing when stderr is not a terminal or with
``--quiet``, and stdout (the command's output, ``--json``) is never touched.

A real pseudo-terminal proves the terminal check (``import`` in a child
process); the other commands run in-process with the check answered yes
(``_progress.is_terminal``), and rich draws into click's captured stderr.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from memory.cli import _progress
from memory.cli._cli import main
from tests.memory.cli._states import owing_state
from tests.model_server import ScriptedModel

ROOT = Path(__file__).resolve().parents[3]
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
TURNS = 7


def shown(text: str) -> str:
    """What a terminal would show, as lines: escape sequences out, redraws split."""
    return ESCAPES.sub("", text).replace("\r", "\n")


def history(tmp_path: Path) -> Path:
    path = tmp_path / "turns.jsonl"
    path.write_text("".join(json.dumps({"role": ("user", "assistant")[n % 2],
                                        "content": f"turn {n} about tea", "id": f"t{n}"}) + "\n"
                            for n in range(TURNS)))
    return path


def scriptorium_on_a_pty(*args: str, stderr_tty: bool = True) -> tuple[int, str, str]:
    """Run ``scriptorium ARGS`` with stderr on a new pseudo-terminal (or a pipe); stdout a pipe."""
    master, slave = os.openpty() if stderr_tty else (-1, -1)
    env = {**os.environ, "COLUMNS": "160"}
    env.pop("FORCE_COLOR", None)
    env.pop("TTY_COMPATIBLE", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from memory.cli import main; main()", *args], cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=slave if stderr_tty else subprocess.PIPE)
    if not stderr_tty:
        out, err = proc.communicate(timeout=120)
        return proc.returncode, out.decode(), err.decode()
    os.close(slave)
    chunks: list[bytes] = []
    while True:  # read as it comes: a full pty buffer would block the child
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            proc.kill()
            raise AssertionError("the command drew nothing for 120 s")
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.stdout is not None
    printed = proc.stdout.read().decode()
    proc.stdout.close()
    return proc.wait(timeout=120), printed, b"".join(chunks).decode()


def test_import_draws_its_turns_on_a_terminal_and_nothing_on_a_pipe(tmp_path: Path) -> None:
    source = history(tmp_path)
    code, out, err = scriptorium_on_a_pty("import", "jsonl", str(source), "--session", "s1",
                                          "--state", str(tmp_path / "a"))
    assert code == 0, err
    assert out == f"s1 (new session): imported {TURNS} turn(s), skipped 0 already there\n"
    assert "importing turns.jsonl" in shown(err) and f"{TURNS}/{TURNS} turns" in shown(err)

    code, out, err = scriptorium_on_a_pty("import", "jsonl", str(source), "--session", "s1",
                                          "--state", str(tmp_path / "b"), stderr_tty=False)
    assert (code, err) == (0, "")  # a pipe: not a byte of progress
    assert out.startswith("s1 (new session)")

    code, _, err = scriptorium_on_a_pty("import", "jsonl", str(source), "--quiet",
                                        "--session", "s1", "--state", str(tmp_path / "c"))
    assert (code, err) == (0, "")


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every stderr counts as a terminal; rich draws into click's captured one, 160 wide."""
    monkeypatch.setattr(_progress, "is_terminal", lambda stream: True)
    monkeypatch.setenv("COLUMNS", "160")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.mark.usefixtures("terminal")
def test_simulate_draws_each_stage_with_its_counts(tmp_path: Path) -> None:
    result = invoke("simulate", "--sessions", "2", "--turns", "3", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["turns"] == 6  # stdout: the document alone
    screen = shown(result.stderr)
    for drawn in ("appending turns", "6/6 turns", "boundary round 1", "2/2 sessions",
                  "memory writes", "batches", "checking the invariants", "/s"):
        assert drawn in screen, (drawn, screen[-3000:])

    quiet = invoke("simulate", "--sessions", "2", "--turns", "3", "--quiet")
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == ""


@pytest.mark.usefixtures("terminal")
def test_memory_write_shows_the_model_writers_retries_and_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = owing_state(tmp_path)
    monkeypatch.setenv("SCRIPTORIUM_MODEL_RETRY_INITIAL", "0.01")  # no real seconds of backoff
    with ScriptedModel(script=["500", "500"]).running() as server:
        result = invoke("memory", "write", "demo", "--force", "--state", str(state),
                        "--writer", "model", "--base-url", server.base_url, "--model", "m-1")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stdout.startswith("demo: written")
    screen = shown(result.stderr)
    assert "model m-1" in screen
    assert re.search(r"waiting \d+\.\d s before attempt 2 of \d", screen), screen[-3000:]
    assert re.search(r"waiting \d+\.\d s before attempt 3 of \d", screen), screen[-3000:]
    assert re.search(r"1 call, 2 retries \(\d+\.\d s waited, last HTTP 500\)", screen)
    assert "1/1 batches" in screen  # at the end: every batch the run made is done


@pytest.mark.usefixtures("terminal")
def test_reindex_counts_the_files_it_reads(tmp_path: Path) -> None:
    state = owing_state(tmp_path)
    assert invoke("memory", "write", "demo", "--force", "--state", str(state)).exit_code == 0
    result = invoke("memory", "reindex", "--state", str(state))
    assert result.exit_code == 0, result.output
    match = re.search(r"reindexing memory.*? (\d+)/(\d+) files", shown(result.stderr))
    assert match is not None and match[1] == match[2], shown(result.stderr)[-2000:]
    assert int(match[1]) > 0
    assert invoke("memory", "reindex", "--quiet", "--state", str(state)).stderr == ""


@pytest.mark.usefixtures("terminal")
def test_backfill_counts_the_sources_it_writes(tmp_path: Path) -> None:
    state = owing_state(tmp_path)
    # A model that answers nothing usable: the batch's turns are archived (the
    # cycle's first step) and no topic cites them: backfill has sources to write.
    with ScriptedModel(default="malformed").running() as server:
        failed = invoke("memory", "write", "demo", "--force", "--quiet", "--state", str(state),
                        "--writer", "model", "--base-url", server.base_url, "--model", "m-1")
    assert failed.exit_code == 1 and failed.stderr.startswith("scriptorium: writer:")
    result = invoke("memory", "backfill", "--json", "--state", str(state))
    assert result.exit_code == 0, result.output
    processed = json.loads(result.stdout)["processed"]
    assert processed > 0
    assert f"{processed}/{processed} sources" in shown(result.stderr), shown(result.stderr)
    assert "backfilling uncited sources" in shown(result.stderr)
