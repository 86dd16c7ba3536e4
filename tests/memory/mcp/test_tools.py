"""The MCP tools and resources, called through the SDK's own client on a runtime in this process.

The transports are tested with real processes (test_serve_stdio, test_serve_http);
here every tool's result and every refusal, on asyncio and trio.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import CallToolResult, TextContent, TextResourceContents

from memory.mcp import MAX_CONTENT_CHARS, TOPICS_URI, build_server
from memory.recall import MAX_QUERY_CHARS
from memory.runtime import MemoryRuntime, open_runtime
from tests.memory.mcp._states import written_state

TOOLS = {"memory_search", "memory_context", "session_append", "session_list", "memory_pending"}


@asynccontextmanager
async def serving(state: Path) -> AsyncIterator[tuple[MemoryRuntime, Client]]:
    async with open_runtime(state) as rt, Client(build_server(rt)) as client:
        yield rt, client


def structured(result: Any) -> dict[str, Any]:
    assert isinstance(result, CallToolResult)
    assert not result.is_error, result.content
    document: dict[str, Any] | None = result.structured_content
    assert document is not None
    return document


def refusal(result: Any) -> str:
    assert isinstance(result, CallToolResult)
    assert result.is_error, result.structured_content
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


async def test_every_tool_is_listed_with_an_input_and_an_output_schema(tmp_path: Path) -> None:
    async with serving(await written_state(tmp_path)) as (_, client):
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert tool.description
    search = tools["memory_search"].input_schema
    assert search["required"] == ["query"]
    assert search["properties"]["k"]["default"] == 8
    assert search["properties"]["query"]["maxLength"] == MAX_QUERY_CHARS
    append = tools["session_append"].input_schema
    assert set(append["required"]) == {"session", "role", "content"}
    assert append["properties"]["content"]["maxLength"] == MAX_CONTENT_CHARS


async def test_search_and_context_give_the_runtimes_hits_with_their_provenance(
        tmp_path: Path) -> None:
    async with serving(await written_state(tmp_path)) as (rt, client):
        found = structured(await client.call_tool("memory_search", {"query": "sister named"}))
        expected = [hit.as_json() for hit in await rt.recall("sister named", k=8)]
        context = structured(await client.call_tool(
            "memory_context", {"query": "sister", "budget_tokens": 200, "session": "demo"}))
        direct = await rt.context("sister", budget_tokens=200, session="demo")
    assert [(h["kind"], h["text"], h["file"]) for h in found["hits"]] == [
        (h["kind"], h["text"], h["file"]) for h in expected]
    assert any("Alice" in hit["text"] for hit in found["hits"])
    for hit in found["hits"]:  # where each came from: the turn, or the paragraph and its turns
        if hit["kind"] == "source":
            assert hit["session"] == "demo" and hit["node_id"] and hit["speaker"]
        else:
            assert hit["block_id"] and hit["sources"]
    assert context["text"] == direct.text and context["tokens"] == direct.tokens <= 200
    assert context["cited"] == [list(pair) for pair in direct.cited]


async def test_append_is_idempotent_by_id_and_pending_and_list_see_it(tmp_path: Path) -> None:
    turn = {"session": "agent-1", "role": "user", "content": "My cat is called Miso.", "id": "t1"}
    async with serving(await written_state(tmp_path)) as (_, client):
        first = structured(await client.call_tool("session_append", turn))
        again = structured(await client.call_tool("session_append", turn))
        reply = structured(await client.call_tool("session_append", {
            "session": "agent-1", "role": "assistant", "content": "Noted.", "predecessor": "t1"}))
        pending = structured(await client.call_tool("memory_pending", {"session": "agent-1"}))
        sessions = structured(await client.call_tool("session_list", {}))
    assert first["created_session"] and not again["created_session"]
    assert first["node"] == again["node"]  # the same node, not a second one
    assert first["node"]["id"] == "t1" and first["node"]["content"] == turn["content"]
    assert reply["node"]["predecessor"] == "t1"
    assert [t["node_id"] for t in pending["pending"]] == ["t1", reply["node"]["id"]]
    assert pending["tokens"] == sum(t["tokens"] for t in pending["pending"]) > 0
    rows = {row["id"]: row for row in sessions["sessions"]}
    assert set(rows) == {"demo", "agent-1"}
    assert rows["agent-1"]["head_id"] == reply["node"]["id"]


async def test_memory_is_written_while_the_server_serves(tmp_path: Path) -> None:
    """A turn past the write threshold is written by the runtime's own trigger and then found."""
    filler = " ".join(f"word{i}" for i in range(20_000))  # past the 16,000-token trigger
    fact = "My brother Bartholomew lives in Lisbon."
    async with serving(await written_state(tmp_path)) as (rt, client):
        structured(await client.call_tool("session_append", {
            "session": "agent-2", "role": "user", "content": f"{fact} {filler}", "id": "big"}))
        await rt.drain()  # the trigger queued the write as the append returned
        assert not structured(await client.call_tool(
            "memory_pending", {"session": "agent-2"}))["pending"]
        texts = [content.text for resource in (await client.list_resources()).resources
                 for content in (await client.read_resource(str(resource.uri))).contents
                 if isinstance(content, TextResourceContents)]
        found = structured(await client.call_tool("memory_search", {"query": "Bartholomew"}))
    assert any("Bartholomew" in text for text in texts)  # a topic file written meanwhile
    assert any("Bartholomew" in hit["text"] for hit in found["hits"])


