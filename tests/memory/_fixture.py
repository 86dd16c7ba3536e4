"""The reference agent's sample state, seen the way memory sees it (read-only)."""

from __future__ import annotations

import json
from typing import Any

from tests.fixture import FIXTURE

DEMO_ARCHIVE = FIXTURE / "memory" / "sources" / "openprogram" / "_v2" / "demo.md"

_RESERVED = {"id", "role", "content", "timestamp", "predecessor", "caller"}
_ROLES = {"user": "user", "llm": "assistant", "code": "tool"}


def message(node_id: str) -> dict[str, Any]:
    """One fixture node in the SPEC §4 message view (metadata spread to the top level)."""
    [path] = (FIXTURE / "sessions" / "demo" / "history").glob(f"*-{node_id}.json")
    node = json.loads(path.read_text(encoding="utf-8"))
    view: dict[str, Any] = {
        "id": node["id"],
        "role": _ROLES[node["role"]],
        "content": node["output"],
        "timestamp": node["created_at"],
        "predecessor": node["predecessor"],
        "caller": node["caller"],
    }
    for key, value in node["metadata"].items():
        if key not in _RESERVED:
            view[key] = value
    return view
