"""Scriptorium `memory.cli`: the ``scriptorium`` command line (SPEC §8).

Layout (see docs/architecture.md): ``_cli`` the commands; ``_cli_errors``
one-line errors and exit codes; ``_session_view`` the session tree view.
"""

from memory.cli._cli import main as main

__all__ = [
    "main",
]
