"""``scriptorium run``'s human log line says only what is known (issue 10, attack item 16)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from memory.cli._cli import main
from tests.conftest import BACKENDS
from tests.memory.cli._states import owing_state


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_written_boundary_logs_no_none_fields(tmp_path: Path, backend: str) -> None:
    """A written boundary has no reason; the line used to end in ``reason=None``."""
    state = owing_state(tmp_path)
    result = CliRunner().invoke(main, ["run", "--once", "--backend", backend,
                                       "--state", str(state)])
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    written = [line for line in lines if line.startswith("scriptorium: boundary ")
               and "outcome=written" in line]
    assert written, lines
    assert not [line for line in lines if "=None" in line], lines
