"""Fixtures of the store tests: a private copy of the reference agent's state directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "openprogram-sample"
if not FIXTURE.is_dir():  # worktrees live next to shared/ under /work
    FIXTURE = Path("/work/shared/fixtures/openprogram-sample")
DEMO_HISTORY = FIXTURE / "sessions" / "demo" / "history"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A writable copy of the fixture state directory (the original is read-only)."""
    target = tmp_path / "state"
    shutil.copytree(FIXTURE, target)
    return target
