"""The ``scriptorium simulate`` command and its report.

The report is what a newcomer reads first, so it says what was done (turns,
branches, batches, faults injected), how fast (turns/s end to end, write
cycle and marker merge p50/p99), what the supervisors healed (restarts,
quarantined jobs, runtime crashes survived), the peak RSS, and then the
oracle's table: PASS/FAIL per invariant. ``--rate R`` runs the open loop
(:mod:`memory.simulate._open_loop`) and adds what it offered, how many
arrivals came late, and the latencies at that rate. Any FAIL exits non-zero. With
``--json`` exactly one JSON object goes to stdout and progress stays on
stderr.

``--compare`` hands the same workload to the baselines of issue 6
(:mod:`memory.simulate.baselines`, installed with the package).
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import sys
import tempfile
import warnings
from types import ModuleType
from typing import Any

import anyio
import click
import orjson

from memory._errors import EndpointUnreachableError, ReferenceThresholdWarning, SettingsError
from memory.ledger._ledger import threshold_warning
from memory.runtime._config import JOURNAL_MODES, JournalMode
from memory.runtime._settings import check_model_flags, check_seconds, check_threshold
from memory.simulate._config import SimulationConfig
from memory.simulate._faults import FAULTS, parse_faults
from memory.simulate._open_loop import ARRIVALS
from memory.simulate._result import SimulationResult
from memory.simulate._simulate import simulate as run_simulation
from memory.writers import CPU_WORKER_MODES, CpuWorkerMode
from memory.writers.model import model_settings, probe_endpoint
from store.lowlevel import state_path

__all__ = ["memory_lag_document", "percentile", "render_report", "result_document",
           "simulate"]

# Processes a run shards its agents over, by default: two, what measured best on a
# 2-core machine (docs/decisions.md, "Both cores"); one where there is one core, and
# with a model writer, whose writes the model's latency bounds, not this machine's cores.
PROCESSES = min(2, os.cpu_count() or 1)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return ordered[rank]


def result_document(result: SimulationResult) -> dict[str, Any]:
    """The ``--json`` object (issue 6 names the first keys)."""
    latency = {
        f"{name}_{label}": round(percentile(values, q) * 1000, 3)
        for name, values in sorted(result.latencies.items())
        for label, q in (("p50", 0.5), ("p99", 0.99))
    }
    config = result.config
    loop = result.open_loop
    open_loop = None
    if loop is not None and config.rate is not None:
        lateness = list(loop.lateness.values())
        issued = sorted(loop.issued.values())
        span = issued[-1] - issued[0] if len(issued) > 1 else 0.0
        open_loop = {
            "rate": config.rate,
            "arrivals": config.arrivals,
            "scheduled": len(loop.offsets),
            "issued": len(loop.issued),
            "late": loop.late,
            "lateness_p99_ms": round(percentile(lateness, 0.99) * 1000, 3),
            "lateness_max_ms": round(max(lateness, default=0.0) * 1000, 3),
            "issued_per_s": round((len(issued) - 1) / span, 1) if span > 0 else 0.0,
        }
    return {
        "invariants": {name: v.status for name, v in result.invariants.items()},
        "turns_per_s": round(result.turns_per_s, 1),
        "turns": result.turns,
        "latency_ms": latency,
        "latency_samples": {name: len(values) for name, values in sorted(
            result.latencies.items())},
        "restarts": result.restarts,
        "quarantined": result.quarantined,
        "peak_rss_mb": round(result.peak_rss_mb, 1),
        "seconds": round(result.seconds, 2),
        "workload_seconds": round(result.workload_seconds, 2),
        "sessions": config.sessions,
        "branches": result.branches,
        "batches": result.batches,
        "deliveries": result.deliveries,
        "runtime_incarnations": result.incarnations,
        "faults": sorted(config.faults),
        "injected": result.injected,
        "outcomes": result.outcomes,
        "actions": result.actions,
        "seed": config.seed,
        "state": config.state_dir,
        "problems": {n: v.problems for n, v in result.invariants.items() if v.problems},
        "notes": list(result.notes),
        "open_loop": open_loop,
        "memory_lag": memory_lag_document(result),
    }


def memory_lag_document(result: SimulationResult) -> dict[str, Any]:
    """How far memory fell behind: the lag seen at each group taken, and the group sizes."""
    ages = result.latencies.get("memory_lag", [])
    sizes = [size for size, count in result.groups.items() for _ in range(count)]
    return {
        "oldest_due_age_p50_ms": round(percentile(ages, 0.5) * 1000, 3),
        "oldest_due_age_p99_ms": round(percentile(ages, 0.99) * 1000, 3),
        "oldest_due_age_max_ms": round(max(ages, default=0.0) * 1000, 3),
        "due_waiting_max": result.due_waiting_max,
        "groups": {str(size): count for size, count in sorted(result.groups.items())},
        "group_size_mean": round(sum(sizes) / len(sizes), 2) if sizes else 0.0,
        "group_size_max": max(sizes, default=0),
    }


def render_report(result: SimulationResult) -> str:
    doc = result_document(result)
    lat = doc["latency_ms"]
    lag = doc["memory_lag"]
    loop = doc["open_loop"]
    lines = [
        (f"scriptorium simulate: {doc['sessions']} sessions, seed {doc['seed']}, "
        f"faults: {', '.join(doc['faults']) or 'none'}"),
        "",
    ]
    if loop is not None:
        lines += [
            (f"  open loop        {loop['rate']:>10} turns/s offered ({loop['arrivals']}), "
             f"{loop['issued_per_s']} issued/s"),
            (f"  late arrivals    {loop['late']:>10}   of {loop['scheduled']} (their session "
             f"was still busy; lateness p99 {loop['lateness_p99_ms']:.1f} ms, "
             f"max {loop['lateness_max_ms']:.1f} ms)"),
        ]
    lines += [
        (f"  turns            {doc['turns']:>10}   ({doc['turns_per_s']} turns/s end to end, "
        f"{doc['seconds']} s)"),
        (f"  appending        {doc['workload_seconds']:>10} s   (then the boundary for every "
        f"session: {round(doc['seconds'] - doc['workload_seconds'], 2)} s)"),
        f"  branches (tips)  {doc['branches']:>10}",
        f"  batches written  {doc['batches']:>10}   ({doc['deliveries']} node deliveries)",
        (f"  write cycle      p50 {lat.get('write_cycle_p50', 0):>8.1f} ms   "
        f"p99 {lat.get('write_cycle_p99', 0):>8.1f} ms"),
        (f"  marker merge     p50 {lat.get('marker_merge_p50', 0):>8.1f} ms   "
        f"p99 {lat.get('marker_merge_p99', 0):>8.1f} ms"),
        (f"  due -> durable   p50 {lat.get('due_to_durable_load_p50', 0):>8.1f} ms   "
         f"p99 {lat.get('due_to_durable_load_p99', 0):>8.1f} ms   (batches due under load; "
         f"all: p99 {lat.get('due_to_durable_p99', 0):.1f} ms)"
         if doc["latency_samples"].get("due_to_durable_load") else
         # 0.0 ms would read as instant; the JSON's latency_samples says 0 batches
         f"  due -> durable   n/a (no batch fell due under load; "
         f"all: p99 {lat.get('due_to_durable_p99', 0):.1f} ms)"),
        (f"  append ack       p50 {lat.get('append_ack_p50', 0):>8.3f} ms   "
        f"p99 {lat.get('append_ack_p99', 0):>8.3f} ms"),
        (f"  memory lag       p99 {lag['oldest_due_age_p99_ms']:>8.1f} ms   max "
         f"{lag['oldest_due_age_max_ms']:.1f} ms   (groups: mean {lag['group_size_mean']}, "
         f"max {lag['group_size_max']}; {lag['due_waiting_max']} due waiting at most)"),
        f"  restarts         {doc['restarts']:>10}   (supervisors healed crashed actors)",
        f"  quarantined      {doc['quarantined']:>10}",
        f"  runtime crashes  {doc['runtime_incarnations'] - 1:>10}   (reopened on the same state)",
        f"  peak RSS         {doc['peak_rss_mb']:>10} MB",
    ]
    if doc["injected"]:
        injected = ", ".join(f"{k} {v}" for k, v in sorted(doc["injected"].items()) if v)
        lines.append(f"  injected         {injected or 'nothing'}")
    lines += [f"  note             {note}" for note in doc["notes"]]
    lines += ["", "  invariant                            result   checked"]
    for name, verdict in result.invariants.items():
        lines.append(f"  {name:<36} {verdict.status:<8} {verdict.checked:>7}")
        lines += [f"      {problem}" for problem in verdict.problems[:5]]
    lines.append("")
    lines.append("ALL PASS" if result.passed else "FAIL: an invariant does not hold (see above)")
    return "\n".join(lines)


# The CLI's progress display (memory.cli._progress), which this layer may not import: the
# ``scriptorium`` group puts its factory in the click context under this key.
PROGRESS_FACTORY = "scriptorium.progress"


def _progress_view(quiet: bool) -> Any:
    """The display of this run's stages, counts and rates on stderr; None without the CLI's."""
    factory = click.get_current_context().meta.get(PROGRESS_FACTORY)
    return None if factory is None else factory("starting the runtime", counted=False,
                                                quiet=quiet)


class EndpointUnreachable(click.ClickException):
    """``--writer model`` with nothing listening at ``--base-url``: one line, the usage code."""

    exit_code = 2


def load_baselines() -> ModuleType:
    """The baselines package, imported only when ``--compare`` asks for it."""
    return importlib.import_module("memory.simulate.baselines")


def _compare(baselines: ModuleType, config: SimulationConfig) -> tuple[object, str]:
    """The baselines' report on the same workload size and seed, and its Markdown."""
    report = baselines.run_baselines(seed=config.seed, sessions=config.sessions,
                                     turns=config.turns)
    return report, baselines.render_baselines(report)


