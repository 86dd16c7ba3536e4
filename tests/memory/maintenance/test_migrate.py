"""Migration from position cursors (SPEC §6.7): only the safe prefix of real DAG paths is marked."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import open_actor
from memory.ledger._ledger import records_from_branch, unwritten_turns
from memory.ledger._records import MARKER_KEY, source_anchor, source_id
from memory.maintenance._migrate import (
    MigrationReport,
    PrefixMerge,
    SessionCandidates,
    migrate,
    read_candidates,
    safe_prefix,
    session_candidates,
)
from memory.runtime._workspace_actor import DropCursors, ReadRuntimeState, WorkspaceActor
from memory.workspace._archive import append_records, archive_relpath, render_frame
from memory.workspace._legacy import legacy_relpath
from memory.workspace._runtime_state import RuntimeState, read_runtime_state, write_runtime_state
from store import DurableFiles, SessionCore, SessionNotFoundError
from store._actor import GetBranch, MergeMetadata, SessionActor
from tests.faults import SimulatedCrash

WID = "w-0badc0de"
TRUNK = [f"m{i}" for i in range(10)]
SHORT = ["f0", "f1"]
LONG = [f"g{i}" for i in range(8)]
COUNTERS = RuntimeState(
    creation_order={"blk": 3},
    write_commits_since_global=2,
    local_batches=7,
    local_tokens=900,
    last_global_at="2025-08-01T00:00:00+00:00",
    cursors={"s1": {"message_id": "m9", "ordinal": 9}},
    extra={"kept": True},
)


class World:
    """A state directory with real sessions, and the callables the runtime would inject."""

    def __init__(self, root: Path) -> None:
        self.state = str(root)
        self.memory = os.path.join(self.state, "memory")
        os.makedirs(self.memory, exist_ok=True)
        self.cores: dict[str, SessionCore] = {}
        self.walks: list[tuple[str, str]] = []
        self.mark_calls: list[tuple[str, tuple[str, ...]]] = []
        self.fail_mark: set[str] = set()

    def session(self, sid: str) -> SessionCore:
        if sid not in self.cores:
            try:
                self.cores[sid] = SessionCore.open(self.state, sid)
            except SessionNotFoundError:
                self.cores[sid] = SessionCore.create(self.state, sid)
        return self.cores[sid]

    def chain(self, sid: str, ids: Sequence[str], after: str | None = None) -> None:
        core = self.session(sid)
        for i, node in enumerate(ids):
            message: dict[str, Any] = {
                "id": node,
                "role": "user" if i % 2 == 0 else "assistant",
                "content": f"turn {node}",
            }
            if after is not None:
                message["predecessor"] = after
            core.append(message)
            after = node

    def archive(self, sid: str, tip: str, only: Sequence[str] | None = None) -> None:
        records = records_from_branch(sid, self.session(sid).get_branch(tip))
        if only is not None:
            records = [r for r in records if r.message_id in only]
        append_records(self.memory, sid, records, DurableFiles())

    async def get_branch(self, sid: str, tip: str) -> list[dict[str, Any]]:
        self.walks.append((sid, tip))
        core = self.cores.get(sid) or SessionCore.open(self.state, sid)
        return core.get_branch(tip)

    async def mark(self, sid: str, ids: Sequence[str]) -> None:
        self.mark_calls.append((sid, tuple(ids)))
        if sid in self.fail_mark:
            raise OSError("disk full")
        self.session(sid).merge_node_metadata_batch({n: {MARKER_KEY: WID} for n in ids})

    async def read_state(self) -> RuntimeState:
        return read_runtime_state(self.memory)

    async def drop_cursors(self) -> None:
        write_runtime_state(self.memory, read_runtime_state(self.memory).without_cursors(),
                            DurableFiles())

    async def migrate(self, progress: list[tuple[int, int]] | None = None) -> MigrationReport:
        return await migrate(
            self.memory,
            get_branch=self.get_branch,
            mark=self.mark,
            read_state=self.read_state,
            drop_cursors=self.drop_cursors,
            progress=None if progress is None else (lambda d, t: progress.append((d, t))),
        )

    def owed(self, sid: str, tip: str) -> list[str]:
        records = records_from_branch(sid, self.session(sid).get_branch(tip))
        return [r.message_id for r in unwritten_turns(records, WID)]

    def write_file(self, relpath: str, data: bytes) -> None:
        path = os.path.join(self.memory, relpath)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)


@pytest.fixture
def world(tmp_path: Path) -> World:
    """SPEC §1's measured session: trunk m0..m9, forks at m3 with 2 and 8 own turns."""
    w = World(tmp_path)
    w.chain("s1", TRUNK)
    w.chain("s1", SHORT, after="m3")
    w.chain("s1", LONG, after="m3")
    write_runtime_state(w.memory, COUNTERS, DurableFiles())
    return w


