"""``scriptorium run --once --writer model`` end to end, configured three ways.

Against the loopback model server: the flags, ``scriptorium.toml``'s
``[writer]`` table and ``$SCRIPTORIUM_MODEL_*`` each choose the endpoint;
the batch is written and marked, the structured log has the batch's usage,
``memory audit --json`` the totals, and the API key is in the request and
nowhere else: no file under the state dir, no log line.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from memory.cli._cli import main
from tests.memory.cli._states import owing_state
from tests.model_server import ScriptedModel

KEY = "sk-cli-" + secrets.token_hex(16)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("how", ["flags", "toml", "env"])
def test_run_once_with_a_model_writer_writes_logs_usage_and_keeps_the_key_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: str, how: str,
) -> None:
    state = owing_state(tmp_path)
    monkeypatch.setenv("MY_MODEL_KEY", KEY)
    with ScriptedModel(["500", "good"]).running() as server:
        args = ["run", "--once", "--log-json", "--json", "--state", str(state)]
        if how == "flags":
            args += ["--writer", "model", "--base-url", server.base_url, "--model", "m-1",
                     "--provider", provider]
            monkeypatch.setenv("SCRIPTORIUM_MODEL_API_KEY_ENV", "MY_MODEL_KEY")
        elif how == "toml":
            (state / "scriptorium.toml").write_text(
                f'[writer]\nkind = "model"\nbase_url = "{server.base_url}"\nmodel = "m-1"\n'
                f'provider = "{provider}"\napi_key_env = "MY_MODEL_KEY"\nretry_initial = 0.01\n')
        else:
            for name, value in (("WRITER", "model"), ("MODEL_BASE_URL", server.base_url),
                                ("MODEL_MODEL", "m-1"), ("MODEL_PROVIDER", provider),
                                ("MODEL_API_KEY_ENV", "MY_MODEL_KEY")):
                monkeypatch.setenv("SCRIPTORIUM_" + name, value)
        result = CliRunner().invoke(main, args)
        sent = server.requests[-1]["headers"]
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert KEY in sent.get("authorization", "") + sent.get("x-api-key", "")
    assert server.behaviours == ["500", "good"]
    events = [orjson.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    [usage] = [e for e in events if e["event"] == "model_usage"]
    assert usage["result"] == "ok" and usage["model"] == "m-1" and usage["retries"] == 1
    [job] = [e for e in events if e["event"] == "job"]
    assert job["result"] == "written"
    audit = CliRunner().invoke(main, ["memory", "audit", "--json", "--state", str(state)])
    totals = orjson.loads(audit.stdout)["model_usage"]["models"]["m-1"]
    assert totals["batches"] == 1 and totals["calls"] == 1 and totals["retries"] == 1
    assert totals["prompt_tokens"] > 0 and totals["failed"] == 0
    assert KEY not in result.stdout + result.stderr + audit.stdout
    for root, _, files in os.walk(state):
        for name in files:
            assert KEY.encode() not in Path(root, name).read_bytes(), name


def test_an_api_key_in_scriptorium_toml_is_refused(tmp_path: Path) -> None:
    state = owing_state(tmp_path)
    (state / "scriptorium.toml").write_text(
        '[writer]\nkind = "model"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
        'api_key = "sk-do-not-store"\n')
    result = CliRunner().invoke(main, ["run", "--once", "--state", str(state)])
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert "scriptorium.toml" in line and "environment only" in line
    assert "sk-do-not-store" not in line


def test_a_model_writer_without_a_model_name_is_a_usage_error(tmp_path: Path) -> None:
    state = owing_state(tmp_path)
    result = CliRunner().invoke(main, ["run", "--once", "--writer", "model", "--base-url",
                                       "http://127.0.0.1:9/v1", "--state", str(state)])
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert "needs model" in line and "--model" in line
