"""The runtime log against real processes: an owner killed with SIGKILL, the agent writing between.

1. Scriptorium (a real process, through a runtime log) appends six turns
   and marks four, and is killed before any checkpoint; the reference agent
   (its unlocked writes) then adds a key to a node from a stale read and
   rewinds the session: it writes the same node files between our log
   record and our replay. The next owner recovers the dead log: the agent's
   key, rewind and head win; our markers are merged back.
2. A busy owner, four threads committing to four sessions, is killed at an
   arbitrary moment: every turn it acknowledged is there after recovery, and
   every file parses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from memory.simulate._outside import agent_rewind, agent_write
from store import SessionOptions
from store._runtime_log import WAL_DIR, RuntimeLog
from store._session import SessionCore, recover_dead_runtimes

REPO = Path(__file__).resolve().parents[2]
MARK = "memory_written_scriptorium"
TURNS = ["u0", "a1", "u2", "a3", "u4", "a5"]
MARKED = ["u0", "a1", "u2", "a3"]
RUN = "import sys; from tests.store.test_runtime_log_kill import {0}; {0}(*sys.argv[1:])"


def marking_owner(state: str) -> None:
    """The killed owner: six appends and a marker batch through a runtime log, then wait."""
    log = RuntimeLog.open(state)
    core = SessionCore.create(state, "s", options=SessionOptions(log=log))
    for i, node_id in enumerate(TURNS):
        core.append({"id": node_id, "role": ["user", "assistant"][i % 2], "content": f"turn {i}"})
    print("appended", flush=True)
    sys.stdin.readline()
    core.merge_node_metadata_batch({n: {MARK: "w-1"} for n in MARKED})
    print("marked", flush=True)
    sys.stdin.read()  # never returns: the test kills this process here


def busy_owner(state: str) -> None:
    """Four threads append to four sessions through one log, printing each acknowledged turn."""
    import threading

    log = RuntimeLog.open(state, segment_bytes=16 * 1024)  # rotations and deletions too
    cores = [SessionCore.create(state, f"s{i}", options=SessionOptions(log=log)) for i in range(4)]
    lock = threading.Lock()

    def work(core: SessionCore) -> None:
        for j in range(100_000):
            core.append({"id": f"n{j}", "content": f"{core.session} turn {j} " * 8})
            if j % 7 == 6:
                core.merge_node_metadata_batch({f"n{j - 3}": {MARK: f"w-{j}"}})
            if j % 25 == 24:
                core.retire_journals()
            with lock:
                print(core.session, f"n{j}", flush=True)

    threads = [threading.Thread(target=work, args=(core,), daemon=True) for core in cores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _node_path(session: Path, node_id: str) -> str:
    (name,) = [n for n in os.listdir(session / "history") if n.endswith(f"-{node_id}.json")]
    return str(session / "history" / name)


def _spawn(function: str, state: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", RUN.format(function), str(state)],
                            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL


def test_the_agent_writes_between_our_record_and_our_replay_and_its_writes_win(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    session = state / "sessions" / "s"
    owner = _spawn("marking_owner", state)
    try:
        assert owner.stdout is not None and owner.stdin is not None
        assert owner.stdout.readline() == "appended\n"
        stale = Path(_node_path(session, "a1")).read_bytes()  # the agent reads a1 now
        owner.stdin.write("mark\n")
        owner.stdin.flush()
        assert owner.stdout.readline() == "marked\n"
    finally:
        _kill(owner)
    assert any(p.suffix == ".log" and p.stat().st_size for p in (state / WAL_DIR).iterdir())
    # the reference agent, no lock: its merge into a1 from the stale read (so it
    # drops our marker, its side of the race), then a rewind to u2
    record = json.loads(stale)
    record["metadata"]["agent_note"] = "from the agent"
    agent_write(_node_path(session, "a1"), record)
    assert agent_rewind(str(session), "u2", 1_900_000_000.5) == ["a5", "u4", "a3", "u2"]
    agent_meta = (session / "meta.json").read_bytes()
    agent_files = {n: Path(_node_path(session, n)).read_bytes() for n in ("u4", "a5")}

    log = RuntimeLog.open(state)  # the next runtime: its sweep recovers the dead one's log
    assert recover_dead_runtimes(state, log) == ["s"]
    core = SessionCore.open(state, "s", options=SessionOptions(log=log))

    assert (session / "meta.json").read_bytes() == agent_meta  # the agent's head move wins
    assert core.head == "a1"
    assert core.node("a1").metadata["agent_note"] == "from the agent"
    for node_id in ("u2", "a3", "u4", "a5"):
        assert core.node(node_id).rewound, node_id
    for node_id in MARKED:  # every marker stands; a1's is merged back onto the agent's file
        assert core.node(node_id).metadata[MARK] == "w-1", node_id
    for node_id in ("u4", "a5"):  # files our appends created: the agent's version, untouched
        assert Path(_node_path(session, node_id)).read_bytes() == agent_files[node_id]
    core.close()
    log.close()
    assert os.listdir(state / WAL_DIR) == []


def test_an_owner_killed_mid_group_commit_loses_no_acknowledged_turn(tmp_path: Path) -> None:
    state = tmp_path / "state"
    owner = _spawn("busy_owner", state)
    acknowledged: list[tuple[str, str]] = []
    try:
        assert owner.stdout is not None
        deadline = time.monotonic() + 60
        while len(acknowledged) < 600 and time.monotonic() < deadline:
            line = owner.stdout.readline()
            if not line:
                break
            sid, node = line.split()
            acknowledged.append((sid, node))
    finally:
        _kill(owner)
    assert len(acknowledged) >= 100, "the owner did not get going"
    log = RuntimeLog.open(state)
    recover_dead_runtimes(state, log)
    for sid in {sid for sid, _ in acknowledged}:
        core = SessionCore.open(state, sid, options=SessionOptions(log=log))
        assert core.problems == []
        held = [n.id for n in core.nodes()]
        wanted = [node for s, node in acknowledged if s == sid]
        assert held[:len(wanted)] == wanted  # in order, none missing, none torn
        assert held == [f"n{j}" for j in range(len(held))]
        core.close()
    log.close()
    assert os.listdir(state / WAL_DIR) == []
