"""Scriptorium `memory.cli`: the ``scriptorium`` command line (SPEC §8).

Layout (see docs/architecture.md): ``_cli`` the commands; ``_cli_errors``
one-line errors and exit codes; ``_session_view`` the session tree view;
``_import_command`` ``scriptorium import`` and ``_status_command``
``scriptorium status`` (registered here: they build on ``_cli``);
``_progress`` the long commands' progress on stderr, ``_progress_rows`` its rows (rich).
"""

from memory.cli._cli import main as main
from memory.cli._import_command import import_group
from memory.cli._status_command import status

main.add_command(import_group)
main.add_command(status)

__all__ = [
    "main",
]
