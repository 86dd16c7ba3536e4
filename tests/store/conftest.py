"""Fixtures of the store tests: a private copy of the reference agent's state directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixture import FIXTURE, copy_fixture

DEMO_HISTORY = FIXTURE / "sessions" / "demo" / "history"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A writable copy of the fixture state directory (the original is read-only)."""
    return copy_fixture(tmp_path / "state")
