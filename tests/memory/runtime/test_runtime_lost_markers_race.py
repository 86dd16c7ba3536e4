"""The race with the reference agent: its unlocked merge drops markers the runtime set.

The second process is the reference agent's merge, reduced to its shape:
read a node file, write back what it read plus a key of its own
(``json.dumps`` and a rename, no lock). When the runtime marks between the
agent's read and its write, the marker is lost. The test forces that
interleaving every round (the agent answers each step on its pipe) instead of
hoping a timed window catches it: in each round but the last the agent drops
the marker of a batch's first turn (behind the batch's own marker: lost); in
the last, of the tip (an owed tail). The runtime in the next start (its
sessions' activation) sets every lost marker again, and a session boundary
marks the dropped tail without writing the lost ones twice.

The second process is ``tests/memory/runtime/_unlocked_agent.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

from memory.ledger._ledger import WritePolicy
from memory.maintenance import audit, read_audit_inputs
from memory.runtime._events import EventTally
from memory.runtime._runtime import RuntimeConfig, open_runtime
from memory.runtime._session_state import BoundaryOutcome
from tests.memory._runtime import marker_values, tally

AGENT = str(Path(__file__).with_name("_unlocked_agent.py"))
ROUNDS = 6  # two turns and one flush each
SENTENCES = [
    "I prefer green tea in the morning.",
    "We decided to ship the release on Friday.",
    "My sister is named Alice.",
    "The office is in Berlin.",
]


def config() -> RuntimeConfig:
    return RuntimeConfig(policy=WritePolicy(threshold=8000), writer_workers=2,
                         on_event=EventTally())


def audit_of(state: Path, workspace: str) -> dict[str, Any]:
    return audit(read_audit_inputs(str(state), workspace))


async def test_markers_lost_to_an_unlocked_merge_are_all_set_again(tmp_path: Path) -> None:
    dropped: list[str] = []
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(title="race")
        workspace = rt.workspace_id
        async with await anyio.open_process(
            [sys.executable, AGENT, str(tmp_path / "sessions" / sid / "history")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE) as agent:
            assert agent.stdin is not None and agent.stdout is not None
            replies = BufferedByteReceiveStream(agent.stdout)

            async def tell(command: str) -> None:
                assert agent.stdin is not None
                await agent.stdin.send(f"{command}\n".encode())
                with anyio.fail_after(30):
                    assert await replies.receive_until(b"\n", 100) == b"done"

            previous = "ROOT"
            for round_number in range(ROUNDS):
                turns = [f"n{round_number}u", f"n{round_number}a"]
                for node, role in zip(turns, ("user", "assistant"), strict=True):
                    text = f"{SENTENCES[(round_number + len(role)) % 4]} Round {round_number}."
                    await rt.sessions.append(sid, {"id": node, "role": role, "content": text,
                                                   "predecessor": previous})
                    previous = node
                victim = turns[-1] if round_number == ROUNDS - 1 else turns[0]
                await tell(f"read {victim}")  # the agent holds the node as it was
                assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
                await rt.drain()  # our markers are durable
                await tell("write")  # and the agent writes back what it read
                dropped.append(victim)
            await agent.stdin.aclose()
    assert {node for node, marker in marker_values(tmp_path, sid).items() if marker is None} == set(
        dropped)
    before = await anyio.to_thread.run_sync(audit_of, tmp_path, workspace)
    lost = {item["node"] for item in before["lost_markers"]}
    assert lost == set(dropped[:-1])  # the tip's is owed, not lost
    async with open_runtime(tmp_path, config=config()) as rt:
        await rt.pending(sid)
        await rt.pending(sid)  # behind the activation's repair
        repaired_at_start = {node for node, marker in marker_values(tmp_path, sid).items()
                             if node in lost and marker == workspace}
        # A marker dropped on the newest batch left an owed tail: delivered once more.
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        redelivered = {node for (_, node) in tally(rt).deliveries}
    assert repaired_at_start == lost
    assert not redelivered & lost  # a lost marker is set, never written again
    after = await anyio.to_thread.run_sync(audit_of, tmp_path, workspace)
    assert after["ok"], after
    assert set(marker_values(tmp_path, sid).values()) == {workspace}
