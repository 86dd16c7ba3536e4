"""Living beside the reference agent: its state formats and rules, on copies of its sample.

Every test starts from a copy of ``shared/fixtures/openprogram-sample`` and
adds what the reference agent itself would write there (node files and
meta.json in its byte format, written by hand as its store does), then runs
scriptorium on that state.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from click.testing import CliRunner

from memory._errors import MissingAuthorityError, ReferenceThresholdWarning, SettingsError
from memory.cli._cli import main
from memory.cli._options import _config
from memory.ledger._ledger import WritePolicy
from memory.ledger._records import MARKER_KEY
from memory.runtime import BoundaryReached
from memory.runtime._config import apply_timings
from memory.runtime._runtime import RuntimeConfig, open_runtime
from memory.runtime._session_state import BoundaryOutcome, Reconsider
from memory.runtime._settings import Timings, read_settings
from memory.workspace._archive import read_archive
from memory.workspace._quarantine import read_quarantine
from memory.writers import Event
from store import SessionCore
from tests.faults import first_event
from tests.fixture import copy_fixture
from tests.memory._runtime import virtual_wall_clock

WORKSPACE = "w-aa116220"  # the fixture's workspace id

OWNER: dict[str, Any] = {
    "speaker_kind": "owner", "speaker_id": "owner/local", "speaker_display": "Owner",
    "principal_id": "owner/install/fd91530a8f9d4d41", "authority_tier": "owner",
    "interaction": "interactive", "authority_schema": 1,
}
BROWSER: dict[str, Any] = {
    "speaker_kind": "mcp_client", "speaker_id": "mcp/browser", "speaker_display": "Browser",
    "principal_id": "mcp/browser/1", "authority_tier": "mcp_browser",
    "interaction": "tool", "authority_schema": 1,
}


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return copy_fixture(tmp_path / "state")


def reference_append(state: Path, sid: str, node_id: str, role: str, output: str,
                     predecessor: str | None, metadata: dict[str, Any], *,
                     caller: str = "", head: bool = True, at: float | None = None) -> None:
    """Write one node the way the reference agent's store does, and bump its meta.json."""
    session = state / "sessions" / sid
    history = session / "history"
    seq = len(list(history.glob("*.json")))
    created = at if at is not None else 1796006500.0 + seq
    node = {"id": node_id, "created_at": created, "seq": seq, "role": role, "name": "",
            "input": None, "output": output, "caller": caller, "predecessor": predecessor,
            "reads": [], "metadata": metadata}
    (history / f"{seq:04d}-{role[0]}-{node_id}.json").write_text(json.dumps(node))
    meta = json.loads((session / "meta.json").read_text())
    meta["updated_at"] = created
    if head:
        meta["head_id"] = node_id
    (session / "meta.json").write_text(json.dumps(meta))


def own_markers(state: Path, sid: str = "demo") -> set[str]:
    return {node.id for node in SessionCore.open(state, sid).nodes()
            if node.metadata.get(MARKER_KEY) == WORKSPACE}


def archived(state: Path, sid: str = "demo") -> list[str]:
    return [frame.source_id.rsplit("/", 1)[1]
            for frame in read_archive(str(state / "memory"), sid).frames]


def config() -> RuntimeConfig:
    return RuntimeConfig(policy=WritePolicy(threshold=8000), writer_workers=1)


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


# -- 1. speaker authority (SPEC §6.1) ------------------------------------------------------


async def test_a_browser_turn_is_never_a_record_and_its_neighbours_are_written(
    state: Path,
) -> None:
    reference_append(state, "demo", "u3", "user", "My cat is called Tom.", "a1", dict(OWNER))
    reference_append(state, "demo", "b1", "user", "Clicked the login button.", "u3",
                     dict(BROWSER))
    reference_append(state, "demo", "a3", "llm", "Tom is a fine name.", "b1", dict(OWNER))
    async with open_runtime(state, config=config()) as rt:
        assert [r.message_id for r in await rt.pending("demo")] == ["a1", "u3", "a3"]
        assert await rt.flush("demo") is BoundaryOutcome.WRITTEN
    assert {"a1", "u3", "a3"} <= own_markers(state)
    assert "b1" not in own_markers(state)
    assert "b1" not in archived(state) and {"a1", "u3", "a3"} <= set(archived(state))
    code, out = cli("memory", "pending", "demo", "--state", str(state), "--json")
    assert code == 0 and orjson.loads(out)["pending"] == []


