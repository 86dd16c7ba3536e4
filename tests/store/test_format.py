"""The on-disk format: byte-identical round trips, and typed refusals of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from store._errors import NodeFileError, OversizedContentError, UnencodableValueError
from store._format import (
    MAX_DEPTH,
    check_value,
    decode_meta,
    decode_node,
    encode_meta,
    encode_node,
    node_filename,
    parse_filename,
)
from store._node import Node
from tests.fixture import FIXTURE
from tests.store.conftest import BAD_FILES, DEMO_HISTORY, GOOD

FIXTURE_FILES = sorted(DEMO_HISTORY.glob("*.json"))


def test_the_fixture_has_node_files() -> None:
    assert len(FIXTURE_FILES) == 7


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
def test_every_fixture_node_reencodes_byte_identically(path: Path) -> None:
    data = path.read_bytes()
    node = decode_node(data, path.name)
    assert encode_node(node) == data
    assert node_filename(node) == path.name


def test_meta_reencodes_byte_identically() -> None:
    path = FIXTURE / "sessions" / "demo" / "meta.json"
    data = path.read_bytes()
    assert encode_meta(decode_meta(data, "meta.json")) == data


def test_non_ascii_is_written_raw_like_the_reference_agent() -> None:
    node = Node(id="n1", created_at=1.5, seq=3, role="user", output="茶 ☕ é\n\"q\"")
    data = encode_node(node)
    assert "茶 ☕ é".encode() in data
    assert data == json.dumps(
        {f: getattr(node, f) for f in ("id", "created_at", "seq", "role", "name", "input",
                                       "output", "caller", "predecessor", "reads", "metadata")},
        ensure_ascii=False,
    ).encode()
    assert not data.endswith(b"\n")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(output=json_values, metadata=st.dictionaries(st.text(), json_values, max_size=5),
       created_at=st.floats(min_value=0, max_value=4e9))
def test_any_encodable_node_round_trips_to_the_same_bytes(
    output: object, metadata: dict[str, object], created_at: float
) -> None:
    node = Node(id="x", created_at=created_at, seq=0, role="llm", output=output,
                metadata=metadata)
    check_value(output, "s", "x")
    data = encode_node(node)
    again = decode_node(data, "x.json")
    assert again == node
    assert encode_node(again) == data


def test_filenames_parse() -> None:
    assert parse_filename("0012-l-summary_abc.json") == (12, "l", "summary_abc")
    assert parse_filename(".0012-l-a.json.1234.scriptorium-tmp") is None
    assert parse_filename("index.json") is None


# -- bad input: each a typed error naming the file -----------------------------

@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_node_files_get_a_typed_error_naming_the_file(name: str) -> None:
    with pytest.raises(NodeFileError) as caught:
        decode_node(BAD_FILES[name], f"sessions/demo/history/{name}.json")
    assert f"sessions/demo/history/{name}.json" in str(caught.value)
    assert caught.value.path == f"sessions/demo/history/{name}.json"


def test_a_wide_integer_is_not_silently_read_as_a_float() -> None:
    data = BAD_FILES["wide_int"]
    assert isinstance(orjson.loads(data)["input"], float)  # what we must not trust
    with pytest.raises(NodeFileError, match="beyond 64 bits"):
        decode_node(data, "f.json")


def test_long_digit_runs_inside_strings_are_fine() -> None:
    data = GOOD.replace(b"I prefer tea.", b"call 12345678901234567890123")
    assert decode_node(data, "f.json").output == "call 12345678901234567890123"


def test_oversized_files_are_refused_before_parsing() -> None:
    big = GOOD.replace(b"I prefer tea.", b"x" * 50_000_000)
    with pytest.raises(NodeFileError, match="over the cap"):
        decode_node(big, "big.json", cap=32 * 1024 * 1024)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("\ud800", "surrogate"),
        (float("nan"), "not a JSON number"),
        (float("inf"), "not a JSON number"),
        (2**64, "beyond 64 bits"),
        ({1: "x"}, "not a string"),
        (object(), "is not JSON"),
    ],
)
def test_unencodable_values_are_refused(value: object, problem: str) -> None:
    with pytest.raises(UnencodableValueError, match=problem):
        check_value({"k": [value]}, "s", "n")


def test_nesting_deeper_than_the_cap_is_refused() -> None:
    value: object = []
    for _ in range(MAX_DEPTH + 2):
        value = [value]
    with pytest.raises(UnencodableValueError, match="nesting"):
        check_value(value, "s", "n")


def test_encoding_refuses_oversized_nodes() -> None:
    node = Node(id="n", created_at=0.0, seq=0, role="user", output="x" * 2000)
    with pytest.raises(OversizedContentError):
        encode_node(node, "s", cap=1000)
