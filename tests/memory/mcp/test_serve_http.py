"""``scriptorium mcp --http``: a real server process on 127.0.0.1, the SDK's streamable HTTP client.

Network only to loopback: the server listens on 127.0.0.1 on a port the
system picks (``:0``), and prints the URL it bound.
"""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from store import SessionCore, SessionOptions
from tests.memory.mcp._clients import http_server, result, two_agents_at_once
from tests.memory.mcp._states import written_state

TOKEN = "t0ken-for-the-test"


async def test_two_clients_at_once_call_every_tool_and_the_server_serves_on(
        tmp_path: Path) -> None:
    state = await written_state(tmp_path)
    async with http_server(state) as (process, url, _):
        await two_agents_at_once(lambda: streamable_http_client(url))
        assert process.returncode is None  # still serving
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await process.wait() == 0
    for agent_id in ("agent-a", "agent-b"):  # appended, and the runtime let go of the sessions
        core = SessionCore.open(state, agent_id)
        assert [m["id"] for m in core.get_branch()][-1] == "t1"
        core.close()


async def test_with_a_token_every_request_without_it_is_401(tmp_path: Path) -> None:
    state = await written_state(tmp_path)
    async with http_server(state, token=TOKEN) as (_, url, _errors):
        hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        async with httpx2.AsyncClient() as plain:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                response = await plain.post(url, json=hello, headers=headers)
                assert response.status_code == 401, headers
                assert response.headers["www-authenticate"] == "Bearer"
            assert (await plain.get(url)).status_code == 401
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as authed, \
                streamable_http_client(url, http_client=authed) as (read, write), \
                ClientSession(read, write) as client:
            await client.initialize()
            found = result(await client.call_tool("memory_search", {"query": "sister"}))
            assert any("Alice" in hit["text"] for hit in found["hits"])


async def test_sigterm_with_a_client_still_connected_ends_the_server(tmp_path: Path) -> None:
    """A client's open event stream does not keep a stopping server up: exit 0, turns kept."""
    state = await written_state(tmp_path)
    async with http_server(state) as (process, url, _), streamable_http_client(url) as (
            read, write), ClientSession(read, write) as client:
        await client.initialize()
        result(await client.call_tool("session_append", {
            "session": "held", "role": "user", "content": "Still here.", "id": "h1"}))
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await process.wait() == 0
    core = SessionCore.open(state, "held", options=SessionOptions(lock_timeout=0.0))
    assert core.get_branch()[-1]["id"] == "h1"
    core.close()
