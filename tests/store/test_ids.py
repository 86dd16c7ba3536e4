"""Ids are checked before any path is built; a hostile one gets a typed error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store._errors import UnsafeIdError
from store._ids import _id_problem, is_safe_id, validate_id, validate_name

HOSTILE = ["", "a/b", "a\\b", "..", "x..y", "a\x00b", "tab\there", "new\nline", ".hidden",
           "x" * 129, "é" * 120, "\x7f", "\u2028", "\ud800"]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_ids_are_refused_with_the_value_and_session(value: str) -> None:
    with pytest.raises(UnsafeIdError) as caught:
        validate_id(value, "node id", "demo")
    assert caught.value.session == "demo"
    assert "demo" in str(caught.value)


def test_non_strings_are_refused() -> None:
    with pytest.raises(UnsafeIdError):
        validate_id(42)


@pytest.mark.parametrize("value", ["u1", "ROOT", "summary_cebcf71b21", "a.b", "茶-1", "x" * 128])
def test_ordinary_ids_pass(value: str) -> None:
    assert validate_id(value) == value


@given(st.text(max_size=140))
def test_a_safe_id_never_escapes_its_directory(value: str) -> None:
    if is_safe_id(value):
        assert "/" not in value and "\\" not in value and ".." not in value
        assert "\x00" not in value and not value.startswith(".")
        assert all(ord(c) >= 0x20 for c in value)


@given(st.one_of(st.text(max_size=140), st.sampled_from(HOSTILE),
                 st.text(alphabet="./\\\x00\x1f\x7f\x9f\u2028\u2029a", max_size=8)))
def test_the_fast_check_and_the_reasons_agree(value: str) -> None:
    # validate_id takes is_safe_id's one regex search first (every append checks
    # several ids); an id it lets through must have no reason to be refused.
    problem = _id_problem(value)
    if problem is None:
        assert validate_id(value) == value
    else:
        assert not is_safe_id(value)
        with pytest.raises(UnsafeIdError):
            validate_id(value)


def test_names_refuse_control_characters_but_allow_slashes() -> None:
    assert validate_name("context/summary") == "context/summary"
    with pytest.raises(UnsafeIdError):
        validate_name("evil\x1b[2J")
