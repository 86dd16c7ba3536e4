"""The node: one turn of a session DAG, exactly as the reference agent stores it.

SPEC §4 fixes the node's fields *and their order* (``id, created_at, seq,
role, name, input, output, caller, predecessor, reads, metadata``), because
node files must stay byte-compatible with the agent that also writes them.
:class:`Node` is that record; :mod:`store._format` turns it into bytes and
back, :mod:`store._message` into the message dicts the API speaks.

The flag properties (``is_summary``, ``display``, ``rewound``...) name the
metadata conventions the walks and tip rules depend on, so those rules read
as the spec words them instead of as dictionary lookups.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "CONVERSATIONAL_ROLES",
    "NODE_FIELDS",
    "RESERVED_KEYS",
    "ROLES",
    "ROLE_LETTERS",
    "ROOT",
    "Node",
]

NODE_FIELDS = (
    "id", "created_at", "seq", "role", "name", "input", "output",
    "caller", "predecessor", "reads", "metadata",
)
ROLES = ("user", "llm", "code")
CONVERSATIONAL_ROLES = frozenset({"user", "llm"})
ROLE_LETTERS = {"user": "u", "llm": "l", "code": "c"}
# The predecessor of a session's first node; also the id of the optional
# real root node (display="root") the agent's dispatcher writes.
ROOT = "ROOT"
# Keys of the message view (SPEC §4): metadata is spread to the top level of
# a message, so a metadata key with one of these names would be shadowed.
RESERVED_KEYS = frozenset({
    "id", "session_id", "role", "content", "predecessor", "caller",
    "timestamp", "token_model", "function", "extra", "status",
})


@dataclass(frozen=True, slots=True)
class Node:
    """One node file's content. ``metadata`` is owned by the node: never mutate it in place."""

    id: str
    created_at: float
    seq: int
    role: str
    name: str = ""
    input: Any = None
    output: Any = None
    caller: str = ""
    predecessor: str | None = ROOT
    reads: list[Any] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    # -- metadata conventions (SPEC §4) -----------------------------------

    @property
    def display(self) -> object:
        return self.metadata.get("display")

    @property
    def rewound(self) -> bool:
        return bool(self.metadata.get("rewound"))

    @property
    def is_spawn_root(self) -> bool:
        return bool(self.metadata.get("spawn_branch_root"))

    @property
    def is_summary(self) -> bool:
        """A compaction summary: it carries ``covers_ids`` (SPEC §4)."""
        return "covers_ids" in self.metadata

    @property
    def is_attach(self) -> bool:
        return self.metadata.get("function") == "attach"

    @property
    def is_context(self) -> bool:
        return isinstance(self.name, str) and self.name.startswith("context/")

    @property
    def is_conversational(self) -> bool:
        return self.role in CONVERSATIONAL_ROLES

    @property
    def is_top_level(self) -> bool:
        return not self.caller

    def with_metadata(self, metadata: dict[str, Any]) -> Node:
        return replace(self, metadata=metadata)
