"""The README's client registrations, as a new user copies them, start a server that answers.

The ``.mcp.json`` of Claude Code and the ``[mcp_servers]`` table of codex are
taken from README.md as written, their placeholders (the console script's
path, the state) filled in; the SDK's stdio client starts the server they
name, the console script ``scriptorium``, and searches.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.memory.mcp._clients import result
from tests.memory.mcp._states import written_state

README = Path(__file__).resolve().parents[3] / "README.md"
SCRIPT = Path(sys.executable).parent / "scriptorium"  # what `pip install` put beside python


def _block(language: str, holding: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    [block] = [b for b in blocks if holding in b]
    return str(block)


def _registered(client: str, state: Path) -> dict[str, Any]:
    if client == "claude-code":
        entry: dict[str, Any] = json.loads(_block("json", "mcpServers"))["mcpServers"]["scriptorium"]
    else:
        entry = tomllib.loads(_block("toml", "mcp_servers"))["mcp_servers"]["scriptorium"]
    return {"command": entry["command"].replace("/path/to/.venv/bin/scriptorium", str(SCRIPT)),
            "args": [arg.replace("/home/me/.scriptorium", str(state)) for arg in entry["args"]]}


@pytest.mark.parametrize("client", ["claude-code", "codex"])
async def test_the_readmes_registration_starts_a_server_that_finds_a_fact(
        tmp_path: Path, client: str) -> None:
    state = await written_state(tmp_path)
    entry = _registered(client, state)
    assert entry["args"][:3] == ["mcp", "--state", str(state)]
    with anyio.fail_after(60):
        async with stdio_client(StdioServerParameters(**entry)) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            found = result(await session.call_tool("memory_search", {"query": "where is the office"}))
    assert "The office is in Berlin." in [hit["text"] for hit in found["hits"]]
