"""The reference agent's sample state, seen the way memory sees it (read-only)."""

from __future__ import annotations

from typing import Any

from store import node_to_message
from store.lowlevel import decode_node
from tests.fixture import FIXTURE

__all__ = ["DEMO_ARCHIVE", "FIXTURE", "message"]

DEMO_ARCHIVE = FIXTURE / "memory" / "sources" / "openprogram" / "_v2" / "demo.md"


def message(node_id: str) -> dict[str, Any]:
    """One fixture node in the SPEC §4 message view (the store's own conversion)."""
    [path] = (FIXTURE / "sessions" / "demo" / "history").glob(f"*-{node_id}.json")
    return node_to_message(decode_node(path.read_bytes(), path.name), "demo")
