"""What one shared log with group commit would buy the store, measured before building it.

Issue 15 asks for one write-ahead log for the runtime, with group commit
across sessions, on the premise that per-session journal flushes set the
pace. This benchmark measures that premise on the machine at hand. Run from
the repository root::

    python bench/shared_flush.py [--repeat N] [--json] [--sessions N] [--threads N]

Every round appends ``APPENDS`` turns spread over ``--sessions`` sessions
from ``--threads`` threads (the runtime's worker-thread limit is 40), four
ways, interleaved (``bench/_harness.py``):

1. **the store** as it is: ``SessionCore.append`` per turn (lock, one
   fdatasync'd record in the session's own journal, node file and
   meta.json installed unsynced), the sessions' journals flushed
   independently;
2. **per-session journals, bare syscalls**: the same bytes with nothing
   but ``os`` calls (one ``O_APPEND`` write + ``fdatasync`` of the
   session's journal, two unsynced installs): the floor of design 1;
3. **one shared log, group commit, bare syscalls**: the journal records go
   to one log; a thread whose record is not yet durable either flushes the
   log for everyone whose record is written (the leader) or waits for the
   flush in progress (the classic leader/follower group commit), then
   installs its two files unsynced: the floor of the shared-log design;
4. **the store through one runtime log** (``--journal shared``): the same
   ``SessionCore.append`` calls on as many other sessions, each core opened
   with ``log=`` one :class:`~store.RuntimeLog` (its records group-committed
   across sessions, the files installed unsynced after), set against the
   store with per-session journals (what it replaces) and against row 3
   (its floor).

The figure to read is row 3 against row 2: what replacing the per-session
flushes with one group-committed log can buy at most, here; row 4 against
row 1 is what the store's runtime log buys. The kernel
already commits concurrent ``fdatasync`` calls of different files in one
filesystem journal transaction (ext4's jbd2, XFS's log force), so the two
can be close; the store's own figure against row 2 is what its code costs
above its floor. ``os.sync`` runs, untimed, before every round.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    CEILING,
    FLOOR,
    MIN_ROUNDS,
    TO_BEAT,
    Row,
    Summary,
    interleaved,
    markdown_table,
    ratio_row,
    value_row,
)
from _raw import RawDisk

from store import RuntimeLog, SessionCore, SessionOptions

APPENDS = 2000
CONTENT = "a short turn of an agent's conversation, about the size of a chat message " * 3


class GroupLog:
    """One append-only log; ``commit`` returns once the caller's record is durable.

    Leader/follower group commit: the record is written under the mutex; if
    no flush is running the caller becomes the leader and flushes everything
    written so far (outside the mutex), else it waits for the running flush
    and checks again. ``flushes`` counts the fdatasync calls.
    """

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._cond = threading.Condition()
        self._written = self._durable = 0
        self._flushing = False
        self.flushes = 0

    def commit(self, record: bytes) -> None:
        with self._cond:
            os.write(self.fd, record)
            self._written += len(record)
            end = self._written
            while self._durable < end:
                if self._flushing:
                    self._cond.wait()
                    continue
                self._flushing, target = True, self._written
                self._cond.release()
                try:
                    os.fdatasync(self.fd)
                finally:
                    self._cond.acquire()
                    self._flushing = False
                    self._durable = max(self._durable, target)
                    self.flushes += 1
                    self._cond.notify_all()

    def close(self) -> None:
        os.close(self.fd)


def _record(node: bytes, meta: bytes) -> bytes:
    return b"".join((len(node).to_bytes(4, "big"), node, len(meta).to_bytes(4, "big"), meta))


def run(directory: Path, repeat: int, sessions: int, threads: int) -> list[Row]:
    disk = RawDisk(0.0)
    state = directory / "state"
    raw = directory / "raw"
    cores = [SessionCore.create(state, f"s{i:04d}") for i in range(sessions)]
    # other sessions for the runtime log: a logged core holds its session's lock until closed
    runtime_log = RuntimeLog.open(state)
    for i in range(sessions):
        SessionCore.create(state, f"l{i:04d}").close()
    logged = [SessionCore.open(state, f"l{i:04d}", options=SessionOptions(
        log=runtime_log)) for i in range(sessions)]
    log_flushes: list[float] = []
    for i in range(sessions):
        (raw / f"s{i:04d}" / "history").mkdir(parents=True)
    counter = iter(range(10**9))
    flushes: list[float] = []
    log = GroupLog(str(raw / "shared.log"))
    pool = concurrent.futures.ThreadPoolExecutor(threads)

    def spread(one: Any) -> float:
        started = time.perf_counter()
        list(pool.map(one, [i % sessions for i in range(APPENDS)]))
        return APPENDS / (time.perf_counter() - started)

    def store() -> float:
        def one(i: int) -> None:
            cores[i].append({"id": f"n{next(counter)}", "role": "user", "content": CONTENT})
        return spread(one)

    def store_logged() -> float:
        before = (runtime_log.flushes, runtime_log.records)

        def one(i: int) -> None:
            logged[i].append({"id": f"n{next(counter)}", "role": "user", "content": CONTENT})
        rate = spread(one)
        flushes, records = runtime_log.flushes - before[0], runtime_log.records - before[1]
        log_flushes.append(records / max(1, flushes))
        return rate

    def raw_files(i: int) -> tuple[str, bytes, bytes, str]:
        node = f"n{next(counter)}"
        now = time.time()
        node_bytes = orjson.dumps({"id": node, "role": "user", "content": CONTENT,
                                   "created_at": now, "metadata": {}})
        meta_bytes = orjson.dumps({"id": f"s{i:04d}", "head_id": node, "updated_at": now})
        return node, node_bytes, meta_bytes, str(raw / f"s{i:04d}")

    def per_session() -> float:
        def one(i: int) -> None:
            node, node_bytes, meta_bytes, folder = raw_files(i)
            fd = os.open(os.path.join(folder, "journal"),
                         os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, _record(node_bytes, meta_bytes))
                os.fdatasync(fd)
            finally:
                os.close(fd)
            disk.install(os.path.join(folder, "history", f"{node}.json"), node_bytes, synced=False)
            disk.install(os.path.join(folder, "meta.json"), meta_bytes, synced=False)
        return spread(one)

    def shared() -> float:
        before = log.flushes

        def one(i: int) -> None:
            node, node_bytes, meta_bytes, folder = raw_files(i)
            log.commit(_record(node_bytes, meta_bytes))
            disk.install(os.path.join(folder, "history", f"{node}.json"), node_bytes, synced=False)
            disk.install(os.path.join(folder, "meta.json"), meta_bytes, synced=False)
        rate = spread(one)
        flushes.append(APPENDS / max(1, log.flushes - before))
        return rate

    def settle() -> None:
        for core in [*cores, *logged]:
            core.retire_journals()
        runtime_log.flush()  # the retirements: a round does not pay for the last one's
        os.sync()

    try:
        found = interleaved({"store": store, "per_session": per_session, "shared": shared,
                             "store_logged": store_logged}, rounds=repeat, settle=settle)
    finally:
        pool.shutdown()
        log.close()
        for core in [*cores, *logged]:
            core.close()
        runtime_log.close()
    where = f"{APPENDS} appends over {sessions} sessions from {threads} threads"
    return [
        ratio_row(f"store appends ({where}), per-session journals", found["store"], "turns/s",
                  found["per_session"], kind=FLOOR,
                  what="the same appends in bare syscalls, each session's journal fdatasync'd"),
        ratio_row(f"one shared log with group commit ({where}), bare syscalls",
                  found["shared"], "turns/s", found["per_session"], kind=CEILING,
                  what=("per-session journals in bare syscalls, same rounds: what a shared log "
                        "could buy at most is this ratio")),
        value_row("records per group-commit flush", Summary.of(flushes[-repeat:]), "records"),
        ratio_row(f"store appends ({where}), per-session journals", found["store"], "turns/s",
                  found["shared"], kind=CEILING,
                  what="one shared log with group commit, bare syscalls, same rounds"),
        ratio_row(f"store appends ({where}), one runtime log", found["store_logged"], "turns/s",
                  found["store"], kind=TO_BEAT,
                  what="the store with per-session journals, same rounds (what the log replaces)"),
        ratio_row(f"store appends ({where}), one runtime log", found["store_logged"], "turns/s",
                  found["shared"], kind=FLOOR,
                  what="one shared log with group commit, bare syscalls, same rounds"),
        value_row("records per runtime-log flush (the store's group commit)",
                  Summary.of(log_flushes[-repeat:]), "records"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help=f"timed rounds (>= {MIN_ROUNDS})")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    if args.repeat < MIN_ROUNDS:
        parser.error(f"--repeat must be at least {MIN_ROUNDS}")
    directory = Path(tempfile.mkdtemp(prefix="scriptorium-bench-"))
    try:
        rows = run(directory, args.repeat, args.sessions, args.threads)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if args.json:
        print(orjson.dumps({"rows": [row.to_json() for row in rows]},
                           option=orjson.OPT_INDENT_2).decode())
    else:
        print(markdown_table(rows))


if __name__ == "__main__":
    main()
