"""The MCP tools and the topic resources, over one running :class:`MemoryRuntime`.

Each tool is a thin call of the runtime's public API (``rt.recall``,
``rt.context``, ``rt.sessions.append``, ``rt.pending``); its arguments are
annotated so the SDK derives the input schema (with its bounds) and checks
every call against it, and its result is a ``TypedDict`` so the SDK
derives the output schema and sends structured content. An error the
caller can act on (a bad id, an unknown session, a conflicting append, an
argument out of range) is a :class:`ToolError`: the call answers
``isError`` with one line naming the session, node or argument, and the
server goes on serving.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.server.stdio import stdio_server
from mcp.types import Resource
from pydantic import Field
from typing_extensions import TypedDict  # typing's: no schema from pydantic on 3.11

from memory._errors import ScriptoriumMemoryError
from memory.ledger import owed_tokens
from memory.mcp._serve import StdinLines
from memory.recall import MAX_QUERY_CHARS, Hit
from memory.runtime import MemoryRuntime
from store import SessionExistsError, StoreError, list_sessions
from store.lowlevel import validate_id, walk_files

__all__ = ["MAX_CONTENT_CHARS", "TOPICS_URI", "build_server"]

# A turn an agent records is a message, not a file: a bound well under the
# store's node cap (32 MiB) that no real turn reaches, so a runaway client
# gets an error naming the argument instead of a 30 MB node in the DAG.
MAX_CONTENT_CHARS = 1_000_000
TOPICS_URI = "memory://topics/"

Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS,
                             description="What to look for, in words.")]
SessionArg = Annotated[str | None, Field(
    description="Rank this session's head branch first (default: no session).")]


class HitResult(TypedDict):
    """One recalled unit with its provenance: a topic paragraph or an archived turn."""

    kind: Literal["topic", "source"]
    text: str
    score: float
    time: str
    file: str
    block_id: str | None
    sources: list[list[str]]  # a paragraph's cited (session, node id) pairs
    session: str | None
    node_id: str | None
    speaker: str | None
    trust: str
    on_branch: bool | None


class SearchResult(TypedDict):
    query: str
    hits: list[HitResult]


class ContextResult(TypedDict):
    text: str
    tokens: int
    quoted: list[list[str]]
    cited: list[list[str]]
    hits: list[HitResult]


class AppendResult(TypedDict):
    session: str
    created_session: bool
    node: dict[str, Any]  # the store's message view of the turn (SPEC §4)


class SessionRow(TypedDict):
    id: str
    title: str
    created_at: float
    updated_at: float
    head_id: str | None


class SessionListResult(TypedDict):
    sessions: list[SessionRow]


class PendingTurn(TypedDict):
    node_id: str
    role: str
    speaker: str
    timestamp: float
    tokens: int


class PendingResult(TypedDict):
    session: str
    pending: list[PendingTurn]
    tokens: int


def _hit(hit: Hit) -> HitResult:
    return HitResult(
        kind="topic" if hit.kind == "topic" else "source", text=hit.text,
        score=float(f"{hit.score:.6g}"), time=hit.time, file=hit.file, block_id=hit.block_id,
        sources=[list(pair) for pair in hit.sources], session=hit.session,
        node_id=hit.node_id, speaker=hit.speaker, trust=hit.trust, on_branch=hit.on_branch)


@contextlib.contextmanager
def _refusing() -> Iterator[None]:
    """The caller's mistakes as a :class:`ToolError` with the typed error's one line.

    The store's and memory's errors name the session, node or argument; the
    SDK would answer any other exception with the bare tool name.
    """
    try:
        yield
    except (StoreError, ScriptoriumMemoryError) as exc:
        raise ToolError(" ".join(str(exc).split())) from None


def _session_id(session: str) -> str:
    with _refusing():
        validate_id(session, "session id")
    return session


class _MemoryServer(MCPServer[Any]):
    """The SDK's server, listing the topic files as they are when asked (they change as memory is written)."""

    def __init__(self, rt: MemoryRuntime) -> None:
        super().__init__("scriptorium", log_level="WARNING", instructions=(
            "Long-term memory of past conversations. memory_search finds facts with their "
            "sources; memory_context gives a block to put in a prompt; session_append "
            "records a turn so it is remembered."))
        self.topics_dir = os.path.join(rt.memory_dir, "topics")

    def topic_files(self) -> list[str]:
        """Every topic file, relative to ``topics/`` (posix), sorted; hidden ones left out."""
        found = walk_files(self.topics_dir, skip=lambda name: name.startswith("."))
        return sorted(path for path, _ in found if path.endswith(".md"))

    async def list_resources(self) -> list[Resource]:
        files = await anyio.to_thread.run_sync(self.topic_files)
        return [*await super().list_resources(), *(
            Resource(uri=f"{TOPICS_URI}{path}", name=path, mime_type="text/markdown",
                     description="A topic file of the memory workspace (read-only).")
            for path in files)]

    async def run_stdio_async(self) -> None:
        """The SDK's stdio serving, with stdin read by :class:`~memory.mcp._serve.StdinLines` (stdout as the SDK's)."""
        stdin = StdinLines()
        try:
            async with stdio_server(stdin=stdin) as (read, write):
                lowlevel = self._lowlevel_server  # the SDK's own run_stdio_async does the same
                await lowlevel.run(read, write, lowlevel.create_initialization_options())
        finally:
            stdin.close()

    def read_topic(self, path: str) -> str:
        # Only a file the listing holds: no path of the caller's reaches the filesystem.
        if path not in self.topic_files():
            raise ResourceNotFoundError(f"no topic file {path!r} under topics/; "
                                        "resources/list names the topic files")
        with open(os.path.join(self.topics_dir, *path.split("/")), encoding="utf-8") as handle:
            return handle.read()


