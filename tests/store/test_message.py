"""The message view: role mapping, metadata spread, reserved keys, unknown fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from store._errors import InvalidNodeError, ReservedMetadataKeyError
from store._format import decode_node
from store._message import message_to_node, node_to_message
from store._node import RESERVED_KEYS
from tests.store.conftest import DEMO_HISTORY


def _fixture(name: str) -> Path:
    return next(DEMO_HISTORY.glob(f"*-{name}.json"))


def test_fixture_node_as_a_message() -> None:
    node = decode_node(_fixture("a1").read_bytes(), "a1")
    message = node_to_message(node, "demo")
    assert message["role"] == "assistant"
    assert message["content"] == "Noted: tea."
    assert message["timestamp"] == 1755000002.0
    assert message["predecessor"] == "u1" and message["caller"] == ""
    assert message["session_id"] == "demo"
    # every metadata key spread to the top level
    for key, value in node.metadata.items():
        assert message[key] == value
    assert message["memory_written_scriptorium"] == "w-4f21c8e0"


@pytest.mark.parametrize(("role", "node_role"),
                         [("user", "user"), ("assistant", "llm"), ("tool", "code")])
def test_roles_map_both_ways(role: str, node_role: str) -> None:
    node = message_to_node({"role": role, "content": "x"}, "s", node_id="n", seq=0, now=1.0)
    assert node.role == node_role
    assert node_to_message(node, "s")["role"] == role


def test_unknown_fields_go_to_metadata_and_known_ones_to_fields() -> None:
    node = message_to_node(
        {"role": "assistant", "content": "hi", "timestamp": 7.5, "predecessor": "u1",
         "token_model": "gpt", "mood": "calm", "extra": {"x": 1, "mood": "ignored"},
         "status": "done", "session_id": "other"},
        "s", node_id="a1", seq=4, now=99.0,
    )
    assert (node.output, node.created_at, node.predecessor, node.name) == ("hi", 7.5, "u1", "gpt")
    assert node.metadata == {"mood": "calm", "x": 1}
    message = node_to_message(node, "s")
    assert message["mood"] == "calm" and message["token_model"] == "gpt"


def test_missing_timestamp_and_predecessor_take_the_defaults() -> None:
    node = message_to_node({"content": "x"}, "s", node_id="n", seq=0, now=3.0,
                           default_predecessor="head1")
    assert node.created_at == 3.0 and node.predecessor == "head1" and node.role == "user"


@pytest.mark.parametrize("key", sorted(RESERVED_KEYS - {"extra", "status", "session_id",
                                                        "token_model", "function"}))
def test_reserved_keys_cannot_arrive_through_extra(key: str) -> None:
    with pytest.raises(ReservedMetadataKeyError):
        message_to_node({"content": "x", "extra": {key: 1}}, "s", node_id="n", seq=0, now=0.0)


def test_bad_roles_and_types_are_typed_errors() -> None:
    with pytest.raises(InvalidNodeError):
        message_to_node({"role": "system"}, "s", node_id="n", seq=0, now=0.0)
    with pytest.raises(InvalidNodeError):
        message_to_node({"timestamp": "yesterday"}, "s", node_id="n", seq=0, now=0.0)


def test_an_appended_message_never_carries_a_marker_into_the_node() -> None:
    """Markers come only from the ledger's merge (SPEC §6.4): top level and ``extra`` alike."""
    node = message_to_node(
        {"content": "x", "memory_written_scriptorium": "w-4f21c8e0",
         "memory_written_openprogram": "w-1", "mood": "calm",
         "extra": {"memory_written_other": "w-2", "x": 1}},
        "s", node_id="n", seq=0, now=1.0,
    )
    assert node.metadata == {"mood": "calm", "x": 1}


def test_function_is_a_code_node_name_and_metadata_on_other_nodes() -> None:
    """An llm attach row keeps ``function`` (SPEC §4); on a code node it is the name."""
    row = message_to_node({"role": "assistant", "content": "x", "function": "attach"},
                          "s", node_id="at", seq=1, now=0.0)
    assert row.is_attach and row.name == "" and node_to_message(row, "s")["function"] == "attach"
    tool = message_to_node({"role": "tool", "content": "x", "function": "grep"},
                           "s", node_id="c1", seq=2, now=0.0)
    assert tool.name == "grep" and "function" not in tool.metadata
    with pytest.raises(ReservedMetadataKeyError):
        message_to_node({"role": "tool", "content": "x", "extra": {"function": "attach"}},
                        "s", node_id="c2", seq=3, now=0.0)
