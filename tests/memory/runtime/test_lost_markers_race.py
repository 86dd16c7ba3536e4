"""The real race: another process merges node metadata unlocked while the runtime marks.

The second process is the reference agent's merge, reduced to its shape:
read a node file, wait a moment, write back what it read plus a key of its
own (``json.dumps`` and a rename, no lock). It works on the newest node
files, the ones the runtime is about to mark, so markers are lost. The
runtime in the next start (its sessions' activation) sets every lost one
again, and a session boundary marks a dropped tail without writing twice.

The second process is ``tests/memory/runtime/_unlocked_agent.py``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio

from memory.ledger._ledger import WritePolicy
from memory.maintenance._audit import audit, read_audit_inputs
from memory.runtime._runtime import RuntimeConfig, open_runtime
from memory.runtime._session_actor import BoundaryOutcome
from tests.memory.runtime.test_lost_markers_runtime import markers

AGENT = str(Path(__file__).with_name("_unlocked_agent.py"))
ROUNDS = 30  # two turns and one flush each
SENTENCES = [
    "I prefer green tea in the morning.",
    "We decided to ship the release on Friday.",
    "My sister is named Alice.",
    "The office is in Berlin.",
]


def config() -> RuntimeConfig:
    return RuntimeConfig(policy=WritePolicy(threshold=8000), writer_workers=2,
                         track_deliveries=True)


def audit_of(state: Path, workspace: str) -> dict[str, Any]:
    return audit(read_audit_inputs(str(state), workspace))


async def test_markers_lost_to_an_unlocked_merge_are_all_set_again(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(title="race")
        workspace = rt.workspace_id
        agent = await anyio.open_process(
            [sys.executable, AGENT, str(tmp_path / "sessions" / sid / "history"), "0.003"],
            stdout=subprocess.PIPE)
        merged = b""
        try:
            previous = "ROOT"
            for round_number in range(ROUNDS):
                for role in ("user", "assistant"):
                    node = f"n{round_number}{role[0]}"
                    text = f"{SENTENCES[(round_number + len(role)) % 4]} Round {round_number}."
                    await rt.sessions.append(sid, {"id": node, "role": role, "content": text,
                                                   "predecessor": previous})
                    previous = node
                await rt.flush(sid)
                await rt.drain()
        finally:
            agent.send_signal(signal.SIGTERM)
            assert agent.stdout is not None
            with anyio.fail_after(30):
                async for chunk in agent.stdout:
                    merged += chunk
                await agent.wait()
    assert int(merged) > 0
    before = await anyio.to_thread.run_sync(audit_of, tmp_path, workspace)
    lost = {item["node"] for item in before["lost_markers"]}
    assert lost, "the race lost no marker this time; the test proves nothing"
    async with open_runtime(tmp_path, config=config()) as rt:
        await rt.pending(sid)
        await rt.pending(sid)  # behind the activation's repair
        repaired_at_start = {node for node, marker in markers(tmp_path, sid).items()
                             if node in lost and marker == workspace}
        # A marker dropped on the newest batch left an owed tail: delivered once more.
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        redelivered = {node for (_, node) in rt.deliveries}
    assert repaired_at_start == lost
    assert not redelivered & lost  # a lost marker is set, never written again
    after = await anyio.to_thread.run_sync(audit_of, tmp_path, workspace)
    assert after["ok"], after
    assert set(markers(tmp_path, sid).values()) == {workspace}
