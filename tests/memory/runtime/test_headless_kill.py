"""``scriptorium run`` killed with SIGKILL at random points, restarted, and nothing is lost.

SPEC §1: Scriptorium never omits a turn and duplicates only after a crash,
bounded by one batch per crash. Here the headless runtime runs as a real
process on a state directory while another process (an agent, taking the
session lock as scriptorium's store does) appends turns to three sessions.
The test kills the runtime with SIGKILL several times at seeded random
points (after a random number of its ``--log-json`` events: mid-job, between
jobs, while appends arrive), restarts it each time, and finally runs
``scriptorium run --once``. Then:

* **nothing lost**: every recordable turn of every head branch carries this
  workspace's marker, and its source is in the session's archive;
* **nothing torn**: node files, meta.json, archives and topics all parse
  (topics strictly);
* **duplicates bounded**: per session, the turns of ``written`` job events
  beyond the number of turns are at most one batch per kill. Counted from
  the job events, this sees a repeated delivery only when the interrupted
  one got as far as its event; a kill before that hides the repeat (the
  topics hide it too: the extractive writer merges a repeated record), so
  the bound is checked on what is visible.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from memory.ledger._records import MARKER_KEY, source_id
from memory.workspace._archive import read_archive
from memory.workspace._topics import parse_topic
from memory.workspace._workspace_id import read_workspace_id
from store import SessionCore
from tests.faults import log_events

REPO = Path(__file__).resolve().parents[3]
SESSIONS = ["k1", "k2", "k3"]
KILLS = 4
CHUNK = 10  # turns per session the agent appends while each incarnation runs
THRESHOLD = "8000"
# Each turn: one fact the extractive writer keeps, and a long sentence it skips
# (over its length limit) that makes the turn ~1,000 tokens, so a batch is ~8 turns.
FILLER = " ".join(["lorem ipsum dolor sit amet"] * 160)


def _turn_text(session: str, index: int) -> str:
    return f"The office of team {session} number {index} is in Berlin. {FILLER}"


# -- the agent process ---------------------------------------------------------------


def agent_main(argv: list[str]) -> None:
    """Append ``n`` turns to every session for each line ``n`` read on stdin; echo when done."""
    (state,) = argv
    cores = {sid: SessionCore.open(state, sid) for sid in SESSIONS}
    counts = dict.fromkeys(SESSIONS, 0)
    for line in sys.stdin:
        for _ in range(int(line)):
            for sid, core in cores.items():
                index = counts[sid]
                core.append({"id": f"{sid}-t{index}", "role": ("user", "assistant")[index % 2],
                             "content": _turn_text(sid, index)})
                counts[sid] += 1
        for core in cores.values():
            core.close()
        print(json.dumps(counts), flush=True)


# -- helpers ---------------------------------------------------------------------------


def _python(code: str, *args: str, **options: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, **options)


# A fault the planted test runs the runtime with: markers merged *before* the
# write cycle (SPEC §6.4 reversed). It says so on stderr, the harness kills the
# runtime on that line, so the kill lands in between every time.
MARKED_FIRST = "marked before writing"
MARK_FIRST = f"""
import anyio, json, sys
from memory.ledger._records import MARKER_KEY
from memory.runtime._desk import JobDesk
from memory.runtime._runtime import MemoryRuntime
runtimes = []
start = MemoryRuntime.__init__
def keep(self, *args, **options):
    start(self, *args, **options)
    runtimes.append(self)
async def mark_first(self, batches):
    rt = runtimes[-1]
    for batch in batches:
        await rt.sessions.merge_node_metadata_batch(
            batch.session_id, {{n: {{MARKER_KEY: rt.workspace_id}} for n in batch.node_ids}})
    print(json.dumps({{"event": {MARKED_FIRST!r}}}), file=sys.stderr, flush=True)
    await anyio.sleep_forever()  # killed here
