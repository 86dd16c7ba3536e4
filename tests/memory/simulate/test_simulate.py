"""``scriptorium simulate``: a CI-sized run passes the oracle, and the oracle can fail.

The run is real (real threads, real fsyncs, a real outside subprocess) but
small: a dozen agents with every fault switched on and the crash rates
raised so that a process crash and actor crashes do happen. The oracle
tests then plant one fault at a time in a finished run's files and show
the matching invariant turns FAIL, so a PASS is never vacuous.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from click.testing import CliRunner

from memory.cli._cli import main
from memory.ledger._records import MARKER_KEY
from memory.ledger._tokens import default_counter
from memory.simulate import _command as simulate_command
from memory.simulate import _simulate
from memory.simulate._agents import SIM_TURN, Mix
from memory.simulate._command import percentile
from memory.simulate._config import SimulationConfig
from memory.simulate._faults import FAULTS, FaultPlan, FaultyWriter, chance, parse_faults
from memory.simulate._oracle import INVARIANTS, Evidence, Verdict, check_invariants
from memory.simulate._result import SimulationResult
from memory.simulate._simulate import simulate
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot
from memory.writers._extractive import ExtractiveWriter
from memory.writers._writer import Batch
from store import SessionCore, SessionOptions

SMALL = Mix(idle_seconds=0.6)


def small(state: str, **overrides: object) -> SimulationConfig:
    options: dict[str, object] = {
        "state_dir": state, "sessions": 10, "turns": 16, "seed": 7, "mix": SMALL,
        "session_idle": 0.4, "watchdog_poll": 0.4, "writer_timeout": 0.5,
        "outside_sessions": 3, "outside_rounds": 40, "agent_sessions": 3, "agent_rounds": 40,
    }
    options.update(overrides)
    return SimulationConfig(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize("journal", ["session", "shared"])
async def test_a_small_run_with_every_fault_passes_the_oracle(tmp_path: Path, journal: str) -> None:
    config = small(str(tmp_path), faults=parse_faults("all"), journal=journal, fault_rates={
        "crash_rate": 0.5, "max_process_crashes": 1, "actor_crash_rate": 0.05,
        "max_actor_crashes": 3, "writer_rate": 0.1,
        # The first two spawns, summaries, rewinds, claims and marker merges crash
        # their actor right after their effect (issue 10: never repeated).
        "rare_effect_crash_rate": 1.0})
    result = await simulate(config)
    failing = {n: v.problems for n, v in result.invariants.items() if not v.passed}
    assert failing == {}
    assert list(result.invariants) == list(INVARIANTS)
    assert all(v.checked > 0 for v in result.invariants.values())
    # the faults really happened, and the harness lived through them
    assert result.incarnations == 2  # one simulated process crash, reopened once
    assert result.injected["actor-crash"] >= 1
    assert sum(n for kind, n in result.injected.items()
               if kind.startswith("actor-crash-after-")) >= 4
    assert result.actions["crashed"] >= 1  # a request that is not idempotent failed its caller
    assert result.restarts >= 1
    assert result.turns >= 10 * 16
    assert result.batches >= 10


# -- the oracle can fail --------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run() -> Iterator[tuple[str, SimulationResult]]:
    """One fault-free run whose state each test copies and damages."""
    with tempfile.TemporaryDirectory() as state:
        result = anyio.run(simulate, small(state, seed=3))
        assert result.passed
        yield state, result


@pytest.fixture
def damaged(finished_run: tuple[str, SimulationResult], tmp_path: Path) -> tuple[Path, SimulationResult]:
    import shutil

    state, result = finished_run
    copy = tmp_path / "state"
    shutil.copytree(state, copy)
    return copy, result


def verdicts(state: Path, result: SimulationResult, **evidence: Any) -> dict[str, Verdict]:
    assert result.evidence is not None
    return check_invariants(
        str(state), result.workspace_id, threshold=result.config.threshold,
        counter=default_counter(), evidence=dataclasses.replace(result.evidence, **evidence))


def failed(found: dict[str, Verdict]) -> set[str]:
    return {name for name, verdict in found.items() if not verdict.passed}


def node_files(state: Path) -> Iterator[Path]:
    yield from sorted((state / "sessions").glob("*/history/*.json"))


def test_the_undamaged_copy_passes(damaged: tuple[Path, SimulationResult]) -> None:
    state, result = damaged
    assert failed(verdicts(state, result)) == set()


def test_a_dropped_marker_fails(damaged: tuple[Path, SimulationResult]) -> None:
    state, result = damaged
    for path in node_files(state):
        node = orjson.loads(path.read_bytes())
        if node["metadata"].get(MARKER_KEY) and node["caller"] == "":
            del node["metadata"][MARKER_KEY]
            path.write_bytes(orjson.dumps(node))
            break
    assert {"metadata_keys_kept"} <= failed(verdicts(state, result))


def test_a_skipped_archive_frame_fails(damaged: tuple[Path, SimulationResult]) -> None:
    state, result = damaged
    archive = min((state / "memory/sources/openprogram/_v2").glob("*.md"))
    text = archive.read_text(encoding="utf-8")
    first = text.index('<a id="source-')
    second = text.index('<a id="source-', first + 1)
    archive.write_text(text[:first] + text[second:], encoding="utf-8")
    assert {"marked_turns_archived", "citations_resolve"} <= failed(verdicts(state, result))


def test_an_unwritten_head_tail_fails(damaged: tuple[Path, SimulationResult]) -> None:
    state, result = damaged
    sid = min(os.listdir(state / "sessions"))
    core = SessionCore.open(state, sid)
    for index in range(4):
        core.append({"id": f"late{index}", "role": "user" if index % 2 == 0 else "assistant",
                     "content": "We decided to move the launch. " * 700})
    assert {"head_branches_written", "no_owed_tail_at_threshold"} <= failed(
        verdicts(state, result))


def test_a_moved_updated_at_fails(damaged: tuple[Path, SimulationResult]) -> None:
    state, result = damaged
    meta_path = min((state / "sessions").glob("*/meta.json"))
    meta = orjson.loads(meta_path.read_bytes())
    meta["updated_at"] += 30.0
    meta_path.write_bytes(orjson.dumps(meta))
    assert result.evidence is not None
    after = dict(result.evidence.updated_after_boundary)
    after[meta["id"]] = meta["updated_at"]
    assert "updated_at_not_moved_by_marking" in failed(
        verdicts(state, result, updated_after_boundary=after))


def test_a_rewritten_batch_without_a_crash_fails(damaged: tuple[Path, SimulationResult]) -> None:
    state, result = damaged
    assert result.evidence is not None
    batches = list(result.evidence.written_batches)
    found = verdicts(state, result, written_batches=[*batches, batches[0]])
    assert failed(found) == {"duplicates_only_after_crashes"}
    # ...and one crash explains exactly one such batch
    found = verdicts(state, result, written_batches=[*batches, batches[0]], process_crashes=1)
    assert failed(found) == set()
    found = verdicts(state, result, written_batches=[*batches, batches[0], batches[0]],
                     process_crashes=1)
    assert failed(found) == {"duplicates_only_after_crashes"}


def test_a_turn_appended_twice_fails(damaged: tuple[Path, SimulationResult]) -> None:
    """The same request written again under a new id, as a redelivered append without one was."""
    state, result = damaged
    sid = min(os.listdir(state / "sessions"))
    core = SessionCore.open(state, sid)
    turn = next(n for n in core.nodes() if SIM_TURN in n.metadata)
    assert "no_turn_appended_twice" not in failed(verdicts(state, result))
    core.append({"id": turn.id + "-again", "role": "user", "content": turn.output,
                 "predecessor": turn.id, SIM_TURN: turn.metadata[SIM_TURN]})
    found = verdicts(state, result)
    assert "no_turn_appended_twice" in failed(found)
    assert f"turn {turn.id} (append) is in the session 2 times" in " ".join(
        found["no_turn_appended_twice"].problems)


def test_a_spawn_written_twice_fails(damaged: tuple[Path, SimulationResult]) -> None:
    state, result = damaged
    for sid in sorted(os.listdir(state / "sessions")):
        core = SessionCore.open(state, sid)
        spawn = next((n for n in core.nodes() if n.is_spawn_root), None)
        if spawn is not None:
            break
    else:
        pytest.skip("the seeded run spawned no sub-agent")
    core.spawn_branch(spawn.caller, "agent_spawn", spawn.output)
    assert "no_turn_appended_twice" in failed(verdicts(state, result))


def test_an_empty_evidence_still_checks_the_files(damaged: tuple[Path, SimulationResult]) -> None:
    state, result = damaged
    empty = Evidence({}, {}, {}, [], 0, {})
    found = check_invariants(str(state), result.workspace_id, threshold=8000,
                             counter=default_counter(), evidence=empty)
    assert found["head_branches_written"].checked > 0
    assert failed(found) == set()


# -- pure pieces and the command --------------------------------------------------


def test_fault_specs() -> None:
    assert parse_faults("all") == frozenset(FAULTS)
    assert parse_faults("") == parse_faults("none") == frozenset()
    assert parse_faults("reject, slow-disk") == {"reject", "slow-disk"}
    with pytest.raises(ValueError, match="unknown fault"):
        parse_faults("reject,meteor")


def test_fault_decisions_are_seeded_by_what_not_when() -> None:
    assert chance(1, "reject", "s", "n", 1) == chance(1, "reject", "s", "n", 1)
    assert chance(1, "reject", "s", "n", 1) != chance(2, "reject", "s", "n", 1)
    draws = [chance(5, "x", i) for i in range(2000)]
    assert 0.45 < sum(d < 0.5 for d in draws) / len(draws) < 0.55


def test_the_fault_wrapper_keeps_the_writer_exclusive() -> None:
    """Hiding ``exclusive`` let the pool race: batches lost 9 commits in a row and stayed owed."""
    plan = FaultPlan(frozenset(), 0)
    assert FaultyWriter(ExtractiveWriter(), plan).exclusive is True
    assert FaultyWriter(object(), plan).exclusive is False  # type: ignore[arg-type]


def test_percentile() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 0.99) == 99.0


def test_the_command_prints_one_json_object(tmp_path: Path) -> None:
    state = tmp_path / "keep"
    outcome = CliRunner().invoke(main, ["simulate", "--sessions", "3", "--turns", "6",
                                        "--faults", "reject,empty", "--json",
                                        "--state", str(state)])
    assert outcome.exit_code == 0, outcome.output
    document = orjson.loads(outcome.stdout)
    assert set(document["invariants"].values()) == {"PASS"}
    for key in ("turns_per_s", "turns", "latency_ms", "restarts", "quarantined", "peak_rss_mb"):
        assert key in document
    assert (state / "sessions").is_dir()  # --state keeps the state


def test_the_command_refuses_an_unknown_fault() -> None:
    outcome = CliRunner().invoke(main, ["simulate", "--faults", "meteor"])
    assert outcome.exit_code == 2
    assert "unknown fault" in outcome.output


def test_compare_hands_the_workload_to_the_baselines(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, int] = {}

    def run_baselines(*, seed: int, sessions: int, turns: int) -> dict[str, object]:
        seen.update(seed=seed, sessions=sessions, turns=turns)
        return {"omitted": 0, "seen": dict(seen)}

    fake = types.SimpleNamespace(run_baselines=run_baselines,
                                 render_baselines=lambda report: "the tables")
    monkeypatch.setattr(simulate_command, "load_baselines", lambda: fake)
    outcome = CliRunner().invoke(main, ["simulate", "--sessions", "2", "--turns", "3",
                                        "--seed", "4", "--compare", "--json"])
    assert outcome.exit_code == 0, outcome.output
    assert orjson.loads(outcome.stdout)["compare"] == {
        "omitted": 0, "seen": {"seed": 4, "sessions": 2, "turns": 3}}


async def test_a_head_branch_of_pure_chatter_is_written_eventually(tmp_path: Path) -> None:
    config = small(str(tmp_path), sessions=3, turns=6, mix=Mix(facts=(0, 0), idle_seconds=0.6))
    result = await simulate(config)
    assert result.invariants["head_branches_written"].passed


def test_a_late_summary_is_its_sessions_last_append(damaged: tuple[Path, SimulationResult]) -> None:
    """A summary's created_at is backdated before what it covers; updated_at follows its append."""
    state, result = damaged
    assert result.evidence is not None
    meta_path = min((state / "sessions").glob("*/meta.json"))
    session = meta_path.parent.name
    later = float(orjson.loads(meta_path.read_bytes())["updated_at"]) + 10.0
    core = SessionCore.open(state, session, options=SessionOptions(clock=lambda: later))
    covers = [n.id for n in core.nodes() if n.role == "user" and not n.is_summary][:2]
    core.insert_summary(covers, "Later compaction.")
    # the summary was the agent's last append, before the final boundary
    seen = {"updated_before_boundary": {**result.evidence.updated_before_boundary, session: later},
            "updated_after_boundary": {**result.evidence.updated_after_boundary, session: later}}
    # with the harness's record of when it appended the summary: consistent
    assert "updated_at_not_moved_by_marking" not in failed(verdicts(
        state, result, summarised={**result.evidence.summarised, session: later}, **seen))
    # without it, the files alone make updated_at look moved: the evidence is needed
    assert "updated_at_not_moved_by_marking" in failed(verdicts(
        state, result, summarised={}, **seen))