def build_server(rt: MemoryRuntime) -> MCPServer[Any]:
    """The MCP server of ``rt``: five tools and the topic files as resources."""
    server = _MemoryServer(rt)

    @server.tool(description="Search long-term memory: topic paragraphs and archived turns, "
                             "best first, each with its provenance (session, node id, file).")
    async def memory_search(
        query: Query,
        k: Annotated[int, Field(ge=1, le=1000, description="How many hits.")] = 8,
        session: SessionArg = None,
    ) -> SearchResult:
        sid = None if session is None else _session_id(session)
        with _refusing():
            hits = await rt.recall(query, k=k, session=sid)
        return SearchResult(query=query, hits=[_hit(hit) for hit in hits])

    @server.tool(description="A block of memory for a prompt: what the query needs, within "
                             "budget_tokens, with the turns it quotes and cites.")
    async def memory_context(
        query: Query,
        budget_tokens: Annotated[int, Field(ge=1, le=1_000_000,
                                            description="Most tokens the block may take.")] = 500,
        session: SessionArg = None,
    ) -> ContextResult:
        sid = None if session is None else _session_id(session)
        with _refusing():
            context = await rt.context(query, budget_tokens=budget_tokens, session=sid)
        return ContextResult(text=context.text, tokens=context.tokens,
                             quoted=[list(p) for p in context.quoted],
                             cited=[list(p) for p in context.cited],
                             hits=[_hit(hit) for hit in context.hits])

    @server.tool(description="Record one turn of a conversation in a session (created if it "
                             "does not exist). With an id, appending the same turn again "
                             "changes nothing; without one, each call appends a new turn.")
    async def session_append(
        session: Annotated[str, Field(min_length=1, description="The session id.")],
        role: Literal["user", "assistant"],
        content: Annotated[str, Field(max_length=MAX_CONTENT_CHARS)],
        id: Annotated[str | None, Field(description="The turn's own id.")] = None,
        predecessor: Annotated[str | None, Field(
            description="The turn this one answers (default: the session's head).")] = None,
    ) -> AppendResult:
        sid = _session_id(session)
        message: dict[str, Any] = {"role": role, "content": content}
        if id is not None:
            message["id"] = id
        if predecessor is not None:
            message["predecessor"] = predecessor
        created = False
        with _refusing():
            if not await anyio.to_thread.run_sync(_session_exists, rt.state_dir, sid):
                try:
                    await rt.sessions.create(session_id=sid)
                    created = True
                except SessionExistsError:  # created meanwhile by another client
                    pass
            node = await rt.sessions.append(sid, message)
        return AppendResult(session=sid, created_session=created, node=node)

    @server.tool(description="The sessions memory holds, newest first.")
    async def session_list() -> SessionListResult:
        rows = await anyio.to_thread.run_sync(list_sessions, rt.state_dir)
        return SessionListResult(sessions=[SessionRow(
            id=row["id"], title=row["title"], created_at=row["created_at"],
            updated_at=row["updated_at"], head_id=row["head_id"]) for row in rows])

    @server.tool(description="The turns of a session's head branch not yet written to memory.")
    async def memory_pending(
        session: Annotated[str, Field(min_length=1, description="The session id.")],
    ) -> PendingResult:
        sid = _session_id(session)
        with _refusing():
            owed = await rt.pending(sid)
        return PendingResult(session=sid, tokens=owed_tokens(owed), pending=[PendingTurn(
            node_id=r.message_id, role=r.role, speaker=r.speaker, timestamp=r.timestamp,
            tokens=r.tokens) for r in owed])

    @server.resource(f"{TOPICS_URI}{{+path}}", name="topic", mime_type="text/markdown",
                     description="A topic file of the memory workspace (read-only).")
    async def topic(path: str) -> str:
        return await anyio.to_thread.run_sync(server.read_topic, path)

    return server


def _session_exists(state_dir: str, session: str) -> bool:
    return os.path.isfile(os.path.join(state_dir, "sessions", session, "meta.json"))
