"""Crash safety: kill append, metadata batch, rewind and the checkpoint at every step.

Each test runs the operation on :class:`tests.faults.FaultyFiles`, which
raises :class:`SimulatedCrash` before primitive step *k* (the process dies
there: nothing after it runs), for every *k*; then re-opens the session with
plain files (recovery) and checks: every node parses, every file holds its
old or its new content, and an acknowledged operation is complete.

Power loss (unsynced installs lost, the journal cut at any byte) is
simulated on the files themselves: see the tests at the end.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from store import SessionOptions
from store._durable import BULK_SYNC_FILES, TEMP_SUFFIX, DurableFiles, bulk_sync_device
from store._journal import JOURNAL_NAME
from store._session import SessionCore
from tests.faults import FaultyFiles, FlushTracking, NoSyncFiles, SimulatedCrash, count_steps
from tests.store._crash_cases import MARK, OPERATIONS, build, first_wins, node_files, state_of


def _recover(state: Path, files: DurableFiles | None = None) -> SessionCore:
    core = SessionCore.open(state, "s", options=SessionOptions(files=files))
    assert core.problems == []
    root = state / "sessions" / "s"
    assert not [p for p in root.rglob("*") if p.name.endswith(TEMP_SUFFIX)]
    journal = root / JOURNAL_NAME
    assert not journal.exists() or journal.stat().st_size == 0  # checkpointed
    return core


def _crash_everywhere(
    tmp_path: Path,
    operation: Callable[[SessionCore], Any],
    check: Callable[[Path, dict[str, bytes], SessionCore, bool], None],
    prepare: Callable[[Path], None] = lambda state: None,
) -> int:
    def run(files: DurableFiles) -> None:
        state = build(tmp_path)
        prepare(state)
        operation(SessionCore.open(state, "s", options=SessionOptions(files=files)))

    total = count_steps(run)
    assert total > 0
    for k in range(total + 1):
        state = build(tmp_path)
        prepare(state)
        before = node_files(state)
        try:
            operation(SessionCore.open(state, "s", options=SessionOptions(
                files=FaultyFiles(crash_at=k))))
            acknowledged = True
        except SimulatedCrash:
            acknowledged = False
        assert acknowledged == (k >= total), k
        check(state, before, _recover(state), acknowledged)
    return total


def test_append_crash_at_every_step(tmp_path: Path) -> None:
    def check(state: Path, before: dict[str, bytes], core: SessionCore, acked: bool) -> None:
        ids = [n.id for n in core.nodes()]
        assert ids[:6] == ["u0", "a1", "u2", "a3", "u4", "a5"]
        assert ids in (ids[:6], [*ids[:6], "u6"])
        # one journal record: node file and meta.json together or not at all
        appended = ids[-1] == "u6"
        assert appended == (core.head == "u6")
        assert appended == (after_meta(state) != before["meta.json"])
        if acked:
            assert appended
        after = node_files(state)
        for name, data in before.items():
            if name != "meta.json":
                assert after[name] == data

    def after_meta(state: Path) -> bytes:
        return (state / "sessions" / "s" / "meta.json").read_bytes()

    steps = _crash_everywhere(
        tmp_path, lambda c: c.append({"id": "u6", "content": "new", "predecessor": "a5"}), check
    )
    assert steps >= 9  # the record: open, write, flush; two installs: open, write, rename


def test_metadata_batch_crash_at_every_step(tmp_path: Path) -> None:
    patch = {n: {MARK: "w-12345678"} for n in ("u0", "a1", "u2")}

    def check(state: Path, before: dict[str, bytes], core: SessionCore, acked: bool) -> None:
        marks = [core.node(n).metadata.get(MARK) for n in ("u0", "a1", "u2")]
        if acked:
            assert marks == ["w-12345678"] * 3
        else:
            # the journal is all-or-nothing once it exists: recovery makes it all
            assert marks in ([None] * 3, ["w-12345678"] * 3)
        assert node_files(state)["meta.json"] == before["meta.json"]
        assert all(core.node(n).metadata["checkpoint"] == 0 for n in ("u0", "a1", "u2"))

    _crash_everywhere(tmp_path, lambda c: c.merge_node_metadata_batch(patch), check)


def test_retirement_crash_at_every_step(tmp_path: Path) -> None:
    def merged(state: Path) -> None:
        core = SessionCore.open(state, "s")
        core.merge_node_metadata_batch({"a1": {MARK: "w-1"}, "a3": {MARK: "w-1"}})
        assert core.statistics().journal_records == 1  # left outstanding on purpose

    def check(state: Path, before: dict[str, bytes], core: SessionCore, acked: bool) -> None:
        assert core.node("a1").metadata[MARK] == "w-1"
        assert core.node("a3").metadata[MARK] == "w-1"
        if acked:
            assert core.node("u4").metadata[MARK] == "w-2"

    def retire(core: SessionCore) -> None:
        # open() adopted the journal another owner left (replay + checkpoint);
        # then an own record is written and checkpointed
        core.merge_node_metadata_batch({"u4": {MARK: "w-2"}})
        core.retire_journals()

    _crash_everywhere(tmp_path, retire, check, prepare=merged)


def test_rewind_crash_at_every_step(tmp_path: Path) -> None:
    def check(state: Path, before: dict[str, bytes], core: SessionCore, acked: bool) -> None:
        stamped = [core.node(n).rewound for n in ("u4", "a5")]
        if acked or stamped[0]:
            assert stamped == [True, True] and core.head == "a3"
        else:
            assert stamped == [False, False] and core.head == "a5"

    _crash_everywhere(tmp_path, lambda c: c.rewind_to("u4"), check)


def test_an_acknowledged_merge_survives_losing_every_unsynced_write(tmp_path: Path) -> None:
    """Power loss after the ack: installs not yet synced are gone; the journal brings them back."""
    state = build(tmp_path)
    before = node_files(state)
    core = SessionCore.open(state, "s")
    core.merge_node_metadata_batch({"u0": {MARK: "w-9"}, "a5": {MARK: "w-9"}})
    root = state / "sessions" / "s"
    for name, data in before.items():  # the page cache never reached the disk
        if name.startswith("history/"):
            (root / name).write_bytes(data)
    recovered = _recover(state)
    assert recovered.node("u0").metadata.get(MARK) == "w-9"
    assert recovered.node("a5").metadata.get(MARK) == "w-9"


def test_the_failing_check_catches_a_store_without_journal_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plant the fault (recovery ignores the journal): the power-loss test must fail."""
    import store._session_journal as journal_module
    from store._journal import JournalScan

    monkeypatch.setattr(journal_module, "read_journal",
                        lambda directory, path: JournalScan([], 0, 0))
    with pytest.raises(AssertionError):
        test_an_acknowledged_merge_survives_losing_every_unsynced_write(tmp_path)


