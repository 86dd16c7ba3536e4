"""The session core: operations and rules of SPEC §4 over a real directory."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from store import SessionOptions
from store._durable import TEMP_SUFFIX, DurableFiles
from store._errors import (
    AppendConflictError,
    AppendInvariantError,
    DuplicateNodeError,
    InvalidNodeError,
    InvalidRequestError,
    NodeFileError,
    NodeNotFoundError,
    OversizedContentError,
    ReservedMetadataKeyError,
    SessionExistsError,
    SessionNotFoundError,
    SummaryHeadError,
    UnencodableValueError,
    UnsafeIdError,
)
from store._runtime_log import RuntimeLog
from store._session import SessionCore, install_staged_session, recover_dead_runtimes
from store._sessions import list_sessions
from tests.store.conftest import BAD_FILES


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _snapshot(directory: Path) -> dict[str, bytes]:
    """Every file's bytes, but the store's own lock and emptied (checkpointed) journal."""
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file() and p.name != ".lock"
            and not (p.name == ".journal" and p.stat().st_size == 0)}


def _ids(messages: list[dict[str, Any]]) -> list[str]:
    return [m["id"] for m in messages]


@pytest.fixture
def core(tmp_path: Path) -> SessionCore:
    return SessionCore.create(tmp_path, "s1", title="Test", options=SessionOptions(clock=Clock()))


# -- the fixture, through the core -----------------------------------------------


def test_fixture_reads_unchanged(state: Path) -> None:
    before = _snapshot(state)
    core = SessionCore.open(state, "demo")
    assert core.head == "a1"
    assert _ids(core.get_branch()) == ["u1", "a1"]
    assert _ids(core.get_branch("a2b")) == ["u1", "a1", "a2b"]
    assert [r["head_msg_id"] for r in core.list_branches()] == ["sp1", "a2b", "a2"]
    assert core.problems == []
    assert _snapshot(state) == before


def test_fixture_merge_touches_only_the_named_node(state: Path) -> None:
    core = SessionCore.open(state, "demo")
    before = _snapshot(state)
    assert core.merge_node_metadata_batch({"a2b": {"memory_written_scriptorium": "w-aa116220"}})
    core.close()
    after = _snapshot(state)
    changed = {k for k in after if after[k] != before.get(k)} | (before.keys() - after.keys())
    assert changed == {"sessions/demo/history/0004-l-a2b.json"}
    node = json.loads(after["sessions/demo/history/0004-l-a2b.json"])
    assert list(node) == ["id", "created_at", "seq", "role", "name", "input", "output",
                          "caller", "predecessor", "reads", "metadata"]
    assert node["metadata"]["memory_written_scriptorium"] == "w-aa116220"
    assert node["metadata"]["speaker_kind"] == "owner"


def test_a_merge_that_changes_nothing_rewrites_nothing(state: Path) -> None:
    core = SessionCore.open(state, "demo")
    before = _snapshot(state)
    assert core.merge_node_metadata_batch({"u1": {"memory_written_scriptorium": "w-aa116220"}}) \
        == []
    assert _snapshot(state) == before and core.outstanding_journals == []


# -- create, append, head rule -------------------------------------------------------


def test_create_is_owner_only_and_exclusive(tmp_path: Path, core: SessionCore) -> None:
    session = tmp_path / "sessions" / "s1"
    assert stat.S_IMODE(session.stat().st_mode) == 0o700
    assert stat.S_IMODE((session / "history").stat().st_mode) == 0o700
    assert stat.S_IMODE((session / "meta.json").stat().st_mode) == 0o600
    with pytest.raises(SessionExistsError):
        SessionCore.create(tmp_path, "s1")
    with pytest.raises(SessionNotFoundError):
        SessionCore.open(tmp_path, "nope")


def test_append_assigns_seq_writes_the_file_and_moves_the_head(
    tmp_path: Path, core: SessionCore
) -> None:
    u1 = core.append({"id": "u1", "role": "user", "content": "hello"})
    a1 = core.append({"id": "a1", "role": "assistant", "content": "hi", "predecessor": "u1"})
    assert (u1["predecessor"], a1["predecessor"]) == ("ROOT", "u1")
    history = tmp_path / "sessions" / "s1" / "history"
    assert sorted(os.listdir(history)) == ["0000-u-u1.json", "0001-l-a1.json"]
    assert stat.S_IMODE((history / "0001-l-a1.json").stat().st_mode) == 0o600
    assert core.head == "a1"
    # predecessor omitted: the head
    assert core.append({"id": "u2", "content": "more"})["predecessor"] == "a1"


def test_a_fork_sibling_does_not_move_the_head(core: SessionCore) -> None:
    core.append({"id": "u1", "content": "q"})
    core.append({"id": "a1", "role": "assistant", "content": "r", "predecessor": "u1"})
    core.append({"id": "a1b", "role": "assistant", "content": "retry", "predecessor": "u1"})
    assert core.head == "a1"
    assert sorted(r["head_msg_id"] for r in core.list_branches()) == ["a1", "a1b"]


def test_sub_calls_do_not_move_the_head(core: SessionCore) -> None:
    core.append({"id": "u1", "content": "q"})
    core.append({"id": "a1", "role": "assistant", "content": "r", "predecessor": "u1"})
    core.append({"id": "c1", "role": "tool", "content": "42", "predecessor": "a1",
                 "caller": "a1"})
    assert core.head == "a1"


def test_append_invariant(core: SessionCore) -> None:
    core.append({"id": "u1", "content": "first turn may start at ROOT"})
    with pytest.raises(AppendInvariantError):
        core.append({"id": "u9", "content": "x", "predecessor": "ROOT"})
    with pytest.raises(AppendInvariantError):
        core.append({"id": "u9", "content": "x", "predecessor": "missing"})
    with pytest.raises(DuplicateNodeError):  # the same id for another turn
        core.append({"id": "u1", "content": "again", "predecessor": "u1"})
    # a root node may start a chain
    core.append({"id": "r2", "content": "", "predecessor": "ROOT", "display": "root"})


# -- appends are idempotent by client id ---------------------------------------------


def test_an_append_repeated_with_its_id_returns_the_existing_node(core: SessionCore) -> None:
    first = core.append({"id": "u1", "content": "I prefer tea."})
    core.merge_node_metadata_batch({"u1": {"memory_written_scriptorium": "w-00000000"}})
    stamp, files = core.meta()["updated_at"], sorted(os.listdir(core.directory + "/history"))
    # At the head, without a predecessor: the head has moved onto u1 since.
    again = core.append_turn({"id": "u1", "content": "I prefer tea.", "timestamp": 5.0})
    assert not again.created
    assert again.message["id"] == "u1" and again.message["timestamp"] == first["timestamp"]
    assert again.message["memory_written_scriptorium"] == "w-00000000"  # the stored node
    assert core.append({"id": "u1", "role": "user", "content": "I prefer tea.",
                        "predecessor": "ROOT", "caller": ""})["id"] == "u1"
    assert core.meta()["updated_at"] == stamp and core.head == "u1"
    assert sorted(os.listdir(core.directory + "/history")) == files
    assert [n.output for n in core.nodes()] == ["I prefer tea."]
    # A reopened owner (another process, a restarted actor) sees the same.
    reopened = SessionCore.open(core.state_dir, "s1")
    assert not reopened.append_turn({"id": "u1", "content": "I prefer tea."}).created
    assert len(reopened.nodes()) == 1


@pytest.mark.parametrize(("change", "fields"), [
    ({"content": "I prefer coffee."}, ("content",)),
    ({"role": "assistant"}, ("role",)),
    ({"predecessor": "a1"}, ("predecessor",)),
    ({"caller": "a1"}, ("caller",)),
    ({"role": "assistant", "content": "other"}, ("role", "content")),
])
def test_the_same_id_for_another_turn_is_a_typed_error(
    core: SessionCore, change: dict[str, Any], fields: tuple[str, ...]
) -> None:
    core.append({"id": "u1", "content": "q"})
    core.append({"id": "a1", "role": "assistant", "content": "r"})
    core.append({"id": "u2", "content": "I prefer tea.", "predecessor": "u1"})
    stamp = core.meta()["updated_at"]
    with pytest.raises(AppendConflictError) as raised:
        core.append({"id": "u2", "content": "I prefer tea.", "predecessor": "u1", **change})
    error = raised.value
    assert (error.session, error.node, error.fields) == ("s1", "u2", fields)
    assert "'s1'" in str(error) and "'u2'" in str(error) and "nothing was written" in str(error)
    assert core.meta()["updated_at"] == stamp and len(core.nodes()) == 3


def test_an_append_without_an_id_is_new_every_time(core: SessionCore) -> None:
    one = core.append({"content": "I prefer tea."})
    two = core.append({"content": "I prefer tea."})
    assert one["id"] != two["id"] and two["predecessor"] == one["id"]


def test_updated_at_moves_only_on_append(core: SessionCore) -> None:
    core.append({"id": "u1", "content": "q"})
    core.append({"id": "a1", "role": "assistant", "content": "r", "predecessor": "u1"})
    stamp = core.meta()["updated_at"]
    core.merge_node_metadata_batch({"u1": {"memory_written_scriptorium": "w-00000000"}})
    core.set_head("u1")
    core.set_head("a1")
    core.rewind_to("u1")
    core.retire_journals()
    assert core.meta()["updated_at"] == stamp
    core.append({"id": "u1b", "content": "again"})
    assert core.meta()["updated_at"] > stamp


def test_meta_unknown_keys_survive_every_rewrite(state: Path) -> None:
    core = SessionCore.open(state, "demo", options=SessionOptions(clock=Clock()))
    core.set_head("a2b")
    core.append({"id": "u3", "content": "next", "predecessor": "a2b"})
    core.rewind_to("u3")
    core.close()
    meta = json.loads((state / "sessions" / "demo" / "meta.json").read_bytes())
    assert meta["agent_id"] == "main" and meta["project_id"] == "default"
    assert meta["branches"]["sp1"]["name"] == "probe"
    assert list(meta)[:3] == ["id", "agent_id", "title"]


def test_set_head_never_a_summary(state: Path) -> None:
    core = SessionCore.open(state, "demo")
    with pytest.raises(SummaryHeadError):
        core.set_head("summary_cebcf71b21")
    with pytest.raises(NodeNotFoundError):
        core.set_head("ghost")
    core.set_head("a2b")
    assert SessionCore.open(state, "demo").head == "a2b"


def test_merge_heads_is_a_union_kept_across_a_reopen(state: Path) -> None:
    core = SessionCore.open(state, "demo", options=SessionOptions(clock=Clock()))
    stamp, head = core.meta()["updated_at"], core.head
    core.merge_heads(["a2b"])
    core.merge_heads(["a2b", "u1"])
    core.merge_heads(["u1"])  # again: nothing changes
    assert core.meta()["merged_heads"] == ["a2b", "u1"]
    assert core.meta()["updated_at"] == stamp and core.head == head
    core.close()
    again = SessionCore.open(state, "demo")
    assert again.meta()["merged_heads"] == ["a2b", "u1"]
    assert "a2b" not in [row["head_msg_id"] for row in again.list_branches()]


def test_merge_heads_refuses_a_summary_or_an_unknown_node(state: Path) -> None:
    core = SessionCore.open(state, "demo")
    with pytest.raises(InvalidNodeError, match="summary_cebcf71b21.*demo"):
        core.merge_heads(["u1", "summary_cebcf71b21"])
    with pytest.raises(NodeNotFoundError, match="ghost"):
        core.merge_heads(["u1", "ghost"])
    assert "merged_heads" not in core.meta()  # nothing of a refused call was written
    assert "merged_heads" not in SessionCore.open(state, "demo").meta()


def test_merge_heads_of_nothing_writes_nothing_and_a_string_is_refused(state: Path) -> None:
    core = SessionCore.open(state, "demo")
    records = core.journal_records
    core.merge_heads([])
    assert core.journal_records == records and "merged_heads" not in core.meta()
    with pytest.raises(TypeError, match="demo.*not the string 'u1'"):
        core.merge_heads("u1")
    core.close()


def test_rewind_stamps_the_chain_and_moves_the_head(core: SessionCore) -> None:
    for i, (node_id, role) in enumerate([("u1", "user"), ("a1", "assistant"),
                                         ("u2", "user"), ("a2", "assistant")]):
        core.append({"id": node_id, "role": role, "content": str(i)})
    core.append({"id": "c2", "role": "tool", "content": "t", "predecessor": "a2",
                 "caller": "a2"})
    stamped = core.rewind_to("u2")
    assert stamped == ["u2", "a2", "c2"]
    assert core.head == "a1"
    assert _ids(core.get_branch("a2")) == ["u1", "a1"]
    assert core.node("a2").metadata["rewound"] is True
    # rewound tips are still listed
    assert "a2" in [r["head_msg_id"] for r in core.list_branches()]
    core.close()


def test_spawn_branch(core: SessionCore) -> None:
    core.append({"id": "u1", "content": "q"})
    core.append({"id": "a1", "role": "assistant", "content": "r"})
    spawned = core.spawn_branch("a1", "agent_spawn", "do it", name="probe")
    assert spawned["predecessor"] is None and spawned["caller"] == "a1"
    assert spawned["spawn_branch_root"] is True and spawned["source"] == "agent_spawn"
    assert core.head == "a1"
    assert _ids(core.get_branch(spawned["id"])) == [spawned["id"]]
    rows = {r["head_msg_id"]: r for r in core.list_branches()}
    assert rows[spawned["id"]]["name"] == "probe"


def test_an_attach_row_registered_first_is_the_trunk_tip(core: SessionCore, tmp_path: Path) -> None:
    # SPEC §4: a1's first registered child is an attach row (an llm node a1
    # called, carrying the sub-agent's result); u2, registered after it,
    # continues the conversation. The trunk follows first children, so it
    # ends on the attach row, which is listed beside the conversation's tip.
    core.append({"id": "u1", "content": "Find the invoice."})
    core.append({"id": "a1", "role": "assistant", "content": "Asking a sub-agent."})
    core.spawn_branch("a1", "agent_spawn", "find it", name="probe")
    core.append({"id": "at", "role": "assistant", "content": "The sub-agent found it.",
                 "predecessor": "a1", "caller": "a1", "function": "attach"})
    core.append({"id": "u2", "content": "Thanks.", "predecessor": "a1"})
    core.append({"id": "a2", "role": "assistant", "content": "Glad to help."})
    assert core.head == "a2"
    assert core.get_branch("at")[-1]["function"] == "attach"  # the view gives back what came in
    for session in (core, SessionCore.open(tmp_path, "s1")):  # and from the files alone
        attach = session.node("at")
        assert attach.is_attach and attach.metadata["function"] == "attach"
        rows = {r["head_msg_id"]: r for r in session.list_branches()}
        assert {"at", "a2"} <= set(rows) and "a1" not in rows
        assert (rows["at"]["created_at"], rows["at"]["updated_at"]) == (
            attach.created_at, attach.created_at)


def test_rolling_summaries(core: SessionCore) -> None:
    for node_id, role in [("u1", "user"), ("a1", "assistant"), ("u2", "user"),
                          ("a2", "assistant")]:
        core.append({"id": node_id, "role": role, "content": node_id})
    first = core.insert_summary(["u1", "a1"], "S1")
    assert first["id"].startswith("summary_") and len(first["id"]) == 18
    assert first["covers_ids"] == ["u1", "a1"] and first["predecessor"] == "ROOT"
    assert first["type"] == "compactionSummary" and first["compaction"] is True
    assert core.head == "a2"
    second = core.insert_summary([first["id"], "u2"], "S2")
    assert second["covers_ids"] == ["u1", "a1", first["id"], "u2"]
    with pytest.raises(SummaryHeadError):
        core.set_head(second["id"])
    assert second["id"] not in [r["head_msg_id"] for r in core.list_branches()]


# -- refusals change nothing ----------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.append({"id": "../evil", "content": "x"}),
        lambda c: c.append({"id": "ok", "content": "x", "predecessor": "a/../b"}),
        lambda c: c.append({"id": "ok", "content": "\ud800"}),
        lambda c: c.append({"id": "ok", "content": float("nan")}),
        lambda c: c.append({"id": "ok", "content": 2**70}),
        lambda c: c.append({"id": "ok", "content": "x", "extra": {"role": "x"}}),
        lambda c: c.merge_node_metadata_batch({"u1": {"content": "x"}}),
        lambda c: c.merge_node_metadata_batch({"u1": {"k": "\udfff"}}),
        lambda c: c.merge_node_metadata_batch({"u1": {"ok": 1}, "ghost": {"ok": 1}}),
        lambda c: c.merge_node_metadata_batch({"..": {"ok": 1}}),
        lambda c: c.set_head("x\x00y"),
        lambda c: c.rewind_to("a1"),
    ],
)
def test_refused_requests_touch_nothing(tmp_path: Path, core: SessionCore, call: Any) -> None:
    core.append({"id": "u1", "content": "q"})
    core.append({"id": "a1", "role": "assistant", "content": "r"})
    before = _snapshot(tmp_path)
    with pytest.raises((UnsafeIdError, UnencodableValueError, ReservedMetadataKeyError,
                        NodeNotFoundError, InvalidRequestError)):
        call(core)
    assert _snapshot(tmp_path) == before


def test_hostile_session_ids_touch_nothing(tmp_path: Path) -> None:
    for sid in ["../x", "a/b", "..", ".lock", "x\x00"]:
        with pytest.raises(UnsafeIdError):
            SessionCore.create(tmp_path, sid)
    assert list(tmp_path.iterdir()) == []


def test_oversized_content_is_refused(tmp_path: Path) -> None:
    core = SessionCore.create(tmp_path, "s", options=SessionOptions(max_node_bytes=10_000))
    with pytest.raises(OversizedContentError, match="over the cap"):
        core.append({"id": "big", "content": "x" * 20_000})
    assert core.nodes() == []


# -- bad files on disk: skipped, reported, never rewritten -------------------------------


def test_unparsable_node_files_are_skipped_reported_and_never_rewritten(state: Path) -> None:
    history = state / "sessions" / "demo" / "history"
    bad = history / "0004-l-a2b.json"
    bad.write_bytes(bad.read_bytes()[:40])
    core = SessionCore.open(state, "demo")
    assert [getattr(p, "path", None) for p in core.problems] == [
        "sessions/demo/history/0004-l-a2b.json"]
    assert "sessions/demo/history/0004-l-a2b.json" in str(core.problems[0])
    assert "a2b" not in [r["head_msg_id"] for r in core.list_branches()]
    with pytest.raises(NodeNotFoundError):
        core.merge_node_metadata_batch({"a2b": {"m": 1}})
    assert bad.read_bytes() == (history / "0004-l-a2b.json").read_bytes()
    assert len(bad.read_bytes()) == 40


def test_a_node_file_corrupted_behind_the_cache_is_refused_not_overwritten(
    state: Path,
) -> None:
    core = SessionCore.open(state, "demo")
    target = state / "sessions" / "demo" / "history" / "0001-l-a1.json"
    stat_before = os.stat(target.parent)
    target.write_bytes(b'{"id": "a1", trunc')  # in place: history/ mtime unchanged
    os.utime(target.parent, ns=(stat_before.st_atime_ns, stat_before.st_mtime_ns))
    with pytest.raises(NodeFileError, match="0001-l-a1.json"):
        core.merge_node_metadata_batch({"a1": {"m": 1}})
    assert target.read_bytes() == b'{"id": "a1", trunc'


def test_leftover_temp_files_are_ignored_and_cleaned_on_open(state: Path) -> None:
    history = state / "sessions" / "demo" / "history"
    leftover = history / f".0007-u-x.json.abcd1234{TEMP_SUFFIX}"
    leftover.write_bytes(b"half a nod")
    core = SessionCore.open(state, "demo")
    assert not leftover.exists()
    assert core.problems == []


# -- freshness: one rebuild per outside write ---------------------------------------------


def test_an_outside_write_triggers_exactly_one_rebuild(tmp_path: Path) -> None:
    ours = SessionCore.create(tmp_path, "s")
    ours.append({"id": "u1", "content": "q"})
    rebuilds = ours.statistics().index_rebuilds
    for _ in range(5):
        ours.get_branch()
        ours.list_branches()
    assert ours.statistics().index_rebuilds == rebuilds  # own writes keep the index current
    theirs = SessionCore.open(tmp_path, "s")
    theirs.append({"id": "a1", "role": "assistant", "content": "r"})
    assert _ids(ours.get_branch()) == ["u1", "a1"]
    for _ in range(5):
        ours.get_branch()
        ours.list_branches()
    assert ours.statistics().index_rebuilds == rebuilds + 1


def test_a_reload_reuses_unchanged_nodes_and_parses_every_changed_file(tmp_path: Path) -> None:
    """A reload keeps the node objects of byte-identical files, and sees any other byte change.

    The outside rewrite keeps the file's name and size and restores every
    timestamp (the same-tick case the reload exists for): only the bytes
    tell, and they must.
    """
    core = SessionCore.create(tmp_path, "s")
    for turn in ("u1", "u2", "u3"):
        core.append({"id": turn, "content": "q"})
    core.reload()  # every node now comes from disk
    before = {node.id: node for node in core.nodes()}
    history = tmp_path / "sessions" / "s" / "history"
    target = next(history.glob("*-u2.json"))
    folder, own = os.stat(history), os.stat(target)
    data = target.read_bytes()
    changed = data.replace(b'"q"', b'"Q"')
    assert changed != data and len(changed) == len(data)
    target.write_bytes(changed)  # in place, same size
    os.utime(target, ns=(own.st_atime_ns, own.st_mtime_ns))
    os.utime(history, ns=(folder.st_atime_ns, folder.st_mtime_ns))
    assert not core.is_stale()  # the fingerprint cannot see it
    core.reload()
    after = {node.id: node for node in core.nodes()}
    assert after["u2"].output == "Q"
    assert after["u1"] is before["u1"] and after["u3"] is before["u3"]
    assert core.get_branch()[1]["content"] == "Q"


def test_a_node_changed_by_our_own_merge_is_parsed_again_on_reload(tmp_path: Path) -> None:
    """Our own merge replaces a node in memory: its loaded bytes no longer vouch for it."""
    core = SessionCore.create(tmp_path, "s")
    core.append({"id": "u1", "content": "q"})
    core.reload()
    target = next((tmp_path / "sessions" / "s" / "history").glob("*-u1.json"))
    loaded = target.read_bytes()
    core.merge_node_metadata_batch({"u1": {"k": "v"}})
    assert core.node("u1").metadata["k"] == "v"
    target.write_bytes(loaded)  # the agent writes back what it read before our merge
    core.reload()
    assert "k" not in core.node("u1").metadata


def test_list_sessions(tmp_path: Path) -> None:
    SessionCore.create(tmp_path, "old", options=SessionOptions(clock=lambda: 1.0))
    SessionCore.create(tmp_path, "new", options=SessionOptions(clock=lambda: 2.0))
    (tmp_path / "sessions" / "broken").mkdir()
    (tmp_path / "sessions" / "broken" / "meta.json").write_bytes(b"{nope")
    (tmp_path / "sessions" / "index.json").write_bytes(b"{}")
    rows = list_sessions(tmp_path)
    assert [r["id"] for r in rows] == ["new", "old"]
    assert list_sessions(tmp_path / "missing") == []


def test_list_sessions_on_the_fixture(state: Path) -> None:
    assert [r["id"] for r in list_sessions(state)] == ["demo"]


def test_the_journal_is_checkpointed_past_its_bounds(core: SessionCore) -> None:
    from store._session_journal import CHECKPOINT_BYTES, CHECKPOINT_RECORDS

    journal = Path(core.directory) / ".journal"
    previous = "ROOT"
    for i in range(CHECKPOINT_RECORDS + 5):
        core.append({"id": f"n{i}", "content": "x", "predecessor": previous})
        previous = f"n{i}"
        assert 1 <= core.statistics().journal_records <= CHECKPOINT_RECORDS
    for i in range(CHECKPOINT_RECORDS + 5):
        core.merge_node_metadata_batch({f"n{i}": {"m": i}})
        assert core.statistics().journal_records <= CHECKPOINT_RECORDS
    big = "y" * (CHECKPOINT_BYTES // 3)
    for i in range(4):
        core.append({"id": f"big{i}", "content": big})
        assert journal.stat().st_size < CHECKPOINT_BYTES + len(big) + 4096
    core.close()
    assert core.outstanding_journals == [] and journal.stat().st_size == 0


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_each_bad_node_file_is_reported_and_nothing_else_changes(state: Path, name: str) -> None:
    history = state / "sessions" / "demo" / "history"
    (history / "0004-l-a2b.json").write_bytes(BAD_FILES[name])
    before = _snapshot(state)
    core = SessionCore.open(state, "demo")
    assert [getattr(p, "path", None) for p in core.problems] == [
        "sessions/demo/history/0004-l-a2b.json"]
    assert _ids(core.get_branch("a2")) == ["u1", "a1"]
    core.list_branches()
    assert _snapshot(state) == before
    core.merge_node_metadata_batch({"a1": {"m": 1}})
    core.close()
    after = _snapshot(state)
    assert {k for k in after if after[k] != before[k]} == {"sessions/demo/history/0001-l-a1.json"}


def test_everything_created_is_owner_only(tmp_path: Path) -> None:
    core = SessionCore.create(tmp_path, "s")
    core.append({"id": "u1", "content": "q"})
    core.merge_node_metadata_batch({"u1": {"m": 1}})
    session = tmp_path / "sessions" / "s"
    created = [p for p in tmp_path.rglob("*")]
    assert any(p.name == ".journal" for p in created)
    assert any(p.name == ".lock" for p in created)
    for path in created:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    assert stat.S_IMODE(session.stat().st_mode) == 0o700


def test_an_oversized_node_file_is_refused_before_it_is_read(state: Path) -> None:
    history = state / "sessions" / "demo" / "history"
    big = history / "0004-l-a2b.json"
    with open(big, "r+b") as handle:  # 50 MB, sparse: cheap to make
        handle.truncate(50 * 1024 * 1024)
    core = SessionCore.open(state, "demo")
    assert str(core.problems[0]).startswith(
        "sessions/demo/history/0004-l-a2b.json cannot be read: 52428800 bytes, over the cap")
    assert big.stat().st_size == 50 * 1024 * 1024


def test_locked_holds_the_session_lock_and_catches_up_when_asked(tmp_path: Path) -> None:
    """The primitive memory's claims decide under: the lock, and the index caught up on request."""
    from store import SessionLockTimeoutError

    core = SessionCore.create(tmp_path, "s1")
    core.append({"id": "u1", "role": "user", "content": "hi"})
    other = SessionCore.open(tmp_path, "s1")
    other.merge_node_metadata_batch({"u1": {"stamp": "theirs"}})  # another owner's write
    with core.trusting_index():  # reads skip their own freshness check in here
        with core.locked(catch_up=False):
            assert "stamp" not in core.node("u1").metadata  # the index as it was
            with pytest.raises(SessionLockTimeoutError):  # nobody else may write meanwhile
                SessionCore(tmp_path, "s1", options=SessionOptions(lock_timeout=0.05)).append(
                    {"id": "a1", "role": "assistant", "content": "no", "predecessor": "u1"})
        with core.locked(catch_up=True):
            assert core.node("u1").metadata["stamp"] == "theirs"


def test_a_session_built_aside_and_installed_never_gets_a_deleted_namesakes_records(
    tmp_path: Path,
) -> None:
    """As ``create`` does, the install retires a dead runtime's records of the same id.

    The staged core looked only at its own (empty) state directory's logs;
    without the install's own discard the old turn would replay into the new
    session at its first lock.
    """
    state = tmp_path / "state"
    SessionCore.create(state, "s")
    dead = RuntimeLog.open(state)
    core = SessionCore.open(state, "s", options=SessionOptions(log=dead))
    core.append({"id": "old1", "role": "user", "content": "a turn of the deleted session"})
    dead.abandon()
    shutil.rmtree(state / "sessions" / "s")
    staged = SessionCore.create(tmp_path / "staging", "s")
    staged.append({"id": "new1", "role": "user", "content": "an imported turn"})
    staged.close()
    install_staged_session(staged, state, DurableFiles())
    log = RuntimeLog.open(state)
    recover_dead_runtimes(state, log)
    installed = SessionCore.open(state, "s", options=SessionOptions(log=log))
    assert [n.id for n in installed.nodes()] == ["new1"]
    installed.close()
    log.close()
