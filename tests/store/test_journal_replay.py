"""Journal replay against the reference agent, which writes the same files without our lock.

Issue 10 item 2: scriptorium marks four nodes and is killed (SIGKILL, a real
process) before the checkpoint, so the journal still holds the records; the
reference agent then adds a metadata key to a node and rewinds the session
(its own unlocked ``atomic_write_text`` of the node files and meta.json).
The next open replays the journal: it must not install the records' bytes
over those newer files. The agent's key, its rewind stamps and its head win;
our markers are merged back onto the node files the agent rewrote.

Item 4, our direction: a marker merge re-reads each node file right before
its rename and merges again if the agent wrote it since the journal record
was made, so a key written in that window is not overwritten.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from memory.simulate._outside import agent_merge, agent_rewind, agent_write
from store import SessionOptions
from store._durable import DurableFiles, ExchangeUnsupported
from store._journal import JOURNAL_NAME, FilePlan, JournalEntry
from store._session import SessionCore

REPO = Path(__file__).resolve().parents[2]
MARK = "memory_written_scriptorium"
TURNS = ["u0", "a1", "u2", "a3", "u4", "a5"]
MARKED = ["u0", "a1", "u2", "a3"]
OWNER = "import sys; from tests.store.test_journal_replay import owner_main; owner_main(sys.argv[1])"


def _six_turns(state: Path | str, content: Callable[[int], str] = str) -> SessionCore:
    """Session ``s`` holding :data:`TURNS`, alternating user and assistant."""
    core = SessionCore.create(state, "s")
    for i, node_id in enumerate(TURNS):
        core.append({"id": node_id, "role": ["user", "assistant"][i % 2], "content": content(i)})
    return core


def owner_main(state: str) -> None:
    """The killed owner: six appends and a marker batch, all still on the journal; then wait."""
    core = _six_turns(state, lambda i: f"turn {i}")
    print("appended", flush=True)
    sys.stdin.readline()
    core.merge_node_metadata_batch({n: {MARK: "w-1"} for n in MARKED})
    print("marked", flush=True)
    sys.stdin.read()  # never returns: the test kills this process here


def _kill_after_marking(state: Path, before_marking: Callable[[], None] = lambda: None) -> None:
    """Run :func:`owner_main` in a real process, SIGKILL it once its batch is acknowledged."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(state)],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdin is not None
        assert owner.stdout.readline() == "appended\n"
        before_marking()
        owner.stdin.write("mark\n")
        owner.stdin.flush()
        assert owner.stdout.readline() == "marked\n"
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    assert owner.returncode == -signal.SIGKILL


def _node_path(session: Path, node_id: str) -> str:
    (name,) = [n for n in os.listdir(session / "history") if n.endswith(f"-{node_id}.json")]
    return str(session / "history" / name)