def test_a_batch_and_an_append_cost_one_flush_on_the_critical_path(tmp_path: Path) -> None:
    state = tmp_path / "s64"
    core = SessionCore.create(state, "s")
    for i in range(64):
        core.append({"id": f"n{i}", "content": str(i), "predecessor": f"n{i-1}" if i else "ROOT"})
    core.close()
    counting = FaultyFiles(only=frozenset({"fsync", "fsync_dir", "syncfs"}))
    core = SessionCore.open(state, "s", options=SessionOptions(files=counting))
    core.merge_node_metadata_batch({f"n{i}": {MARK: "w-1"} for i in range(64)})
    assert counting.steps == [("fsync", str(state / "sessions" / "s" / JOURNAL_NAME))]
    for i in range(64, 74):
        core.append({"id": f"n{i}", "content": str(i)})
    assert len(counting.steps) == 1 + 10
    # the checkpoint, off the critical path: one syncfs of the filesystem where
    # there is one, else each file once (meta.json once for ten appends) and both
    # directories; then the truncation
    core.retire_journals()
    synced = [step for step, _ in counting.steps[11:]]
    if bulk_sync_device([str(state)]) is not None:
        assert synced == ["syncfs", "fsync"]
    else:
        assert len(synced) == 64 + 10 + 1 + 2 + 1 and "syncfs" not in synced


