"""``scriptorium import claude-code|codex|pi [PATH]...``: real agents' histories, DAG kept.

The rules (what each line becomes, the id rule, what is new) are
:mod:`memory.importers`'; this is the command around them. Each session is
one line of output; a file with a malformed line is one line on stderr
naming the file and the line (nothing of its session imported) and the
command ends with exit 1 after importing the others; an import that stopped
part way is exit 3 and says to run it again.

One-shot imports only bring turns in (``memory write`` or ``run`` writes
them); ``--follow`` keeps importing as the agent writes, with the runtime
writing memory as for any session (triggers, idle boundaries), until
SIGINT/SIGTERM.
"""

from __future__ import annotations

import signal

import anyio
import click

from memory.cli._cli_errors import EXIT_FAILURE, EXIT_PROBLEMS, EXIT_USAGE, CliError
from memory.cli._import_command import _append_only_config
from memory.cli._options import _config, _with_runtime, _writer, creating_state_options, emit_json
from memory.importers import AGENTS, DEFAULT_ROOTS, ImportPass, LogImporter, follow_logs
from memory.runtime import MemoryRuntime

__all__ = ["register_agent_imports"]

_HELP = {
    "claude-code": "Claude Code sessions (~/.claude/projects/**/<session>.jsonl, with their "
                   "subagents/ files)",
    "codex": "Codex CLI rollouts (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl)",
    "pi": "pi sessions (~/.pi/agent/sessions/**/*.jsonl)",
}


def _session_line(row: dict[str, object], dry_run: bool) -> str:
    verb = "would import" if dry_run else "imported"
    new = " (new session)" if row["created"] else ""
    parts = [f"{row['session']}{new}: {verb} {row['imported']} turn(s)"]
    extra = [f"{row[k]} {label}" for k, label in (("summaries", "summary node(s)"),
                                                  ("spawn_roots", "sub-agent branch(es)"))
             if row[k]]
    if extra:
        parts.append(f" ({', '.join(extra)})")
    parts.append(f", {row['already']} already there; {row['left_out']} tool/meta line(s) left out")
    unknown = row["unknown"]
    if isinstance(unknown, dict) and unknown:
        counted = ", ".join(f"{kind} x{n}" for kind, n in sorted(unknown.items()))
        parts.append(f"; unknown record types skipped: {counted}")
    changed = row["changed"]
    if isinstance(changed, list) and changed:
        parts.append(f"; {len(changed)} turn(s) changed in the log since they were imported, "
                     f"kept as imported ({', '.join(changed[:3])})")
    return "".join(parts)


def _say(report: ImportPass, *, dry_run: bool, as_json: bool, following: bool) -> None:
    for error in report.errors:
        click.echo(f"scriptorium: {' '.join(error.split())}", err=True)
    if as_json:
        emit_json({**report.to_json(), "dry_run": dry_run})
        return
    for session in report.sessions:
        row = session.to_json()
        if following and not row["imported"]:
            continue
        click.echo(_session_line(row, dry_run))
    for file in [] if following else report.waiting:  # following: it comes when complete
        click.echo(f"{file}: its last line is not complete yet; it is imported once it is",
                   err=True)


def _command(agent: str) -> click.Command:
    @click.command(agent, help=f"Import {_HELP[agent]} into sessions, branches and sub-agents "
                   f"kept.\n\nPATH: log files or directories (default {DEFAULT_ROOTS[agent]}). "
                   "Importing again appends only what is new.")
    @click.argument("paths", nargs=-1, type=click.Path(path_type=str))
    @click.option("--follow", is_flag=True,
                  help="Keep importing as the agent writes (memory is written meanwhile); "
                       "stop with Ctrl-C.")
    @click.option("--poll", type=click.FloatRange(min=0.05), default=2.0, show_default=True,
                  help="With --follow: seconds between passes without a file event.")
    @click.option("--dry-run", is_flag=True, help="Say what would be imported; write nothing.")
    @creating_state_options
    def command(paths: tuple[str, ...], follow: bool, poll: float, dry_run: bool,
                state_dir: str, as_json: bool) -> None:
        importer = LogImporter(agent, paths)
        missing = [str(p) for p in importer.paths if not p.exists()]
        if missing and not follow:
            raise CliError(f"{missing[0]}: no such file or directory; give the path of "
                           f"{agent}'s logs", EXIT_USAGE)
        if not missing and not follow and not importer.log_files():
            raise CliError(f"{', '.join(map(str, importer.paths))}: no {agent} logs (*.jsonl) "
                           "found there; give the directory or file of its logs", EXIT_USAGE)
        if follow and dry_run:
            raise CliError("--follow and --dry-run together: a dry run imports nothing to "
                           "follow; drop one", EXIT_USAGE)
        if follow:
            _follow(importer, poll, state_dir, as_json)
            return

        async def body(rt: MemoryRuntime) -> ImportPass:
            return await importer.run(rt, dry_run=dry_run)

        report = _with_runtime(state_dir, _append_only_config(), "asyncio", body)
        _say(report, dry_run=dry_run, as_json=as_json, following=False)
        if report.interrupted:
            raise click.exceptions.Exit(EXIT_FAILURE)
        if report.errors:
            raise click.exceptions.Exit(EXIT_PROBLEMS)

    return command


def _follow(importer: LogImporter, poll: float, state_dir: str, as_json: bool) -> None:
    config = _config(state_dir, 1, {})
    writer = _writer(state_dir, {}, None)

    def on_pass(report: ImportPass) -> None:
        _say(report, dry_run=False, as_json=as_json, following=True)

    async def body(rt: MemoryRuntime) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: follow_logs(rt, importer, poll=poll, on_pass=on_pass))
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    break
            tg.cancel_scope.cancel()

    _with_runtime(state_dir, config, "asyncio", body, writer)


def register_agent_imports(group: click.Group) -> None:
    """Add ``claude-code``, ``codex`` and ``pi`` to the ``import`` group."""
    for agent in AGENTS:
        group.add_command(_command(agent))