def test_replay_after_a_kill_keeps_the_agents_key_and_rewind_and_merges_our_markers(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    session = state / "sessions" / "s"
    stale: dict[str, bytes] = {}  # the agent's read of a1, made before our marker landed
    _kill_after_marking(
        state, lambda: stale.update(a1=Path(_node_path(session, "a1")).read_bytes()))
    assert (session / JOURNAL_NAME).stat().st_size > 0  # no checkpoint happened
    # the reference agent, no lock: its merge of a key into a1 finishes from
    # the stale read (so it drops our marker, its side of the race), then a rewind
    record = json.loads(stale["a1"])
    record["metadata"]["agent_note"] = "from the agent"
    agent_write(_node_path(session, "a1"), record)
    assert MARK not in json.loads(Path(_node_path(session, "a1")).read_bytes())["metadata"]
    assert agent_rewind(str(session), "u2", 1_900_000_000.5) == ["a5", "u4", "a3", "u2"]
    agent_files = {n: Path(_node_path(session, n)).read_bytes() for n in TURNS}
    agent_meta = (session / "meta.json").read_bytes()

    core = SessionCore.open(state, "s")  # replays the journal, then checkpoints

    assert json.loads((session / "meta.json").read_bytes())["head_id"] == "a1"
    assert (session / "meta.json").read_bytes() == agent_meta  # the agent's head move wins
    assert core.head == "a1"
    assert core.node("a1").metadata["agent_note"] == "from the agent"
    for node_id in ("u2", "a3", "u4", "a5"):
        assert core.node(node_id).rewound, node_id
        assert core.node(node_id).metadata["rewound_at"] == 1_900_000_000.5
    for node_id in MARKED:  # every marker stands; a1's is merged back onto the agent's file
        assert core.node(node_id).metadata[MARK] == "w-1", node_id
    for node_id in ("u4", "a5"):  # files our appends created: the agent's version, untouched
        assert Path(_node_path(session, node_id)).read_bytes() == agent_files[node_id]
    assert [m["id"] for m in core.get_branch()] == ["u0", "a1"]
    conflicts = {c.file.rsplit("/", 1)[-1]: c.outcome for c in core.replay_conflicts}
    # u2, a3: the agent rewound them after our markers landed, so its files hold them
    assert conflicts == {
        "0001-l-a1.json": "merged", "0002-u-u2.json": "theirs", "0003-l-a3.json": "theirs",
        "0004-u-u4.json": "theirs", "0005-l-a5.json": "theirs", "meta.json": "theirs"}
    assert (session / JOURNAL_NAME).stat().st_size == 0
    assert core.problems == []


def test_replay_after_a_kill_with_no_outside_write_installs_every_record(tmp_path: Path) -> None:
    """The ordinary case stays as it was: nothing foreign, the records win, no conflicts."""
    state = tmp_path / "state"
    _kill_after_marking(state)
    session = state / "sessions" / "s"
    for node_id in MARKED:  # the installs were lost (power loss: page cache gone)
        path = Path(_node_path(session, node_id))
        record = json.loads(path.read_bytes())
        del record["metadata"][MARK]
        path.write_bytes(json.dumps(record, ensure_ascii=False).encode())
    core = SessionCore.open(state, "s")
    assert [core.node(n).metadata.get(MARK) for n in MARKED] == ["w-1"] * 4
    assert core.head == "a5" and core.replay_conflicts == []


def test_a_journal_of_format_2_on_disk_still_replays(tmp_path: Path) -> None:
    """Journals written before records said what each file was: replayed as before."""
    core = SessionCore.create(tmp_path, "s")
    core.append({"id": "u1", "content": "q"})
    core.close()
    session = tmp_path / "sessions" / "s"
    node_file = session / "history" / "0000-u-u1.json"
    marked = json.loads(node_file.read_bytes())
    marked["metadata"] = {MARK: "w-2"}
    data = json.dumps(marked, ensure_ascii=False).encode()
    payload = b"history/0000-u-u1.json\n%d\n%s\nend\n" % (len(data), data)
    (session / JOURNAL_NAME).write_bytes(
        b"scriptorium-journal 2 %d %08x\n%s" % (len(payload), zlib.crc32(payload), payload))
    assert SessionCore.open(tmp_path, "s").node("u1").metadata == {MARK: "w-2"}
    assert node_file.read_bytes() == data


# -- our direction: the window between the journal flush and the rename ---------------


class AgentBetweenFlushAndRename(DurableFiles):
    """Runs the agent's unlocked merge of a key once, after the journal's flush and
    before the node file's install (when the install opens its temp file)."""

    def __init__(self, node_path: str) -> None:
        self.node_path = node_path
        self.flushed = False
        self.fired = 0
        self.again = False  # fire before every install attempt, not only the first

    def _step(self, step: str, path: str) -> None:
        if step == "fsync" and path.endswith(JOURNAL_NAME):
            self.flushed = True
        name = os.path.basename(self.node_path)
        if (self.flushed and (self.again or not self.fired) and step == "open"
                and os.path.basename(path).startswith(f".{name}.")):
            self.fired += 1
            agent_merge(self.node_path, {"agent_note": "written in the window",
                                         "agent_round": self.fired})


def test_a_key_the_agent_writes_between_our_journal_flush_and_install_survives(
    tmp_path: Path,
) -> None:
    _six_turns(tmp_path).close()
    session = tmp_path / "sessions" / "s"
    files = AgentBetweenFlushAndRename(_node_path(session, "a3"))
    core = SessionCore.open(tmp_path, "s", options=SessionOptions(files=files))
    assert core.merge_node_metadata_batch({n: {MARK: "w-3"} for n in MARKED}) == MARKED
    assert files.fired
    on_disk = json.loads(Path(_node_path(session, "a3")).read_bytes())["metadata"]
    assert on_disk == {MARK: "w-3", "agent_note": "written in the window", "agent_round": 1}
    assert core.node("a3").metadata["agent_note"] == "written in the window"  # the index knows
    core.close()
    # and a replay of that record (say the checkpoint never ran) keeps it too
    reopened = SessionCore.open(tmp_path, "s")
    assert reopened.node("a3").metadata == {
        MARK: "w-3", "agent_note": "written in the window", "agent_round": 1}
    assert [reopened.node(n).metadata.get(MARK) for n in MARKED] == ["w-3"] * 4


def test_a_merge_the_agent_outruns_at_every_re_read_is_an_error_not_an_ok(
    tmp_path: Path,
) -> None:
    """The other writer changes a3 before each of our renames: the caller must hear it."""
    from store._errors import NodeFileError

    _six_turns(tmp_path).close()
    session = tmp_path / "sessions" / "s"
    files = AgentBetweenFlushAndRename(_node_path(session, "a3"))
    files.again = True
    core = SessionCore.open(tmp_path, "s", options=SessionOptions(files=files))
    with pytest.raises(NodeFileError, match="sessions/s/history/0003-l-a3.json"):
        core.merge_node_metadata_batch({n: {MARK: "w-5"} for n in MARKED})
    # MERGE_ATTEMPTS swaps, each handing back the agent's write of that moment,
    # then the attempt to put the agent's last one back (it wrote again first)
    assert files.fired == 9
    on_disk = json.loads(Path(_node_path(session, "a3")).read_bytes())["metadata"]
    assert on_disk["agent_note"] == "written in the window" and on_disk["agent_round"] == 9
    assert core.node("a3").metadata == on_disk  # the index reloaded: it claims what is there
    assert [core.node(n).metadata.get(MARK) for n in ("u0", "a1", "u2")] == ["w-5"] * 3


def test_a_key_the_agent_writes_while_replay_installs_survives(tmp_path: Path) -> None:
    """Replay re-reads each file right before its rename, as a live merge does."""
    first = _six_turns(tmp_path)
    first.retire_journals()
    session = tmp_path / "sessions" / "s"
    path = Path(_node_path(session, "a3"))
    unmarked = path.read_bytes()
    first.merge_node_metadata_batch({n: {MARK: "w-4"} for n in MARKED})  # outstanding
    path.write_bytes(unmarked)  # its install was lost (power loss): replay must redo it
    files = AgentBetweenFlushAndRename(str(path))
    files.flushed = True  # the hook fires at the replay's install of a3
    second = SessionCore.open(tmp_path, "s", options=SessionOptions(files=files))
    assert files.fired
    assert second.node("a3").metadata == {
        MARK: "w-4", "agent_note": "written in the window", "agent_round": 1}
    assert [c.outcome for c in second.replay_conflicts] == ["merged"]


@pytest.mark.parametrize("planted", ["replay", "install", "replay-install"])
def test_the_checks_catch_a_store_that_installs_blindly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    """Plant the fault (no re-read before the rename / replay trusts every state)."""
    import store._session_journal as journal_module
    from store._journal import replay_plan

    def cannot_swap(self: DurableFiles, path: str, data: bytes) -> bytes:
        raise ExchangeUnsupported(path)

    monkeypatch.setattr(DurableFiles, "exchange_unsynced", cannot_swap)  # the re-read path
    if planted == "replay-install":
        monkeypatch.setattr(DurableFiles, "replace_unsynced_if",
                            lambda self, path, data, unchanged: self.replace_unsynced(path, data)
                            or True)
        with pytest.raises(AssertionError):
            test_a_key_the_agent_writes_while_replay_installs_survives(tmp_path)
    elif planted == "install":
        monkeypatch.setattr(DurableFiles, "replace_unsynced_if",
                            lambda self, path, data, unchanged: self.replace_unsynced(path, data)
                            or True)
        with pytest.raises(AssertionError):
            test_a_key_the_agent_writes_between_our_journal_flush_and_install_survives(tmp_path)
    else:
        def trusting(records: list[list[JournalEntry]]) -> dict[str, FilePlan]:
            plans = replay_plan(records)
            for plan in plans.values():
                plan.known = None
            return plans

        monkeypatch.setattr(journal_module, "replay_plan", trusting)
        with pytest.raises(AssertionError):
            test_replay_after_a_kill_keeps_the_agents_key_and_rewind_and_merges_our_markers(
                tmp_path)


def _swaps(directory: Path) -> bool:
    """Whether files in ``directory`` can be swapped atomically here."""
    first, second = directory / "swap-a", directory / "swap-b"
    first.write_bytes(b"a")
    second.write_bytes(b"b")
    try:
        DurableFiles()._exchange(str(first), str(second))
        return second.read_bytes() == b"a"
    except ExchangeUnsupported:
        return False
    finally:
        first.unlink()
        second.unlink()


class AgentAtTheRename(DurableFiles):
    """Runs the agent's unlocked merge of a key once, right before our install of the node file.

    That is after our last re-read of it: the window a re-read cannot close.
    """

    def __init__(self, node_path: str) -> None:
        self.node_path = node_path
        self.fired = 0

    def _step(self, step: str, path: str) -> None:
        if step == "rename" and path == self.node_path and not self.fired:
            self.fired += 1
            agent_merge(self.node_path, {"agent_note": "written at our rename"})


def test_a_key_the_agent_writes_right_before_our_rename_survives(tmp_path: Path) -> None:
    """The swap hands the agent's version back and the marker is merged onto it again.

    Found by ``simulate`` under load: a marker merge's rename landed right
    after the agent's write and dropped its key (``no_outside_write_reverted``).
    """
    if not _swaps(tmp_path):
        pytest.skip("this filesystem cannot swap two files (renameat2 RENAME_EXCHANGE)")
    _six_turns(tmp_path).close()
    session = tmp_path / "sessions" / "s"
    files = AgentAtTheRename(_node_path(session, "a3"))
    core = SessionCore.open(tmp_path, "s", options=SessionOptions(files=files))
    core.merge_node_metadata_batch({n: {MARK: "w-6"} for n in MARKED})
    assert files.fired
    on_disk = json.loads(Path(_node_path(session, "a3")).read_bytes())["metadata"]
    assert on_disk == {MARK: "w-6", "agent_note": "written at our rename"}
    assert core.node("a3").metadata == on_disk
    assert not [p for p in (session / "history").iterdir() if p.name.startswith(".")]


def test_the_rename_window_check_catches_a_store_that_only_re_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plant the fault (no swap: re-read, then rename): the agent's key is lost, the test fails."""

    def cannot_swap(self: DurableFiles, path: str, data: bytes) -> bytes:
        raise ExchangeUnsupported(path)

    monkeypatch.setattr(DurableFiles, "exchange_unsynced", cannot_swap)
    with pytest.raises(AssertionError):
        test_a_key_the_agent_writes_right_before_our_rename_survives(tmp_path)
