"""Two runtimes, two OS processes, one state directory (issue 5).

An embedded agent and ``scriptorium run`` (or two agents) may open the same
``<state>`` at once. Each process has its own session actors, so inside a
process the mailbox serialises a session's writes, and between processes
only the session ``.lock`` (and the claim it guards), the workspace
``write.lock`` and the transaction's revision check do. This test runs two real processes, one on
asyncio and one on trio, that append to the same sessions (their turns
interleave into one chain: an append without a predecessor continues the
head as it is on disk under the lock), stamp metadata keys on random nodes,
and flush, all concurrently. Then it checks what the issue asks:

* **no lost marker**: every metadata key whose merge was acknowledged to
  either process is on disk, and so is every acknowledged turn;
* **no lost topic edit**: every turn marked with the workspace id has its
  source in the session's archive and is cited by a topic, and every turn
  of every head branch is marked (the last flush of a session came after
  every append to it);
* **no torn file**: every node file, meta.json, archive and topic file
  parses (strictly), and every archive scan is complete;
* **no duplicate delivery**: no crash is injected, so no turn may be handed
  to a writer twice (SPEC §1), counted over both processes. Each runtime's
  "at most one job per session" holds only inside its process; across
  them the leased claim in ``<sid>/.claim`` does it (store._claim). Measured
  before claims: 106-140 of the 144 turns delivered twice; with them, none.

Planted faults (each must make a check fail): ``no-session-lock`` turns the
session ``.lock`` into a no-op, ``ignore-claims`` treats every claim as void.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from memory.ledger._ledger import WritePolicy
from memory.ledger._records import MARKER_KEY, source_anchor, source_id
from memory.runtime._config import JOURNAL_MODES, JournalMode
from memory.runtime._events import EventTally
from memory.runtime._runtime import RuntimeConfig, open_runtime
from memory.workspace._archive import read_archive
from memory.workspace._topics import parse_topic
from memory.workspace._workspace_id import read_workspace_id
from store import SessionCore
from tests.memory._runtime import SENTENCES, tally

REPO = Path(__file__).resolve().parents[3]
SESSIONS = ["shared-a", "shared-b", "shared-c"]
TURNS = 24  # per process and session


# -- the worker process --------------------------------------------------------------


async def _work(state: str, name: str, seed: int, tolerant: bool,
                journal: JournalMode) -> dict[str, Any]:
    rng = random.Random(seed)
    config = RuntimeConfig(policy=WritePolicy(threshold=8000), writer_workers=2,
                           on_event=EventTally(), seed=seed, journal=journal)
    appended: dict[str, list[str]] = {sid: [] for sid in SESSIONS}
    stamped: dict[str, dict[str, list[str]]] = {sid: {} for sid in SESSIONS}
    outcomes: list[str] = []
    errors: list[str] = []
    async with open_runtime(state, config=config) as rt:
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)  # both start together

        async def converse(sid: str) -> None:
            for turn in range(TURNS):
                try:
                    await step(sid, turn)
                except Exception as exc:
                    if not tolerant:
                        raise
                    errors.append(repr(exc))  # a planted fault: let the checks judge
            try:
                outcomes.append((await rt.flush(sid)).value)
            except Exception as exc:
                if not tolerant:
                    raise
                errors.append(repr(exc))

        async def step(sid: str, turn: int) -> None:
            node_id = f"{name}-{sid}-{turn}"
            text = f"{SENTENCES[turn % len(SENTENCES)]} Turn {node_id}."
            await rt.sessions.append(sid, {"id": node_id, "content": text,
                                           "role": ("user", "assistant")[turn % 2]})
            appended[sid].append(node_id)
            if rng.random() < 0.4:  # a component stamping its own key on some node
                nodes = [m["id"] for m in await rt.sessions.get_branch(sid)]
                target = rng.choice(nodes)
                key = f"{name}_stamp_{turn}"
                await rt.sessions.merge_node_metadata_batch(sid, {target: {key: turn}})
                stamped[sid].setdefault(target, []).append(key)
            if turn % 8 == 7:
                outcomes.append((await rt.flush(sid)).value)

        async with anyio.create_task_group() as tg:
            for sid in SESSIONS:
                tg.start_soon(converse, sid)
        await rt.drain()
        deliveries = {f"{sid}/{node}": n for (sid, node), n in tally(rt).deliveries.items()}
    return {"appended": appended, "stamped": stamped, "outcomes": outcomes,
            "deliveries": deliveries, "errors": errors}


def worker_main(argv: list[str]) -> None:
    """Entry point of one worker: ``state name backend seed journal [plant]``; prints ready, then a report.

    ``plant`` names a fault the test plants to show its checks catch it:
    ``no-session-lock`` makes the session ``.lock`` a no-op in this process,
    ``ignore-claims`` makes every claim void (as if claims did not exist).
    """
    state, name, backend, seed, journal, *plant = argv
    assert journal in JOURNAL_MODES
    if plant == ["no-session-lock"]:
        from store._lock import SessionLock

        SessionLock.__enter__ = lambda self: self  # type: ignore[method-assign]
        SessionLock.__exit__ = lambda self, *exc: None  # type: ignore[method-assign]
    if plant == ["ignore-claims"]:
        from memory.ledger._claim import Claim

        Claim.live = lambda self, now, **rules: False  # type: ignore[method-assign]
    report = anyio.run(_work, state, name, int(seed), bool(plant), journal, backend=backend)
    print(json.dumps(report), flush=True)


# -- the test -----------------------------------------------------------------------------


def _start(
    state: Path, name: str, backend: str, seed: int, journal: str, plant: str | None = None
) -> subprocess.Popen[str]:
    code = ("import sys; from tests.memory.runtime.test_runtime_two_processes import worker_main; "
            "worker_main(sys.argv[1:])")
    return subprocess.Popen(
        [sys.executable, "-c", code, str(state), name, backend, str(seed), journal,
         *([plant] if plant else [])],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _run_both(state: Path, journal: str, plant: str | None = None) -> list[dict[str, Any]]:
    workers = [_start(state, "p1", "asyncio", 1, journal, plant),
               _start(state, "p2", "trio", 2, journal, plant)]
    try:
        for worker in workers:
            assert worker.stdout is not None
            line = worker.stdout.readline()
            assert line == "ready\n", "worker failed: " + (worker.stderr.read() if worker.stderr
                                                            else line)
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        reports = []
        for worker in workers:
            out, err = worker.communicate(timeout=60)
            assert worker.returncode == 0, "worker failed: " + err[-4000:]
            reports.append(json.loads(out.strip().splitlines()[-1]))
        return reports
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def _cited_anchors(memory: Path) -> set[str]:
    anchors: set[str] = set()
    for path in sorted((memory / "topics").rglob("*.md")):
        rel = path.relative_to(memory).as_posix()
        topic = parse_topic(path.read_text(encoding="utf-8"), rel, strict=True)
        for footnote in topic.footnotes.values():
            for link in footnote.sources:
                anchors.add(link.target.rpartition("#")[2])
    return anchors


@pytest.mark.parametrize("journal", JOURNAL_MODES)
def test_two_runtimes_on_one_state_directory(tmp_path: Path, journal: str) -> None:
    """Also with each runtime's own runtime log: sessions held in turn, recovered never."""
    _check_two_runtimes(tmp_path, journal)