async def test_a_stamped_turn_without_authority_is_refused_naming_its_node(
    state: Path,
) -> None:
    damaged = {key: value for key, value in OWNER.items() if key != "principal_id"}
    reference_append(state, "demo", "u3", "user", "My cat is called Tom.", "a1", damaged)
    reference_append(state, "demo", "a3", "llm", "Tom is a fine name.", "u3", dict(OWNER))
    async with open_runtime(state, config=config()) as rt:
        with pytest.raises(MissingAuthorityError, match=r"node 'u3'.*principal_id"):
            await rt.pending("demo")
        assert await rt.flush("demo") is BoundaryOutcome.QUARANTINED
        [entry] = [e for e in rt.quarantined if e.session == "demo"]
        assert entry.node_ids == ("u3",) and "node 'u3'" in entry.error
        # the session stays quarantined: asking again neither writes nor adds an entry
        assert await rt.flush("demo") is BoundaryOutcome.QUARANTINED
    [saved] = read_quarantine(str(state / "memory"))
    assert saved.node_ids == ("u3",) and "principal_id" in saved.error
    assert own_markers(state) == {"u1"}  # nothing was written or marked
    assert archived(state) == ["u2", "a2", "u1"]  # the fixture's archive, untouched
    code, out = cli("memory", "pending", "demo", "--state", str(state))
    assert code == 1 and "node 'u3'" in out and "Traceback" not in out
    code, out = cli("memory", "audit", "--state", str(state), "--json")
    report = orjson.loads(out)
    assert code == 1 and not report["ok"]
    assert [(r["tip"], "node 'u3'" in r["error"]) for r in report["refused_branches"]] == [
        ("a3", True)]


async def test_an_unstamped_legacy_turn_stays_a_record(state: Path) -> None:
    reference_append(state, "demo", "u3", "user", "My cat is called Tom.", "a1",
                     {"speaker_kind": "guest"})
    async with open_runtime(state, config=config()) as rt:
        [_a1, u3] = await rt.pending("demo")
        assert u3.message_id == "u3" and u3.meta is not None and u3.trusted
        assert (u3.meta.speaker_kind, u3.meta.principal_id) == ("unknown", "unknown")
        assert await rt.flush("demo") is BoundaryOutcome.WRITTEN
    assert {"a1", "u3"} <= own_markers(state)


# -- 2. the legacy archive header (SPEC §5) -------------------------------------------------


def reference_session(state: Path, sid: str, turns: list[tuple[str, str, str]]) -> None:
    """A new session in the reference's format: a chain of (id, role, text) owner turns."""
    session = state / "sessions" / sid
    (session / "history").mkdir(parents=True)
    (session / "meta.json").write_text(json.dumps({
        "id": sid, "agent_id": "main", "title": sid, "source": "",
        "created_at": 1796006000.0, "updated_at": 1796006000.0, "project_id": "default",
        "head_id": None}))
    previous = "ROOT"
    for node_id, role, text in turns:
        reference_append(state, sid, node_id, role, text, previous, dict(OWNER))
        previous = node_id


def legacy_record(sid: str, node: str, text: str, *, intermediate: bool) -> str:
    from memory.ledger._records import source_anchor, source_id

    source = source_id(sid, node)
    lines = [f'<a id="{source_anchor(source)}"></a>', f"<!-- source-id:{source} -->"]
    if intermediate:
        lines += ["<!-- speaker-id:owner%2Flocal -->", "<!-- record-lines:1 -->"]
    return "\n".join([*lines, f"[2025-08-12T12:00:02+00:00] Owner (owner/local): {text}", ""]) + "\n"


def with_cursors(state: Path, cursors: dict[str, Any]) -> None:
    path = state / "memory" / ".scriptorium" / "runtime.json"
    document = json.loads(path.read_text())
    document["cursors"] = cursors
    path.write_text(json.dumps(document))


