"""Scriptorium `memory.cli`: the ``scriptorium`` command line (SPEC §8).

Layout (see docs/architecture.md): ``_cli`` the commands; ``_cli_errors``
one-line errors and exit codes; ``_session_view`` the session tree view;
``_import_command`` ``scriptorium import`` (registered here: it builds on ``_cli``),
``_agent_import_command`` its ``claude-code``, ``codex`` and ``pi`` commands.
"""

from memory.cli._agent_import_command import register_agent_imports
from memory.cli._cli import main as main
from memory.cli._import_command import import_group

main.add_command(import_group)
register_agent_imports(import_group)

__all__ = [
    "main",
]
