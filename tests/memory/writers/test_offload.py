"""The writer's and the commit's CPU work in a worker process (issue 15): same result, never stuck.

``RuntimeConfig.cpu_worker = "process"`` moves the extractive writer's
extraction and a commit's normalisation into a worker process. What must
hold:

- the same edits and the same commit as in-thread, byte for byte, on the
  same sequence of batches (ids are assigned by counters that depend on
  every earlier commit, so any difference compounds and shows);
- the runtime keeps writing when the worker cannot start, or when it is
  killed for real (SIGKILL), with a ``cpu_worker`` event saying so; a killed
  worker is replaced;
- a worker never outlives the runtime's process.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from memory.ledger._ledger import WritePolicy
from memory.ledger._records import SourceMeta, SourceRecord
from memory.runtime._events import EventTally
from memory.runtime._runtime import MemoryRuntime, RuntimeConfig, open_runtime
from memory.runtime._session_state import BoundaryOutcome
from memory.workspace._edits import TopicEdit
from memory.workspace._transaction import Transactions
from memory.writers import CpuWorker
from memory.writers._extractive import ExtractiveWriter
from memory.writers._writer import Batch

META = SourceMeta("owner", "owner/offload", "owner", "trusted")
FACTS = [
    "I prefer green tea with breakfast.", "We decided to rename the module next week.",
    "My colleague Ada reviews the patch.", "The project deadline is in March.",
    "I live in Lisbon.", "The office has a new espresso machine.", "thanks!", "Sounds good.",
]


def records(session: str, start: int, count: int) -> tuple[SourceRecord, ...]:
    """Turns stating facts (every fifth repeats an earlier one), some of them small talk."""
    return tuple(
        SourceRecord(session, f"n{i}", "user" if i % 2 == 0 else "assistant",
                     f"{FACTS[i % len(FACTS)]} Item {i - 3 if i % 5 == 4 else i}.",
                     1_755_000_000.0 + 3600 * i, "Owner", meta=META)
        for i in range(start, start + count))


@pytest.fixture
def worker() -> Any:
    found = CpuWorker()
    yield found
    found.close()


async def write_and_commit(memory: Path, worker: CpuWorker | None) -> list[Any]:
    """The same batches through the writer and the transaction; every result, in order.

    :func:`hand_made` edits are committed in between by another transaction in-thread
    (another runtime, or a fallback), so the worker's next bases are files it did not write.
    """
    tx = Transactions(str(memory), archived=lambda source: True, run_cpu=worker)
    writer = ExtractiveWriter()
    seen: list[Any] = []

    async def batches(numbers: range) -> None:
        for number in numbers:
            session = f"s{number % 3}"
            batch = Batch(session, records(session, 6 * number, 9), "")  # overlapping: repeats
            view = dataclasses.replace(await anyio.to_thread.run_sync(tx.snapshot),
                                       run_cpu=worker)
            edits = await writer.write(batch, view)
            result = await anyio.to_thread.run_sync(functools.partial(
                tx.commit, edits, base_revision=view.revision,
                batch_sources={r.source_id for r in batch.records}))
            seen.extend([edits, result])

    await batches(range(8))
    other = Transactions(str(memory), archived=lambda source: True)
    for edits in hand_made(memory):  # hand-made edits: refusals, a superseded one, a move, a deletion
        base = await anyio.to_thread.run_sync(other.revision)
        seen.append(await anyio.to_thread.run_sync(functools.partial(
            other.commit, edits, base_revision=base, batch_sources={"openprogram/s0/n0"})))
    await batches(range(8, 12))
    seen.append(sorted((p.relative_to(memory).as_posix(), p.read_bytes())
                       for p in (memory / "topics").rglob("*.md")))
    return seen


def hand_made(memory: Path) -> list[list[TopicEdit]]:
    """Edits the validator judges both ways, and one that changes a file the batches extend."""
    notes = (memory / "topics" / "notes.md").read_text(encoding="utf-8")
    body, mark, footnotes = notes.partition("\n[^")
    return [
        [TopicEdit("topics/extra.md", "# Extra\n\nSuperseded.[^e1]\n\n"
                   "[^e1]: Time: `2025-08-12`; Sources: openprogram/s0/n0\n"),
         TopicEdit("topics/extra.md", "# Extra\n\nA new fact.[^e1]\n\n"
                   "[^e1]: Time: `2025-08-12`; Sources: openprogram/s0/n0\n"),
         TopicEdit("../outside.md", "# Out\n"),
         TopicEdit("topics/foreign.md", "# F\n\nCites another batch.[^e1]\n\n"
                   "[^e1]: Time: `2025-08-12`; Sources: openprogram/zz/n9\n")],
        [TopicEdit("topics/notes.md", body.rstrip() + "\n\nA note from elsewhere.[^x1]\n\n"
                   + mark.lstrip("\n") + footnotes.rstrip() + "\n[^x1]: Time: `2025-08-12`; "
                   "Sources: openprogram/s0/n0\n")],
    ]


async def test_the_worker_process_gives_the_same_edits_and_commits(
        tmp_path: Path, worker: CpuWorker) -> None:
    in_thread = await write_and_commit(tmp_path / "thread", None)
    in_process = await write_and_commit(tmp_path / "process", worker)
    assert in_process == in_thread
    audits = [entry for result in in_thread[16:18] for entry in result.audit]
    assert {entry["status"] for entry in audits} == {"ok", "error"}  # both kinds were judged
    assert all(result.changed_files for result in in_thread[16:18])
    assert worker.calls >= 2 * 12 and worker.fallbacks == 0  # every call ran in the worker


def slow_echo(value: str, seconds: float) -> str:
    """A call that is still running in the worker when its caller is cancelled."""
    time.sleep(seconds)
    return value


async def test_a_cancelled_call_leaves_the_worker_to_the_next_caller(worker: CpuWorker) -> None:
    """The abandoned call's answer is read by its own thread, never by the next call."""
    assert await anyio.to_thread.run_sync(worker, slow_echo, "warm", 0.0) == "warm"
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(
            anyio.to_thread.run_sync, worker, slow_echo, "abandoned", 0.5,
            abandon_on_cancel=True))
        await anyio.wait_all_tasks_blocked()
        group.cancel_scope.cancel()
    assert await anyio.to_thread.run_sync(worker, slow_echo, "next", 0.0) == "next"
    # Callers at once (a commit's dry run beside a writer): each gets its own answer.
    answers: dict[int, str] = {}

    async def call(number: int) -> None:
        value = f"{number}:" + "x" * (1 << 20)  # larger than a pipe's buffer
        answers[number] = await anyio.to_thread.run_sync(worker, slow_echo, value, 0.0)

    async with anyio.create_task_group() as group:
        for number in range(6):
            group.start_soon(call, number)
    assert all(answer.startswith(f"{number}:") and len(answer) == len(f"{number}:") + (1 << 20)
               for number, answer in answers.items()) and len(answers) == 6
    assert worker.fallbacks == 0 and worker.available


