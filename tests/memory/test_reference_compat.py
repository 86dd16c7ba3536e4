"""Living beside the reference agent: its state formats and rules, on copies of its sample.

Every test starts from a copy of ``shared/fixtures/openprogram-sample`` and
adds what the reference agent itself would write there (node files and
meta.json in its byte format, written by hand as its store does), then runs
scriptorium on that state.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from click.testing import CliRunner

from memory._archive import read_archive
from memory._cli import main
from memory._errors import MissingAuthority
from memory._ledger import WritePolicy
from memory._quarantine import read_quarantine
from memory._records import MARKER_KEY
from memory._runtime import RuntimeConfig, open_runtime
from memory._session_actor import BoundaryOutcome
from store import SessionCore
from tests.fixture import copy_fixture

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
        with pytest.raises(MissingAuthority, match=r"node 'u3'.*principal_id"):
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
    from memory._records import source_anchor, source_id

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

REPO = Path(__file__).resolve().parents[2]
OUR_NAMES = (".lock", ".claim", ".journal", ".scriptorium-tmp")
# The crash: a real process appends a turn and is killed with SIGKILL at the
# rename of the node file's temp copy, leaving the journal record and the temp file.
CRASHING_APPEND = """
import os, signal, sys
from store import DurableFiles, SessionCore

class KilledAtRename(DurableFiles):
    def _step(self, step, path):
        if step == "rename":
            os.kill(os.getpid(), signal.SIGKILL)

core = SessionCore.open(sys.argv[1], "demo", files=KilledAtRename())
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
    previous, ids = "sp1", []
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
        rest = await rt.pending("demo", tip=sub[-1])
    # written batch by batch while it owes a whole batch, as other non-head tips
    assert sum(r.tokens for r in rest) < 8000 and [r.message_id for r in rest] == sub[-len(rest):]
    written = ["sp1", *sub[: len(sub) - len(rest)]]
    assert len(written) >= 8 and set(written) <= own_markers(state)
    assert set(written) <= set(archived(state))
    assert not {r.message_id for r in rest} & own_markers(state)


async def test_a_short_merged_branch_follows_the_rule_of_other_tips(state: Path) -> None:
    sub = spawn_and_merge(state, 2)  # far below the threshold: a non-head tip is not written
    async with open_runtime(state, config=config()) as rt:
        assert await rt.flush("demo") is BoundaryOutcome.WRITTEN
        assert [r.message_id for r in await rt.pending("demo", tip=sub[-1])] == ["sp1", *sub]