MemoryRuntime.__init__ = keep
JobDesk.write_group = mark_first
"""


def _scriptorium(
    state: Path, *args: str, plant: str = "", **options: Any
) -> subprocess.Popen[str]:
    return _python(plant + "\nfrom memory.cli._cli import main; main()", *args,
                   "--state", str(state), "--threshold", THRESHOLD, "--workers", "2",
                   "--log-json", **options)


def _run_and_kill(state: Path, agent: subprocess.Popen[str], rng: random.Random,
                  jobs: list[dict[str, Any]], plant: str) -> None:
    """Start ``scriptorium run``, feed the agent a chunk, SIGKILL after k events."""
    runtime = _scriptorium(state, "run", "--scan-interval", "0.05", plant=plant,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    guard = threading.Timer(60, runtime.kill)  # a hung run fails the test, never the suite
    guard.start()
    try:
        assert runtime.stderr is not None and agent.stdin is not None and agent.stdout
        kill_after = rng.randint(1, 4)  # events after "started": jobs mostly
        seen = 0
        for event in log_events(runtime.stderr):
            if event["event"] == "job":
                jobs.append(event)
            if event["event"] == "started":
                agent.stdin.write(f"{CHUNK}\n")
                agent.stdin.flush()
                agent.stdout.readline()  # the chunk is on disk; the runtime scans it
                continue
            seen += 1
            if seen >= kill_after or event["event"] == MARKED_FIRST:
                break
        else:
            raise AssertionError(f"scriptorium run exited early ({runtime.wait()})")
    finally:
        guard.cancel()
        runtime.send_signal(signal.SIGKILL)
        runtime.wait(timeout=30)
        assert runtime.stderr is not None
        for event in log_events(runtime.stderr):  # whatever it printed before dying
            if event["event"] == "job":
                jobs.append(event)


def _check_state(state: Path, jobs: list[dict[str, Any]]) -> dict[str, int]:
    memory = state / "memory"
    workspace = read_workspace_id(str(memory))
    assert workspace is not None
    for path in sorted((memory / "topics").rglob("*.md")):
        parse_topic(path.read_text(encoding="utf-8"), path.relative_to(memory).as_posix())
    duplicates: dict[str, int] = {}
    written = Counter[str]()
    largest = Counter[str]()
    for job in jobs:
        if job["result"] == "written":
            written[job["session"]] += job["nodes"]
            largest[job["session"]] = max(largest[job["session"]], job["nodes"])
    for sid in SESSIONS:
        core = SessionCore.open(state, sid)
        assert core.problems == []
        branch = core.get_branch()
        assert len(branch) == CHUNK * KILLS
        unmarked = [m["id"] for m in branch if m.get(MARKER_KEY) != workspace]
        assert not unmarked, (sid, unmarked)
        archive = read_archive(str(memory), sid)
        assert archive.complete, (sid, archive.stop_reason)
        assert {source_id(sid, m["id"]) for m in branch} <= archive.source_ids
        duplicates[sid] = written[sid] - len(branch)
        assert duplicates[sid] <= KILLS * largest[sid], (sid, duplicates[sid], largest[sid])
    return duplicates


def test_sigkill_at_random_points_loses_nothing(tmp_path: Path) -> None:
    duplicates = _kill_and_check(tmp_path)
    print(f"{KILLS} kills, visible duplicates per session {duplicates}")


def test_the_checks_catch_a_runtime_that_marks_before_writing(tmp_path: Path) -> None:
    """Plant the fault (markers first, then the write cycle): a kill in between loses turns."""
    with pytest.raises(AssertionError) as caught:
        _kill_and_check(tmp_path, plant=MARK_FIRST)
    assert "archive" in "".join(traceback.format_tb(caught.tb)[-1:])  # the archive check


def _kill_and_check(tmp_path: Path, plant: str = "") -> dict[str, int]:
    state = tmp_path / "state"
    for sid in SESSIONS:
        SessionCore.create(state, sid, title=sid)
    rng = random.Random(20261130)
    agent = _python("import sys; from tests.memory.runtime.test_headless_kill import agent_main; "
                    "agent_main(sys.argv[1:])", str(state),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    jobs: list[dict[str, Any]] = []
    try:
        for _ in range(KILLS):
            _run_and_kill(state, agent, rng, jobs, plant)
    finally:
        assert agent.stdin is not None
        agent.stdin.close()
        agent.wait(timeout=30)
    once = _scriptorium(state, "run", "--once", "--json",
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = once.communicate(timeout=120)
    assert once.returncode == 0, err[-4000:]
    jobs.extend(e for e in log_events(iter(err.splitlines())) if e["event"] == "job")
    outcomes = json.loads(out)["sessions"]
    assert set(outcomes) == set(SESSIONS)
    return _check_state(state, jobs)
