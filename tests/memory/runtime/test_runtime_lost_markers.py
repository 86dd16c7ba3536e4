"""Lost markers in a real state: the audit counts them, the runtime sets them again, writes nothing.

The fault is planted the way the reference agent makes it: its unlocked
read-modify-write of a node file writes back the metadata it read (before
our marker) plus a key of its own, with plain ``json.dumps`` and a rename,
without our lock.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from click.testing import CliRunner

from memory.cli._cli import main
from memory.ledger._ledger import WritePolicy
from memory.ledger._records import MARKER_KEY
from memory.runtime._runtime import MemoryRuntime, open_runtime
from memory.runtime._session_state import BoundaryOutcome
from memory.runtime._workspace_actor import ArchiveBatches
from memory.writers._writer import Batch
from store import SessionCore
from tests.memory._runtime import chain, config, marker_values, tally, virtual_wall_clock

AGENT_KEY = "agent_note"


def agent_drops_marker(state: Path, sid: str, node: str) -> None:
    """The reference agent's merge: what it read before our marker, plus its key, written back."""
    [path] = (state / "sessions" / sid / "history").glob(f"*-{node}.json")
    record = json.loads(path.read_bytes())
    record["metadata"].pop(MARKER_KEY, None)
    record["metadata"][AGENT_KEY] = "kept"
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(json.dumps(record, ensure_ascii=False))
    os.replace(temp, path)


def memory_files(state: Path) -> dict[str, bytes]:
    """Every file that says what memory holds: topics, archives, runtime.json's counters."""
    root = state / "memory"
    paths = [*(root / "topics").rglob("*"), *(root / "sources").rglob("*"),
             root / ".scriptorium" / "runtime.json"]
    return {str(p.relative_to(root)): p.read_bytes() for p in paths if p.is_file()}


