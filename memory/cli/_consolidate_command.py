"""``scriptorium memory consolidate`` and ``scriptorium memory history`` (issue 23).

``consolidate`` runs one pass of the offline consolidator now (the runtime
also runs them by itself, see :mod:`memory.runtime._consolidation`);
``--dry-run`` prints the pass as a unified diff of the topic files and
changes nothing. A pass that would lose a fact is refused whole: one line
saying what would have been lost, exit 1. A write that landed while the
pass was planned: exit 3, run it again. ``history`` prints the record each
pass left (what was merged, superseded, folded, before and after).
"""

from __future__ import annotations

import os
import time
from typing import Any, Literal, cast

import anyio
import click

from memory._errors import ConcurrentUpdateError, ConsolidationRefusedError
from memory.cli._cli_errors import EXIT_FAILURE, EXIT_PROBLEMS, CliError
from memory.cli._options import _writer, emit_json, state_options, writer_options
from memory.consolidation import (
    ModelConsolidator,
    PreparedPass,
    consolidate_offline,
    consolidate_with_model,
    consolidate_workspace,
    read_history,
)

__all__ = ["memory_consolidate", "memory_history"]


@click.command("consolidate")
@click.option("--dry-run", is_flag=True, help="Print the pass as a diff; change nothing.")
@click.option("--scope", type=click.Choice(["local", "global"]), default="local",
              show_default=True,
              help="Which counters the pass resets: local (batches and tokens since the last "
                   "pass) or global (also the daily pass's, and sets last_global_at).")
@writer_options
@state_options
def memory_consolidate(dry_run: bool, scope: str, state_dir: str, as_json: bool,
                       writer: str | None, base_url: str | None, model: str | None,
                       provider: str | None) -> None:
    """Merge facts stated twice, supersede changed ones, fold facts about one subject.

    Nothing is lost: every cited source stays cited and every block id still
    resolves (merged paragraphs keep the ids they absorbed), or the pass is
    refused whole. Each pass leaves a record ('scriptorium memory history').
    With a model writer (--writer model, or configured), the model proposes
    the edits and the same check judges them.
    """
    memory_dir = os.path.join(state_dir, "memory")
    chosen = cast(Literal["local", "global"], scope)
    model_writer = _writer(state_dir, {"writer": writer, "base_url": base_url, "model": model,
                                       "provider": provider}, None)
    try:
        if model_writer is None:
            prepared = consolidate_workspace(memory_dir, consolidate_offline, scope=chosen,
                                             now=time.time(), dry_run=dry_run)
        else:
            async def by_model() -> PreparedPass:
                try:
                    return await consolidate_with_model(
                        memory_dir, ModelConsolidator(model_writer.endpoint), scope=chosen,
                        now=time.time(), dry_run=dry_run)
                finally:
                    await model_writer.aclose()

            prepared = anyio.run(by_model)
    except ConsolidationRefusedError as error:
        raise CliError(f"scriptorium: {state_dir}/memory: {error}", EXIT_PROBLEMS) from None
    except ConcurrentUpdateError:
        raise CliError(f"scriptorium: {state_dir}/memory changed while the pass was planned "
                       "(a write landed); nothing was changed: run it again", EXIT_FAILURE
                       ) from None
    if as_json:
        emit_json({**prepared.record, "dry_run": dry_run,
                   **({"diff": prepared.diff} if dry_run else {})})
        return
    if dry_run and prepared.diff:
        click.echo(prepared.diff, nl=False)
    click.echo(_summary(prepared.record, dry_run))


def _summary(record: dict[str, Any], dry_run: bool) -> str:
    kinds: dict[str, int] = {}
    for action in record["actions"]:
        kinds[action["kind"]] = kinds.get(action["kind"], 0) + 1
    if not kinds:
        return "nothing to consolidate"
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    verb = "would change" if dry_run else "changed"
    return f"pass {record['pass']} ({record['scope']}): {counts}; {verb} {len(record['files'])} " \
           f"topic file(s)"


@click.command("history")
@click.option("--limit", type=click.IntRange(min=0), default=None,
              help="Only the last N passes.")
@state_options
def memory_history(limit: int | None, state_dir: str, as_json: bool) -> None:
    """The consolidation passes, oldest first: what each merged, superseded and folded."""
    records = read_history(os.path.join(state_dir, "memory"), limit=limit)
    if as_json:
        emit_json(records)
        return
    if not records:
        click.echo("no consolidation pass yet")
    for record in records:
        click.echo(f"{record.get('at')} {record.get('scope')} pass {record.get('pass')}: "
                   f"{len(record.get('actions', []))} action(s)")
        for action in record.get("actions", []):
            ids = "".join(f" ^{i}" for i in [action["block"], *action.get("absorbed", [])] if i)
            click.echo(f"  {action['kind']} {action['path']}{ids}: {action['reason']}")
            for before in action.get("before", []) if action["kind"] != "fold" else []:
                click.echo("    - " + before.replace("\n", "\n      "))
            if action.get("after"):
                click.echo("    + " + action["after"].replace("\n", "\n      "))
        for block, reason in record.get("removed", {}).items():
            click.echo(f"  removed ^{block}: {reason}")
