"""pi's format 1 (no ids): entries chained in order, the compaction's first kept entry by index."""

from __future__ import annotations

import json
from typing import Any

from memory.importers import plan_pi, read_lines


def _message(role: str, text: str, ms: int) -> dict[str, Any]:
    return {"type": "message", "message": {"role": role, "content": text, "timestamp": ms}}


def test_format_1_entries_are_chained_and_compaction_covers_up_to_the_kept_index() -> None:
    lines = [
        {"type": "session", "id": "old", "timestamp": "2025-01-01T00:00:00Z", "provider": "x"},
        _message("user", "Hello.", 1_735_689_600_000),
        _message("assistant", "Hi.", 1_735_689_601_000),
        _message("toolResult", "ok", 1_735_689_602_000),
        _message("user", "Again.", 1_735_689_603_000),
        {"type": "compaction", "summary": "Greetings.", "firstKeptEntryIndex": 3},
        _message("assistant", "Yes.", 1_735_689_604_000),
    ]
    log = read_lines("".join(json.dumps(line) + "\n" for line in lines).encode(), "p.jsonl")
    plan = plan_pi(log)
    assert plan.session == "pi-old"
    turns = [(t.id, t.predecessor, t.created_at) for t in plan.turns if not t.is_summary]
    assert turns == [("L2", "ROOT", 1_735_689_600.0), ("L3", "L2", 1_735_689_601.0),
                     ("L5", "L3", 1_735_689_603.0), ("L7", "L5", 1_735_689_604.0)]
    summary = next(t for t in plan.turns if t.is_summary)
    assert summary.metadata["covers_ids"] == ["L2", "L3"]  # entry 3 (L5) is the first kept
    assert plan.left_out == 1 and plan.head == "L7"
