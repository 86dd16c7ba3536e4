"""``scriptorium run --shard K/N``: one of N runtime processes on one state (issue 20)."""

from __future__ import annotations

from pathlib import Path

import orjson
from click.testing import CliRunner

from memory.cli._cli import main
from tests.memory._runtime import build_session

SESSIONS = [f"s{index}" for index in range(8)]  # s0-s3 hash to shard 0 of 2, s4-s7 to 1


def test_run_once_with_a_shard_writes_its_own_sessions_only(tmp_path: Path) -> None:
    for sid in SESSIONS:
        build_session(tmp_path, sid, ["u1", "a1", "u2", "a2"])
    first = CliRunner().invoke(main, ["run", "--once", "--json", "--shard", "1/2",
                                      "--state", str(tmp_path)])
    assert first.exit_code == 0, first.output
    assert set(orjson.loads(first.stdout)["sessions"]) == set(SESSIONS[4:])
    status = CliRunner().invoke(main, ["status", "--json", "--state", str(tmp_path)])
    owing = {sid for sid, row in orjson.loads(status.stdout)["sessions"].items()
             if row["owed"]}
    assert owing == set(SESSIONS[:4])  # shard 0's, left to its own process
    second = CliRunner().invoke(main, ["run", "--once", "--json", "--shard", "0/2",
                                       "--state", str(tmp_path)])
    assert set(orjson.loads(second.stdout)["sessions"]) == set(SESSIONS[:4])


def test_a_shard_that_is_not_k_of_n_is_a_usage_error(tmp_path: Path) -> None:
    for bad in ("2/2", "1", "x/2"):
        result = CliRunner().invoke(main, ["run", "--once", "--shard", bad,
                                           "--state", str(tmp_path)])
        assert result.exit_code == 2, result.output
        assert "--shard" in result.output and "K/N" in result.output
