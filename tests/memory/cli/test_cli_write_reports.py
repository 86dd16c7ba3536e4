"""``memory write`` and ``run`` as a new user runs them: real processes, broken sessions.

Each command must end, print per session its outcome with the reason, print
``written`` only when nothing the command covers is still owed, and exit
non-zero otherwise. The commands run as real processes under a timeout: on
the code before this fix they waited forever, which shows as that timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from store import SessionCore

REPO = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-c", "from memory.cli._cli import main; main()"]
HANG = 120.0  # real seconds: these commands take one or two; reaching it is a hang
# ~1,000 tokens a turn (the extractive writer skips the long sentence), so
# eight turns pass the 8,000-token trigger.
FILLER = " ".join(["lorem ipsum dolor sit amet"] * 160)


def build(state: Path, sid: str, turns: int, *, long: bool = False) -> list[str]:
    core = SessionCore.create(state, sid, title=sid)
    previous, ids = "ROOT", []
    for index in range(turns):
        text = f"Team {sid} number {index} prefers tea. We decided to ship it."
        node = core.append({"role": ["user", "assistant"][index % 2], "predecessor": previous,
                            "content": f"{text} {FILLER}" if long else text})
        previous = node["id"]
        ids.append(previous)
    core.close()
    return ids


def scriptorium(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args, "--state", str(state)],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=HANG,
        env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture
def state(tmp_path: Path) -> Path:
    ids = build(tmp_path, "bad", 4)
    build(tmp_path, "good", 2)
    [path] = (tmp_path / "sessions" / "bad" / "history").glob(f"*-{ids[1]}.json")
    path.write_text("{not json")
    return tmp_path


def test_memory_write_force_on_a_broken_session_ends_with_the_reason(state: Path) -> None:
    done = scriptorium(state, "memory", "write", "bad", "--force")
    assert done.returncode == 1, done
    [line] = done.stdout.splitlines()
    assert line.startswith("bad: error: ") and "sessions/bad/history/0001-l-" in line
    assert "Traceback" not in done.stderr


def test_run_once_reports_each_session_and_writes_the_others(state: Path) -> None:
    done = scriptorium(state, "run", "--once", "--json")
    assert done.returncode == 1, done  # one session is still owed
    report = json.loads(done.stdout)
    assert report["sessions"] == {"bad": "error", "good": "written"}
    assert set(report) == {"sessions", "reasons", "owed", "writer"}
    assert "broken" in report["reasons"]["bad"]
    assert "nothing the session boundary covers is owed" in report["reasons"]["good"]
    assert report["owed"] == {"bad": None, "good": []}  # None: unknown, the walk failed
    pending = scriptorium(state, "memory", "pending", "good", "--json")
    assert json.loads(pending.stdout)["pending"] == []


def test_written_only_when_nothing_covered_is_still_owed(tmp_path: Path) -> None:
    build(tmp_path, "demo", 2)
    meta = tmp_path / "sessions" / "demo" / "meta.json"
    document = json.loads(meta.read_bytes())
    document["head_id"] = 42  # the head branch, what --force covers first, is unknown
    meta.write_text(json.dumps(document))
    done = scriptorium(tmp_path, "memory", "write", "demo", "--force")
    assert done.returncode == 1, done
    assert done.stdout.startswith("demo: error: ") and "head_id 42 is neither a node id nor null" in done.stdout


def test_memory_write_without_force_says_why_nothing_was_written(tmp_path: Path) -> None:
    build(tmp_path, "short", 2)
    build(tmp_path, "long", 10, long=True)
    done = scriptorium(tmp_path, "memory", "write", "--threshold", "8000", "--json")
    assert done.returncode == 0, done
    report = json.loads(done.stdout)
    assert report["sessions"] == {"long": "written", "short": "not due"}
    assert "under the 8000-token threshold" in report["reasons"]["short"]
    assert "--force" in report["reasons"]["short"]
    assert "nothing the trigger rule covers is owed" in report["reasons"]["long"]
    done = scriptorium(tmp_path, "memory", "write", "", "--json")  # '' is no session, not all
    assert done.returncode == 2, done  # a usage error, before any session is touched
    assert "session id" in done.stderr


def test_the_daemon_logs_the_session_it_skips_and_serves_the_others(state: Path) -> None:
    build(state, "busy", 10, long=True)  # over the trigger: the scan's reconsider writes it
    daemon = subprocess.Popen(
        [*CLI, "run", "--log-json", "--scan-interval", "0.2",
         "--threshold", "8000", "--state", str(state)],
        cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    events: list[dict[str, Any]] = []
    seen = threading.Event()

    def read() -> None:
        assert daemon.stderr is not None
        for line in daemon.stderr:
            events.append(json.loads(line))
            if (any(e["event"] == "skipped" and e["session"] == "bad" for e in events)
                    and any(e["event"] == "job" and e["session"] == "busy"
                            and e["result"] == "written" for e in events)):
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen.wait(HANG), events
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(HANG)
        reader.join(HANG)
    assert daemon.returncode == 0
    [skipped] = [e for e in events if e["event"] == "skipped"]  # once, not at every scan
    assert "sessions/bad/history/0001-l-" in skipped["reason"]



@pytest.mark.parametrize("force", [[], ["--force"]])
def test_an_error_reports_its_owed_turns_as_unknown_not_none(
    tmp_path: Path, force: list[str],
) -> None:
    """A session whose meta.json is corrupt or missing owes what nobody can tell: null, not []."""
    build(tmp_path, "corrupt", 2)
    build(tmp_path, "missing", 2)
    build(tmp_path, "good", 2)
    (tmp_path / "sessions" / "corrupt" / "meta.json").write_text("{garbage")
    (tmp_path / "sessions" / "missing" / "meta.json").unlink()
    done = scriptorium(tmp_path, "memory", "write", *force, "--json")
    assert done.returncode == 1, done
    report = json.loads(done.stdout)
    assert report["sessions"]["corrupt"] == report["sessions"]["missing"] == "error"
    assert report["owed"]["corrupt"] is None and report["owed"]["missing"] is None
    assert isinstance(report["owed"]["good"], list)
