"""Recall arguments that ask for nothing are named, not answered with no hit.

``rt.recall(q, k=0)``, ``k=-1`` or ``since=nan`` used to return ``[]``,
which reads as "memory holds nothing on that".
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from memory import RecallArgumentError, open_runtime
from memory.cli._cli import main
from memory.recall._arguments import check_context_arguments, check_recall_arguments


@pytest.mark.parametrize(("arguments", "named"), [
    ({"k": 0}, "k"), ({"k": -1}, "k"), ({"k": 2.0}, "k"), ({"k": True}, "k"),
    ({"since": math.nan}, "since"), ({"until": math.inf}, "until"),
    ({"since": "2023-05-01"}, "since"), ({"since": 10.0, "until": 5.0}, "until"),
])
def test_a_recall_argument_that_asks_for_nothing_is_named(arguments: dict[str, object],
                                                         named: str) -> None:
    given: dict[str, object] = {"k": 8, "since": None, "until": None, **arguments}
    with pytest.raises(RecallArgumentError) as caught:
        check_recall_arguments(given["k"], given["since"], given["until"])
    assert caught.value.argument == named and isinstance(caught.value, ValueError)
    assert str(caught.value).startswith(f"{named}=")


@pytest.mark.parametrize(("budget", "as_of", "named"), [
    (0, None, "budget_tokens"), (-3, None, "budget_tokens"), (500, math.nan, "as_of"),
])
def test_a_context_argument_that_asks_for_nothing_is_named(budget: object, as_of: object,
                                                          named: str) -> None:
    with pytest.raises(RecallArgumentError) as caught:
        check_context_arguments(budget, as_of)
    assert caught.value.argument == named


def test_usable_arguments_pass() -> None:
    check_recall_arguments(1, 0, datetime(2023, 5, 1, tzinfo=UTC))
    check_recall_arguments(8, None, None)
    check_context_arguments(1, 1_700_000_000.0)


async def test_the_runtime_raises_before_searching(tmp_path: Path) -> None:
    async with open_runtime(tmp_path) as rt:
        for call in (rt.recall("tea", k=0), rt.recall("tea", k=-1),
                     rt.recall("tea", since=math.nan), rt.context("tea", budget_tokens=0)):
            with pytest.raises(RecallArgumentError):
                await call


def test_the_cli_refuses_a_zero_budget(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    result = CliRunner().invoke(main, ["memory", "context", "tea", "--budget", "0",
                                       "--state", str(tmp_path)])
    assert result.exit_code == 2 and "--budget" in result.output
