"""Scriptorium `memory.cli`: the ``scriptorium`` command line (SPEC §8).

Layout (see docs/architecture.md): ``_cli`` the groups and every command's
registration; ``_options`` what the commands share (``--state``, ``--json``,
the runtime's options); the commands by group: ``_session_commands``,
``_memory_commands``, ``_recall_commands``, ``_run_command``,
``_import_command``, ``_consolidate_command``, ``_agent_import_command`` (import's ``claude-code``, ``codex``
and ``pi``), ``_status_command``, ``_mcp_command``, ``_inspect_command``
(``scriptorium inspect``); ``_live_inspector`` ``run --inspect``; ``_cli_errors``
one-line errors and exit codes; ``_session_view`` the session tree view;
``_progress`` the long commands' progress on stderr, ``_progress_rows`` its rows (rich).
"""

from memory.cli._cli import main as main

__all__ = [
    "main",
]
