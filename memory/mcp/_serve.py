"""Serving the MCP server: over stdio, or over streamable HTTP with its exposure rule.

stdio is how Claude Code, codex and most clients start a server: one
client, the server's lifetime is the client's. HTTP serves any number of
clients at once on one runtime; it listens on loopback unless told
otherwise, and an address other machines can reach is refused unless
``allow_remote`` is given *and* a bearer token, which every request must
then carry (the memory holds whatever the agents said: it is not served
to a network without a secret).
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, cast

import anyio
import anyio.lowlevel
import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

from memory._errors import SettingsError

__all__ = ["BearerAuth", "HttpAddress", "StdinLines", "check_exposure", "parse_http_address",
           "serve_http", "serve_stdio"]

MCP_PATH = "/mcp"
GRACE_SECONDS = 3  # how long a stopping HTTP server waits for requests still running


@dataclass(frozen=True, slots=True)
class HttpAddress:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a name other than localhost: it may resolve anywhere
            return False

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port if port is None else port}{MCP_PATH}"


def parse_http_address(text: str, flag: str = "--http") -> HttpAddress:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; port 0: any free port), or a :class:`SettingsError`."""
    host, colon, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise SettingsError(flag, f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:8765)")
    return HttpAddress(host, int(port))


def check_exposure(address: HttpAddress, *, allow_remote: bool, token: str | None,
                   flag: str = "--http") -> None:
    """Refuse an address beyond loopback unless ``allow_remote`` and a bearer token are both given."""
    if address.loopback:
        return
    if not allow_remote:
        raise SettingsError(flag, f"{address.host} is not a loopback address: memory would be "
                                  "served to the network; add --allow-remote and set "
                                  "SCRIPTORIUM_MCP_TOKEN, or listen on 127.0.0.1")
    if not token:
        raise SettingsError(flag, f"serving {address.host} with --allow-remote needs a bearer "
                                  "token: set SCRIPTORIUM_MCP_TOKEN")


class BearerAuth:
    """ASGI middleware: every HTTP request carries ``Authorization: Bearer <token>``, or gets 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):  # constant time: no token oracle
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body",
                            "body": b"a bearer token is required (Authorization: Bearer ...)\n"})
                return
        await self.app(scope, receive, send)


class StdinLines(anyio.AsyncFile[str]):
    """stdin as lines, read when the event loop says it is readable: no worker thread.

    The SDK reads stdin in a worker thread, and a cancel waits for the thread:
    a SIGTERM while the client is silent would wait for the next line (and
    the interpreter, on exit, for the thread). Here a pending read is just a
    wait that a cancel ends (POSIX: the loop's reader on the descriptor).
    """

    def __init__(self) -> None:
        self.fd = os.dup(0)  # our own descriptor; the SDK leaves fd 0 alone when given one
        super().__init__(cast(IO[str], os.fdopen(self.fd, "rb", buffering=0)))
        os.set_blocking(self.fd, False)
        self.pending = bytearray()
        self.eof = False
        self.pollable = True

    async def readline(self) -> str:
        searched = 0
        while True:
            end = self.pending.find(b"\n", searched)
            if end >= 0 or self.eof:
                size = end + 1 if end >= 0 else len(self.pending)
                line = bytes(self.pending[:size])
                del self.pending[:size]
                return line.decode("utf-8", errors="replace")
            searched = len(self.pending)
            if self.pollable:
                try:
                    await anyio.wait_readable(self.fd)
                except PermissionError:  # a regular file or /dev/null: epoll refuses it,
                    self.pollable = False  # and a read of it never blocks
            else:
                await anyio.lowlevel.checkpoint()
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:  # woken for nothing
                continue
            self.eof = not chunk
            self.pending += chunk

    def close(self) -> None:
        os.set_blocking(self.fd, True)  # the description is shared with fd 0
        self.wrapped.close()


async def _until_signalled(serve: Callable[[], Awaitable[None]],
                           stop: Callable[[], None] | None = None) -> None:
    """Run ``serve`` until it returns, or until SIGINT or SIGTERM (then ``stop()``, or cancel it).

    A client ends a server it started by closing stdin or by a signal: either
    way the caller's ``open_runtime`` block then ends as it should (in-flight
    writes drained, session locks and the runtime log closed), rather than
    the process dying inside it.
    """
    async with anyio.create_task_group() as group:
        async def watch() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    (stop or group.cancel_scope.cancel)()
                    return

        group.start_soon(watch)
        await serve()
        group.cancel_scope.cancel()


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handlers: it would re-raise SIGTERM after serving and
    kill the process before the runtime closes; :func:`_until_signalled` stops it instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_stdio(server: MCPServer[Any]) -> None:
    """Serve one client on stdin/stdout until it closes stdin or signals."""
    await _until_signalled(server.run_stdio_async)


async def serve_http(server: MCPServer[Any], address: HttpAddress, *, token: str | None,
                     on_listening: Callable[[str], None]) -> None:
    """Serve streamable HTTP on ``address`` until SIGINT or SIGTERM (uvicorn: asyncio only).

    The socket is bound here, before serving, so ``on_listening`` gets the
    URL with the port actually bound (``:0`` picks a free one).
    """
    app: ASGIApp = server.streamable_http_app(streamable_http_path=MCP_PATH, host=address.host)
    if token:
        app = BearerAuth(app, token)
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address.host, address.port))
            sock.listen(128)
        except OSError as error:  # only the address's own trouble is said as such
            raise SettingsError(f"--http {address.host}:{address.port}",
                                f"{error.strerror or error}; pick another port") from None
        # An open event stream never ends by itself: a client still connected must
        # not keep a stopping server (and its runtime) up for good.
        config = uvicorn.Config(app, log_level="warning", lifespan="on",
                                timeout_graceful_shutdown=GRACE_SECONDS)
        on_listening(address.url(sock.getsockname()[1]))
        runner = _Uvicorn(config)

        def stop() -> None:
            runner.should_exit = True

        await _until_signalled(lambda: runner.serve(sockets=[sock]), stop)
    finally:
        sock.close()