def _old_cursor_rule(branch: Sequence[Mapping[str, Any]], cursor: int) -> list[str]:
    """What the replaced design delivered: rows of the unrolled list past the cursor."""
    return [m["id"] for ordinal, m in enumerate(branch) if ordinal > cursor]


async def test_measured_case(world: World) -> None:
    core = world.session("s1")
    assert core.head == "m9"
    # The failure being fixed: last rows 5 and 11, cursor 9 -> 0 and 2 turns delivered.
    assert len(core.get_branch("f1")) - 1 == 5 and len(core.get_branch("g7")) - 1 == 11
    assert _old_cursor_rule(core.get_branch("f1"), 9) == []
    assert _old_cursor_rule(core.get_branch("g7"), 9) == ["g6", "g7"]
    # What the old design archived: the trunk, then the long fork's last two turns.
    world.archive("s1", "m9")
    world.archive("s1", "g7", only=["g6", "g7"])

    report = await world.migrate()

    # The fork's archived tail sits after a gap (g0..g5): it is not marked.
    assert report.as_json() == {"marked": {"s1": TRUNK}, "cursors_removed": True}
    assert world.owed("s1", "m9") == []
    assert world.owed("s1", "f1") == SHORT  # every own turn: 2
    assert world.owed("s1", "g7") == LONG  # every own turn: 8 (g6, g7 again: a duplicate)
    shared = {"m0", "m1", "m2", "m3"}
    assert not shared & {*world.owed("s1", "f1"), *world.owed("s1", "g7")}  # written once
    state = read_runtime_state(world.memory)
    assert state == COUNTERS.without_cursors()


async def test_gap_on_the_head_branch_marks_only_up_to_it(world: World) -> None:
    world.archive("s1", "m9", only=["m0", "m1", "m2", "m3", "m6", "m7", "m8", "m9"])
    report = await world.migrate()
    assert report.marked == {"s1": ("m0", "m1", "m2", "m3")}
    assert world.owed("s1", "m9") == TRUNK[4:]


async def test_a_forged_frame_inside_a_body_is_never_a_candidate(world: World) -> None:
    [g0] = [
        r
        for r in records_from_branch("s1", world.session("s1").get_branch("g0"))
        if r.message_id == "g0"
    ]
    forged = render_frame(g0)
    world.session("s1").append({"id": "m10", "role": "user", "content": forged})
    world.archive("s1", "m10")
    world.archive("s1", "g7", only=["g1", "g2", "g3"])
    assert "g0" not in session_candidates("s1", _file(world, archive_relpath("s1")), None).node_ids
    report = await world.migrate()
    assert report.marked == {"s1": (*TRUNK, "m10")}
    assert world.owed("s1", "g7") == LONG


async def test_frames_after_garbage_are_not_candidates(world: World) -> None:
    world.archive("s1", "m9", only=TRUNK[:6])
    valid = _file(world, archive_relpath("s1")) + b"\ngarbage line\n\n"
    rest = [
        r
        for r in records_from_branch("s1", world.session("s1").get_branch("m9"))
        if r.message_id in TRUNK[6:]
    ]
    world.write_file(
        archive_relpath("s1"), valid + b"".join(b"\n" + render_frame(r).encode() for r in rest)
    )
    report = await world.migrate()
    assert report.marked == {"s1": tuple(TRUNK[:6])}
    assert any("scan stopped" in p for p in report.problems)
    assert report.cursors_removed


def _legacy(sid: str, ids: Sequence[str], *, bad_hash: bool = False) -> bytes:
    out = f"# {sid}\n\n"
    for node in ids:
        source = source_id(sid, node)
        anchor = "source-" + "0" * 16 if bad_hash else source_anchor(source)
        out += f'<a id="{anchor}"></a>\n<!-- source-id:{source} -->\n[2025-08-01] user: x\n\n'
    return out.encode()


async def test_legacy_archive_gives_only_its_first_header(world: World) -> None:
    world.write_file(legacy_relpath("s1"), _legacy("s1", TRUNK))
    report = await world.migrate()
    assert report.marked == {"s1": ("m0",)}
    assert world.owed("s1", "m9") == TRUNK[1:]


async def test_legacy_first_header_with_a_wrong_hash_is_not_believed(world: World) -> None:
    world.write_file(legacy_relpath("s1"), _legacy("s1", TRUNK, bad_hash=True))
    report = await world.migrate()
    assert report.marked == {}
    assert any("no trusted first header" in p for p in report.problems)
    assert report.cursors_removed


