"""SessionActor: the mailbox is the only way into a session's files.

The headline test is the lost-marker race of SPEC §1 run through the actor:
many tasks append, rewind, merge markers and stamp checkpoints on one
session at once; every acknowledged key must be on disk at the end and
every node file must parse. ``test_session_race.py`` shows the same workload losing
keys without an owner, so the checker can fail.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import anyio
import pytest

from actors import (
    ActorCrashedError,
    MailboxOptions,
    UnhandledMessageError,
    open_actor,
    redeliverable,
)
from store import (
    InvalidNodeError,
    SessionCore,
    SessionMessage,
    SessionOptions,
    StoreError,
    UnsafeIdError,
)
from store._actor import (
    Append,
    CheckpointJournal,
    GetBranch,
    GetMeta,
    InsertSummary,
    ListBranches,
    MergeMetadata,
    RewindTo,
    SessionActor,
    SetHead,
    SpawnBranch,
    TipMoved,
)
from store._format import decode_node
from supervisors import Backoff, ChildSpec, Supervisor, get_child
from tests.faults import NoSyncFiles


def _new_session(state: Path, sid: str = "s1") -> None:
    SessionCore.create(state, sid, title="t")


def _node_files(state: Path, sid: str) -> dict[str, dict[str, Any]]:
    history = state / "sessions" / sid / "history"
    found = {}
    for path in history.iterdir():
        if path.name.startswith("."):
            continue
        node = decode_node(path.read_bytes(), path.name)
        found[node.id] = dict(node.metadata)
    return found


async def test_append_walk_and_merge_through_the_mailbox(tmp_path: Path) -> None:
    _new_session(tmp_path)
    async with open_actor(SessionActor(tmp_path, "s1")) as ref:
        u1 = await ref.call(Append({"id": "u1", "role": "user", "content": "hi"}))
        await ref.call(Append({"id": "a1", "role": "assistant", "content": "hello",
                               "predecessor": "u1"}))
        branch = await ref.call(GetBranch())
        assert [m["id"] for m in branch] == ["u1", "a1"]
        assert u1["content"] == "hi"
        before = (await ref.call(GetMeta()))["updated_at"]
        changed = await ref.call(MergeMetadata({"u1": {"memory_written_scriptorium": "w-1"}}))
        assert changed == ["u1"]
        assert (await ref.call(GetMeta()))["updated_at"] == before
        rows = await ref.call(ListBranches())
        assert [r["head_msg_id"] for r in rows] == ["a1"]
    assert _node_files(tmp_path, "s1")["u1"]["memory_written_scriptorium"] == "w-1"


async def test_bad_input_is_a_typed_error_and_the_actor_keeps_running(tmp_path: Path) -> None:
    _new_session(tmp_path)
    async with open_actor(SessionActor(tmp_path, "s1")) as ref:
        with pytest.raises(UnsafeIdError, match="s1"):
            await ref.call(Append({"id": "../evil", "role": "user", "content": "x"}))
        with pytest.raises(StoreError):
            await ref.call(MergeMetadata({"missing": {"k": 1}}))
        with pytest.raises(UnhandledMessageError, match="does not handle str messages"):
            await ref.call("not a session message")  # type: ignore[call-overload]  # nor by mypy
        await ref.call(Append({"id": "u1", "role": "user", "content": "still here"}))
        assert ref.statistics().crashes == 0
    assert list(_node_files(tmp_path, "s1")) == ["u1"]


async def test_journals_are_retired_once_the_mailbox_drains(tmp_path: Path) -> None:
    _new_session(tmp_path)
    actor = SessionActor(tmp_path, "s1")
    async with open_actor(actor) as ref:
        await ref.call(Append({"id": "u1", "role": "user", "content": "hi"}))
        await ref.call(MergeMetadata({"u1": {"k": 1}}))
        # the CheckpointJournal cast sits behind any queued work; a call after it drains it
        await ref.call(CheckpointJournal())
        assert actor.core.outstanding_journals == []


async def test_tip_moved_reports_every_append(tmp_path: Path) -> None:
    events: list[TipMoved] = []

    class Watching(SessionActor[SessionMessage]):
        async def tip_moved(self, event: TipMoved) -> None:
            events.append(event)

    _new_session(tmp_path)
    async with open_actor(Watching(tmp_path, "s1")) as ref:
        await ref.call(Append({"id": "u1", "role": "user", "content": "a"}))
        await ref.call(Append({"id": "a1", "role": "assistant", "content": "b",
                               "predecessor": "u1"}))
        # a retry sibling of a1 forks: it does not move the head
        await ref.call(Append({"id": "a1b", "role": "assistant", "content": "c",
                               "predecessor": "u1"}))
    assert [(e.node["id"], e.head, e.head_moved) for e in events] == [
        ("u1", "u1", True), ("a1", "a1", True), ("a1b", "a1", False)]


async def test_an_outside_write_is_seen_after_one_rebuild(tmp_path: Path) -> None:
    _new_session(tmp_path)
    actor = SessionActor(tmp_path, "s1")
    async with open_actor(actor) as ref:
        await ref.call(Append({"id": "u1", "role": "user", "content": "a"}))
        outside = SessionCore.open(tmp_path, "s1")
        outside.append({"id": "a1", "role": "assistant", "content": "b", "predecessor": "u1"})
        rebuilds = actor.core.rebuilds
        for _ in range(3):
            assert [m["id"] for m in await ref.call(GetBranch())] == ["u1", "a1"]
        assert actor.core.rebuilds == rebuilds + 1


async def test_lost_marker_race_removed_by_the_actor(tmp_path: Path) -> None:
    """Appends, rewinds, marker merges from several tasks and checkpoint stamps, at once.

    fsync is skipped (``NoSyncFiles``): this is about isolation; the crash
    tests prove durability.
    """
    _new_session(tmp_path)
    acknowledged: list[tuple[str, str]] = []
    operations = 0
    rng = random.Random(7)
    async with open_actor(SessionActor(tmp_path, "s1", options=SessionOptions(files=NoSyncFiles())),
                          options=MailboxOptions(capacity=64)) as ref:
        ids: list[str] = []
        previous = "ROOT"
        for i in range(12):
            node_id = f"n{i}"
            await ref.call(Append({"id": node_id, "role": ["user", "assistant"][i % 2],
                                   "content": node_id, "predecessor": previous}))
            ids.append(node_id)
            previous = node_id

        def count() -> None:
            nonlocal operations
            operations += 1

        async def marker_writer(task: int) -> None:
            for round_ in range(200):
                batch = rng.sample(ids[:12], 4)
                key = f"memory_written_t{task}_{round_}"
                await ref.call(MergeMetadata({n: {key: "w"} for n in batch}))
                count()
                acknowledged.extend((n, key) for n in batch)

        async def checkpoint_stamper() -> None:
            for round_ in range(800):
                node_id = rng.choice(ids[:12])
                key = f"checkpoint_{round_}"
                await ref.call(MergeMetadata({node_id: {key: round_}}))
                count()
                acknowledged.append((node_id, key))

        async def appender() -> None:
            tip = "n11"
            for i in range(400):
                node_id = f"x{i}"
                await ref.call(Append({"id": node_id, "role": ["user", "assistant"][i % 2],
                                       "content": node_id, "predecessor": tip}))
                count()
                tip = node_id
                if i % 10 == 9:
                    branch = await ref.call(GetBranch())
                    user_turns = [m["id"] for m in branch if m["role"] == "user"
                                  and m["id"].startswith("x")]
                    if user_turns:
                        await ref.call(RewindTo(user_turns[-1]))
                        acknowledged.append((user_turns[-1], "rewound"))
                    tip = (await ref.call(GetMeta()))["head_id"] or "n11"

        async with anyio.create_task_group() as tg:
            for task in range(4):
                tg.start_soon(marker_writer, task)
            tg.start_soon(checkpoint_stamper)
            tg.start_soon(appender)
    on_disk = _node_files(tmp_path, "s1")
    lost = [(n, k) for n, k in acknowledged if k not in on_disk[n]]
    assert operations >= 2000
    assert lost == []


# -- a crash after the append's durable effect ------------------------------------------


class CrashAfterAppend(SessionActor[SessionMessage]):
    """``tip_moved`` raises OSError once (ENOSPC writing the claim, say): after the append."""

    def __init__(self, state: Path, sid: str, seen: list[TipMoved]) -> None:
        super().__init__(state, sid)
        self.seen = seen

    async def tip_moved(self, event: TipMoved) -> None:
        self.seen.append(event)
        if len(self.seen) == 1:
            raise OSError(28, "No space left on device")


async def _under_a_supervisor(state: Path, seen: list[TipMoved], message: Any) -> Any:
    spec = ChildSpec("s1", lambda: CrashAfterAppend(state, "s1", seen))
    async with open_actor(Supervisor([spec], backoff=Backoff.none()), name="sup") as sup:
        ref = await get_child(sup, "s1")
        try:
            return await ref.call(message)
        finally:
            assert ref.statistics().crashes == 1


async def test_an_append_with_its_own_id_is_redelivered_and_written_once(tmp_path: Path) -> None:
    _new_session(tmp_path)
    seen: list[TipMoved] = []
    node = await _under_a_supervisor(
        tmp_path, seen, Append({"id": "u1", "role": "user", "content": "I prefer tea."}))
    assert node["id"] == "u1" and node["content"] == "I prefer tea."
    assert list(_node_files(tmp_path, "s1")) == ["u1"]
    # The redelivery found the turn and ran the interrupted reaction again.
    assert [(e.replayed, e.head_moved, e.head) for e in seen] == [
        (False, True, "u1"), (True, True, "u1")]


async def test_an_append_without_an_id_is_not_redelivered_and_its_caller_learns_why(
    tmp_path: Path,
) -> None:
    _new_session(tmp_path)
    seen: list[TipMoved] = []
    with pytest.raises(ActorCrashedError, match="not idempotent") as raised:
        await _under_a_supervisor(
            tmp_path, seen, Append({"role": "user", "content": "I prefer tea."}))
    assert isinstance(raised.value.__cause__, OSError)
    assert len(_node_files(tmp_path, "s1")) == 1  # written once, never twice
    assert len(seen) == 1


def test_which_session_messages_may_be_redelivered() -> None:
    safe = [GetBranch(), ListBranches(), GetMeta(), SetHead("u1"), CheckpointJournal(),
            MergeMetadata({"u1": {"k": 1}}), Append({"id": "u1", "content": "x"})]
    unsafe = [Append({"content": "x"}), Append({"id": "", "content": "x"}), RewindTo("u1"),
              SpawnBranch("u1", "agent_spawn", "p"), InsertSummary(("u1",), "s")]
    assert [redeliverable(m) for m in safe] == [True] * len(safe)
    assert [redeliverable(m) for m in unsafe] == [False] * len(unsafe)


async def test_a_turn_named_root_is_refused_naming_the_session(tmp_path: Path) -> None:
    """ "ROOT" is the first turn's predecessor (SPEC §4): a node so named loops every walk."""
    _new_session(tmp_path)
    async with open_actor(SessionActor(tmp_path, "s1")) as ref:
        with pytest.raises(InvalidNodeError, match="'ROOT'.*'s1'.*another id"):
            await ref.call(Append({"id": "ROOT", "role": "user", "content": "a"}))
        assert _node_files(tmp_path, "s1") == {}  # nothing written
        await ref.call(Append({"id": "u1", "role": "user", "content": "b"}))
        assert [m["id"] for m in await ref.call(GetBranch())] == ["u1"]  # still readable
        assert ref.statistics().crashes == 0