@pytest.mark.parametrize(("tool", "arguments", "named"), [
    ("memory_search", {"query": "tea", "k": 0}, "k"),
    ("memory_search", {"query": ""}, "query"),
    ("memory_search", {"query": "x" * (MAX_QUERY_CHARS + 1)}, "query"),
    ("memory_search", {"k": 3}, "query"),
    ("memory_search", {"query": "tea", "session": "no-such-session"}, "no-such-session"),
    ("memory_search", {"query": "tea", "session": "../etc"}, "../etc"),
    ("memory_context", {"query": "tea", "budget_tokens": -5}, "budget_tokens"),
    ("memory_context", {"query": "tea", "session": "ghost"}, "ghost"),
    ("session_append", {"session": "s", "role": "system", "content": "hi"}, "role"),
    ("session_append", {"session": "s", "role": "user", "content": "x" * (MAX_CONTENT_CHARS + 1)},
     "content"),
    ("session_append", {"session": "a/b", "role": "user", "content": "hi"}, "a/b"),
    ("session_append", {"session": "demo", "role": "user", "content": "hi", "predecessor": "nope"},
     "nope"),
    ("memory_pending", {"session": "ghost"}, "ghost"),
    ("memory_pending", {}, "session"),
    ("no_such_tool", {}, "no_such_tool"),
])
async def test_a_bad_call_is_an_error_naming_what_was_wrong_and_the_server_serves_on(
        tmp_path: Path, tool: str, arguments: dict[str, Any], named: str) -> None:
    async with serving(await written_state(tmp_path)) as (_, client):
        message = refusal(await client.call_tool(tool, arguments))
        after = structured(await client.call_tool("memory_search", {"query": "green tea"}))
    assert named in message
    assert "\n" not in message or "validation error" in message  # ours: one line
    assert after["hits"]


async def test_an_append_that_conflicts_with_a_held_turn_names_the_session_and_node(
        tmp_path: Path) -> None:
    async with serving(await written_state(tmp_path)) as (_, client):
        structured(await client.call_tool(
            "session_append", {"session": "s", "role": "user", "content": "one", "id": "n1"}))
        message = refusal(await client.call_tool(
            "session_append", {"session": "s", "role": "user", "content": "two", "id": "n1"}))
    assert "n1" in message and "'s'" in message


async def test_the_topic_files_are_resources_read_only_and_nothing_else_is(tmp_path: Path) -> None:
    state = await written_state(tmp_path)
    topics = sorted(p.relative_to(state / "memory" / "topics").as_posix()
                    for p in (state / "memory" / "topics").rglob("*.md"))
    (state / "secret.txt").write_text("not memory")
    async with serving(state) as (_, client):
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        templates = [t.uri_template for t in (await client.list_resource_templates())
                     .resource_templates]
        first = await client.read_resource(f"{TOPICS_URI}{topics[0]}")
        refused = []
        for uri in (f"{TOPICS_URI}../../secret.txt", f"{TOPICS_URI}%2E%2E/%2E%2E/secret.txt",
                    f"{TOPICS_URI}missing.md", "memory://elsewhere/x.md"):
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri)
            refused.append(str(caught.value))
        still = structured(await client.call_tool("session_list", {}))
    assert listed == [f"{TOPICS_URI}{path}" for path in topics]
    assert templates == [f"{TOPICS_URI}{{+path}}"]
    [content] = first.contents
    assert isinstance(content, TextResourceContents)
    assert content.text == (state / "memory" / "topics" / topics[0]).read_text(encoding="utf-8")
    assert all("not memory" not in message for message in refused)
    assert still["sessions"]  # and the server still serves


async def test_two_clients_appending_to_one_session_at_once_lose_and_double_nothing(
        tmp_path: Path) -> None:
    """Each sends its ten turns and then the other's again (a retry): twenty turns, each once."""
    async with open_runtime(await written_state(tmp_path)) as rt:
        server = build_server(rt)
        turns = {name: [{"session": "shared", "role": "user", "content": f"{name} says {i}",
                         "id": f"{name}-{i}"} for i in range(10)] for name in ("a", "b")}

        async def client(mine: str, theirs: str) -> None:
            async with Client(server) as session:
                for turn in [*turns[mine], *turns[theirs]]:  # theirs: new, or the same turn
                    structured(await session.call_tool("session_append", turn))

        async with anyio.create_task_group() as group:
            group.start_soon(client, "a", "b")
            group.start_soon(client, "b", "a")
        branch = await rt.sessions.get_branch("shared")
    ids = [m["id"] for m in branch if m.get("role") == "user"]
    assert sorted(ids) == sorted(t["id"] for name in turns for t in turns[name])
