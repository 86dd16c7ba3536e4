"""The lost-marker race (SPEC §1): shown with a naive read-modify-write, removed by ownership.

Workload: marker writers (several tasks) and a "checkpoint stamp" component
merge distinct metadata keys into the same node files, while appends and
rewinds go on. Every merge's key is recorded when acknowledged; at the end
every recorded key must be on its node and every node file must parse.

* Naive: each merge reads the node file, adds its key and writes the file
  back (atomically, even), with no owner. The interleaving is fixed with a
  barrier between read and write (the unlucky schedule a real system hits
  sooner or later), so the test *shows* keys are lost: the checker can fail.
* Owned: the same merges, from the same threads, go through one
  :class:`SessionCore` via a single-consumer queue, as the session actor's
  mailbox will: nothing is lost.
* Two OS processes, each with its own core on the same session, sharing it
  through ``<sid>/.lock``: nothing is lost.

fsync is skipped here (``NoSyncFiles``): this is about isolation, not
durability, which the crash tests prove; the tests stay fast.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from store import SessionOptions
from store._format import decode_node
from store._session import SessionCore
from tests.faults import NoSyncFiles

NODES = [f"n{i}" for i in range(8)]
ROUNDS = 300
MARKER_TASKS = 3  # plus one checkpoint-stamp component


def _session(state: Path) -> SessionCore:
    core = SessionCore.create(state, "race", options=SessionOptions(files=NoSyncFiles()))
    previous = "ROOT"
    for i, node_id in enumerate(NODES):
        core.append({"id": node_id, "role": ["user", "assistant"][i % 2], "content": node_id,
                     "predecessor": previous})
        previous = node_id
    core.close()
    return core


def _keys_on_disk(state: Path) -> dict[str, set[str]]:
    history = state / "sessions" / "race" / "history"
    found: dict[str, set[str]] = {}
    for path in history.iterdir():
        if path.name.startswith("."):
            continue
        node = decode_node(path.read_bytes(), path.name)  # every node file parses
        found[node.id] = set(node.metadata)
    return found


def _lost(state: Path, acknowledged: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    on_disk = _keys_on_disk(state)
    return [(n, k) for n, k in acknowledged if k not in on_disk.get(n, set())]


def _component_keys(component: int, round_: int) -> tuple[str, str]:
    node = NODES[round_ % len(NODES)]
    if component == MARKER_TASKS:
        return node, f"checkpoint_{round_}"
    return node, f"memory_written_w{component}_{round_}"


def _run_components(merge: Callable[[int, str, str], None]) -> list[tuple[str, str]]:
    acknowledged: list[tuple[str, str]] = []
    lock = threading.Lock()

    def component(index: int) -> None:
        for round_ in range(ROUNDS):
            node, key = _component_keys(index, round_)
            merge(index, node, key)
            with lock:
                acknowledged.append((node, key))

    threads = [threading.Thread(target=component, args=(i,)) for i in range(MARKER_TASKS + 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return acknowledged


def test_naive_read_modify_write_loses_markers(tmp_path: Path) -> None:
    _session(tmp_path)
    history = tmp_path / "sessions" / "race" / "history"
    files = {name.split("-", 2)[2][:-5]: history / name for name in os.listdir(history)}
    barrier = threading.Barrier(MARKER_TASKS + 1)
    durable = NoSyncFiles()

    def naive_merge(component: int, node: str, key: str) -> None:
        record = json.loads(files[node].read_bytes())
        barrier.wait()  # every component has read the same node: now they all write
        record["metadata"][key] = component
        durable.write_atomic(str(files[node]), json.dumps(record, ensure_ascii=False).encode())
        barrier.wait()

    acknowledged = _run_components(naive_merge)
    assert len(acknowledged) == ROUNDS * (MARKER_TASKS + 1)
    lost = _lost(tmp_path, acknowledged)
    # each round every writer but the last loses its key
    assert len(lost) == ROUNDS * MARKER_TASKS


def test_merges_serialised_through_one_owner_lose_nothing(tmp_path: Path) -> None:
    core = _session(tmp_path)
    core = SessionCore.open(tmp_path, "race", options=SessionOptions(files=NoSyncFiles()))
    mailbox: queue.Queue[tuple[Callable[[], Any], Future[Any]] | None] = queue.Queue()

    def owner() -> None:  # the session actor's loop: one message at a time
        while (item := mailbox.get()) is not None:
            call, reply = item
            try:
                reply.set_result(call())
            except Exception as exc:  # noqa: BLE001 - the reply carries it to the caller
                reply.set_exception(exc)

    def call(fn: Callable[[], Any]) -> Any:
        reply: Future[Any] = Future()
        mailbox.put((fn, reply))
        return reply.result()

    owner_thread = threading.Thread(target=owner)
    owner_thread.start()
    barrier = threading.Barrier(MARKER_TASKS + 1)

    def owned_merge(component: int, node: str, key: str) -> None:
        barrier.wait()  # the same contention as the naive run
        call(lambda: core.merge_node_metadata_batch({node: {key: component}}))

    appended: list[str] = []

    def host() -> None:  # appends and rewinds on the same session meanwhile
        for i in range(120):
            head = call(lambda: core.head)
            turn = {"id": f"h{i}", "content": "x", "role": ["user", "assistant"][i % 2],
                    "predecessor": head}
            appended.append(call(functools.partial(core.append, turn))["id"])
            if i % 20 == 19:  # back to the user turn just before this reply
                call(functools.partial(core.rewind_to, appended[-2]))

    host_thread = threading.Thread(target=host)
    host_thread.start()
    acknowledged = _run_components(owned_merge)
    host_thread.join()
    mailbox.put(None)
    owner_thread.join()
    core.close()
    assert len(acknowledged) == ROUNDS * (MARKER_TASKS + 1)
    assert _lost(tmp_path, acknowledged) == []
    assert set(appended) <= set(_keys_on_disk(tmp_path))


def _process_worker(state: str, worker: int, rounds: int) -> list[tuple[str, str]]:
    core = SessionCore.open(state, "race", options=SessionOptions(files=NoSyncFiles()))
    acknowledged: list[tuple[str, str]] = []
    for round_ in range(rounds):
        node = NODES[(round_ * 3 + worker) % len(NODES)]
        key = f"memory_written_p{worker}_{round_}" if round_ % 4 else f"checkpoint_p{worker}_{round_}"
        core.merge_node_metadata_batch({node: {key: round_}})
        acknowledged.append((node, key))
        if round_ % 50 == 0:
            core.append({"id": f"p{worker}_{round_}", "content": "x",
                         "role": "assistant", "predecessor": node})
    core.close()
    return acknowledged


def test_two_processes_share_a_session_through_the_lock(tmp_path: Path) -> None:
    _session(tmp_path)
    rounds = 600
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        results = pool.starmap(_process_worker, [(str(tmp_path), w, rounds) for w in (0, 1)])
    acknowledged = [item for result in results for item in result]
    assert len(acknowledged) == 2 * rounds
    assert _lost(tmp_path, acknowledged) == []
    reopened = SessionCore.open(tmp_path, "race")
    assert reopened.problems == []
    assert len(reopened.nodes()) == len(NODES) + 2 * (rounds // 50)