def test_the_first_record_also_syncs_the_new_journal_entry(tmp_path: Path) -> None:
    counting = FaultyFiles(only=frozenset({"fsync", "fsync_dir"}))
    core = SessionCore.create(tmp_path, "s")
    core = SessionCore.open(tmp_path, "s", options=SessionOptions(files=counting))
    core.append({"id": "u1", "content": "first"})
    assert [step for step, _ in counting.steps] == ["fsync", "fsync_dir"]


@pytest.mark.parametrize("operation", ["merge", "append", "rewind"])
def test_an_io_error_at_every_step_leaves_the_owner_usable_and_the_batch_whole(
    tmp_path: Path, operation: str
) -> None:
    """``FaultyFiles(fail_at=k)``: the owner keeps running after an OSError at step k."""
    calls: dict[str, Callable[[SessionCore], Any]] = {
        "merge": lambda c: c.merge_node_metadata_batch(
            {n: {MARK: "w-5"} for n in ("u0", "a1", "u2")}),
        "append": lambda c: c.append({"id": "u6", "content": "new", "predecessor": "a5"}),
        "rewind": lambda c: c.rewind_to("u2"),
    }
    call = calls[operation]

    def run(files: DurableFiles) -> None:
        call(SessionCore.open(build(tmp_path), "s", options=SessionOptions(files=files)))

    total = count_steps(run)
    for k in range(total):
        state = build(tmp_path)
        files = FaultyFiles(fail_at=k)
        core = SessionCore.open(state, "s", options=SessionOptions(files=files))
        with pytest.raises(OSError):
            call(core)
        files.fail_at = None
        # the same owner goes on: its next mutation catches up first
        core.merge_node_metadata_batch({"a3": {"after": True}})
        core.close()
        for view in (core, _recover(state)):
            marks = [view.node(n).metadata.get(MARK) for n in ("u0", "a1", "u2")]
            assert marks in ([None] * 3, ["w-5"] * 3), (k, marks)
            rewound = [view.node(n).rewound for n in ("u2", "a3", "u4", "a5")]
            assert rewound in ([False] * 4, [True] * 4), (k, rewound)
            assert view.node("a3").metadata["after"] is True
            assert view.problems == []


# -- power loss: unsynced installs lost, the journal cut anywhere -----------------

def test_power_loss_with_the_journal_cut_at_every_byte(tmp_path: Path) -> None:
    """The disk keeps only the journal's first L bytes and none of the unsynced installs.

    For every L, recovery yields exactly the state after the operations
    whose records lie wholly in those L bytes: a prefix, never a mix, and
    every acknowledged operation (its record was flushed) survives. L runs
    over every byte around each record's header and end, and a stride
    through the bodies (every byte would take a minute); recovery skips the
    real flushes, which a simulated power loss does not need.
    """
    state = build(tmp_path)
    before = node_files(state)
    core = SessionCore.open(state, "s")
    expected = [state_of(core)]
    boundaries = [0]
    root = state / "sessions" / "s"
    for operation in OPERATIONS:
        operation(core)
        expected.append(state_of(core))
        boundaries.append((root / JOURNAL_NAME).stat().st_size)
    journal = (root / JOURNAL_NAME).read_bytes()
    assert core.statistics().journal_records == len(OPERATIONS)
    cuts = set(range(0, len(journal) + 1, 17))
    for boundary in boundaries:
        cuts.update(c for c in range(boundary - 8, boundary + 48) if 0 <= c <= len(journal))
    for cut in sorted(cuts):
        for path in [*root.rglob("*.json")]:
            path.unlink()
        for name, data in before.items():
            (root / name).write_bytes(data)
        (root / JOURNAL_NAME).write_bytes(journal[:cut])
        complete = sum(1 for b in boundaries[1:] if b <= cut)
        assert state_of(_recover(state, NoSyncFiles())) == expected[complete], cut


