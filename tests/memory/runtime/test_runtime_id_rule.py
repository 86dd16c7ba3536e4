"""The id rule: an id the store accepts is one memory can write, for every character class.

Memory cites a turn by ``openprogram/<sid>/<node-id>`` in archive comments,
footnote source lists and archive links. Ids those grammars cannot carry are
refused where they enter (create, append); ids the reference agent already
wrote on disk are reported (their batch is quarantined with a clear reason),
never retried forever.
"""

from __future__ import annotations

import os
import shutil
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory import open_runtime
from memory._errors import TopicError, UnframeableRecordError
from memory.ledger._records import SourceRecord
from memory.maintenance import audit, read_audit_inputs
from memory.runtime._session_state import BoundaryOutcome
from memory.workspace._archive import V2_MARKER, parse_archive, render_frame
from memory.workspace._topic_ids import handle_key, is_source_handle, source_key, source_link_target
from memory.workspace._topics import parse_topic
from store import SessionCore
from store._errors import UnsafeIdError
from store._ids import citable_id_problem, is_safe_id, validate_new_id
from tests.fixture import copy_fixture

# One representative (or every member) of each character class.
ASCII_PRINTABLE = [chr(c) for c in range(0x21, 0x7F)]
UNICODE = {
    "space": " ", "nbsp (Zs)": "\u00a0", "ideographic space (Zs)": "\u3000",
    "em space (Zs)": "\u2003", "zero-width space (Cf)": "\u200b", "bom (Cf)": "\ufeff",
    "rtl override (Cf)": "\u202e", "private use (Co)": "\ue000", "unassigned (Cn)": "\u0378",
    "combining acute (Mn)": "\u0301", "latin é (Ll)": "é", "cjk (Lo)": "茶",
    "emoji (So)": "\U0001f600", "fullwidth hash (Po)": "\uff03", "fullwidth paren (Ps)": "\uff08",
    "math lt (Sm)": "\u2264", "arabic digit (Nd)": "\u0663", "tab": "\t", "line sep (Zl)": "\u2028",
}
CLASSES = ASCII_PRINTABLE + list(UNICODE.values())
# What the handle, archive comment and link grammars cannot carry.
REFUSED = {" ", "#", "(", ")", "[", "]", "<", ">", ",", "\u00a0", "\u3000", "\u2003", "\u200b",
           "\ufeff", "\u202e", "\ue000", "\u0378", "\t", "\u2028"}
PATH_UNSAFE = {"/", "\\", "\t", "\u2028"}  # refused by the path rule already


def _accepts(value: str) -> bool:
    try:
        validate_new_id(value, "session id")
    except UnsafeIdError:
        return False
    return True


def carried(sid: str, nid: str) -> bool:
    """Every memory grammar that holds a source id carries ``openprogram/<sid>/<nid>``."""
    handle = f"openprogram/{sid}/{nid}"
    if not is_source_handle(handle):
        return False
    record = SourceRecord(sid, nid, "user", "tea", 1.0, "user")
    try:
        frame = render_frame(record)
    except UnframeableRecordError:
        return False
    scan = parse_archive(f"{V2_MARKER}\n\n{frame}".encode(), sid)
    if not scan.complete or [f.source_id for f in scan.frames] != [handle]:
        return False
    target = source_link_target("topics/people/owner.md", handle)
    text = (f"# Owner\n\nTea.[^e-0123456789] ^0123abcd\n\n"
            f"[^e-0123456789]: Time: `undated`; Sources: [tea]({target})\n")
    try:
        topic = parse_topic(text, "topics/people/owner.md")
    except TopicError:
        return False
    cited = [link.target for note in topic.footnotes.values() for link in note.sources]
    return cited == [target] and source_key("topics/people/owner.md", target) == handle_key(handle)


@pytest.mark.parametrize("ch", CLASSES, ids=lambda c: f"U+{ord(c):04X}")
def test_every_character_class_is_refused_exactly_when_memory_cannot_carry_it(ch: str) -> None:
    value = f"s{ch}x"
    assert is_safe_id(value) == (ch not in PATH_UNSAFE)
    assert _accepts(value) == (ch not in REFUSED | PATH_UNSAFE), unicodedata.name(ch, repr(ch))
    if ch in PATH_UNSAFE:
        return
    assert carried(value, "n1") == carried("s1", value) == (ch not in REFUSED)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(st.characters(), min_size=1, max_size=10))
def test_the_rule_is_exactly_what_the_grammars_carry(value: str) -> None:
    if not is_safe_id(value):
        assert not _accepts(value)
        return
    assert _accepts(value) == carried(value, "n1") == carried("s1", value)
    if not _accepts(value):
        assert citable_id_problem(value) is not None


