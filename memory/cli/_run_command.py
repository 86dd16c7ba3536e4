"""``scriptorium run``: the memory runtime headless, until a signal (or, ``--once``, until done).

Its events are its log on stderr, a line each (``--log-json``: one JSON
object each), including the periodic ``lag`` line of how far memory is behind.
"""
from __future__ import annotations

import anyio
import click

from memory.cli._cli_errors import CliError
from memory.cli._live_inspector import INSPECT_OPTION, live_inspector, logged
from memory.cli._options import (
    LOCK_TIMEOUT_OPTION,
    _config,
    _report_writes,
    _say_writer,
    _with_runtime,
    _writer,
    creating_state_options,
    runtime_options,
    stderr_log,
    timing_options,
    writer_options,
)
from memory.cli._store_warnings import store_warnings_to
from memory.runtime._config import Shard
from memory.runtime._headless import run_headless, run_once
from store import StoreError


@click.command("run")
@click.option("--once", is_flag=True, help="Write everything owed (every session boundary), then exit.")
@click.option("--log-json", is_flag=True, help="One JSON line per event on stderr.")
@click.option("--scan-interval", type=float, default=2.0, show_default=True,
              help="Seconds between scans for sessions other processes appended to.")
@click.option("--drain-timeout", type=float, default=30.0, show_default=True,
              help="On SIGINT/SIGTERM, how long in-flight jobs may take to finish.")
@click.option("--lag-interval", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              help="Seconds between 'lag' log lines (how far memory is behind).")
@click.option("--shard", metavar="K/N", default=None,
              help="Take only the sessions whose id hashes to K of N (0 <= K < N): run N "
                   "processes, 0/N to N-1/N, on one state to use N cores.")
@LOCK_TIMEOUT_OPTION
@INSPECT_OPTION
@writer_options
@runtime_options
@timing_options
@creating_state_options
def run(once: bool, log_json: bool, scan_interval: float, drain_timeout: float,
        lag_interval: float, shard: str | None, lock_timeout: float, inspect_port: int | None,
        threshold: int | None, workers: int,
        backend: str, state_dir: str, as_json: bool, writer: str | None, base_url: str | None,
        model: str | None, provider: str | None, **timings: float | None) -> None:
    """Run the memory runtime headless until SIGINT/SIGTERM (or, with --once, until done)."""

    try:
        held = None if shard is None else Shard.parse(shard)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--shard") from None
    log = stderr_log(log_json)

    on_event, beside = live_inspector(None if once else inspect_port, state_dir, log)
    config = _config(state_dir, workers, {"threshold": threshold, **timings}, on_event=on_event,
                     lock_timeout=lock_timeout, shard=held)
    model_writer = _writer(state_dir, {"writer": writer, "base_url": base_url, "model": model,
                                       "provider": provider}, logged(log))
    if once:
        with store_warnings_to(log):
            reports = _with_runtime(state_dir, config, backend, run_once, model_writer)
        _say_writer(model_writer, as_json)
        _report_writes(reports, as_json, model_writer)
        return

    async def headless() -> None:
        try:
            await run_headless(state_dir, config=config, scan_interval=scan_interval,
                               drain_timeout=drain_timeout, lag_interval=lag_interval,
                               log=log, writer=model_writer, beside=beside)
        finally:
            if model_writer is not None:
                await model_writer.aclose()

    try:
        with store_warnings_to(log):
            anyio.run(headless, backend=backend)
    except StoreError as exc:
        raise CliError.of(exc) from None