def test_the_power_loss_check_catches_a_replay_in_the_wrong_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plant the fault (the first record naming a file wins): the cut test must fail."""
    import store._journal as journal_module

    monkeypatch.setattr(journal_module, "latest_per_file", first_wins)
    with pytest.raises(AssertionError):
        test_power_loss_with_the_journal_cut_at_every_byte(tmp_path)


def test_adopting_another_owners_records_crash_at_every_step(tmp_path: Path) -> None:
    """Owner B adopts owner A's outstanding record, then appends; B dies at every step."""

    def scenario(files: DurableFiles) -> tuple[Path, bool]:
        state = build(tmp_path)
        b = SessionCore.open(state, "s", options=SessionOptions(files=files))
        a = SessionCore.open(state, "s")
        a.append({"id": "u6", "content": "from a", "predecessor": "a5"})  # outstanding
        try:
            b.append({"id": "a7", "role": "assistant", "content": "from b"})
        except SimulatedCrash:
            return state, False
        return state, True

    total = count_steps(lambda files: scenario(files))
    assert total >= 9  # B's record and installs (A's record needed no step of B's)
    for k in range(total + 1):
        state, acked = scenario(FaultyFiles(crash_at=k))
        core = _recover(state)
        ids = [n.id for n in core.nodes()]
        assert ids[:7] == ["u0", "a1", "u2", "a3", "u4", "a5", "u6"], k  # A's ack holds
        assert ids[7:] in ([], ["a7"]) and (ids[7:] == ["a7"]) == (core.head == "a7"), k
        assert acked <= (ids[7:] == ["a7"]), k
        if ids[7:] == ["a7"]:
            assert core.node("a7").predecessor == "u6"  # B continued A's head


@pytest.mark.skipif(bulk_sync_device([tempfile.gettempdir()]) is None,
                    reason="the bulk checkpoint needs syncfs on ext4, xfs or btrfs (Linux)")
def test_a_bulk_checkpoint_crash_at_every_step(tmp_path: Path) -> None:
    """A checkpoint of many files syncs them with one syncfs; a crash anywhere loses nothing."""
    nodes = ["u0", "a1", "u2", "a3", "u4", "a5"]

    def merged(state: Path) -> None:
        core = SessionCore.open(state, "s")
        core.merge_node_metadata_batch({n: {MARK: "w-1"} for n in nodes[:4]})
        assert core.statistics().journal_files >= BULK_SYNC_FILES  # left outstanding

    def check(state: Path, before: dict[str, bytes], core: SessionCore, acked: bool) -> None:
        assert all(core.node(n).metadata[MARK] == "w-1" for n in nodes[:4])
        if acked:
            assert all(core.node(n).metadata[MARK] == "w-2" for n in nodes[4:])

    def retire(core: SessionCore) -> None:
        core.merge_node_metadata_batch({n: {MARK: "w-2"} for n in nodes[4:]})
        core.retire_journals()

    def run(files: DurableFiles) -> None:
        state = build(tmp_path)
        merged(state)
        retire(SessionCore.open(state, "s", options=SessionOptions(files=files)))

    steps = FaultyFiles()
    run(steps)
    assert "syncfs" in [step for step, _ in steps.steps]
    _crash_everywhere(tmp_path, retire, check, prepare=merged)


@pytest.mark.parametrize("merged", [1, 6])  # 3 files: fsync each; 8: one syncfs
def test_no_journal_is_truncated_while_a_file_it_names_is_unflushed(
    tmp_path: Path, merged: int,
) -> None:
    state = build(tmp_path)
    files = FlushTracking()
    core = SessionCore.open(state, "s", options=SessionOptions(files=files))
    core.merge_node_metadata_batch({n: {MARK: "w-1"} for n in
                                    ["u0", "a1", "u2", "a3", "u4", "a5"][:merged]})
    core.append({"id": "u6", "content": "more"})
    assert files.unflushed  # installed unsynced, resting on the journal
    core.retire_journals()
    assert files.unflushed_at_truncate == [set()]
