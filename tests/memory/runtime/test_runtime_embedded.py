"""SPEC §8's embedded example, verbatim in spirit: the public names are enough."""

from __future__ import annotations

from pathlib import Path

from memory import open_runtime


async def test_the_spec_8_embedded_example(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, writer=None) as rt:
        sid = await rt.sessions.create(title="embedded")
        msg = await rt.sessions.append(sid, {"role": "user", "content": "I prefer tea.",
                                             "predecessor": "ROOT"})
        reply = await rt.sessions.append(sid, {"role": "assistant", "content": "Noted: tea.",
                                               "predecessor": msg["id"]})
        branch = await rt.sessions.get_branch(sid, tip=None)
        assert [m["id"] for m in branch] == [msg["id"], reply["id"]]
        owed = await rt.pending(sid, tip=None)
        assert [r.message_id for r in owed] == [msg["id"], reply["id"]]
        await rt.flush(sid)
        await rt.drain()
        assert await rt.pending(sid) == []