class EmptyAtFirst(ExtractiveWriter):
    """Changes nothing for one session's first ``times`` batches: a failure no fault plan owns."""

    def __init__(self, session: str, times: int) -> None:
        super().__init__()
        self.session, self.left, self.asked = session, times, 0

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> list[TopicEdit]:
        if batch.session_id == self.session:
            self.asked += 1
            if self.left > 0:
                self.left -= 1
                return []
        return await super().write(batch, workspace)

    async def write_group(self, batches: Sequence[Batch], workspace: WorkspaceSnapshot
                          ) -> list[TopicEdit]:
        # the chosen session runs alone, through write
        return await super().write_group(
            [b for b in batches if b.session_id != self.session], workspace)


async def test_the_boundary_goes_on_while_a_round_had_a_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that failed in the last round waits on a retry timer that drain() ignores.

    The boundary used to stop after its second round regardless, and the
    oracle then found that batch's head tail owed.
    """
    writer = EmptyAtFirst("sim-00001", times=2)
    monkeypatch.setattr(_simulate, "ExtractiveWriter", lambda: writer)
    # idle far away: the session is only written at the boundary
    config = small(str(tmp_path), sessions=3, turns=6, session_idle=60.0, watchdog_poll=60.0)
    result = await simulate(config)
    assert writer.asked >= 3
    assert result.invariants["head_branches_written"].passed, (
        result.invariants["head_branches_written"].problems)


async def test_an_agent_resends_a_failed_append_as_it_was() -> None:
    """Same id, same turn: the store returns the turn if the first send wrote it."""
    from actors import PoisonMessageError
    from memory.simulate._agents import SIM_TURN, Acknowledged, Agent

    sent: list[dict[str, Any]] = []

    class Sessions:
        async def append(self, session: str, message: dict[str, Any]) -> dict[str, Any]:
            sent.append(dict(message))
            if len(sent) == 1:
                raise PoisonMessageError(f"runtime/sessions[{session}]", message, 3)
            return {**message, "session_id": session}

    class Runtime:
        sessions = Sessions()

    agent = Agent(0, "s1", 4, 7, SMALL, Acknowledged())
    node = await agent._append(Runtime(), "user", None)  # type: ignore[arg-type]
    assert len(sent) == 2 and sent[0] == sent[1]
    assert node == sent[0]["id"] == sent[0][SIM_TURN]
    assert (agent.retried, agent.done_turns) == (1, 1)
# -- the unlocked reference agent (agent-writes) and "no outside write reverted" ------


def _agent_run(state: Path) -> tuple[str, dict[str, Any]]:
    from memory.simulate._outside import run_agent

    sid = min(os.listdir(state / "sessions"))
    report = run_agent(str(state), 1, 40, [sid], pause=0.0, rewind_share=0.25)
    assert report["merged"] and report["rewound"]
    return sid, report


def _node_file(state: Path, sid: str, node_id: str) -> Path:
    (path,) = (state / "sessions" / sid / "history").glob(f"*-{node_id}.json")
    return path


def test_the_agents_writes_pass_and_reverting_any_of_them_fails(
    damaged: tuple[Path, SimulationResult],
) -> None:
    from memory.simulate._oracle import outside_evidence
    from memory.simulate._outside import agent_write

    state, result = damaged
    sid, report = _agent_run(state)
    evidence = outside_evidence(report)
    assert failed(verdicts(state, result, **evidence)) == set()
    assert verdicts(state, result, **evidence)["no_outside_write_reverted"].checked > 0
    # a merged key undone, as a replay installing old bytes would
    _, node_id, key = report["merged"][-1]
    path = _node_file(state, sid, node_id)
    record = orjson.loads(path.read_bytes())
    del record["metadata"][key]
    agent_write(str(path), record)
    assert failed(verdicts(state, result, **evidence)) == {"no_outside_write_reverted"}
    agent_write(str(path), {**record, "metadata": {**record["metadata"], key: 0}})
    assert failed(verdicts(state, result, **evidence)) == set()
    # the last rewind's head move undone
    meta_path = state / "sessions" / sid / "meta.json"
    meta = orjson.loads(meta_path.read_bytes())
    agent_write(str(meta_path), {**meta, "head_id": report["rewound"][-1][1][0]})
    assert "no_outside_write_reverted" in failed(verdicts(state, result, **evidence))
    agent_write(str(meta_path), meta)
    # a rewind stamp undone
    stamped = _node_file(state, sid, report["rewound"][0][1][0])
    record = orjson.loads(stamped.read_bytes())
    del record["metadata"]["rewound"]
    agent_write(str(stamped), record)
    assert "no_outside_write_reverted" in failed(verdicts(state, result, **evidence))


def test_a_marker_lost_on_a_turn_the_agent_rewound_is_not_a_lost_key(
    damaged: tuple[Path, SimulationResult],
) -> None:
    """Rewound turns are invisible to memory: the agent's rewind dropping their marker owes nothing."""
    from memory.simulate._oracle import outside_evidence
    from memory.simulate._outside import agent_write

    state, result = damaged
    sid, report = _agent_run(state)
    evidence = outside_evidence(report)
    marked = [n for n in dict.fromkeys(evidence["outside_rewinds"][sid][0])
              if MARKER_KEY in orjson.loads(_node_file(state, sid, n).read_bytes())["metadata"]]
    assert marked
    path = _node_file(state, sid, marked[0])
    record = orjson.loads(path.read_bytes())
    del record["metadata"][MARKER_KEY]
    agent_write(str(path), record)
    assert failed(verdicts(state, result, **evidence)) == set()
    assert "metadata_keys_kept" in failed(verdicts(state, result))  # without the agent's rewinds


