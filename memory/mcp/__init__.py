"""Scriptorium `memory.mcp`: memory served to any agent over the Model Context Protocol (issue 22).

Layout (see docs/architecture.md): ``_tools`` the tools and the topic
resources over a running runtime (the SDK's ``MCPServer``); ``_serve``
the transports (stdio, streamable HTTP) and the HTTP exposure rule (loopback,
or ``--allow-remote`` with a bearer token). Needs the ``mcp`` extra
(``pip install -e '.[mcp]'`` from the Scriptorium checkout).
"""

from memory.mcp._serve import BearerAuth as BearerAuth
from memory.mcp._serve import HttpAddress as HttpAddress
from memory.mcp._serve import check_exposure as check_exposure
from memory.mcp._serve import parse_http_address as parse_http_address
from memory.mcp._serve import serve_http as serve_http
from memory.mcp._serve import serve_stdio as serve_stdio
from memory.mcp._tools import MAX_CONTENT_CHARS as MAX_CONTENT_CHARS
from memory.mcp._tools import TOPICS_URI as TOPICS_URI
from memory.mcp._tools import build_server as build_server

__all__ = [
    "MAX_CONTENT_CHARS",
    "TOPICS_URI",
    "BearerAuth",
    "HttpAddress",
    "build_server",
    "check_exposure",
    "parse_http_address",
    "serve_http",
    "serve_stdio",
]
