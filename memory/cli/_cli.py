"""The ``scriptorium`` command line (SPEC §8): its groups and where each command is registered.

The commands live by group: ``_session_commands`` (``session ...``),
``_memory_commands`` (``memory ...``), ``_recall_commands`` (``memory
search|context|reindex``), ``_run_command``, ``_import_command``,
``_status_command``, ``_mcp_command``, ``_consolidate_command`` (``memory
consolidate|history``) and ``memory.simulate``'s
``simulate``; what they share (``--state``, ``--json``, the runtime's
options) is ``_options``'s. This module makes the groups and registers
every command, in one place.

Errors go to stderr as one line naming the session, node or file, with the
exit codes of ``memory.cli._cli_errors`` (the traceback only with
``scriptorium --debug``). click is the framework (see docs/decisions.md):
it parses, documents and tests commands. The long commands draw their
progress on stderr through ``memory.cli._progress`` (off with ``--quiet``
or off a terminal).
"""

from __future__ import annotations

import click

from memory.cli._agent_import_command import register_agent_imports
from memory.cli._cli_errors import ReportingGroup
from memory.cli._consolidate_command import memory_consolidate, memory_history
from memory.cli._import_command import import_group
from memory.cli._inspect_command import inspect_command
from memory.cli._mcp_command import mcp_command
from memory.cli._memory_commands import (
    memory_audit,
    memory_backfill,
    memory_migrate,
    memory_pending,
    memory_release,
    memory_write,
)
from memory.cli._progress import ProgressView
from memory.cli._recall_commands import memory_context, memory_reindex, memory_search
from memory.cli._run_command import run
from memory.cli._session_commands import (
    session_branch,
    session_branches,
    session_list,
    session_show,
)
from memory.cli._status_command import status
from memory.simulate._command import PROGRESS_FACTORY, simulate

__all__ = ["main"]


@click.group(cls=ReportingGroup)
@click.version_option(package_name="scriptorium")
def main() -> None:
    """Scriptorium: the long-term memory runtime of an agent whose conversations are DAGs.

    Exit codes: 0 ok; 1 a problem found or work left undone; 2 usage (bad
    option, unsafe or unknown id, --state not a state directory); 3 the
    state could not be read or written (corrupt file, I/O error).
    """
    click.get_current_context().meta[PROGRESS_FACTORY] = ProgressView  # simulate draws with it


@main.group()
def session() -> None:
    """Inspect the session DAGs under <state>/sessions."""


@main.group()
def memory() -> None:
    """The memory ledger: what each branch still owes."""


for _command in (session_list, session_branches, session_branch, session_show):
    session.add_command(_command)
for _command in (memory_pending, memory_write, memory_release, memory_migrate, memory_backfill,
                 memory_audit, memory_search, memory_context, memory_reindex,
                 memory_consolidate, memory_history):
    memory.add_command(_command)
for _command in (run, simulate, import_group, status, mcp_command, inspect_command):
    main.add_command(_command)
register_agent_imports(import_group)
