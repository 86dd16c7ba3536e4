"""``scriptorium simulate --writer model`` against the scripted model server on loopback.

The model server writes every observed record into ``topics/notes.md``,
with a fixed latency and a 500 on every seventh request; the run must pass
every invariant on both backends, in both wire formats.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from memory.cli._cli import main
from tests.model_server import ScriptedModel


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_simulate_with_a_model_writer_passes_every_invariant(
    tmp_path: Path, backend: str, provider: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-simulate-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-simulate-key")
    with ScriptedModel(latency=0.01, fail_every=7).running() as server:
        result = CliRunner().invoke(main, [
            "simulate", "--writer", "model", "--base-url", server.base_url,
            "--model", "scripted-1", "--provider", provider, "--backend", backend,
            "--sessions", "4", "--turns", "12", "--session-idle", "0.4",
            "--watchdog-poll", "0.4", "--state", str(tmp_path / "state"), "--json"])
    assert result.exit_code == 0, result.output
    document = orjson.loads(result.output)
    assert set(document["invariants"].values()) == {"PASS"}, document["problems"]
    assert document["outcomes"].get("written", 0) >= 4
    assert "500" in server.behaviours and "good" in server.behaviours  # errors were injected
    assert server.requests[0]["path"].endswith(
        "/messages" if provider == "anthropic" else "/chat/completions")
    assert (tmp_path / "state" / "memory" / "topics" / "notes.md").exists()
