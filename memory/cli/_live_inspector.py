"""``scriptorium run --inspect``: the web inspector beside the running runtime.

Apart from ``_inspect_command`` because ``run`` (in ``_cli``) uses it, and
``_inspect_command`` builds on ``_cli``. The URL is one ``inspector`` event
of the run's log. memory.inspector (the optional extra) is imported only
when asked for: without it, one line says what to install (exit 2).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio
import click

from memory.cli._cli_errors import EXIT_USAGE, CliError
from memory.writers import Event, EventListener

if TYPE_CHECKING:
    from memory.inspector import LiveRuntime
    from memory.runtime import MemoryRuntime

__all__ = ["INSPECT_OPTION", "inspector_hosts", "live_inspector", "load_inspector", "logged"]


def load_inspector() -> Any:
    """``memory.inspector``, or a one-line usage error naming the extra to install."""
    try:
        inspector = importlib.import_module("memory.inspector")  # late: the optional extra
    except ImportError as error:
        # 'scriptorium[inspect]' would fetch an unrelated PyPI project of that name
        raise CliError("the inspector: a package of the inspect extra is missing: "
                       f"{str(error.name).partition('.')[0]}; "
                       "pip install -e '.[inspect]' (from the Scriptorium checkout)",
                       EXIT_USAGE) from None
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
) -> tuple[EventListener, Callable[[MemoryRuntime], Coroutine[Any, Any, None]] | None]:
    """``run --inspect``: the run's event hook (its log and the live page's) and what runs beside.

    Without ``--inspect``: the log alone, and nothing beside.
    """
    if inspect_port is None:
        return logged(log), None
    inspector = load_inspector()
    live: LiveRuntime = inspector.LiveRuntime()

    def on_event(event: Event) -> None:
        live.on_event(event)
        log(event.as_record())

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


def logged(log: Callable[[dict[str, Any]], None]) -> EventListener:
    """An event listener writing each event's record to ``log`` (a line of the run's log)."""

    def on_event(event: Event) -> None:
        log(event.as_record())

    return on_event
