"""``memory write`` and ``memory backfill`` use the configured writer, and say which.

They used to build the runtime with the built-in extractive writer whatever
``<state>/scriptorium.toml`` or ``$SCRIPTORIUM_MODEL_*`` chose: a user who
configured a model saw memory written, by another writer. Against the
loopback model server, each command now sends its batches to the model
chosen exactly as ``scriptorium run`` chooses it, and names the writer in
its output (on stderr after the run; in the ``--json`` document).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner, Result

from memory.cli._cli import main
from tests.memory.cli._states import FACTS, owing_state
from tests.model_server import ScriptedModel


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def configure(state: Path, how: str, server: ScriptedModel,
              monkeypatch: pytest.MonkeyPatch) -> None:
    """Choose the model writer through the file or through the environment, never a flag."""
    if how == "toml":
        (state / "scriptorium.toml").write_text(
            f'[writer]\nkind = "model"\nbase_url = "{server.base_url}"\nmodel = "m-1"\n'
            'retry_initial = 0.01\n')
    else:
        for name, value in (("WRITER", "model"), ("MODEL_BASE_URL", server.base_url),
                            ("MODEL_MODEL", "m-1"), ("MODEL_RETRY_INITIAL", "0.01")):
            monkeypatch.setenv("SCRIPTORIUM_" + name, value)


def notes(state: Path) -> str:
    path = state / "memory" / "topics" / "notes.md"  # the scripted model's file
    return path.read_text() if path.exists() else ""


@pytest.mark.parametrize("how", ["toml", "env"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_memory_write_uses_the_configured_model_writer_and_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, backend: str,
) -> None:
    state = owing_state(tmp_path)
    with ScriptedModel().running() as server:
        configure(state, how, server, monkeypatch)
        result = invoke("memory", "write", "demo", "--force", "--backend", backend,
                        "--state", str(state))
        as_json = invoke("memory", "write", "demo", "--force", "--json", "--state", str(state))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert server.requests and server.requests[0]["path"] == "/v1/chat/completions"
    assert all(request["body"]["model"] == "m-1" for request in server.requests)
    [line] = result.stdout.splitlines()  # stdout: one line per session, as before
    assert line.startswith("demo: written")
    assert f"scriptorium: writer: model m-1 (openai) at {server.base_url}" in result.stderr
    assert "noted: I prefer green tea" in notes(state)  # the model's words, not extractive's
    assert orjson.loads(as_json.stdout)["writer"] == {
        "kind": "model", "model": "m-1", "provider": "openai", "base_url": server.base_url}


def test_memory_write_without_a_model_configured_says_extractive(tmp_path: Path) -> None:
    state = owing_state(tmp_path)
    result = invoke("memory", "write", "demo", "--force", "--state", str(state))
    assert result.exit_code == 0, result.output
    assert "scriptorium: writer: extractive (built-in)" in result.stderr.splitlines()
    result = invoke("memory", "write", "demo", "--force", "--json", "--state", str(state))
    assert orjson.loads(result.stdout)["writer"] == {"kind": "extractive"}


@pytest.mark.parametrize("how", ["toml", "env"])
def test_memory_backfill_uses_the_configured_model_writer_and_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str,
) -> None:
    state = owing_state(tmp_path)
    # A model that answers nothing usable: the batch is archived (the cycle's first
    # step) and fails, so its sources are archived, trusted and cited by no topic.
    with ScriptedModel(default="malformed").running() as server:
        configure(state, how, server, monkeypatch)
        failed = invoke("memory", "write", "demo", "--force", "--state", str(state))
    assert failed.exit_code == 1 and server.requests, failed.output
    assert notes(state) == ""
    with ScriptedModel().running() as server:
        configure(state, how, server, monkeypatch)
        result = invoke("memory", "backfill", "--json", "--state", str(state))
        text = invoke("memory", "backfill", "--state", str(state))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    document = orjson.loads(result.stdout)
    assert document["status"] == "ok" and document["processed"] == document["candidates"] > 0
    assert document["writer"] == {"kind": "model", "model": "m-1", "provider": "openai",
                                  "base_url": server.base_url}
    assert server.requests and all(r["body"]["model"] == "m-1" for r in server.requests)
    assert all(f"noted: {' '.join(fact.rstrip('.').split())}" in notes(state) for fact in FACTS)
    assert text.exit_code == 0, text.output
    assert f"scriptorium: writer: model m-1 (openai) at {server.base_url}" in text.stderr


@pytest.mark.parametrize("command", [["memory", "write", "demo", "--force"],
                                     ["memory", "backfill"], ["run", "--once"]])
@pytest.mark.parametrize("flag", [["--base-url", "http://127.0.0.1:9/v1"], ["--model", "m"],
                                  ["--provider", "anthropic"]])
def test_a_model_option_without_the_model_writer_is_a_usage_error(
    tmp_path: Path, command: list[str], flag: list[str],
) -> None:
    state = owing_state(tmp_path)
    result = invoke(*command, *flag, "--state", str(state))
    assert result.exit_code == 2, result.output
    [line] = result.stderr.strip().splitlines()
    assert flag[0] in line and "--writer model" in line
    assert (tmp_path / "state" / "memory").exists() is False  # refused before the runtime


def test_a_model_option_is_taken_when_the_file_chooses_the_model_writer(
    tmp_path: Path,
) -> None:
    """``kind = "model"`` in scriptorium.toml: --base-url completes it, no --writer needed."""
    state = owing_state(tmp_path)
    with ScriptedModel().running() as server:
        (state / "scriptorium.toml").write_text('[writer]\nkind = "model"\nmodel = "m-2"\n')
        result = invoke("memory", "write", "demo", "--force", "--base-url", server.base_url,
                        "--state", str(state))
    assert result.exit_code == 0, result.output
    assert server.requests and server.requests[0]["body"]["model"] == "m-2"