async def test_legacy_archives_of_the_intermediate_form_and_decoded_stems_migrate(
    state: Path,
) -> None:
    turns = [("m1", "user", "I live in Oslo."), ("m2", "llm", "Noted: Oslo."),
             ("m3", "user", "And I cycle."), ("m4", "llm", "Good.")]
    legacy = state / "memory" / "sources" / "openprogram"
    # intermediate writer: speaker-id and record-lines lines between header and record
    reference_session(state, "chat 1", turns)
    (legacy / "chat%201.md").write_text(
        "# chat 1\n\n" + legacy_record("chat 1", "m1", "I live in Oslo.", intermediate=True)
        + legacy_record("chat 1", "m2", "Noted: Oslo.", intermediate=True))
    # a stem the reference encoded another way than scriptorium's quoting would
    reference_session(state, "a+b", turns)
    (legacy / "a+b.md").write_text(
        "# a+b\n\n" + legacy_record("a+b", "m1", "I live in Oslo.", intermediate=False))
    with_cursors(state, {"chat 1": {"message_id": "m2", "ordinal": 2},
                         "a+b": {"message_id": "m1", "ordinal": 1}})
    async with open_runtime(state, config=config()) as rt:
        report = rt.migration
        assert report is not None and report.cursors_removed
        assert report.marked["chat 1"] == ("m1",)  # only the first header is believed
        assert report.marked["a+b"] == ("m1",)
        assert [r.message_id for r in await rt.pending("chat 1")] == ["m2", "m3", "m4"]
    assert own_markers(state, "chat 1") == {"m1"} and own_markers(state, "a+b") == {"m1"}
    code, out = cli("memory", "audit", "--state", str(state), "--json")
    report_json = orjson.loads(out)
    assert code == 0 and report_json["ok"] and report_json["warnings"] == []


# -- 3. the trunk tip (SPEC §4) --------------------------------------------------------------


def test_an_attach_row_at_the_end_of_the_trunk_is_listed_with_its_own_times(
    state: Path,
) -> None:
    # The trunk u1 -> a1 -> u2 -> a2 (first children) now ends on an attach row.
    reference_append(state, "demo", "at1", "llm", "attached sub-agent result", "a2",
                     {"function": "attach", "source": "agent_spawn"}, head=False,
                     at=1796006420.5)
    meta_path = state / "sessions" / "demo" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["branches"]["at1"] = {"name": "sub", "created_at": 1.0, "updated_at": 2.0}
    meta_path.write_text(json.dumps(meta))
    code, out = cli("session", "branches", "demo", "--state", str(state), "--json")
    assert code == 0
    rows = {row["head_msg_id"]: row for row in orjson.loads(out)}
    assert set(rows) == {"at1", "sp1", "a2b", "a2"}
    assert rows["at1"] == {"head_msg_id": "at1", "name": "sub", "created_at": 1796006420.5,
                           "updated_at": 1796006420.5, "archived": False}
    assert next(iter(rows)) == "at1"  # sorted by the node's time, the newest


# -- 4. our files out of the agent's git history --------------------------------------------

REPO = Path(__file__).resolve().parents[3]
OUR_NAMES = (".lock", ".claim", ".journal", ".scriptorium-tmp")
# The crash: a real process appends a turn and is killed with SIGKILL at the
# rename of the node file's temp copy, leaving the journal record and the temp file.
CRASHING_APPEND = """
import os, signal, sys
from store import DurableFiles, SessionCore, SessionOptions

class KilledAtRename(DurableFiles):
    def _step(self, step, path):
        if step == "rename":
            os.kill(os.getpid(), signal.SIGKILL)

core = SessionCore.open(sys.argv[1], "demo", options=SessionOptions(files=KilledAtRename()))
core.append({"id": "u9", "role": "user", "content": "The crash came after this.",
             "predecessor": "a3", **OWNER})
""".replace("OWNER", repr(OWNER))


