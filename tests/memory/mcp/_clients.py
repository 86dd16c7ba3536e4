"""What the transport tests ask a served state through the SDK's client, and how they start servers."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from mcp import ClientSession, MCPError
from mcp.types import CallToolResult, TextContent, TextResourceContents

from tests.memory.mcp._states import FACTS

__all__ = ["SERVE", "exercise", "http_server", "result", "two_agents_at_once"]

# `scriptorium mcp` as the console script runs it, from the interpreter running the tests.
SERVE = [sys.executable, "-c", "from memory.cli import main; main()", "mcp"]


def result(answer: Any, *, error: bool = False) -> dict[str, Any]:
    """A tool's structured result, or (``error``) ``{"text": <its one message>}``."""
    assert isinstance(answer, CallToolResult)
    assert answer.is_error is error, answer.content
    if error:
        [content] = answer.content
        assert isinstance(content, TextContent)
        return {"text": content.text}
    document: dict[str, Any] | None = answer.structured_content
    assert document is not None
    return document


async def exercise(client: ClientSession, agent: str) -> None:
    """Every tool, a resource, and bad arguments, each answered, the server serving throughout."""
    await client.initialize()
    tools = {tool.name for tool in (await client.list_tools()).tools}
    assert tools == {"memory_search", "memory_context", "session_append", "session_list",
                     "memory_pending"}
    found = result(await client.call_tool("memory_search", {"query": "Berlin office", "k": 3}))
    assert FACTS[2] in [hit["text"] for hit in found["hits"]]
    context = result(await client.call_tool("memory_context", {"query": "green tea"}))
    assert "green tea" in context["text"] and context["tokens"] <= 500
    bad = result(await client.call_tool("memory_search", {"query": "tea", "k": "many"}),
                 error=True)
    assert "k" in bad["text"]
    unknown = result(await client.call_tool("memory_pending", {"session": "nobody"}), error=True)
    assert "nobody" in unknown["text"]
    node = result(await client.call_tool("session_append", {
        "session": agent, "role": "user", "content": f"{agent} likes rye bread.", "id": "t1"}))
    assert node["node"]["id"] == "t1"
    pending = result(await client.call_tool("memory_pending", {"session": agent}))
    assert [turn["node_id"] for turn in pending["pending"]] == ["t1"]
    sessions = {row["id"] for row in result(await client.call_tool("session_list", {}))["sessions"]}
    assert {"demo", agent} <= sessions
    resources = (await client.list_resources()).resources
    assert resources and all(str(r.uri).startswith("memory://topics/") for r in resources)
    [content] = (await client.read_resource(str(resources[0].uri))).contents
    assert isinstance(content, TextResourceContents) and content.text.startswith("# ")
    try:
        await client.read_resource("memory://topics/../../sessions/demo/meta.json")
    except MCPError as exc:
        assert "Unknown resource" in str(exc)
    else:
        raise AssertionError("a path out of topics/ was read")
    again = result(await client.call_tool("memory_search", {"query": "sister"}))
    assert again["hits"]  # still serving after every refusal


async def two_agents_at_once(connect: Callable[[], AbstractAsyncContextManager[Any]]) -> None:
    """Two clients, each on its own ``connect()`` transport, :func:`exercise` the server together."""
    async def agent(name: str) -> None:
        async with connect() as (read, write), ClientSession(read, write) as client:
            await exercise(client, name)

    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            group.start_soon(agent, "agent-a")
            group.start_soon(agent, "agent-b")


@asynccontextmanager
async def http_server(state: Path, *args: str, token: str | None = None,
                      ) -> AsyncIterator[tuple[anyio.abc.Process, str, list[bytes]]]:
    """``scriptorium mcp --http 127.0.0.1:0`` in a process: it, its URL, its stderr so far.

    The URL is read from the server's stderr line; the rest of stderr is
    read on as it comes (a full pipe would stall the server).
    """
    env = {**os.environ, "SCRIPTORIUM_MCP_TOKEN": token or ""}
    errors: list[bytes] = []
    listening = anyio.Event()

    async def read_stderr(stream: anyio.abc.ByteReceiveStream) -> None:
        async for chunk in stream:
            errors.append(chunk)
            _, found, rest = b"".join(errors).partition(b"mcp serving ")
            if found and b"\n" in rest:
                listening.set()

    async with await anyio.open_process(
            [*SERVE, "--state", str(state), "--http", "127.0.0.1:0", *args],
            env=env, stdin=None) as process, anyio.create_task_group() as group:
        assert process.stderr is not None
        group.start_soon(read_stderr, process.stderr)
        with anyio.fail_after(60):
            await listening.wait()
        url = b"".join(errors).decode().split("mcp serving ", 1)[1].split()[0]
        try:
            yield process, url, errors
        finally:
            if process.returncode is None:
                process.terminate()
            with anyio.move_on_after(30):
                await process.wait()
            if process.returncode is None:  # a test that failed on a hung server: no stray
                process.kill()
