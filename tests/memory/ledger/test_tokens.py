"""Token counting: a fast estimate by default, tiktoken when it is installed and loads."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from memory.ledger import _tokens
from memory.ledger._tokens import default_counter, estimate_tokens, tiktoken_counter


def test_estimate_is_about_four_bytes_per_token() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a") == 1
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("x" * 4000) == 1000
    assert estimate_tokens("猫" * 4) == 3  # 12 UTF-8 bytes
    assert estimate_tokens("\ud800") == 1  # a lone surrogate is counted, not an error


def test_without_tiktoken_the_estimate_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # import raises ImportError
    assert tiktoken_counter() is None
    assert default_counter() is estimate_tokens


def _fake_tiktoken(fail: bool) -> types.ModuleType:
    module = types.ModuleType("tiktoken")

    class Encoding:
        def encode(self, text: str, **kwargs: Any) -> list[int]:
            return list(range(len(text.split())))

    def get_encoding(name: str) -> Encoding:
        if fail:
            raise OSError(f"cannot download the {name} vocabulary")
        return Encoding()

    module.get_encoding = get_encoding  # type: ignore[attr-defined]
    return module


def test_tiktoken_is_used_when_it_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", _fake_tiktoken(fail=False))
    counter = default_counter()
    assert counter is not estimate_tokens
    assert counter("three small words") == 3


def test_a_vocabulary_that_cannot_load_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", _fake_tiktoken(fail=True))
    assert tiktoken_counter() is None
    assert default_counter() is estimate_tokens


def test_encoding_name_is_cl100k_by_default() -> None:
    assert _tokens.TIKTOKEN_ENCODING == "cl100k_base"
