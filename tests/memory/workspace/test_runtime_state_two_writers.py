"""runtime.json under two writers, one of them SIGKILLed: no entry lost, no counter backwards.

Issue 23, as a new user tried it: ``scriptorium run`` and ``scriptorium
memory write --force`` on one state directory, one of them killed with
SIGKILL, again and again. The kill is aimed: the test watches
``memory/.scriptorium`` and kills whichever writer holds ``write.lock``
(``/proc/locks``) the moment a topic install is under way (its journal
exists) or one of its files is being written (a temp file exists); a
round where neither is seen in time kills a random writer at a random
moment. Measured before the fix: the kill landed between a commit's topic
install and its ``runtime.json`` update, so block ids lived in topics without a ``creation_order`` entry
(and the batch went uncounted), a temp file of ``runtime.json`` stayed
behind, and ``audit`` said ok. After every round here:

* ``runtime.json`` parses, every ``creation_order`` entry of the round
  before is still there with the same number, and no counter went down
  (nothing consolidates in this test, so nothing resets them);
* every block id a topic holds (aliases too) has its ``creation_order``
  entry: the counters move in the same install as the topics;

and at the end no temp file is left in ``memory/.scriptorium`` and
``scriptorium memory audit`` is ok.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from memory.workspace._topics import parse_topic
from store import SessionCore
from store._durable import TEMP_SUFFIX
from store._lock import lock_holder

REPO = Path(__file__).resolve().parents[3]
SESSIONS = ["w1", "w2", "w3"]
ROUNDS = 8
TURNS = 12  # per session and round; ~1,000 tokens each, so 1-2 batches per session
FILLER = " ".join(["lorem ipsum dolor sit amet"] * 160)


def _scriptorium(state: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", "from memory.cli._cli import main; main()", *args,
         "--state", str(state), "--threshold", "8000", "--workers", "2"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def _append_round(state: Path, start: int) -> None:
    for sid in SESSIONS:
        core = SessionCore.open(state, sid)
        try:
            for index in range(start, start + TURNS):
                core.append({"id": f"{sid}-t{index}", "role": ("user", "assistant")[index % 2],
                             "content": f"Team {sid} member {index} works in city {index}. "
                                        f"{FILLER}"})
        finally:
            core.close()


def _kill_in_the_act(
    memory: Path, writers: list[subprocess.Popen[str]], rng: random.Random, aim: str,
) -> subprocess.Popen[str]:
    """SIGKILL the writer holding ``write.lock`` while it installs (``aim``); the victim."""
    private = memory / ".scriptorium"
    deadline = time.monotonic() + rng.uniform(2.0, 4.0)
    by_pid = {writer.pid: writer for writer in writers}
    while time.monotonic() < deadline and any(w.poll() is None for w in writers):
        try:
            names = os.listdir(private)
        except FileNotFoundError:
            continue
        busy = ("install.journal" in names if aim == "install"
                else any(n.endswith(TEMP_SUFFIX) for n in names))
        holder = _lock_holder(private / "write.lock") if busy else None
        if holder is not None and holder in by_pid:
            by_pid[holder].send_signal(signal.SIGKILL)
            print(f"killed {holder} during a {aim} write")
            return by_pid[holder]
    victim = rng.choice(writers)
    victim.send_signal(signal.SIGKILL)
    print(f"killed {victim.pid} at a random moment")
    return victim


def _lock_holder(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return lock_holder(fd)
    finally:
        os.close(fd)


def _topic_block_ids(memory: Path) -> set[str]:
    ids: set[str] = set()
    for path in sorted((memory / "topics").rglob("*.md")):
        topic = parse_topic(path.read_text(encoding="utf-8"), path.relative_to(memory).as_posix())
        ids.update(topic.block_ids())
    return ids


def _runtime(memory: Path) -> dict[str, Any]:
    document = json.loads((memory / ".scriptorium" / "runtime.json").read_bytes())
    assert isinstance(document, dict)
    return document


def test_two_writers_one_killed_lose_no_entry_and_no_counter_goes_backwards(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    memory = state / "memory"
    for sid in SESSIONS:
        SessionCore.create(state, sid, title=sid)
    rng = random.Random(2311)
    before: dict[str, Any] = {"creation_order": {}, "local_batches": 0, "local_tokens": 0,
                              "write_commits_since_global": 0}
    for round_ in range(ROUNDS):
        _append_round(state, round_ * TURNS)
        writers = [_scriptorium(state, "run", "--once"),
                   _scriptorium(state, "memory", "write", "--force")]
        victim = _kill_in_the_act(memory, writers, rng, aim=("install", "temp file")[round_ % 2])
        victim.wait(timeout=30)  # reaped at once, as a shell would: its claims die with it
        for writer in writers:
            _, err = writer.communicate(timeout=120)
            assert writer is victim or writer.returncode in (0, 1), err[-3000:]
        after = _runtime(memory)
        order = after["creation_order"]
        lost = {b: n for b, n in before["creation_order"].items() if order.get(b) != n}
        assert not lost, f"round {round_}: creation_order lost or renumbered {len(lost)} entries"
        for counter in ("local_batches", "local_tokens", "write_commits_since_global"):
            assert after[counter] >= before[counter], (round_, counter, before[counter],
                                                       after[counter])
        unordered = _topic_block_ids(memory) - set(order)
        assert not unordered, f"round {round_}: {len(unordered)} block ids without an order"
        before = after
    finish = _scriptorium(state, "run", "--once")
    _, err = finish.communicate(timeout=120)
    assert finish.returncode == 0, err[-3000:]
    left = [n for n in os.listdir(memory / ".scriptorium") if n.endswith(TEMP_SUFFIX)]
    assert not left, left
    audit = subprocess.run(
        [sys.executable, "-c", "from memory.cli._cli import main; main()", "memory", "audit",
         "--state", str(state), "--json"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, text=True, capture_output=True,
        timeout=120, check=False)
    assert audit.returncode == 0, audit.stdout[-3000:]
