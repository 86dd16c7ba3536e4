"""``FindNodes``: which of some ids a session holds, rewound turns included, through the mailbox.

An import checks its whole file against the session before it appends
anything; a rewound turn is still a turn the id names (appending it again
would be a conflict, not a new turn), so it must be found too.
"""

from __future__ import annotations

from pathlib import Path

from actors import open_actor
from store import FindNodes, SessionCore
from store._actor import Append, RewindTo, SessionActor


async def test_find_nodes_answers_held_ids_rewound_ones_too(tmp_path: Path) -> None:
    SessionCore.create(tmp_path, "s1")
    async with open_actor(SessionActor(tmp_path, "s1")) as ref:
        await ref.call(Append({"id": "u1", "role": "user", "content": "hi"}))
        await ref.call(Append({"id": "a1", "role": "assistant", "content": "hello"}))
        await ref.call(Append({"id": "u2", "role": "user", "content": "again"}))
        await ref.call(RewindTo("u2"))
        found = await ref.call(FindNodes(("u2", "a1", "nowhere")))
        assert sorted(found) == ["a1", "u2"]
        assert found["u2"]["content"] == "again" and found["u2"]["rewound"] is True
        assert found["a1"]["predecessor"] == "u1" and found["a1"]["role"] == "assistant"
        assert await ref.call(FindNodes(())) == {}
    assert FindNodes(("u1",)).idempotent