def test_the_agent_writes_the_reference_byte_format(tmp_path: Path) -> None:
    from memory.simulate._outside import agent_write
    from tests.fixture import copy_fixture

    state = copy_fixture(tmp_path / "state")
    for path in sorted((state / "sessions" / "demo" / "history").glob("*.json")):
        original = path.read_bytes()
        agent_write(str(path), orjson.loads(original))
        assert path.read_bytes() == original
    assert not [p for p in (state / "sessions" / "demo" / "history").iterdir()
                if p.name.startswith(".")]


# -- every size and seed runs (issue 10, attack item 7) ---------------------------


@pytest.mark.parametrize("count", range(1, 21))
def test_the_outside_writers_share_any_number_of_sessions_without_overlap(count: int) -> None:
    sessions = [f"sim-{index:05d}" for index in range(count)]
    plan = FaultPlan(parse_faults("all"), 0)
    config = small("/tmp/unused", outside_sessions=8, agent_sessions=8)
    by_outside, by_agent, notes = _simulate.outside_writers(sessions, config, plan)
    assert not set(by_outside) & set(by_agent)
    assert set(by_outside) | set(by_agent) <= set(sessions)
    assert by_outside == sessions[: len(by_outside)] and by_outside  # the outside writer first
    if count >= 16:
        assert (len(by_outside), len(by_agent)) == (8, 8)
    assert bool(by_agent) == (count >= 2) and bool(notes) == (count == 1)
    alone = FaultPlan(parse_faults("agent-writes"), 0)
    assert _simulate.outside_writers(sessions, config, alone)[:2] == ([], sessions[:8])


