"""``scriptorium simulate``: many simulated agents, seeded faults, and the oracle.

The project's main job and its proof under load (issue 6). It opens the
embedded runtime on a state directory, creates one session per simulated
agent (:mod:`memory.simulate._agents`) and runs them all concurrently with
the idle watchdog on a compressed clock, while the faults of
:mod:`memory.simulate._faults` fire. A simulated process crash kills the
runtime; the harness reopens it on the same state and the agents carry on.
When the workload ends, faults switch off, the session boundary runs for
every session (quarantined batches are released once, as an operator
would), the pool drains, and :mod:`memory.simulate._oracle` checks the
files. :mod:`memory.simulate._command` prints the result.

With ``rate`` set the load is an open loop (:mod:`memory.simulate._open_loop`):
``sessions x turns`` arrivals at ``rate`` turns/s, each one step of its
agent, issued on their schedule whatever the runtime does; the agents'
own idle pauses are off (the gaps of the schedule are the idleness). The
write cycle is measured from a batch becoming due to its markers being
durable (``due_to_durable``; ``due_to_durable_load`` keeps the batches
that came due while turns were still arriving), and every append from its
send to its acknowledgement (``append_ack``), in both loops.

Everything here is orchestration; the rules live in the runtime. What a run
is asked is :mod:`memory.simulate._config`'s, what it returns
:mod:`memory.simulate._result`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from functools import partial

import anyio
import orjson

from memory.ledger._ledger import WritePolicy
from memory.ledger._records import MARKER_KEY
from memory.ledger._tokens import default_counter
from memory.runtime._events import EventTally
from memory.runtime._runtime import MemoryRuntime, RuntimeConfig, open_runtime
from memory.simulate._agents import Acknowledged, Agent
from memory.simulate._config import SimulationConfig, Stage
from memory.simulate._faults import FaultPlan, FaultyDisk, FaultyWriter, SimulatedCrash
from memory.simulate._open_loop import OpenLoop, arrival_offsets
from memory.simulate._oracle import check_invariants
from memory.simulate._result import SimulationResult, Totals, build_result
from memory.simulate._settle import SETTLE_ROUNDS, flush_tolerating_injected, settle
from memory.simulate._shards import JOB_EVENTS, child_env, read_config, run_shards, send_frame
from memory.simulate._share import Share, merge_shares
from memory.writers._events import Event
from memory.writers._extractive import ExtractiveWriter
from memory.writers._writer import Writer
from memory.writers.model import ModelWriter, UsageFile
from store.lowlevel import run_durable
from supervisors import Backoff, get_child

__all__ = [
    "SETTLE_ROUNDS",
    "flush_tolerating_injected",
    "outside_writers",
    "run_share",
    "share_process",
    "simulate",
]


def runtime_config(config: SimulationConfig, plan: FaultPlan, tally: EventTally) -> RuntimeConfig:
    """The runtime with the compressed clock: idle, polls and backoffs in (fractions of) seconds.

    Its events go to ``tally``: the simulator measures through them.
    """
    return RuntimeConfig(
        policy=WritePolicy(
            threshold=config.threshold,
            idle_after=config.idle_after if config.idle_after is not None else config.session_idle,
        ),
        writer_workers=config.writer_workers,
        writer_timeout=config.writer_timeout,
        session_idle=config.session_idle,
        watchdog_poll=config.watchdog_poll,
        passivate_after=4 * config.session_idle,
        retry_backoff=Backoff(initial=0.05, factor=2.0, maximum=0.5, jitter=0.25),
        worker_backoff=Backoff(initial=0.01, factor=2.0, maximum=0.2, jitter=0.25),
        # A simulated crash leaves its process alive, so its claims are not void by
        # pid as a real crash's are: the next incarnation waits out their lease, kept
        # on the compressed clock too (the default margin is a minute).
        claim_margin=config.writer_timeout,
        files=FaultyDisk(plan),
        seed=config.seed,
        on_event=tally,
        cpu_worker=config.cpu_worker,
        journal=config.journal,
        shard=config.shard,
    )


async def _restarts(rt: MemoryRuntime) -> int:
    """Supervisor restarts of this incarnation: the root, the writer pool, the sessions."""
    if rt.root is None:
        return 0
    total = 0
    for name in ("writers", "sessions"):
        child = await get_child(rt.root, name)
        total += int(getattr(await child.inspect(), "restarts", 0))
    return total + int(getattr(await rt.root.inspect(), "restarts", 0))


def _crashed(error: BaseException) -> bool:
    if isinstance(error, SimulatedCrash):
        return True
    if isinstance(error, BaseExceptionGroup):
        return any(_crashed(inner) for inner in error.exceptions)
    return _crashed(error.__context__) if error.__context__ is not None else False


def outside_writers(sessions: list[str], config: SimulationConfig, plan: FaultPlan
                    ) -> tuple[list[str], list[str], list[str]]:
    """The sessions of ``outside-appends`` and of ``agent-writes``, never shared, and notes.

    Each takes its configured count when there are enough sessions; a small
    run shares what it has between them (the outside writer first), so both
    faults still run. They never share a session: the locked appender and the
    unlocked agent would overwrite each other's head, and the oracle would
    blame scriptorium. With one session only, ``agent-writes`` is left out,
    and a note says so. With ``journal = "shared"`` ``outside-appends`` is
    left out, with a note: the runtime holds a session from a mutation to its
    next checkpoint, so a writer that takes the lock per mutation mostly
    waits out its lock timeout (docs/decisions.md, "The runtime log").
    """
    notes = []
    exclusive = config.journal == "shared" and plan.on("outside-appends")
    if exclusive:
        notes.append("outside-appends left out: --journal shared holds each active session's "
                     "lock until its next checkpoint, so a writer taking it per mutation would "
                     "mostly wait out its lock timeout")
    wants_outside = (config.outside_sessions if plan.on("outside-appends") and not exclusive
                     else 0)
    wants_agent = config.agent_sessions if plan.on("agent-writes") else 0
    count = len(sessions)
    if wants_outside + wants_agent <= count:
        outside = wants_outside
    elif wants_agent == 0:
        outside = count
    elif wants_outside == 0:
        outside = 0
    else:  # proportionally, at least one each while there are two
        share = round(count * wants_outside / (wants_outside + wants_agent))
        outside = max(1, min(share, count - 1))
    agent = min(wants_agent, count - outside)
    if wants_agent and not agent:
        notes.append(f"agent-writes left out: {count} session(s), all taken by outside-appends "
                     "(the two would overwrite each other's head, not scriptorium's)")
    return sessions[:outside], sessions[outside: outside + agent], notes


async def _outside(config: SimulationConfig, sessions: list[str], into: dict[str, object]) -> None:
    """The outside writer subprocess; its acknowledged writes land in ``into``."""
    env = child_env()
    command = [sys.executable, "-m", "memory.simulate._outside", config.state_dir,
               str(config.seed), str(config.outside_rounds), *sessions]
    done = await anyio.run_process(command, env=env, check=False, stderr=subprocess.PIPE)
    if done.returncode != 0:
        raise RuntimeError(
            f"the outside writer exited with {done.returncode}: {done.stderr.decode()[-2000:]}")
    into.update(orjson.loads(done.stdout))


async def _agent(config: SimulationConfig, sessions: list[str], into: dict[str, object],
                 go: anyio.Event) -> None:
    """The unlocked reference agent's process (``agent-writes``); it starts writing on ``go``."""
    env = child_env()
    command = [sys.executable, "-m", "memory.simulate._outside", "--agent", config.state_dir,
               str(config.seed), str(config.agent_rounds), *sessions]
    async with await anyio.open_process(command, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        await go.wait()
        await proc.stdin.send(b"go\n")
        out = b"".join([chunk async for chunk in proc.stdout])
        err = b"".join([chunk async for chunk in proc.stderr])
        if await proc.wait() != 0:
            raise RuntimeError(f"the outside agent exited with {proc.returncode}: "
                               f"{err.decode()[-2000:]}")
    into.update(orjson.loads(out))


@contextlib.asynccontextmanager
async def _closing(writer: Writer) -> AsyncIterator[None]:
    """A model writer's connections close with its incarnation."""
    try:
        yield
    finally:
        if isinstance(writer, ModelWriter):
            await writer.aclose()


async def simulate(config: SimulationConfig) -> SimulationResult:
    """Run the whole simulation on the current event loop; see the module docstring.

    With ``config.processes`` above 1 the agents are sharded by session id
    over that many processes (:mod:`memory.simulate._shards`), each running
    its own runtime on the one state directory; the oracle then checks the
    files once, with every process's evidence.
    """
    started, wall_started = time.perf_counter(), time.time()
    sharded = config.processes > 1 and config.shard is None
    share = merge_shares(await run_shards(config)) if sharded else await run_share(config)
    seconds = time.perf_counter() - started
    _stage(config, "checking the invariants", "")
    evidence = share.evidence()
    invariants = await run_durable(lambda: check_invariants(
        config.state_dir, share.workspace_id, threshold=config.threshold,
        counter=default_counter(), evidence=evidence))
    # This process's peak (the oracle's included), and the shards' when they ran apart.
    peak_rss_mb = _peak_rss_mb() + (share.peak_rss_mb if sharded else 0.0)
    result = build_result(config, invariants, share.agents, share.totals, share.injected,
                          seconds, share.outside, peak_rss_mb=peak_rss_mb)
    result.latencies["due_to_durable_load"] = share.due_to_durable_load
    result.open_loop = share.open_loop
    result.workspace_id = share.workspace_id
    result.workload_seconds = max(0.0, share.workload_ended - wall_started)
    result.evidence = evidence
    result.notes = share.notes
    return result


async def run_share(config: SimulationConfig) -> Share:
    """This process's share of the run (every agent, or ``config.shard``'s): up to the oracle."""
    plan = FaultPlan(config.faults, config.seed, **config.fault_rates)
    acknowledged = Acknowledged()
    totals = Totals()
    agents: list[Agent] = []
    outside: dict[str, object] = {}
    agent_writes: dict[str, object] = {}
    workload_over = anyio.Event()  # the unlocked agent writes from then on, while marking goes on
    workload_wall = 0.0  # the runtime's clock (the wall) when the last arrival returned
    open_loop = None
    if config.rate is not None:
        open_loop = OpenLoop(arrival_offsets(config.rate, config.sessions * config.turns,
                                             arrivals=config.arrivals, seed=config.seed),
                             config.sessions)
    mix = config.mix if open_loop is None else dataclasses.replace(config.mix, idle=0.0)
    evidence_before: dict[str, float] = {}
    evidence_after: dict[str, float] = {}
    workspace_id = ""
    notes: list[str] = []
    agent_started = False
    outside_started = False
    async with anyio.create_task_group() as background:
        while True:
            rt: MemoryRuntime | None = None
            tally = EventTally(config.on_event)
            try:
                inner: Writer = ExtractiveWriter() if config.model is None else ModelWriter(
                    config.model, usage_file=UsageFile(os.path.join(config.state_dir, "memory")),
                    on_event=config.on_event)
                async with _closing(inner), open_runtime(
                    config.state_dir, FaultyWriter(inner, plan),
                    config=runtime_config(config, plan, tally),
                ) as rt:
                    totals.incarnations += 1
                    workspace_id = rt.workspace_id
                    if not agents:
                        for index in range(config.sessions):
                            session = f"sim-{index:05d}"
                            if config.shard is not None and not config.shard.holds(session):
                                continue  # another process's agent
                            sid = await rt.sessions.create(title=f"agent {index}",
                                                           session_id=session)
                            agents.append(Agent(index, sid, config.turns, config.seed,
                                                mix, acknowledged))
                        if open_loop is not None:
                            open_loop.held = frozenset(agent.index for agent in agents)
                        by_outside, by_agent, notes = outside_writers(
                            [a.session for a in agents], config, plan)
                        if by_outside:
                            outside_started = True
                            background.start_soon(_outside, config, by_outside, outside)
                        if by_agent:
                            agent_started = True
                            background.start_soon(_agent, config, by_agent, agent_writes,
                                                  workload_over)
                    _stage(config, "appending turns" if totals.incarnations == 1 else
                           f"appending turns (runtime run {totals.incarnations})",
                           "turns")
                    if open_loop is None:
                        await _run_agents(rt, agents, config)
                    else:
                        await _run_open_loop(rt, agents, open_loop, config)
                    workload_wall = workload_wall or time.time()
                    workload_over.set()
                    if agent_started:
                        while not agent_writes:
                            await anyio.sleep(0.05)
                    await settle(rt, [a.session for a in agents],
                                 outside if outside_started else None, plan, evidence_before,
                                 evidence_after, stage=partial(_stage, config),
                                 progress=config.progress)
                    totals.absorb(rt, tally, await _restarts(rt))
                break
            except BaseException as error:
                if not _crashed(error):
                    raise
                if rt is not None:
                    totals.absorb(rt, tally, 0)
    for sid, node, key in _triples(outside.get("merged")):
        acknowledged.add(sid, node, (key,))
    for sid, node in totals.marked:
        acknowledged.add(sid, node, (MARKER_KEY,))
    return Share(
        agents=agents, acknowledged=acknowledged, totals=totals,
        updated_before_boundary=evidence_before, updated_after_boundary=evidence_after,
        outside=outside, agent_writes=agent_writes, process_crashes=plan.process_crashes,
        actor_crashes=dict(plan.crashed_sessions),
        injected={**plan.injected, "process-crashes": plan.process_crashes},
        workspace_id=workspace_id, notes=notes, workload_ended=workload_wall or time.time(),
        due_to_durable_load=[durable - due for due, durable in totals.cycles
                             if due <= workload_wall],
        open_loop=open_loop, peak_rss_mb=_peak_rss_mb())


def share_process() -> None:
    """A shard's process (:mod:`memory.simulate._shards`): its config on stdin, frames on stdout."""
    out = sys.stdout.buffer

    def on_event(event: Event) -> None:  # what a progress display reads; the rest stays here
        if isinstance(event, (Stage, *JOB_EVENTS)):
            send_frame(out, ("event", event))

    config = dataclasses.replace(read_config(sys.stdin.buffer.read()), on_event=on_event,
                                 progress=lambda done, total: send_frame(
                                     out, ("progress", done, total)))
    send_frame(out, ("share", anyio.run(run_share, config, backend=sys.argv[1])))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


async def _run_agents(rt: MemoryRuntime, agents: list[Agent], config: SimulationConfig) -> None:
    total = sum(agent.turns for agent in agents)
    progress = config.progress

    async def tick() -> None:
        while progress is not None:
            progress(sum(min(a.done_turns, a.turns) for a in agents), total)
            await anyio.sleep(0.25)

    async with anyio.create_task_group() as outer:
        outer.start_soon(tick)
        async with anyio.create_task_group() as tg:
            for agent in agents:
                if not agent.done:
                    tg.start_soon(agent.run, rt)
        outer.cancel_scope.cancel()
    if progress is not None:
        progress(total, total)


async def _run_open_loop(rt: MemoryRuntime, agents: list[Agent], loop: OpenLoop,
                         config: SimulationConfig) -> None:
    """This incarnation's share of the open loop: every agent re-reads its branch, then on."""
    async with anyio.create_task_group() as tg:
        for agent in agents:
            tg.start_soon(agent.resync, rt)
    total = loop.scheduled_here
    by_lane = {agent.index: agent for agent in agents}
    progress = config.progress

    async def issue(lane: int, _arrival: int) -> None:
        await by_lane[lane].arrive(rt)

    async def tick() -> None:
        while progress is not None:
            progress(len(loop.issued), total)
            await anyio.sleep(0.25)

    async with anyio.create_task_group() as outer:
        outer.start_soon(tick)
        await loop.run(issue)
        outer.cancel_scope.cancel()
    if progress is not None:
        progress(total, total)


def _stage(config: SimulationConfig, what: str, unit: str, total: int | None = None) -> None:
    """Say the run moves on to ``what`` (counted in ``unit``), for a progress display."""
    if config.on_event is not None:
        config.on_event(Stage(at=time.time(), what=what, unit=unit, total=total))


def _triples(value: object) -> list[tuple[str, str, str]]:
    if not isinstance(value, list):
        return []
    return [(str(a), str(b), str(c)) for a, b, c in value]
