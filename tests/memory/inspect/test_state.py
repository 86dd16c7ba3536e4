"""What the inspector says of each turn: the ledger's own verdict, with the reason."""

from __future__ import annotations

from pathlib import Path

from memory.inspect._state import read_overview, read_session
from store import SessionCore
from tests.fixture import copy_fixture


def test_each_turn_of_the_sample_state_has_the_ledgers_status(tmp_path: Path) -> None:
    state = copy_fixture(tmp_path / "sample")
    view = read_session(str(state), "demo")
    status = {turn.node.id: turn.status for turn in view.turns}
    assert status == {"u1": "written", "a1": "owed", "u2": "rewound", "a2": "rewound",
                      "a2b": "owed", "sp1": "owed", "summary_cebcf71b21": "stranded"}
    assert view.head == "a1" and set(view.tips) == {"a2", "a2b", "sp1"}  # and the head's walk
    overview = read_overview(str(state), now=2_000_000_000.0)
    [row] = overview.sessions
    assert (overview.total("written"), overview.total("owed"), row.owed_tokens) == (1, 3, 8)
    assert overview.audit is not None and overview.audit["ok"]


def test_a_turn_that_is_no_record_says_which_rule_left_it_out(tmp_path: Path) -> None:
    core = SessionCore.create(tmp_path / "state", "s", title="s")
    core.append({"role": "user", "content": "   "})
    core.append({"role": "assistant", "content": "next", "display": "runtime"})
    core.append({"role": "user", "content": "hi", "speaker_kind": "agent", "speaker_id": "x",
                 "speaker_display": "X", "principal_id": "p", "authority_tier": "mcp_browser",
                 "interaction": "i"})
    core.close()
    reasons = [turn.reason for turn in read_session(str(tmp_path / "state"), "s").turns]
    assert [turn.status for turn in read_session(str(tmp_path / "state"), "s").turns] == [
        "not-a-record"] * 3
    assert reasons[0] == "no text"
    assert "runtime" in reasons[1]
    assert "'mcp_browser' may not append" in reasons[2]
