"""``scriptorium import jsonl FILE [--session SID]``: history kept elsewhere, appended to a session.

The rules (what a line holds, skipped repeats, all or nothing) are
:mod:`memory.runtime._import`'s; this is the command around them: a bad
line is one line on stderr naming the file and the line, exit 2 (the file
is the command's argument, like a bad flag); an import that stopped part
way is exit 3 and says to run it again.
"""

from __future__ import annotations

import math
import os
import sys
import warnings

import click

from memory._errors import ImportInterruptedError, ReferenceThresholdWarning, ScriptoriumMemoryError
from memory.cli._cli_errors import EXIT_USAGE, CliError
from memory.cli._options import _with_runtime, creating_state_options, emit_json
from memory.cli._progress import QUIET_OPTION, ProgressView
from memory.ledger import WritePolicy
from memory.runtime import RuntimeConfig
from memory.runtime._import import ImportReport, import_jsonl
from memory.runtime._runtime import MemoryRuntime

__all__ = ["import_group"]


@click.group("import")
def import_group() -> None:
    """Import conversations kept elsewhere into sessions."""


@import_group.command("jsonl")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=str))
@click.option("--session", "session", default=None,
              help="The session to import into (created if missing; default: import- and "
                   "12 hex of the file's sha256, so the same file lands in the same session).")
@QUIET_OPTION
@creating_state_options
def import_jsonl_command(file: str, session: str | None, quiet: bool, state_dir: str,
                         as_json: bool) -> None:
    """Append FILE's messages (one JSON object a line) to a session.

    Each line: {"role": "user"|"assistant", "content": ..., "created_at"?:
    seconds, "id"?: ..., "predecessor"?: ..., "speaker"?: ..., other keys are
    metadata}. The whole file is checked first: a bad line imports nothing.
    A line whose id the session already holds is skipped, so importing the
    same file again changes nothing.
    """

    async def body(rt: MemoryRuntime) -> ImportReport:
        try:
            with ProgressView(f"importing {os.path.basename(file)}", "turns",
                              quiet=quiet) as progress:
                return await import_jsonl(rt, file, session=session, progress=progress)
        except ImportInterruptedError:
            raise  # the state could not be written: exit 3, run it again
        except ScriptoriumMemoryError as exc:  # a bad line, an unusable session id
            raise CliError(" ".join(str(exc).split()), EXIT_USAGE) from None

    report = _with_runtime(state_dir, _append_only_config(), "asyncio", body)
    if as_json:
        emit_json(report.to_json())
        return
    new = " (new session)" if report.created_session else ""
    click.echo(f"{report.session}{new}: imported {report.imported} turn(s), skipped "
               f"{report.skipped} already there")


def _append_only_config() -> RuntimeConfig:
    """A runtime that appends and never writes memory: no trigger, no boundary, no poll.

    An import only brings turns in. Writing them is ``run``'s or ``memory
    write``'s job, with the writer the state is configured for: the
    runtime's default writer, firing on an imported file's first 16,000
    tokens, would write a model-writer state's memory with the extractive
    writer.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReferenceThresholdWarning)  # never reached anyway
        policy = WritePolicy(threshold=sys.maxsize, idle_after=math.inf)
    return RuntimeConfig(writer_workers=1, policy=policy, session_idle=math.inf,
                         watchdog_poll=math.inf)