async def agent_commit(directory: Path, message: str) -> None:
    """What the reference agent does after every turn: ``git add -A`` and commit."""
    identity = ["-c", "user.name=agent", "-c", "user.email=agent@example.invalid"]
    await anyio.run_process(["git", "add", "-A"], cwd=directory)
    await anyio.run_process(["git", *identity, "commit", "-q", "--allow-empty", "-m", message],
                            cwd=directory)


async def git_out(directory: Path, *args: str) -> str:
    done = await anyio.run_process(["git", *args], cwd=directory)
    return done.stdout.decode()


def ours(listing: str) -> list[str]:
    return [line for line in listing.splitlines() if any(n in line for n in OUR_NAMES)]


@pytest.mark.parametrize("repository_at", ["session", "sessions"])
async def test_a_session_directory_in_git_stays_clean_of_our_files(
    state: Path, repository_at: str,
) -> None:
    session = state / "sessions" / "demo"
    work_tree = session if repository_at == "session" else session.parent
    await anyio.run_process(["git", "init", "-q"], cwd=work_tree)
    await agent_commit(work_tree, "start")
    async with open_runtime(state, config=config()) as rt:
        await rt.sessions.append("demo", {"id": "u3", "role": "user", "predecessor": "a1",
                                          "content": "My cat is called Tom.", **OWNER})
        await agent_commit(work_tree, "turn u3")
        await rt.sessions.append("demo", {"id": "a3", "role": "assistant", "predecessor": "u3",
                                          "content": "Tom is a fine name.", **OWNER})
        assert await rt.flush("demo") is BoundaryOutcome.WRITTEN  # append, claim, mark
        await agent_commit(work_tree, "turn a3")
        assert all((session / name).exists() for name in (".lock", ".claim", ".journal"))
        assert ours(await git_out(work_tree, "status", "--porcelain", "--ignored=no")) == []
    crashed = await anyio.run_process(
        [sys.executable, "-c", CRASHING_APPEND, str(state)], cwd=REPO, check=False)
    assert crashed.returncode == -signal.SIGKILL
    leftovers = [p.name for p in session.rglob("*") if p.name.endswith(".scriptorium-tmp")]
    assert leftovers and (session / ".journal").stat().st_size > 0  # the crash left them
    await agent_commit(work_tree, "after the crash")
    async with open_runtime(state, config=config()) as rt:  # recovery replays the journal
        assert "u9" in {m["id"] for m in await rt.sessions.get_branch("demo")}
        assert await rt.flush("demo") is BoundaryOutcome.WRITTEN
    await agent_commit(work_tree, "after recovery")
    assert ours(await git_out(work_tree, "status", "--porcelain")) == []
    history = await git_out(work_tree, "log", "--all", "--name-only", "--format=")
    assert ours(history) == []
    tracked = await git_out(work_tree, "ls-files")
    assert "meta.json" in tracked and "u9.json" in tracked  # the agent's own files are committed
    assert {"u3", "a3", "u9"} <= own_markers(state)


# -- 5. a merged spawn branch reaches memory at the session boundary ----------------------

# ~1,000 tokens of text the extractive writer logs without a fact: 9 turns pass 8,000.
FILLER = " ".join(["lorem ipsum dolor sit amet"] * 160)


def spawn_and_merge(state: Path, turns: int) -> list[str]:
    """The reference's sub-agent: turns after spawn root sp1, attached back to a1, merged."""
    previous, ids = "sp1", list[str]()
    for index in range(turns):
        node_id = f"sub{index}"
        role = "llm" if index % 2 == 0 else "user"
        reference_append(state, "demo", node_id, role,
                         f"Sub-agent step {index} found the invoice. {FILLER}", previous,
                         {"source": "agent_spawn"}, head=False)
        previous, ids = node_id, [*ids, node_id]
    reference_append(state, "demo", "attach1", "llm", "The sub-agent is done.", "a1",
                     {"function": "attach", "source": "agent_spawn"}, head=False)
    meta_path = state / "sessions" / "demo" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["merged_heads"] = [previous, "gone-node"]
    meta_path.write_text(json.dumps(meta))
    return ids