async def audit_json(state: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    """``scriptorium memory audit --json`` (in a thread: ``--repair`` runs its own event loop)."""
    def invoke() -> tuple[int, dict[str, Any]]:
        result = CliRunner().invoke(
            main, ["memory", "audit", "--state", str(state), "--json", *extra])
        return result.exit_code, orjson.loads(result.stdout)

    return await anyio.to_thread.run_sync(invoke)


TURNS = ["u0", "a0", "u1", "a1", "u2", "a2"]


async def written_session(state: Path) -> tuple[str, str]:
    """A session whose six turns are written and marked; the workspace id."""
    async with open_runtime(state, config=config()) as rt:
        sid = await rt.sessions.create(title="lost")
        await chain(rt, sid, "ROOT", TURNS)
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        workspace = rt.workspace_id
    assert set(marker_values(state, sid).values()) == {workspace}
    return sid, workspace


async def owed_but_stranded(rt: MemoryRuntime, sid: str, workspace: str) -> None:
    """u3 archived (a crash before its install) and u4 never archived, both behind marked a4."""
    await chain(rt, sid, "a2", ["u3", "a3", "u4", "a4"])
    [u3] = [r for r in await rt.pending(sid) if r.message_id == "u3"]
    await rt.workspace_ref.call(ArchiveBatches((Batch(sid, (u3,), ""),)))
    await rt.sessions.merge_node_metadata_batch(sid, {"a4": {MARKER_KEY: workspace}})


async def test_audit_reports_a_lost_marker_and_exits_non_zero(tmp_path: Path) -> None:
    sid, workspace = await written_session(tmp_path)
    assert (await audit_json(tmp_path))[0] == 0
    agent_drops_marker(tmp_path, sid, "u1")
    before = memory_files(tmp_path)
    code, report = await audit_json(tmp_path)
    assert code == 1 and not report["ok"]
    assert report["lost_markers"] == [{"session": sid, "node": "u1"}]
    text = await anyio.to_thread.run_sync(
        lambda: CliRunner().invoke(main, ["memory", "audit", "--state", str(tmp_path)]))
    assert text.exit_code == 1 and "lost_markers: 1" in text.stdout
    assert "lost marker(s): 'scriptorium memory audit --repair'" in text.stderr
    # audit is a read-only check: nothing changed, the marker is still lost
    assert marker_values(tmp_path, sid)["u1"] is None and memory_files(tmp_path) == before
    # --repair sets it again through the runtime and audits again; memory is untouched
    code, report = await audit_json(tmp_path, "--repair")
    assert code == 0 and report["ok"], report
    assert report["repaired"] == [{"session": sid, "node": "u1"}]
    assert marker_values(tmp_path, sid)["u1"] == workspace
    assert memory_files(tmp_path) == before


async def test_the_runtime_repairs_at_activation_without_writing(tmp_path: Path) -> None:
    sid, workspace = await written_session(tmp_path)
    for node in ("u1", "a1"):
        agent_drops_marker(tmp_path, sid, node)
    before = memory_files(tmp_path)
    events: list[dict[str, Any]] = []
    async with open_runtime(tmp_path, config=config(on_event=events.append)) as rt:
        # Activation queues the repair before anything this call sends after it.
        assert await rt.pending(sid) == []
        assert await rt.pending(sid) == []
        await rt.drain()
        assert not tally(rt).deliveries  # nothing was handed to a writer
    after = marker_values(tmp_path, sid)
    assert after["u1"] == after["a1"] == workspace
    assert [e["nodes"] for e in events if e["event"] == "markers_repaired"] == [["a1", "u1"]]
    assert memory_files(tmp_path) == before
    core = SessionCore.open(tmp_path, sid)
    assert core.node("u1").metadata[AGENT_KEY] == "kept"  # the agent's own key survives
    core.close()


async def test_the_watchdog_scan_repairs_a_marker_lost_while_running(tmp_path: Path) -> None:
    sid, workspace = await written_session(tmp_path)
    async with open_runtime(tmp_path, config=config()) as rt:
        await rt.pending(sid)
        await rt.poll_idle()  # the first scan looks at every session: nothing lost yet
        watchdog = rt._watchdog
        assert watchdog is not None
        asked = watchdog.repairs
        await rt.poll_idle()
        assert watchdog.repairs == asked  # unchanged files: not asked again
        before = memory_files(tmp_path)
        agent_drops_marker(tmp_path, sid, "a1")
        await rt.poll_idle()
        assert watchdog.repairs == asked + 1
        await rt.pending(sid)  # behind the repair in the session's mailbox
        assert marker_values(tmp_path, sid)["a1"] == workspace
        await rt.drain()
        assert not tally(rt).deliveries
        assert memory_files(tmp_path) == before


async def test_an_unmarked_turn_not_in_memory_is_never_marked(tmp_path: Path) -> None:
    sid, workspace = await written_session(tmp_path)
    async with open_runtime(tmp_path, config=config(policy=WritePolicy(threshold=32000))) as rt:
        await owed_but_stranded(rt, sid, workspace)
        agent_drops_marker(tmp_path, sid, "u1")
        await rt.poll_idle()
        await rt.pending(sid)
        assert await rt.repair_markers(sid) == []  # u1 was repaired by the scan
        workspace_marks = marker_values(tmp_path, sid)
    code, report = await audit_json(tmp_path)
    assert workspace_marks["u1"] == workspace
    # u3 (archived, not cited) and u4, a3 (not archived) are owed a write, not a marker
    assert all(workspace_marks[n] is None for n in ("u3", "a3", "u4"))
    assert code == 1 and report["lost_markers"] == []
    assert report["non_prefix_branches"][0]["unmarked"] == ["u3", "a3", "u4"]


async def test_the_scan_sees_a_drop_in_the_same_timestamp_tick_as_our_merge(
        tmp_path: Path) -> None:
    """The agent's rename right after our marker merge may leave ``history/``'s mtime as it was.

    Then the session's index looks fresh but holds our marker; the scan must
    read the files again. The tick is made exact by restoring the mtime.
    """
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(title="tick")
        await chain(rt, sid, "ROOT", TURNS)
        await rt.poll_idle()  # the scan's view: turns appended, nothing marked
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        history = tmp_path / "sessions" / sid / "history"
        ours = history.stat()
        agent_drops_marker(tmp_path, sid, "u2")
        os.utime(history, ns=(ours.st_atime_ns, ours.st_mtime_ns))
        assert await rt.pending(sid) == []  # the index did not notice
        await rt.poll_idle()
        await rt.pending(sid)
        assert marker_values(tmp_path, sid)["u2"] == rt.workspace_id


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_the_watchdogs_own_poll_repairs_within_one_interval(tmp_path: Path) -> None:
    """No explicit scan: the timer's poll every ``watchdog_poll`` seconds finds it."""
    sid, workspace = await written_session(tmp_path)
    # The session stays active: a passivated one would repair when it activates again.
    cfg = config(clock=virtual_wall_clock, watchdog_poll=300.0,
                 passivate_after=10_000.0)
    async with open_runtime(tmp_path, config=cfg) as rt:
        await rt.pending(sid)
        await rt.pending(sid)  # active, and its activation's repair is done
        await anyio.sleep(301)  # the first poll: every session, nothing lost yet
        agent_drops_marker(tmp_path, sid, "a1")
        await rt.pending(sid)
        await rt.pending(sid)
        assert marker_values(tmp_path, sid)["a1"] is None  # reading the fresh index repairs nothing
        await anyio.sleep(300)
        await rt.pending(sid)
        assert marker_values(tmp_path, sid)["a1"] == workspace
        await rt.drain()
        assert not tally(rt).deliveries
