"""``scriptorium run --inspect``: the web inspector beside the running runtime.

Apart from ``_inspect_command`` because ``run`` (in ``_cli``) uses it, and
``_inspect_command`` builds on ``_cli``. The URL is one ``inspector`` event
of the run's log. memory.inspect (the optional extra) is imported only
when asked for: without it, one line says what to install (exit 2).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio
import click

from memory.cli._cli_errors import EXIT_USAGE, CliError

if TYPE_CHECKING:
    from memory.inspect import LiveRuntime
    from memory.runtime import MemoryRuntime

__all__ = ["INSPECT_OPTION", "inspector_hosts", "live_inspector", "load_inspector"]


def load_inspector() -> Any:
    """``memory.inspect``, or a one-line usage error naming the extra to install."""
    try:
        import memory.inspect as inspector
    except ImportError as error:
        raise CliError(f"the inspector needs its extra ({error.name} is missing): "
                       "pip install 'scriptorium[inspect]'", EXIT_USAGE) from None
    return inspector


def inspector_hosts(host: str, inspector: Any) -> list[str] | None:
    """The Host headers a loopback server answers (against DNS rebinding); None: any."""
    if not inspector.is_loopback(host):
        return None
    return ["127.0.0.1", "localhost", "::1", "[::1]", host]


INSPECT_OPTION = click.option(
    "--inspect", "inspect_port", type=click.IntRange(0, 65535), default=None, is_flag=False,
    flag_value=0, help="Serve the web inspector on 127.0.0.1 beside the runtime "
    "(--inspect: a free port; --inspect=PORT); its URL is logged as an 'inspector' event.")


def live_inspector(
    inspect_port: int | None, state_dir: str, log: Callable[[dict[str, Any]], None],
) -> tuple[Callable[[dict[str, Any]], None],
           Callable[[MemoryRuntime], Coroutine[Any, Any, None]] | None]:
    """``run --inspect``: the run's event hook (its log and the live page's) and what runs beside.

    Without ``--inspect``: the log alone, and nothing beside.
    """
    if inspect_port is None:
        return log, None
    inspector = load_inspector()
    live: LiveRuntime = inspector.LiveRuntime()

    def on_event(event: dict[str, Any]) -> None:
        live.on_event(event)
        log(event)

    async def beside(rt: MemoryRuntime) -> None:
        app = inspector.inspector_app(state_dir, live, live=live,
                                      hosts=inspector_hosts("127.0.0.1", inspector))
        server = inspector.InspectorServer(app, "127.0.0.1", inspect_port)
        url = await anyio.to_thread.run_sync(server.start)
        log({"event": "inspector", "url": url})
        try:
            await live.sample_forever(rt)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(server.stop)

    return on_event, beside