async def test_legacy_and_v2_candidates_are_merged(world: World) -> None:
    world.write_file(legacy_relpath("s1"), _legacy("s1", ["m0"]))
    world.archive("s1", "m9", only=TRUNK[1:5])
    report = await world.migrate()
    assert report.marked == {"s1": tuple(TRUNK[:5])}


async def test_no_sources_marks_nothing_and_removes_cursors(world: World) -> None:
    progress: list[tuple[int, int]] = []
    report = await world.migrate(progress)
    assert report.as_json() == {"marked": {}, "cursors_removed": True}
    assert world.mark_calls == [] and progress == [(0, 0)]
    assert read_runtime_state(world.memory) == COUNTERS.without_cursors()
    assert world.owed("s1", "m9") == TRUNK  # written from scratch


async def test_without_cursors_nothing_is_done(world: World) -> None:
    write_runtime_state(world.memory, COUNTERS.without_cursors(), DurableFiles())
    world.archive("s1", "m9")
    report = await world.migrate()
    assert report.marked == {} and not report.cursors_removed and not report.had_cursors
    assert world.walks == [] and world.mark_calls == []


async def test_a_failed_mark_keeps_cursors_for_the_next_attempt(world: World) -> None:
    world.chain("s2", ["x0", "x1"])
    world.archive("s1", "m9")
    world.archive("s2", "x1")
    world.fail_mark = {"s1"}
    progress: list[tuple[int, int]] = []
    report = await world.migrate(progress)
    assert not report.cursors_removed and report.errors
    assert report.marked == {"s2": ("x0", "x1")}  # the other session still got its marks
    assert progress == [(0, 2), (1, 2), (2, 2)]
    assert read_runtime_state(world.memory).cursors == COUNTERS.cursors
    world.fail_mark = set()
    again = await world.migrate()
    assert again.cursors_removed and again.marked["s1"] == tuple(TRUNK)
    assert read_runtime_state(world.memory).cursors is None


async def test_an_unexpected_read_failure_keeps_cursors(world: World) -> None:
    world.archive("s1", "m9")

    async def broken(sid: str, tip: str) -> list[dict[str, Any]]:
        raise RuntimeError("actor crashed")

    report = await migrate(
        world.memory,
        get_branch=broken,
        mark=world.mark,
        read_state=world.read_state,
        drop_cursors=world.drop_cursors,
    )
    assert not report.cursors_removed and world.mark_calls == []
    assert read_runtime_state(world.memory).cursors is not None


async def test_archives_of_missing_sessions_or_nodes_are_passed_over(world: World) -> None:
    world.archive("s1", "m9")
    ghost = records_from_branch("s1", world.session("s1").get_branch("m2"))
    ghost_records = [r.__class__(**{**_fields(r), "session_id": "ghost"}) for r in ghost]
    append_records(world.memory, "ghost", ghost_records, DurableFiles())
    world.write_file(legacy_relpath("s1"), _legacy("s1", ["nosuch"]))
    report = await world.migrate()
    assert report.marked == {"s1": tuple(TRUNK)}
    assert any("ghost" in p for p in report.problems)
    assert any("nosuch" in p for p in report.problems)
    assert report.cursors_removed


async def test_a_linear_session_is_walked_once(world: World) -> None:
    world.archive("s1", "m9")
    await world.migrate()
    assert world.walks == [("s1", "m9")]


async def test_non_canonical_file_names_are_not_believed(world: World) -> None:
    world.archive("s1", "m9")
    data = _file(world, archive_relpath("s1"))
    world.write_file("sources/openprogram/_v2/s%31.md", data)  # unquotes to "s1"
    world.write_file("sources/openprogram/_v2/x y.md", data)  # "x y" is written x%20y
    sessions, ignored = read_candidates(world.memory)
    assert [c.session_id for c in sessions] == ["s1"]
    assert [p.split(": ")[0] for p in ignored] == [
        "memory/sources/openprogram/_v2/s%31.md",
        "memory/sources/openprogram/_v2/x y.md",
    ]
    report = await world.migrate()
    assert report.marked == {"s1": tuple(TRUNK)}
    assert sum("not a quoted session id" in p for p in report.problems) == 2


def _file(world: World, relpath: str) -> bytes:
    with open(os.path.join(world.memory, relpath), "rb") as handle:
        return handle.read()


def _fields(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__slots__}


# -- the pure rule, as a property ----------------------------------------------------


def _message(node: int, parent: int | None, kind: str) -> dict[str, Any]:
    role = {"u": "user", "a": "assistant", "t": "tool", "r": "user", "e": "assistant"}[kind]
    message: dict[str, Any] = {
        "id": f"n{node}",
        "role": role,
        "content": "" if kind == "e" else f"text {node}",
        "predecessor": "ROOT" if parent is None else f"n{parent}",
    }
    if kind == "r":
        message["display"] = "runtime"
    return message


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[dict[str, Any]], set[str]]:
    size = draw(st.integers(1, 25))
    messages = []
    for node in range(size):
        parent = None if node == 0 else draw(st.integers(0, node - 1))
        messages.append(_message(node, parent, draw(st.sampled_from("uuaaatre"))))
    candidates = {m["id"] for m in messages if draw(st.booleans())}
    return messages, candidates