def _check_two_runtimes(tmp_path: Path, journal: str = "session",
                        plant: str | None = None) -> None:
    state = tmp_path / "state"
    for sid in SESSIONS:
        SessionCore.create(state, sid, title=sid)
    reports = _run_both(state, journal, plant)

    memory = state / "memory"
    workspace = read_workspace_id(str(memory))
    assert workspace is not None
    cited = _cited_anchors(memory)  # every topic parses strictly
    for sid in SESSIONS:
        core = SessionCore.open(state, sid)
        assert core.problems == []  # every node file and meta.json parses
        nodes = {n.id: n for n in core.nodes()}
        # no lost turn, no lost metadata key
        for report in reports:
            assert set(report["appended"][sid]) <= nodes.keys()
            for node_id, keys in report["stamped"][sid].items():
                missing = [k for k in keys if k not in nodes[node_id].metadata]
                assert not missing, (sid, node_id, missing)
        # both processes' turns form one chain, and all of it is written
        branch = [m["id"] for m in core.get_branch()]
        assert sorted(branch) == sorted(a for r in reports for a in r["appended"][sid])
        unmarked = [n for n in branch if nodes[n].metadata.get(MARKER_KEY) != workspace]
        assert not unmarked, (sid, unmarked)
        # every marked turn is archived (the archive parses completely) and cited
        archive = read_archive(str(memory), sid)
        assert archive.complete, (sid, archive.stop_reason, archive.stop_line)
        for node_id in branch:
            source = source_id(sid, node_id)
            assert source in archive.source_ids, (sid, node_id)
            assert source_anchor(source) in cited, (sid, node_id)

    delivered: dict[str, int] = {}
    for report in reports:
        for key, count in report["deliveries"].items():
            delivered[key] = delivered.get(key, 0) + count
    turns = 2 * TURNS * len(SESSIONS)
    assert set(delivered) == {f"{sid}/{n}" for r in reports for sid in SESSIONS
                              for n in r["appended"][sid]}
    duplicates = sum(delivered.values()) - turns
    print(f"two processes: {turns} turns, {duplicates} duplicate deliveries, outcomes "
          f"{[sorted(set(r['outcomes'])) for r in reports]}")
    # no crash was injected: not one turn may reach a writer twice (SPEC §1)
    assert duplicates == 0, f"{duplicates} duplicate deliveries without a crash"


def test_the_checks_catch_two_processes_without_the_session_lock(tmp_path: Path) -> None:
    """Plant the fault (no cross-process session lock): the same checks must fail."""
    with pytest.raises(AssertionError) as caught:
        _check_two_runtimes(tmp_path, plant="no-session-lock")
    assert "worker failed" not in str(caught.value)  # a check failed, not a worker


def test_the_checks_catch_two_processes_ignoring_claims(tmp_path: Path) -> None:
    """Plant the fault (claims void): the runtimes deliver the same batches twice."""
    with pytest.raises(AssertionError, match="duplicate deliveries without a crash"):
        _check_two_runtimes(tmp_path, plant="ignore-claims")
