"""The state directories the command-line tests start from, built with the store alone."""

from __future__ import annotations

from pathlib import Path

from store import SessionCore

__all__ = ["FACTS", "owing_state"]

FACTS = ["I prefer green tea.", "My sister is named Alice.", "The office is in Berlin."]


def owing_state(tmp_path: Path, sid: str = "demo") -> Path:
    """A state whose session owes six turns (three facts and three replies)."""
    state = tmp_path / "state"
    core = SessionCore.create(state, sid, title=sid)
    for fact in FACTS:
        core.append({"role": "user", "content": fact})
        core.append({"role": "assistant", "content": "Noted."})
    core.close()  # checkpoint: the journal would otherwise replay over the hand edits
    return state
