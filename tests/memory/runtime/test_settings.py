"""scriptorium.toml's [consolidation] table: the triggers set from the file, or a one-line error."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory._errors import SettingsError
from memory.consolidation import ConsolidationPolicy
from memory.runtime._config import RuntimeConfig, apply_timings
from memory.runtime._settings import parse_settings


def test_the_consolidation_table_sets_the_triggers() -> None:
    timings = parse_settings(b"threshold = 8000\n[consolidation]\nlocal_batches = 2\n"
                             b"global_interval = 3600\nenabled = true\n", "scriptorium.toml")
    assert timings.consolidation == ConsolidationPolicy(local_batches=2, global_interval=3600.0)
    config = apply_timings(RuntimeConfig(), timings)
    assert config.consolidation.local_batches == 2 and config.policy.threshold == 8000
    assert apply_timings(RuntimeConfig(), parse_settings(b"", "x")).consolidation == (
        ConsolidationPolicy())


@pytest.mark.parametrize(("text", "why"), [
    (b"consolidation = 3\n", "must be a table"),
    (b"[consolidation]\nlocal_batches = 0\n", "local_batches must be a positive integer"),
    (b"[consolidation]\ncheck_interval = -1\n", "check_interval must be a positive number"),
    (b"[consolidation]\nenabled = 'no'\n", "enabled must be true or false"),
    (b"[consolidation]\nevery = 1\n", "unknown key"),
])
def test_a_bad_table_names_the_file_and_the_key(text: bytes, why: str, tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=why) as raised:
        parse_settings(text, str(tmp_path / "scriptorium.toml"))
    assert "[consolidation]" in str(raised.value) or "consolidation must" in str(raised.value)