async def test_a_merged_spawn_branch_is_written_at_the_boundary_and_never_listed(
    state: Path,
) -> None:
    sub = spawn_and_merge(state, 10)
    code, out = cli("session", "branches", "demo", "--state", str(state), "--json")
    assert code == 0 and sub[-1] not in {row["head_msg_id"] for row in orjson.loads(out)}
    async with open_runtime(state, config=config()) as rt:
        assert await rt.flush("demo") is BoundaryOutcome.WRITTEN
        assert sub[-1] not in {row["head_msg_id"] for row in await rt.sessions.list_branches(
            "demo")}
        assert await rt.pending("demo", tip=sub[-1]) == []
    # written completely, like the head branch: the sub-agent's work is no rejected retry
    written = ["sp1", *sub]
    assert set(written) <= own_markers(state)
    assert set(written) <= set(archived(state))


async def test_a_short_merged_branch_is_written_completely(state: Path) -> None:
    sub = spawn_and_merge(state, 2)  # far below the threshold a non-head tip must reach
    async with open_runtime(state, config=config()) as rt:
        assert await rt.flush("demo") is BoundaryOutcome.WRITTEN
        assert await rt.pending("demo", tip=sub[-1]) == []
    assert {"sp1", *sub} <= own_markers(state)


async def test_a_branch_merged_while_the_runtime_runs_is_written_at_the_next_boundary(
    state: Path,
) -> None:
    """``rt.sessions.merge_heads`` reaches the live session actor's planner (no stale view)."""
    sub = spawn_and_merge(state, 2)
    meta_path = state / "sessions" / "demo" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["merged_heads"]
    meta_path.write_text(json.dumps(meta))
    async with open_runtime(state, config=config()) as rt:
        assert await rt.flush("demo") is BoundaryOutcome.WRITTEN
        assert not {"sp1", *sub} & own_markers(state)  # a short side branch: owed, not written
        await rt.sessions.merge_heads("demo", [sub[-1]])
        assert await rt.flush("demo") is BoundaryOutcome.WRITTEN
        assert await rt.pending("demo", tip=sub[-1]) == []
    assert {"sp1", *sub} <= own_markers(state)


# -- 6. every timing the agent's rules use is configurable -----------------------------------


def write_settings(state: Path, text: str) -> None:
    (state / "scriptorium.toml").write_text(text)


def test_the_settings_file_is_strict_and_names_itself(state: Path) -> None:
    assert read_settings(state) == Timings()
    write_settings(state, "threshold = 12000\nidle_after = 5\nsession_idle = 1.5\n")
    assert read_settings(state) == Timings(threshold=12000, idle_after=5.0, session_idle=1.5)
    for text, reason in [("idle_afer = 5", r"unknown key\(s\) idle_afer"),
                         ("threshold = 0", "positive integer"),
                         ("threshold = true", "positive integer"),
                         ("watchdog_poll = -1", "watchdog_poll must be a positive number"),
                         ("threshold = ", "not valid TOML")]:
        write_settings(state, text)
        with pytest.raises(SettingsError, match=reason) as caught:
            read_settings(state)
        assert str(caught.value).startswith(str(state / "scriptorium.toml"))


async def started(state: Path, seen: list[RuntimeConfig]) -> None:
    async with open_runtime(state) as rt:
        seen.append(rt.config)


