"""The inspector's web app: server-rendered pages over the state, read-only by construction.

Starlette routes, Jinja2 templates with autoescape on (every text from a
session or a topic is hostile: a turn may hold ``<script>``, a topic a
``javascript:`` link, a line a megabyte), assets served from this package
(no CDN: it runs offline). Read-only:

- every route is GET (and HEAD); anything else is 405 from the router;
- a page reads through :mod:`memory.inspect._state` (sessions as found,
  audit as found) and recall through :mod:`memory.inspect._sources`
  (an index in memory, or the running runtime): nothing opens a file of
  the state for writing;
- the Content-Security-Policy allows scripts and styles from this origin
  only, so even an unescaped ``<script>`` could not run; links to turns
  are built from ids (URL-quoted), never taken from a topic's text.

A token (``--allow-remote``) is taken once from ``?token=`` and kept in an
HttpOnly, SameSite=Strict cookie.
"""

from __future__ import annotations

import datetime
import hmac
import html
import json
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import quote

import anyio
from jinja2 import Environment, PackageLoader
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.middleware.gzip import GZipMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from memory._errors import ScriptoriumMemoryError
from memory.inspect._graph import draw_session
from memory.inspect._sources import LiveRuntime, Memory
from memory.inspect._state import (
    STATUSES,
    TopicView,
    frames_by_key,
    read_overview,
    read_session,
    read_topics_view,
    read_turn,
)
from memory.workspace import CITATION, Paragraph
from store import StoreError
from store.lowlevel import validate_id

__all__ = ["MAX_SHOWN", "inspector_app"]

MAX_SHOWN = 100_000  # characters of one text shown in a page; the rest is counted, not sent
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
TOKEN_COOKIE = "scriptorium_inspect"


