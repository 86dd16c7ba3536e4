"""A recall query longer than recall reads is said to be cut, not cut silently.

Recall bounds a query to its first ``MAX_QUERY_CHARS`` characters, so a
100 KB query costs what a short one does; a user who pasted a whole
document was not told that most of it was never searched. ``memory search``
and ``memory context`` now say so on stderr (stdout stays the one document).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from memory.cli._cli import main
from memory.recall import MAX_QUERY_CHARS
from tests.memory.cli._states import owing_state


@pytest.fixture
def state(tmp_path: Path) -> Path:
    state = owing_state(tmp_path)
    result = CliRunner().invoke(main, ["memory", "write", "demo", "--force", "--state",
                                       str(state)])
    assert result.exit_code == 0, result.output
    return state


@pytest.mark.parametrize("command", [["memory", "search"], ["memory", "context"]])
def test_a_query_past_the_bound_is_searched_in_part_and_says_so(
    state: Path, command: list[str],
) -> None:
    huge = "green tea " + "filler " * 15_000  # ~100 KB
    assert len(huge) > 100_000
    result = CliRunner().invoke(main, [*command, huge, "--json", "--state", str(state)])
    assert result.exit_code == 0, result.output
    orjson.loads(result.stdout)  # stdout is still exactly one JSON document
    [warning] = result.stderr.strip().splitlines()
    assert warning == (f"scriptorium: warning: the query is {len(huge):,} characters; only "
                       f"its first {MAX_QUERY_CHARS:,} are searched")
    short = CliRunner().invoke(main, [*command, "green tea", "--state", str(state)])
    assert short.exit_code == 0 and short.stderr == "", short.output
    at_bound = CliRunner().invoke(main, [*command, "t" * MAX_QUERY_CHARS, "--state", str(state)])
    assert at_bound.exit_code == 0 and "warning" not in at_bound.stderr, at_bound.output
