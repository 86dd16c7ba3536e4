"""Scriptorium `memory.cli`: the ``scriptorium`` command line (SPEC §8).

Layout (see docs/architecture.md): ``_cli`` the commands; ``_cli_errors``
one-line errors and exit codes; ``_session_view`` the session tree view;
``_import_command`` ``scriptorium import``, ``_status_command`` ``scriptorium status`` and
``_mcp_command`` ``scriptorium mcp`` (registered here: they build on ``_cli``);
``_agent_import_command`` import's ``claude-code``, ``codex`` and ``pi`` commands;
``_progress`` the long commands' progress on stderr, ``_progress_rows`` its rows (rich).
"""

from memory.cli._agent_import_command import register_agent_imports
from memory.cli._cli import main as main
from memory.cli._import_command import import_group
from memory.cli._mcp_command import mcp_command
from memory.cli._status_command import status

main.add_command(import_group)
main.add_command(status)
main.add_command(mcp_command)
register_agent_imports(import_group)

__all__ = [
    "main",
]
