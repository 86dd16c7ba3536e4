"""``--lock-timeout`` and ``RuntimeConfig.lock_timeout`` take finite seconds only.

``click.FloatRange(min=0.0)`` let ``nan`` and ``inf`` through, and a lock
wait bounded by either never ends (NaN compares false with everything).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from memory import RuntimeConfig
from memory._errors import SettingsError
from memory.cli._cli import main
from memory.cli._cli_errors import EXIT_USAGE
from tests.fixture import copy_fixture


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return copy_fixture(tmp_path / "state")


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "infinity", "-1", "-0.5", "abc"])
@pytest.mark.parametrize("command", [["memory", "write", "--force"], ["run", "--once"]])
def test_a_non_finite_or_negative_lock_timeout_is_a_one_line_usage_error(
    state: Path, command: list[str], value: str
) -> None:
    before = sorted(p.relative_to(state) for p in state.rglob("*"))
    result = CliRunner().invoke(main, [*command, f"--lock-timeout={value}", "--state", str(state)])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "Traceback" not in result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: --lock-timeout: ") and repr(value) in line
    assert sorted(p.relative_to(state) for p in state.rglob("*")) == before  # nothing started


def test_a_finite_lock_timeout_is_taken(state: Path) -> None:
    result = CliRunner().invoke(main, ["memory", "write", "--force", "--lock-timeout", "0.5",
                                       "--state", str(state)])
    assert result.exit_code in (0, 1), result.output  # ran: written, or a session's own problem
    assert "--lock-timeout" not in result.output


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1.0])
def test_the_embedded_config_refuses_a_non_finite_or_negative_lock_timeout(value: float) -> None:
    with pytest.raises(SettingsError) as raised:
        RuntimeConfig(lock_timeout=value)
    assert raised.value.where == "RuntimeConfig.lock_timeout"
    assert "lock_timeout" in str(raised.value) and repr(value) in str(raised.value)


@pytest.mark.parametrize("value", [None, 0, 0.0, 2.5, 30])
def test_the_embedded_config_takes_none_or_finite_seconds(value: float | None) -> None:
    assert RuntimeConfig(lock_timeout=value).lock_timeout == value