@click.command("simulate")
@click.option("--sessions", default=60, show_default=True, help="Concurrent simulated agents.")
@click.option("--turns", default=30, show_default=True, help="Turns each agent appends.")
@click.option("--seed", default=0, show_default=True, help="Seed of every random choice.")
@click.option("--faults", "faults_spec", default="", metavar="SPEC",
              help=f"Comma-separated faults or 'all': {', '.join(FAULTS)}.")
@click.option("--backend", type=click.Choice(["asyncio", "trio"]), default="asyncio",
              show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("--state", "state_dir", type=click.Path(file_okay=False, path_type=str),
              default=None, callback=lambda _ctx, _param, value: (
                  state_path(value) if value is not None else None),
              help="Keep the simulated state here (default: a temporary dir).")
@click.option("--compare", is_flag=True, help="Also run the ledger baselines on the same workload.")
@click.option("--threshold", type=int, default=8000, show_default=True,
              help="Owed tokens that trigger a write (the reference accepts 8000/16000/32000).")
@click.option("--idle-after", type=float, default=None,
              help="Idle seconds before owed turns are written (default: --session-idle).")
@click.option("--session-idle", type=float, default=2.0, show_default=True,
              help="Idle seconds before a session's boundary runs (compressed clock).")
@click.option("--watchdog-poll", type=float, default=2.0, show_default=True,
              help="Seconds between the idle watchdog's polls.")
@click.option("--writer", type=click.Choice(["extractive", "model"]), default="extractive",
              show_default=True, help="The writer: built-in, or a model endpoint.")
@click.option("--base-url", default=None, help="--writer model: the endpoint's base URL.")
@click.option("--model", default=None, help="--writer model: the model name.")
@click.option("--provider", type=click.Choice(["openai", "anthropic"]), default=None,
              help="--writer model: the wire format (default openai).")
@click.option("--rate", type=float, default=None, metavar="TURNS_PER_S",
              help="Open loop: turns arrive at this average rate whatever the runtime does "
                   "(default: closed loop, each agent's next turn when its last returned).")
@click.option("--arrivals", type=click.Choice(ARRIVALS), default="poisson", show_default=True,
              help="The open loop's arrival process (with --rate).")
@click.option("--cpu-worker", type=click.Choice(CPU_WORKER_MODES), default="thread",
              show_default=True,
              help="Where the writer's and the commit's CPU work runs (RuntimeConfig.cpu_worker).")
@click.option("--journal", type=click.Choice(JOURNAL_MODES), default="session",
              show_default=True,
              help="Where mutations are made durable (RuntimeConfig.journal): each session's "
                   "journal, or one runtime log shared by every session.")
@click.option("--processes", type=click.IntRange(min=1), default=None,
              show_default=f"{PROCESSES}; 1 with --writer model",
              help="Shard the agents by session id over this many processes, each with its own "
                   "runtime on the one state (1: this process alone).")
@click.option("--quiet", "-q", is_flag=True,
              help="Draw no progress on stderr (it is drawn only on a terminal anyway).")
def simulate(sessions: int, turns: int, seed: int, faults_spec: str, backend: str,
             as_json: bool, state_dir: str | None, compare: bool, threshold: int,
             idle_after: float | None, session_idle: float, watchdog_poll: float,
             writer: str, base_url: str | None, model: str | None,
             provider: str | None, rate: float | None, arrivals: str,
             cpu_worker: CpuWorkerMode, journal: JournalMode, processes: int | None,
             quiet: bool) -> None:
    """Run concurrent simulated agents with seeded faults, then check every invariant."""
    model_config = None
    try:
        check_model_flags(writer, {"base_url": base_url, "model": model, "provider": provider})
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None
    if writer == "model":  # settings from $SCRIPTORIUM_MODEL_* and the flags; key from env
        try:
            model_config = model_settings({}, os.environ, {
                "base_url": base_url, "model": model, "provider": provider},
                where="--writer model")
        except SettingsError as exc:
            raise click.UsageError(str(exc)) from None
    try:
        faults = parse_faults(faults_spec)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--faults") from None
    if sessions < 1 or turns < 1:
        raise click.BadParameter("--sessions and --turns must be at least 1")
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise click.BadParameter(f"--rate must be a positive number of turns/s, not {rate}",
                                 param_hint="--rate")
    try:
        check_threshold(threshold, "--threshold")
        for flag, value in (("--idle-after", idle_after), ("--session-idle", session_idle),
                            ("--watchdog-poll", watchdog_poll)):
            if value is not None:
                check_seconds(value, flag, flag.lstrip("-").replace("-", "_"))
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None
    if model_config is not None:  # before a run whose every batch would fail on it
        try:
            anyio.run(probe_endpoint, model_config, backend=backend)
        except EndpointUnreachableError as exc:
            raise EndpointUnreachable(str(exc)) from None
    baselines = load_baselines() if compare else None  # before a run that may take minutes
    if (warning := threshold_warning(threshold)) is not None:
        click.echo(f"scriptorium: warning: {warning}", err=True)
    with tempfile.TemporaryDirectory(prefix="scriptorium-sim-") as temporary:
        state = state_dir or temporary
        if state_dir and os.path.isdir(os.path.join(state_dir, "sessions")) and os.listdir(
                os.path.join(state_dir, "sessions")):
            raise click.UsageError(f"--state {state_dir} already holds sessions; "
                                   "give an empty or new directory")
        os.makedirs(state, mode=0o700, exist_ok=True)
        view = _progress_view(quiet)
        config = SimulationConfig(state_dir=state, sessions=sessions, turns=turns, seed=seed,
                                  faults=faults, progress=view,
                                  on_event=None if view is None else view.on_event,
                                  threshold=threshold, idle_after=idle_after,
                                  session_idle=session_idle, watchdog_poll=watchdog_poll,
                                  model=model_config, rate=rate, arrivals=arrivals,
                                  cpu_worker=cpu_worker, journal=journal,
                                  processes=processes if processes is not None else
                                  1 if model_config is not None else PROCESSES)
        with warnings.catch_warnings(), view or contextlib.nullcontext():  # warned above
            warnings.simplefilter("ignore", ReferenceThresholdWarning)
            result = anyio.run(run_simulation, config, backend=backend)
        document = result_document(result)
        compared_text = None
        if baselines is not None:
            document["compare"], compared_text = _compare(baselines, config)
        if not state_dir:
            document["state"] = None
        if as_json:
            sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
        else:
            click.echo(render_report(result))
            if compare and document["compare"] is not None:
                click.echo("")
                click.echo(compared_text or orjson.dumps(document["compare"]).decode())
    if not result.passed:
        sys.exit(1)