async def test_every_accepted_class_is_written_end_to_end(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with open_runtime(state) as rt:
        written: list[str] = []
        for ch in CLASSES:
            sid, nid = f"s{ch}x", f"n{ch}y"
            if ch in PATH_UNSAFE:
                continue
            if ch in REFUSED:
                with pytest.raises(UnsafeIdError) as caught:
                    await rt.sessions.create(session_id=sid)
                assert caught.value.value == sid and repr(sid) in str(caught.value)
                assert not os.path.exists(state / "sessions" / sid)
                continue
            await rt.sessions.create(session_id=sid)
            first = await rt.sessions.append(sid, {"id": nid, "role": "user",
                                                   "content": f"I prefer tea {ord(ch)}."})
            await rt.sessions.append(sid, {"role": "assistant", "content": "Noted.",
                                           "predecessor": first["id"]})
            written.append(sid)
        for sid in written:
            assert await rt.flush(sid) is BoundaryOutcome.WRITTEN, sid
            assert await rt.pending(sid) == []
        workspace = rt.workspace_id
    report = audit(read_audit_inputs(str(state), workspace))
    assert report["ok"], report


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.text(st.characters(), min_size=1, max_size=8).filter(is_safe_id))
async def test_any_id_accepted_at_entry_is_written(tmp_path: Path, value: str) -> None:
    state = tmp_path / "state"
    shutil.rmtree(state, ignore_errors=True)
    async with open_runtime(state) as rt:
        if not _accepts(value):
            with pytest.raises(UnsafeIdError):
                await rt.sessions.create(session_id=value)
            sid = await rt.sessions.create()
            with pytest.raises(UnsafeIdError):
                await rt.sessions.append(sid, {"id": value, "role": "user", "content": "tea"})
            assert await rt.sessions.get_branch(sid) == []
            return
        await rt.sessions.create(session_id=value)
        await rt.sessions.append(value, {"id": value, "role": "user", "content": "I like tea."})
        assert await rt.flush(value) is BoundaryOutcome.WRITTEN
        assert await rt.pending(value) == []
        workspace = rt.workspace_id
    assert audit(read_audit_inputs(str(state), workspace))["ok"]


def test_appending_to_an_uncitable_session_on_disk_is_refused(tmp_path: Path) -> None:
    state = copy_fixture(tmp_path / "state")
    os.rename(state / "sessions" / "demo", state / "sessions" / "my chat")
    core = SessionCore.open(state, "my chat")  # still readable
    assert [m["id"] for m in core.get_branch("a2b")] == ["u1", "a1", "a2b"]
    before = sorted(os.listdir(state / "sessions" / "my chat" / "history"))
    with pytest.raises(UnsafeIdError, match="my chat"):
        core.append({"role": "user", "content": "more"})
    assert sorted(os.listdir(state / "sessions" / "my chat" / "history")) == before


async def test_uncitable_ids_already_on_disk_are_quarantined_with_a_reason(tmp_path: Path) -> None:
    """Sessions the reference agent wrote under such ids: a clear, terminal outcome, no crash."""
    state = tmp_path / "state"
    async with open_runtime(state) as rt:
        for sid in ("good", "bad-node"):
            await rt.sessions.create(session_id=sid)
            await rt.sessions.append(sid, {"id": "u1", "role": "user", "content": "I like tea."})
    # The reference agent's own writes: a session and a node under uncitable ids.
    shutil.copytree(state / "sessions" / "good", state / "sessions" / "my chat")
    history = state / "sessions" / "bad-node" / "history"
    (name,) = os.listdir(history)
    node = (history / name).read_text().replace('"u1"', '"u 1"')
    (history / name).unlink()
    (history / name.replace("u1", "u 1")).write_text(node)
    meta = state / "sessions" / "bad-node" / "meta.json"
    meta.write_text(meta.read_text().replace('"u1"', '"u 1"'))
    async with open_runtime(state) as rt:
        for sid, needle in (("my chat", "session id 'my chat'"),
                            ("bad-node", "node 'u 1' of session 'bad-node'")):
            ref = rt.session_ref(sid)
            assert await rt.flush(sid) is BoundaryOutcome.QUARANTINED
            (entry,) = [e for e in rt.quarantined if e.session == sid]
            assert needle in entry.error and "cannot be cited" in entry.error
            assert await rt.flush(sid) is BoundaryOutcome.QUARANTINED  # not retried hot
            assert ref is rt.session_ref(sid)
        assert await rt.flush("good") is BoundaryOutcome.WRITTEN
        assert len(rt.quarantined) == 2
