"""The runtime consolidates by itself when runtime.json's counters say so (issue 23), on virtual time."""

from __future__ import annotations

import datetime as dt
import shutil
import time
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from actors import ActorRef
from memory.consolidation import ConsolidationPolicy, due_scope, prepare_pass, read_history
from memory.runtime import ConsolidationPass
from memory.runtime import _consolidation as consolidation_module
from memory.runtime._consolidation import CheckConsolidation
from memory.runtime._runtime import open_runtime
from memory.workspace._edits import TopicEdit
from memory.workspace._runtime_state import RuntimeState, read_runtime_state, write_runtime_state
from memory.workspace._transaction import Transactions
from memory.writers import Event
from memory.writers.model import ModelSettings, ModelWriter
from store import DurableFiles
from supervisors import get_child
from tests.fixture import copy_fixture
from tests.memory._runtime import EPOCH, HANG, virtual_config
from tests.model_server import ScriptedModel

DAY = 86_400.0
ARCHIVE = {"openprogram/demo/u1": True, "openprogram/demo/a2": True}


def _iso(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat()


@pytest.mark.parametrize(("state", "now", "scope"), [
    (RuntimeState(local_batches=5), EPOCH, "local"),
    (RuntimeState(local_tokens=40_000), EPOCH, "local"),
    (RuntimeState(local_batches=4, local_tokens=39_999), EPOCH, None),
    (RuntimeState(write_commits_since_global=1), EPOCH, "global"),  # never run yet
    (RuntimeState(write_commits_since_global=1, last_global_at=_iso(EPOCH - DAY + 1)), EPOCH, None),
    (RuntimeState(write_commits_since_global=1, last_global_at=_iso(EPOCH - DAY)), EPOCH, "global"),
    (RuntimeState(last_global_at=_iso(EPOCH - 9 * DAY), local_batches=1), EPOCH, None),  # nothing new
    (RuntimeState(local_batches=5, write_commits_since_global=3,
                  last_global_at=_iso(EPOCH - 2 * DAY)), EPOCH, "global"),  # global covers local
])
def test_which_pass_is_due(state: RuntimeState, now: float, scope: str | None) -> None:
    assert due_scope(state, ConsolidationPolicy(), now) == scope
    assert due_scope(state, ConsolidationPolicy(enabled=False), now) is None


def _state(tmp_path: Path, counters: RuntimeState) -> Path:
    """The fixture's memory with one fact told twice, runtime.json holding ``counters``, and
    no session (nothing the runtime would write, so only the test moves the counters)."""
    state = copy_fixture(tmp_path / "state")
    shutil.rmtree(state / "sessions" / "demo")
    memory = state / "memory"
    tx = Transactions(str(memory), archived=ARCHIVE.get)
    tx.commit([TopicEdit(f"topics/{name}.md", f"# {name}\n\nThe cat is called Tom.[^e1]\n\n"
                         f"[^e1]: Time: `2025-05-01`; Sources: {source}\n")
               for name, source in [("a", "openprogram/demo/u1"), ("b", "openprogram/demo/a2")]],
              base_revision=tx.revision(), batch_sources=set(ARCHIVE))
    order = read_runtime_state(str(memory)).creation_order
    write_runtime_state(str(memory), RuntimeState(
        order, counters.write_commits_since_global, counters.local_batches, counters.local_tokens,
        counters.last_global_at), DurableFiles())
    return state


@pytest.mark.virtual_time(wait_for_threads=True)
@pytest.mark.parametrize("counters", [RuntimeState(local_batches=5),
                                      RuntimeState(local_tokens=40_000)],
                         ids=["5 batches", "40,000 tokens"])
async def test_a_local_pass_runs_at_the_next_check(tmp_path: Path, counters: RuntimeState) -> None:
    state = _state(tmp_path, counters)
    events: list[Event] = []
    async with open_runtime(state, config=virtual_config(on_event=events.append)):
        await anyio.sleep(59)
        assert read_history(str(state / "memory")) == []
        await anyio.sleep(2)  # the first check, at 60 s
    (record,) = read_history(str(state / "memory"))
    assert record["scope"] == "local" and [a["kind"] for a in record["actions"]] == ["merge", "compact"]
    after = read_runtime_state(str(state / "memory"))
    assert (after.local_batches, after.local_tokens) == (0, 0)
    assert [e.outcome for e in events if isinstance(e, ConsolidationPass)] == ["done"]
    assert not (state / "memory/topics/b.md").exists()


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_below_the_thresholds_nothing_runs(tmp_path: Path) -> None:
    state = _state(tmp_path, RuntimeState(local_batches=4, local_tokens=39_999))
    async with open_runtime(state, config=virtual_config()):
        await anyio.sleep(DAY)
    assert read_history(str(state / "memory")) == []


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_the_global_pass_runs_once_a_day_when_something_was_written(tmp_path: Path) -> None:
    # the last global pass ran an hour before the runtime starts (virtual wall time EPOCH)
    state = _state(tmp_path, RuntimeState(write_commits_since_global=2,
                                          last_global_at=_iso(EPOCH - 3600)))
    events: list[Event] = []
    async with open_runtime(state, config=virtual_config(on_event=events.append)):
        await anyio.sleep(DAY - 3600 - 61)
        assert read_history(str(state / "memory")) == []
        await anyio.sleep(120)
        (record,) = read_history(str(state / "memory"))
        assert record["scope"] == "global"
        after = read_runtime_state(str(state / "memory"))
        assert after.write_commits_since_global == 0
        ran_at = dt.datetime.fromisoformat(after.last_global_at or "").timestamp()
        assert EPOCH + DAY - 3600 <= ran_at <= EPOCH + DAY - 3600 + 60
        await anyio.sleep(2 * DAY)  # nothing written since: no other pass
    assert len(read_history(str(state / "memory"))) == 1
    # a second pass with nothing to merge would write no record: the events say none ran
    assert [(e.scope, e.outcome) for e in events if isinstance(e, ConsolidationPass)] == [
        ("global", "done")]


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_the_triggers_can_be_turned_off(tmp_path: Path) -> None:
    state = _state(tmp_path, RuntimeState(local_batches=50, write_commits_since_global=9))
    config = virtual_config(consolidation=ConsolidationPolicy(enabled=False))
    async with open_runtime(state, config=config):
        await anyio.sleep(2 * DAY)
    assert read_history(str(state / "memory")) == []


@pytest.mark.parametrize(("behaviour", "outcome", "passes"), [
    ("consolidate", "done", 1), ("consolidate_drop", "refused", 0)])
async def test_with_a_model_writer_the_model_proposes_the_runtimes_pass(
    tmp_path: Path, behaviour: str, outcome: str, passes: int,
) -> None:
    state = _state(tmp_path, RuntimeState(local_batches=5))
    before = sorted(p.read_bytes() for p in (state / "memory/topics").rglob("*.md"))
    events: list[Event] = []
    config = virtual_config(on_event=events.append, clock=time.time,
                            consolidation=ConsolidationPolicy(check_interval=HANG, model=True))
    with ScriptedModel(default=behaviour).running() as server:
        writer = ModelWriter(ModelSettings(base_url=server.base_url, model="scripted-1",
                                           total_timeout=10.0), env={})
        async with open_runtime(state, writer=writer, config=config) as rt:
            assert rt.root is not None
            job = cast(ActorRef[CheckConsolidation], await get_child(rt.root, "consolidation"))
            assert await job.call(CheckConsolidation()) == outcome
        await writer.aclose()
    assert len(read_history(str(state / "memory"))) == passes
    reported = [e for e in events if isinstance(e, ConsolidationPass)]
    assert [e.outcome for e in reported] == [outcome]
    if outcome == "refused":
        assert "would no longer be cited" in reported[0].problems[0]
        assert sorted(p.read_bytes() for p in (state / "memory/topics").rglob("*.md")) == before


async def test_a_write_landing_while_the_pass_is_planned_wins_and_the_pass_yields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = _state(tmp_path, RuntimeState(local_batches=5))
    memory = str(state / "memory")
    planned = prepare_pass
    landed: list[str] = []

    def write_meanwhile(*args: Any, **kwargs: Any) -> Any:
        prepared = planned(*args, **kwargs)
        if not landed:  # another runtime's commit, between the snapshot and the pass's commit
            tx = Transactions(memory, archived=ARCHIVE.get)
            tx.commit([TopicEdit("topics/c.md", "# c\n\nThe dog is called Rex.[^e1]\n\n"
                                 "[^e1]: Time: `2025-06-01`; Sources: openprogram/demo/u1\n")],
                      base_revision=tx.revision(), batch_sources=set(ARCHIVE))
            landed.append("topics/c.md")
        return prepared

    monkeypatch.setattr(consolidation_module, "prepare_pass", write_meanwhile)
    config = virtual_config(clock=time.time, consolidation=ConsolidationPolicy(check_interval=HANG))
    async with open_runtime(state, config=config) as rt:
        assert rt.root is not None
        job = cast(ActorRef[CheckConsolidation], await get_child(rt.root, "consolidation"))
        assert await job.call(CheckConsolidation()) == "yielded"
        assert read_history(memory) == [] and (state / "memory/topics/c.md").exists()
        assert await job.call(CheckConsolidation()) == "done"  # planned again, on the write
    assert len(read_history(memory)) == 1
