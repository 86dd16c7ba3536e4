"""The state the MCP tests serve: a session whose facts are already written to memory."""

from __future__ import annotations

from pathlib import Path

from memory.runtime import open_runtime
from store import SessionCore

__all__ = ["FACTS", "written_state"]

FACTS = ["I prefer green tea.", "My sister is named Alice.", "The office is in Berlin."]


async def written_state(tmp_path: Path, sid: str = "demo") -> Path:
    """A state whose session ``sid`` holds :data:`FACTS` (each answered), written to topics."""
    state = tmp_path / "state"
    core = SessionCore.create(state, sid, title=sid)
    for fact in FACTS:
        core.append({"role": "user", "content": fact})
        core.append({"role": "assistant", "content": "Noted."})
    core.close()
    async with open_runtime(state) as rt:
        await rt.flush(sid)
    assert list((state / "memory" / "topics").glob("*.md")), "the fixture state has topic files"
    return state