def config(events: list[dict[str, Any]] | None = None, **overrides: Any) -> RuntimeConfig:
    forward = events.append if events is not None else None
    options: dict[str, Any] = {"policy": WritePolicy(threshold=8000), "writer_workers": 2,
                               "on_event": EventTally(forward), "cpu_worker": "process"}
    options.update(overrides)
    return RuntimeConfig(**options)


def cpu_states(events: list[dict[str, Any]]) -> list[str]:
    return [e["state"] for e in events if e["event"] == "cpu_worker"]


async def write_turns(rt: MemoryRuntime, sid: str, start: int, count: int) -> None:
    for i in range(start, start + count):
        await rt.sessions.append(sid, {"id": f"t{i}", "role": "user",
                                       "content": f"{FACTS[i % 6]} Turn {i}."})
    assert await rt.flush(sid) is BoundaryOutcome.WRITTEN


def topics(state: Path) -> dict[str, bytes]:
    return {p.relative_to(state).as_posix(): p.read_bytes()
            for p in sorted((state / "memory" / "topics").rglob("*.md"))}


class _NoProcesses:
    """A multiprocessing context whose processes cannot start (EAGAIN, as under a full table)."""

    def __init__(self) -> None:
        self._real = multiprocessing.get_context("spawn")

        class Refused(self._real.Process):  # type: ignore[name-defined,misc]
            def start(self) -> None:
                raise OSError(11, "Resource temporarily unavailable (planted)")

        self.Process = Refused

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


