"""``scriptorium mcp``: the memory served to agents over MCP, by stdio or streamable HTTP.

The runtime runs as under ``scriptorium run`` (its supervision tree, the
write triggers, the idle watchdog): memory is written while the server
serves. Over stdio, stdout carries only the protocol; every event line
goes to stderr. Exit codes as every command: 2 for a bad ``--http``, an
address beyond loopback without ``--allow-remote`` and a token, or the
``mcp`` extra missing; 3 for a state that cannot be read or written.
"""

from __future__ import annotations

import os

import anyio
import click

from memory.cli._cli_errors import EXIT_USAGE, CliError
from memory.cli._live_inspector import logged
from memory.cli._options import (
    _config,
    _with_runtime,
    _writer,
    creating_state_options,
    runtime_options,
    stderr_log,
    timing_options,
    writer_options,
)
from memory.runtime import MemoryRuntime

__all__ = ["mcp_command"]

TOKEN_ENV = "SCRIPTORIUM_MCP_TOKEN"


@click.command("mcp")
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio "
                   "(port 0: a free port, printed on stderr).")
@click.option("--allow-remote", is_flag=True,
              help=f"Allow --http on an address beyond loopback (needs ${TOKEN_ENV}).")
@click.option("--log-json", is_flag=True, help="One JSON line per runtime event on stderr.")
@click.option("--drain-timeout", type=float, default=30.0, show_default=True,
              help="When the client goes, how long in-flight memory writes may take to finish.")
@writer_options
@runtime_options
@timing_options
@creating_state_options
def mcp_command(http: str | None, allow_remote: bool, log_json: bool, drain_timeout: float,
                threshold: int | None, workers: int, backend: str, state_dir: str,
                as_json: bool, writer: str | None, base_url: str | None, model: str | None,
                provider: str | None, **timings: float | None) -> None:
    """Serve memory to agents over the Model Context Protocol (stdio by default).

    Tools: memory_search, memory_context, session_append, session_list,
    memory_pending; resources: the topic files (memory://topics/<file>).
    With --http, every request must carry "Authorization: Bearer $SCRIPTORIUM_MCP_TOKEN"
    when that variable is set; an address beyond loopback is refused unless
    --allow-remote is given and the variable is set (exit 2).
    """
    try:
        from memory.mcp import (
            build_server,
            check_exposure,
            parse_http_address,
            serve_http,
            serve_stdio,
        )
    except ImportError as exc:  # the optional extra
        # 'scriptorium[mcp]' would fetch an unrelated PyPI project of that name
        raise CliError("scriptorium mcp: a package of the mcp extra is missing: "
                       f"{str(exc.name).partition('.')[0]}; "
                       "pip install -e '.[mcp]' (from the Scriptorium checkout)",
                       EXIT_USAGE) from None
    token = os.environ.get(TOKEN_ENV) or None
    address = None
    if http is not None:
        try:
            address = parse_http_address(http)
            check_exposure(address, allow_remote=allow_remote, token=token)
        except ValueError as exc:  # SettingsError: names --http
            raise CliError.of(exc) from None
        if backend != "asyncio":
            raise CliError("--http serves with uvicorn, which runs on asyncio only: "
                           "drop --backend trio (stdio runs on trio too)", EXIT_USAGE)

    log = stderr_log(True)

    on_event = logged(log) if log_json else None
    config = _config(state_dir, workers, {"threshold": threshold, **timings}, on_event=on_event)
    model_writer = _writer(state_dir, {"writer": writer, "base_url": base_url, "model": model,
                                       "provider": provider}, on_event)

    def listening(url: str) -> None:
        click.echo(f"scriptorium: mcp serving {url}", err=True)

    async def serve(rt: MemoryRuntime) -> None:
        server = build_server(rt)
        if address is None:
            await serve_stdio(server)
        else:
            await serve_http(server, address, token=token, on_listening=listening)
        with anyio.move_on_after(drain_timeout):  # turns owed a write get it
            await rt.drain()

    _with_runtime(state_dir, config, backend, serve, model_writer)
