"""A topic file that is not UTF-8 is treated like one that fails the strict parse.

One bad byte must not fail every batch that touches the topic, forever: the
file is left byte for byte as it is, its edits are refused with an error
naming the file and the byte, writers route around it, and the audit names
the same file and byte instead of blaming a block id.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memory._errors import TopicError
from memory.ledger._ledger import WritePolicy
from memory.maintenance import audit, read_audit_inputs
from memory.runtime._runtime import RuntimeConfig, open_runtime
from memory.runtime._session_state import BoundaryOutcome
from memory.workspace._edits import TopicEdit
from memory.workspace._transaction import Transactions


def config() -> RuntimeConfig:
    return RuntimeConfig(policy=WritePolicy(threshold=8000), writer_workers=2)


async def write(state: Path, facts: list[str]) -> BoundaryOutcome:
    async with open_runtime(state, config=config()) as rt:
        if not (state / "sessions" / "s").exists():
            await rt.sessions.create(title="s", session_id="s")
        for fact in facts:
            await rt.sessions.append("s", {"role": "user", "content": fact})
        return await rt.flush("s")


def break_byte(path: Path, after: bytes) -> int:
    """Replace the byte right after ``after`` with 0xff; returns its offset."""
    raw = path.read_bytes()
    offset = raw.index(after) + len(after)
    path.write_bytes(raw[:offset] + b"\xff" + raw[offset + 1:])
    return offset


def test_the_decode_error_names_the_file_line_and_byte() -> None:
    from memory.workspace._topics import decode_topic

    with pytest.raises(TopicError) as caught:
        decode_topic(b"# T\n\nab\xffc\n", "topics/t.md")
    assert caught.value.line == 3
    assert str(caught.value).startswith("topics/t.md:3: not UTF-8: byte 7 (0xff)")


async def test_a_topic_with_a_bad_byte_is_routed_around_and_named(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert await write(state, ["I prefer green tea."]) is BoundaryOutcome.WRITTEN
    topic = state / "memory" / "topics" / "preferences.md"
    offset = break_byte(topic, b"I prefer green")
    broken = topic.read_bytes()

    # A fact of the same topic and one of another topic: both reach memory.
    outcome = await write(state, ["I prefer black coffee.", "My sister is named Alice."])

    assert outcome is BoundaryOutcome.WRITTEN
    assert topic.read_bytes() == broken  # untouched
    texts = {p.name: p.read_text() for p in (state / "memory" / "topics").glob("*.md")
             if p != topic}
    assert any("black coffee" in t for t in texts.values())  # in another shard of the subject
    assert any("Alice" in t for t in texts.values())
    workspace = (state / "memory" / ".scriptorium" / "workspace-id").read_text().strip()
    report = audit(read_audit_inputs(str(state), workspace))
    assert not report["ok"]
    [entry] = report["unreadable_topics"]
    assert entry["topic"] == "topics/preferences.md"
    assert f"byte {offset} (0xff)" in entry["error"]
    # The citations of the broken file are not read, so nothing blames a block id.
    assert report["unresolved_citations"] == []


def test_an_edit_of_the_bad_file_is_refused_and_others_commit(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    (memory / "topics").mkdir(parents=True)
    (memory / "topics" / "bad.md").write_bytes(b"# Bad\n\nText \xfe here. ^00000001\n")
    transactions = Transactions(str(memory), archived=lambda handle: True)
    base = transactions.revision()
    snapshot = transactions.snapshot()
    with pytest.raises(TopicError, match=r"topics/bad.md:3: not UTF-8: byte 12"):
        snapshot.read("topics/bad.md")
    result = transactions.commit(
        [
            TopicEdit("topics/bad.md", "# Bad\n\nReplaced.[^e1]\n\n[^e1]: Time: `undated`; "
                      "Sources: openprogram/s/n1\n"),
            TopicEdit("topics/good.md", "# Good\n\nFine.[^e1]\n\n[^e1]: Time: `undated`; "
                      "Sources: openprogram/s/n1\n"),
        ],
        base_revision=base, batch_sources={"openprogram/s/n1"},
    )
    bad, good, commit = result.audit
    assert bad["status"] == "error" and "byte 12" in bad["error"]
    assert good["status"] == "ok" and commit["topic_paths"] == ["topics/good.md"]
    assert (memory / "topics" / "bad.md").read_bytes() == b"# Bad\n\nText \xfe here. ^00000001\n"