async def test_the_runtime_writes_in_thread_when_no_worker_can_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import memory.writers._offload as offload

    reference = tmp_path / "reference"
    async with open_runtime(reference, config=config(cpu_worker="thread")) as rt:
        sid = await rt.sessions.create(session_id="s1")
        await write_turns(rt, sid, 0, 6)
    monkeypatch.setattr(offload, "_context", _NoProcesses)
    state = tmp_path / "state"
    events: list[dict[str, Any]] = []
    async with open_runtime(state, config=config(events)) as rt:
        sid = await rt.sessions.create(session_id="s1")
        await write_turns(rt, sid, 0, 6)
        assert rt.cpu_worker is not None
        assert rt.cpu_worker.calls == 0 and rt.cpu_worker.fallbacks >= 2
    states = cpu_states(events)
    assert states and set(states) <= {"lost", "unavailable"}, states  # said, not silent
    assert topics(state) == topics(reference)


def _wait_dead(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # dead and reaped already
    try:
        ready, _, _ = select.select([fd], [], [], 30)
        assert ready, f"worker {pid} outlived SIGKILL"
    finally:
        os.close(fd)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open (Linux)")
async def test_the_runtime_keeps_writing_when_its_worker_is_killed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    events: list[dict[str, Any]] = []
    async with open_runtime(state, config=config(events)) as rt:
        cpu = rt.cpu_worker
        assert cpu is not None
        sid = await rt.sessions.create(session_id="s1")
        await write_turns(rt, sid, 0, 4)
        ran = cpu.calls
        assert ran >= 2 and cpu.fallbacks == 0
        pid = await anyio.to_thread.run_sync(cpu.worker_pid)
        assert pid is not None and pid != os.getpid()
        os.kill(pid, signal.SIGKILL)
        await anyio.to_thread.run_sync(_wait_dead, pid)
        await write_turns(rt, sid, 4, 4)  # the first call meets the dead worker: in-thread
        await write_turns(rt, sid, 8, 4)  # a new worker by now
        assert cpu.fallbacks >= 1
        assert cpu.calls > ran + 1  # the replacement did the later work
        again = await anyio.to_thread.run_sync(cpu.worker_pid)
        assert again is not None and again != pid
    states = cpu_states(events)
    assert states[:3] == ["started", "lost", "started"], states
    text = "".join(v.decode() for v in topics(state).values())
    assert all(f"[openprogram/s1/t{i}]" in text for i in range(12))  # every turn is cited


WORKER_OWNER = """
import os, sys, time
from memory.writers import CpuWorker
if __name__ == "__main__":
    worker = CpuWorker()
    print(worker.worker_pid(), flush=True)
    time.sleep(120)
"""


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open (Linux)")
def test_a_worker_never_outlives_the_runtime_process(tmp_path: Path) -> None:
    script = tmp_path / "owner.py"
    script.write_text(WORKER_OWNER, encoding="utf-8")
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[3])
    try:
        assert owner.stdout is not None
        pid = int(owner.stdout.readline())
        watched = os.pidfd_open(pid)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
    try:
        ready, _, _ = select.select([watched], [], [], 30)
        assert ready, "the worker outlived its runtime's process"
    finally:
        os.close(watched)
    # Nothing holds the dead process's stderr open any more: EOF, not a hang.
    assert owner.stderr is not None
    owner.stderr.read()


def test_the_config_names_where_the_cpu_work_runs() -> None:
    assert RuntimeConfig().cpu_worker == "thread"  # the measured default (docs/decisions.md)
    with pytest.raises(ValueError, match="cpu_worker"):
        RuntimeConfig(cpu_worker="gpu")  # type: ignore[arg-type]
