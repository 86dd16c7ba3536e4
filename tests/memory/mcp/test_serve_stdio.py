"""``scriptorium mcp`` over stdio: a real server process started by the SDK's own stdio client.

How Claude Code and codex run it. The server runs on asyncio and on trio
(``--backend``), the client on both (the test's backend).
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from store import SessionCore, SessionOptions
from tests.memory.mcp._clients import SERVE, exercise, two_agents_at_once
from tests.memory.mcp._states import written_state

# A client's first words, then one turn recorded (the raw lines, as any client sends them).
OPENING = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "session_append",
        "arguments": {"session": "demo", "role": "user", "content": "Bye.", "id": "bye"}}},
]


def _server(state: Path, backend: str) -> StdioServerParameters:
    return StdioServerParameters(command=SERVE[0],
                                 args=[*SERVE[1:], "--state", str(state), "--backend", backend])


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_a_stdio_client_calls_every_tool_and_reads_a_resource(
        tmp_path: Path, backend: str) -> None:
    state = await written_state(tmp_path)
    with anyio.fail_after(120):
        async with stdio_client(_server(state, backend)) as (read, write), \
                ClientSession(read, write) as client:
            await exercise(client, "agent-a")


async def test_two_stdio_servers_serve_one_state_at_once(tmp_path: Path) -> None:
    """Two agents each start their own server on one state: both serve, neither waits."""
    state = await written_state(tmp_path)
    await two_agents_at_once(lambda: stdio_client(_server(state, "asyncio")))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sigterm_while_the_client_is_silent_ends_the_server_cleanly(
        tmp_path: Path, backend: str) -> None:
    """A client that signals without closing stdin: exit 0 at once, the session let go."""
    state = anyio.run(written_state, tmp_path)
    with subprocess.Popen([*SERVE, "--state", str(state), "--backend", backend],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as server:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(b"".join(json.dumps(line).encode() + b"\n" for line in OPENING))
        server.stdin.flush()
        assert json.loads(server.stdout.readline())["id"] == 1
        appended = json.loads(server.stdout.readline())
        assert appended["id"] == 2 and not appended["result"].get("isError"), appended
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            raise AssertionError("the server did not stop on SIGTERM") from None
    assert code == 0, server.stderr.read() if server.stderr else b""
    core = SessionCore.open(state, "demo", options=SessionOptions(lock_timeout=0.0))  # a held lock: an error at once
    assert core.get_branch()[-1]["id"] == "bye"
    core.append({"role": "assistant", "content": "See you."})
    core.close()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_requests_from_a_file_are_answered_and_its_end_ends_the_server(
        tmp_path: Path, backend: str) -> None:
    """stdin a regular file (``scriptorium mcp < requests.jsonl``): no event loop can poll it.

    Its end is the client gone: a request still running then is answered
    "Connection closed" (the SDK's rule), so only the handshake is asked.
    """
    state = anyio.run(written_state, tmp_path)
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(json.dumps(OPENING[0]).encode() + b"\n")
    with requests.open("rb") as stdin:
        done = subprocess.run([*SERVE, "--state", str(state), "--backend", backend], stdin=stdin,
                              capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [answer["id"] for answer in answers] == [1]
    assert answers[0]["result"]["serverInfo"]["name"] == "scriptorium"
