"""The inspector's server: uvicorn on its own event loop, in its own thread.

uvicorn serves on asyncio, while ``scriptorium run`` may run on trio, so the
server never shares the runtime's loop: it runs in a daemon thread and
reaches a running runtime only through :class:`~memory.inspect._sources.LiveRuntime`.
``port=0`` binds a free port; :attr:`InspectorServer.url` is the one bound.

Binding: loopback unless ``allow_remote`` (then a token is required, and
one is made when none is given), and on loopback only loopback Host
headers are answered (a page of another site cannot reach the inspector
through DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import secrets
import threading
from types import TracebackType
from typing import Any, Self

import uvicorn

from memory._errors import SettingsError

__all__ = ["InspectorServer", "check_bind", "is_loopback"]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, allow_remote: bool, token: str | None) -> str | None:
    """The token the server requires (None on loopback without one); refuses a remote bind.

    Raises :class:`~memory._errors.SettingsError` (a usage error) for a
    non-loopback ``host`` without ``allow_remote``.
    """
    if not is_loopback(host) and not allow_remote:
        raise SettingsError("--host", f"{host!r} is not a loopback address; the inspector "
                            "serves the whole state, so bind elsewhere only with "
                            "--allow-remote (a token is then required)")
    if allow_remote and not is_loopback(host):
        return token or secrets.token_urlsafe(24)
    return token


class InspectorServer:
    """``with InspectorServer(app, host, port) as server: server.url`` (see the module)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None) -> None:
        self.host = host
        self.token = token
        self.server = uvicorn.Server(uvicorn.Config(
            app, host=host, port=port, log_level="warning", access_log=False,
            lifespan="off", server_header=False))
        self.thread = threading.Thread(target=self.server.run, name="inspector", daemon=True)
        self.port = port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        suffix = f"/?token={self.token}" if self.token else "/"
        return f"http://{host}:{self.port}{suffix}"

    def start(self) -> str:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise OSError(f"the inspector could not listen on {self.host}:{self.port}")
            self.thread.join(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