async def test_open_runtime_takes_the_files_timings_and_warns_for_an_odd_threshold(
    state: Path,
) -> None:
    write_settings(state, "threshold = 12000\nidle_after = 60\nsession_idle = 120\n"
                          "watchdog_poll = 7.5\n")
    seen: list[RuntimeConfig] = []
    with pytest.warns(ReferenceThresholdWarning, match="12000 .*reference agent would not"):
        await started(state, seen)
    [config] = seen
    assert (config.policy.threshold, config.policy.idle_after) == (12000, 60.0)
    assert (config.session_idle, config.watchdog_poll) == (120.0, 7.5)
    given = RuntimeConfig()  # an explicit embedded config is used as it is
    async with open_runtime(state, config=given) as rt:
        assert rt.config is given


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_the_files_timings_drive_the_watchdog_and_the_trigger(state: Path) -> None:
    write_settings(state, "idle_after = 60\nsession_idle = 5000\nwatchdog_poll = 30\n")
    ended = anyio.Event()

    def on_event(event: Event) -> None:
        if isinstance(event, BoundaryReached) and event.session == "demo":
            ended.set()

    base = RuntimeConfig(clock=virtual_wall_clock, writer_workers=1,
                         on_event=on_event)
    async with open_runtime(state, config=apply_timings(base, read_settings(state))) as rt:
        # the fixture's session stopped long ago: the first poll (30 s, not 300) finds it
        await anyio.sleep(29)
        assert "a1" not in own_markers(state) and not ended.is_set()
        with anyio.fail_after(2):
            await ended.wait()  # the watchdog's session boundary, ended at its first poll
        assert "a1" in own_markers(state)
        # the incremental trigger's idle time: 60 s, not an hour
        sid = await rt.sessions.create()
        await rt.sessions.append(sid, {"id": "u1", "role": "user", "content": "I am Ann.",
                                       **OWNER})
        await anyio.sleep(59)
        await rt.session_ref(sid).call(Reconsider())
        await rt.drain()
        assert own_markers(state, sid) == set()
        await anyio.sleep(2)
        await rt.session_ref(sid).call(Reconsider())
        await rt.drain()
        assert own_markers(state, sid) == {"u1"}


def test_flags_win_over_the_file_and_odd_thresholds_warn_in_one_line(state: Path) -> None:
    write_settings(state, "threshold = 32000\nsession_idle = 99\n")
    config = _config(str(state), 1, {"threshold": 12000, "watchdog_poll": 4.0})
    assert (config.policy.threshold, config.session_idle, config.watchdog_poll) == (
        12000, 99.0, 4.0)
    result = CliRunner().invoke(main, ["memory", "write", "demo", "--force", "--state",
                                       str(state), "--threshold", "12000", "--idle-after", "1",
                                       "--session-idle", "1", "--watchdog-poll", "1"])
    assert result.exit_code == 0, result.output
    [warning] = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warning.startswith("scriptorium: warning: token threshold 12000")
    assert "a1" in own_markers(state)
    code, out = cli("run", "--once", "--state", str(state), "--session-idle", "0")
    assert code == 2 and "--session-idle: session_idle must be a positive number" in out
    write_settings(state, "idle_after = 'soon'\n")
    code, out = cli("memory", "write", "--state", str(state))
    assert code == 2 and "scriptorium.toml: idle_after must be" in out
    assert "Traceback" not in out


def test_run_writes_during_a_short_test_with_short_timings(state: Path) -> None:
    """A new user's try: ``scriptorium run`` with short timings writes within seconds."""
    reference_append(state, "demo", "u3", "user", "My cat is called Tom.", "a1", dict(OWNER))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-c", "from memory.cli._cli import main; main()", "run", "--state",
         str(state), "--idle-after", "1", "--session-idle", "1", "--watchdog-poll", "0.2",
         "--scan-interval", "0.2", "--log-json"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:  # the run's own word that the session boundary ended
        boundary = first_event(process, lambda event: event["event"] == "boundary"
                               and event["session"] == "demo", within=30)
        assert boundary["outcome"] == "written", boundary
        assert {"a1", "u3"} <= own_markers(state)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_simulate_takes_the_timing_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    from memory.simulate import simulate as real

    seen: list[Any] = []

    async def recording(config: Any) -> Any:
        seen.append(config)
        return await real(config)

    monkeypatch.setattr("memory.simulate._command.run_simulation", recording)
    result = CliRunner().invoke(main, [
        "simulate", "--sessions", "2", "--turns", "4", "--json", "--threshold", "12000",
        "--idle-after", "0.5", "--session-idle", "1.5", "--watchdog-poll", "0.25"])
    assert result.exit_code == 0, result.output
    [config] = seen
    assert (config.threshold, config.idle_after, config.session_idle, config.watchdog_poll) == (
        12000, 0.5, 1.5, 0.25)
    assert result.stderr.count("scriptorium: warning: token threshold 12000") == 1
    assert "ReferenceThresholdWarning" not in result.stderr