@pytest.mark.parametrize(("sessions", "faults", "seed"), [
    (1, "all", 0), (2, "all", 1), (3, "agent-writes", 2),
    (2, "actor-crash", 0), (3, "actor-crash", 4),
])
async def test_small_runs_finish_at_every_size_and_seed(
        tmp_path: Path, sessions: int, faults: str, seed: int) -> None:
    """Few sessions (the outside agent had none: IndexError) and claims that crash at the boundary.

    Idle writes are far away, so the boundary makes the first claims, and
    every claim's first two crash right after it (``actor-crash-after-claim``):
    ``rt.flush`` raised that injected fault as a ``BoundaryError`` and the
    run stopped, instead of running the boundary again as for other faults.
    """
    config = small(str(tmp_path), sessions=sessions, turns=4, seed=seed, session_idle=60.0,
                   watchdog_poll=60.0, faults=parse_faults(faults), outside_rounds=10,
                   agent_rounds=10, fault_rates={"rare_effect_crash_rate": 1.0})
    result = await simulate(config)
    assert {n: v.problems for n, v in result.invariants.items() if not v.passed} == {}
    if "actor-crash" in config.faults:
        assert result.injected.get("actor-crash-after-claim", 0) >= 1
    left_out = sessions == 1 and faults == "all"
    assert [note.split(":")[0] for note in result.notes] == (
        ["agent-writes left out"] if left_out else [])


async def test_a_boundary_error_the_plan_did_not_inject_still_fails_the_run() -> None:
    from memory._errors import BoundaryError
    from memory.simulate._faults import InjectedIOError

    class Runtime:
        def __init__(self, cause: BaseException) -> None:
            self.cause = cause

        async def flush(self, session: str) -> None:
            # as the session actor hands it over: wrapped by the kernel
            wrapped = RuntimeError("actor crashed")
            wrapped.__cause__ = self.cause
            raise BoundaryError(session, "claiming failed", wrapped) from wrapped

    injected: list[str] = []
    await _simulate.flush_tolerating_injected(
        Runtime(InjectedIOError("simulated I/O error (.claim)")),  # type: ignore[arg-type]
        "s1", injected)
    assert injected == ["s1"]
    with pytest.raises(BoundaryError):
        await _simulate.flush_tolerating_injected(
            Runtime(OSError(28, "No space left on device")), "s2", injected)  # type: ignore[arg-type]
    assert injected == ["s1"]