def _templates() -> Environment:
    env = Environment(loader=PackageLoader("memory.inspect", "templates"), autoescape=True)
    env.filters.update(shown=shown, when=when, ago=ago, pretty=pretty, turn_url=turn_url,
                       by_session=by_session)
    env.globals["STATUSES"] = STATUSES
    return env


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """A text for a page: as it is up to ``limit`` characters, then how many were left out."""
    text = value if isinstance(value, str) else pretty(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… ({len(text) - limit:,} more characters not shown)"


def pretty(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str, sort_keys=True)


def when(seconds: object) -> str:
    if not isinstance(seconds, (int, float)):
        return "-"
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def ago(seconds: object) -> str:
    if not isinstance(seconds, (int, float)):
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def turn_url(session: str, node: str) -> str:
    return f"/session/{quote(session, safe='')}/turn/{quote(node, safe='')}"


def by_session(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(session, "id,id,...") per session of ``(session, node)`` pairs: a session page's ?quoted=."""
    found: dict[str, list[str]] = {}
    for session, node in pairs:
        found.setdefault(session, []).append(node)
    return [(session, ",".join(nodes)) for session, nodes in found.items()]


def cited_body(topic: TopicView, paragraph: Paragraph,
               frames: dict[str, tuple[str, str]]) -> Markup:
    """A paragraph's text, escaped, each citation a link to the turns its footnote cites."""
    out: list[str] = []
    body = shown(paragraph.body)
    position = 0
    for match in CITATION.finditer(body):
        out.append(html.escape(body[position:match.start()]))
        label = match.group(1)
        links = []
        for text, key in topic.links.get(label, ()):
            turn = frames.get(key) if key is not None else None
            name = html.escape(text or label)
            links.append(f'<a class="cite" href="{html.escape(turn_url(*turn))}">{name}</a>'
                         if turn else f'<span class="cite missing" title="no archived turn">'
                         f"{name}</span>")
        out.append(f'<sup>[{", ".join(links) or html.escape(label)}]</sup>')
        position = match.end()
    out.append(html.escape(body[position:]))
    return Markup("".join(out))  # every part above is escaped


class _Guard(BaseHTTPMiddleware):
    """Security headers on every answer; the token when one is required."""

    def __init__(self, app: Any, token: str | None) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        given = request.query_params.get("token")
        if self.token is not None:
            held = request.cookies.get(TOKEN_COOKIE, "")
            if not any(hmac.compare_digest(value.encode(), self.token.encode())
                       for value in (given or "", held)):
                return PlainTextResponse("a token is required: open the URL the inspector "
                                         "printed", status_code=401)
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        if self.token is not None and given:
            response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict")
        return response


def inspector_app(
    state_dir: str, memory: Memory, *, live: LiveRuntime | None = None,
    token: str | None = None, hosts: Sequence[str] | None = None,
) -> Starlette:
    """The app over ``state_dir``; ``hosts``: the Host headers accepted (None: any)."""
    env = _templates()

    def page(name: str, status: int = 200, **values: Any) -> HTMLResponse:
        values.setdefault("live", live is not None)
        return HTMLResponse(env.get_template(name).render(**values), status_code=status)

    def reads(handler: Callable[[Request], Awaitable[Response]]
              ) -> Callable[[Request], Awaitable[Response]]:
        """A read that fails says so in the page, naming what it could not read."""
        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except (StoreError, ScriptoriumMemoryError, OSError, ValueError) as error:
                return page("error.html", 404 if isinstance(error, ValueError) else 500,
                            title="Cannot show this", error=str(error))
        return guarded

    @reads
    async def overview(request: Request) -> Response:
        facts = await anyio.to_thread.run_sync(read_overview, state_dir)
        return page("overview.html", title="Overview", o=facts, state=state_dir)

    def _session_id(request: Request) -> str:
        sid = str(request.path_params["sid"])
        validate_id(sid, "session id")
        return sid

    @reads
    async def session(request: Request) -> Response:
        sid = _session_id(request)
        view = await anyio.to_thread.run_sync(read_session, state_dir, sid)
        quoted = frozenset(request.query_params.get("quoted", "").split(","))
        svg, layout = draw_session(sid, view.turns, view.head, view.tips, quoted)
        return page("session.html", title=f"Session {sid}", v=view, svg=Markup(svg),
                    counts=view.counts(), hidden=len(view.turns) - len(layout.order))

    @reads
    async def turn(request: Request) -> Response:
        sid = _session_id(request)
        node_id = str(request.path_params["nid"])

        def load() -> Any:
            return read_turn(state_dir, read_session(state_dir, sid), node_id)

        detail = await anyio.to_thread.run_sync(load)
        if detail is None:
            raise ValueError(f"session {sid!r} has no node {node_id!r}")
        name = "_turn.html" if request.query_params.get("part") else "turn.html"
        return page(name, title=f"Turn {node_id}", d=detail, n=detail.turn.node)

    @reads
    async def memory_page(request: Request) -> Response:
        query = request.query_params.get("q", "")[:4000]
        k = _bounded(request.query_params.get("k"), 8, 1, 100)
        budget = _bounded(request.query_params.get("budget"), 500, 1, 100_000)

        def topics() -> tuple[list[TopicView], dict[str, tuple[str, str]]]:
            views = read_topics_view(state_dir)
            keys = {key for view in views for pairs in view.links.values()
                    for _, key in pairs if key is not None}
            return views, frames_by_key(state_dir, sorted({key.split("#")[0] for key in keys}))

        views, frames = await anyio.to_thread.run_sync(topics)
        hits = block = None
        if query.strip():
            hits = await memory.recall(query, k=k)
            block = await memory.context(query, budget_tokens=budget)
        return page("memory.html", title="Memory", topics=views, frames=frames, q=query, k=k,
                    budget=budget, hits=hits, block=block, cited_body=cited_body)

    async def runtime(request: Request) -> Response:
        return page("runtime.html", title="Runtime",
                    running=live is not None and live.running)

    async def runtime_json(request: Request) -> Response:
        return JSONResponse(live.document() if live is not None else {"running": False})

    static = os.path.join(os.path.dirname(__file__), "static")
    routes = [
        Route("/", overview, methods=["GET"]),
        Route("/session/{sid}", session, methods=["GET"]),
        Route("/session/{sid}/turn/{nid}", turn, methods=["GET"]),
        Route("/memory", memory_page, methods=["GET"]),
        Route("/runtime", runtime, methods=["GET"]),
        Route("/runtime.json", runtime_json, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=static), name="static"),
    ]
    # A 5,000-turn session page is 1.5 MB of SVG, 0.15 MB compressed.
    middleware = [Middleware(GZipMiddleware, minimum_size=4096), Middleware(_Guard, token=token)]
    if hosts is not None:
        middleware.insert(0, Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts)))
    return Starlette(routes=routes, middleware=middleware)


def _bounded(value: str | None, default: int, low: int, high: int) -> int:
    if value is None or not re.fullmatch(r"\d{1,9}", value):
        return default
    return max(low, min(high, int(value)))
