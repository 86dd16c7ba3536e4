"""Scriptorium `memory.cli`: the ``scriptorium`` command line (SPEC §8).

Layout (see docs/architecture.md): ``_cli`` the commands; ``_cli_errors``
one-line errors and exit codes; ``_session_view`` the session tree view;
``_import_command`` ``scriptorium import`` (registered here: it builds on ``_cli``);
``_consolidate_command`` ``memory consolidate`` and ``memory history`` (registered
on ``_cli``'s ``memory`` group by being imported here);
``_progress`` the long commands' progress on stderr, ``_progress_rows`` its rows (rich).
"""

from memory.cli import _consolidate_command  # noqa: F401 (registers its commands)
from memory.cli._cli import main as main
from memory.cli._import_command import import_group

main.add_command(import_group)

__all__ = [
    "main",
]
