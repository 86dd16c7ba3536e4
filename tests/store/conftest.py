"""Fixtures of the store tests: a private copy of the reference agent's state directory.

And the node files a store must refuse, each built from a good fixture node
(the format tests decode them; the session tests find them on disk).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixture import FIXTURE, copy_fixture

DEMO_HISTORY = FIXTURE / "sessions" / "demo" / "history"

GOOD = (DEMO_HISTORY / "0000-u-u1.json").read_bytes()


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


BAD_FILES = {
    "truncated": GOOD[: len(GOOD) // 2],
    "byte_flipped": flip(GOOD, 2),
    "byte_flipped_in_string": flip(GOOD, GOOD.index(b"I prefer")),
    "invalid_utf8": GOOD.replace(b"tea", b"t\xffa"),
    "lone_surrogate": GOOD.replace(b"tea", b"\\ud800"),
    "nan": GOOD.replace(b'"seq": 0', b'"seq": NaN'),
    "wide_int": GOOD.replace(b'"input": null', b'"input": 123456789012345678901234567890'),
    "wide_negative_int": GOOD.replace(b'"input": null', b'"input": -9223372036854775809'),
    "deep_nesting": GOOD.replace(b'"input": null', b'"input": ' + b"[" * 5000 + b"]" * 5000),
    "not_an_object": b"[1, 2]",
    "missing_field": GOOD.replace(b'"reads": [], ', b""),
    "extra_field": GOOD.replace(b'"reads": []', b'"reads": [], "x": 1'),
    "bad_role": GOOD.replace(b'"role": "user"', b'"role": "robot"'),
    "hostile_id": GOOD.replace(b'"id": "u1"', b'"id": "../../etc/passwd"'),
    "empty": b"",
}


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A writable copy of the fixture state directory (the original is read-only)."""
    return copy_fixture(tmp_path / "state")