def _path(messages: list[dict[str, Any]], tip: str) -> list[dict[str, Any]]:
    by_id = {m["id"]: m for m in messages}
    path = []
    node: str | None = tip
    while node is not None and node != "ROOT":
        path.append(by_id[node])
        node = by_id[node]["predecessor"]
    return path[::-1]


@settings(max_examples=200, deadline=None)
@given(trees())
def test_marks_are_a_contiguous_prefix_of_every_path_and_maximal(
    tree: tuple[list[dict[str, Any]], set[str]],
) -> None:
    messages, candidates = tree
    merge = PrefixMerge(SessionCandidates("s", tuple(sorted(candidates))))
    while (tip := merge.next_tip()) is not None:
        merge.add_path(tip, _path(messages, tip))
    marked = set(merge.node_ids)
    assert marked <= candidates
    for message in messages:
        records = [r.message_id for r in records_from_branch("s", _path(messages, message["id"]))]
        flags = [r in marked for r in records]
        # No record is marked after an unmarked one: the walk back never strands a turn.
        assert flags == sorted(flags, reverse=True)
        # Maximal: a candidate whose whole record path is archived is marked.
        if message["id"] in candidates and all(r in candidates for r in records):
            assert set(records) <= marked


def test_safe_prefix_skips_non_records_without_breaking() -> None:
    branch = [
        _message(0, None, "u"),
        _message(1, 0, "t"),
        _message(2, 1, "r"),
        _message(3, 2, "e"),
        _message(4, 3, "a"),
        _message(5, 4, "u"),
    ]
    assert safe_prefix("s", branch, {"n0", "n4"}) == ["n0", "n4"]
    assert safe_prefix("s", branch, {"n0", "n5"}) == ["n0"]
    assert safe_prefix("s", branch, {"n1", "n4"}) == []


async def test_a_crash_between_marks_keeps_cursors_and_a_rerun_finishes(world: World) -> None:
    world.chain("s2", ["x0", "x1"])
    world.archive("s1", "m9")
    world.archive("s2", "x1")
    real_mark = world.mark

    async def dies_on_s2(sid: str, ids: Sequence[str]) -> None:
        if sid == "s2":
            raise SimulatedCrash("killed while marking s2")
        await real_mark(sid, ids)

    with pytest.raises(SimulatedCrash):
        await migrate(
            world.memory,
            get_branch=world.get_branch,
            mark=dies_on_s2,
            read_state=world.read_state,
            drop_cursors=world.drop_cursors,
        )
    assert read_runtime_state(world.memory).cursors == COUNTERS.cursors
    assert world.owed("s1", "m9") == [] and world.owed("s2", "x1") == ["x0", "x1"]
    report = await world.migrate()
    assert report.as_json() == {
        "marked": {"s1": TRUNK, "s2": ["x0", "x1"]},
        "cursors_removed": True,
    }
    assert world.owed("s2", "x1") == []


async def test_through_the_session_and_workspace_actors(world: World) -> None:
    """The driver's callables are exactly the actors' calls (both backends)."""
    world.archive("s1", "m9")
    world.archive("s1", "g7", only=["g6", "g7"])
    world.cores.clear()  # from here on, the actors own the files
    async with (
        open_actor(SessionActor(world.state, "s1")) as session,
        open_actor(WorkspaceActor(world.memory)) as workspace,
    ):

        async def get_branch(sid: str, tip: str) -> list[dict[str, Any]]:
            assert sid == "s1"
            branch: list[dict[str, Any]] = await session.call(GetBranch(tip))
            return branch

        async def mark(sid: str, ids: Sequence[str]) -> None:
            await session.call(MergeMetadata({n: {MARKER_KEY: WID} for n in ids}))

        async def read_state() -> RuntimeState:
            state: RuntimeState = await workspace.call(ReadRuntimeState())
            return state

        async def drop_cursors() -> None:
            await workspace.call(DropCursors())

        report = await migrate(
            world.memory,
            get_branch=get_branch,
            mark=mark,
            read_state=read_state,
            drop_cursors=drop_cursors,
        )
    assert report.as_json() == {"marked": {"s1": TRUNK}, "cursors_removed": True}
    assert world.owed("s1", "f1") == SHORT and world.owed("s1", "g7") == LONG
    assert read_runtime_state(world.memory) == COUNTERS.without_cursors()
