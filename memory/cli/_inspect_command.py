"""``scriptorium inspect`` and ``scriptorium run --inspect``: the web inspector (memory/inspector).

``inspect`` serves a read-only view of a state and prints its URL (on
stdout, or ``{"url": ...}`` with ``--json``), until Ctrl-C. ``run
--inspect`` (:mod:`memory.cli._live_inspector`) serves the same beside the
running runtime, plus its live page.

The server needs the optional extra (``pip install -e '.[inspect]'`` from the Scriptorium checkout):
without it the command says so in one line (exit 2), and every other
command works as before (memory.inspector is imported only here, late).
Exit codes: 0 stopped by Ctrl-C; 2 usage (a non-loopback --host without
--allow-remote, the extra missing, --state not a state directory); 3 the
port could not be bound.
"""

from __future__ import annotations

import threading

import click

from memory._errors import SettingsError
from memory.cli._cli_errors import EXIT_FAILURE, CliError
from memory.cli._live_inspector import inspector_hosts, load_inspector
from memory.cli._options import emit_json, state_options

__all__ = ["inspect_command"]


@click.command("inspect")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to serve on; loopback unless --allow-remote.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="The port (0: a free one; the URL printed says which).")
@click.option("--allow-remote", is_flag=True,
              help="Allow a non-loopback --host; a token is then required (printed in the URL).")
@click.option("--token", default=None, envvar="SCRIPTORIUM_INSPECT_TOKEN",
              help="The token for --allow-remote (default: $SCRIPTORIUM_INSPECT_TOKEN or a new one).")
@state_options
def inspect_command(host: str, port: int, allow_remote: bool, token: str | None,
                    state_dir: str, as_json: bool) -> None:
    """Serve a read-only web inspector of the state and print its URL; Ctrl-C stops it.

    Pages: the overview (sessions, written and owed turns, memory lag,
    quarantine, the audit), each session's DAG, memory (topics, search,
    the context preview) and, with ``scriptorium run --inspect``, the
    runtime. Nothing under --state is written.
    """
    inspector = load_inspector()
    try:
        token = inspector.check_bind(host, allow_remote, token)
    except SettingsError as error:
        raise CliError.of(error) from None
    memory = inspector.StateMemory(state_dir)
    app = inspector.inspector_app(state_dir, memory, token=token, hosts=inspector_hosts(host, inspector))
    server = inspector.InspectorServer(app, host, port, token)
    try:
        url = server.start()
    except OSError as error:
        raise CliError(f"inspect: cannot serve on {host}:{port}: {error}", EXIT_FAILURE) from None
    try:
        if as_json:
            emit_json({"url": url})
        else:
            click.echo(url)
        threading.Event().wait()  # until Ctrl-C
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        memory.close()
