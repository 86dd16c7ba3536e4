"""The model writer's options as a new user mistypes them: each refused at once, in one line.

From a new user's attack on ``run`` and ``simulate``: ``--base-url`` without
``--writer model`` did nothing, silently; a base URL that is no HTTP URL
(``notaurl``, ``ftp://x``) was retried as a connection error on every
batch; and ``simulate --writer model`` against a port with nothing behind
it ran for half a minute and ended in failed invariants that never named
the endpoint.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from memory.cli._cli import main
from tests.memory.cli._states import owing_state


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def error_line(result: Result) -> str:
    """The one line that says what is wrong (click prints a usage error after two of help)."""
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_simulate_against_nothing_listening_names_the_endpoint_in_one_line(
    tmp_path: Path, backend: str,
) -> None:
    url = f"http://user:pw-s3cret@127.0.0.1:{closed_port()}/v1?key=s3cret-too"
    result = invoke("simulate", "--writer", "model", "--base-url", url, "--model", "m",
                    "--sessions", "2", "--turns", "2", "--backend", backend,
                    "--state", str(tmp_path / "sim"))
    assert result.exit_code == 2, result.output
    [line] = result.stderr.strip().splitlines()
    shown = url.replace("user:pw-s3cret", "[redacted]").replace("s3cret-too", "[redacted]")
    assert line.startswith(f"Error: nothing answers at {shown} (connection refused)")
    assert "start the model server" in line and "--base-url" in line
    assert "s3cret" not in result.output
    assert not (tmp_path / "sim").exists()  # refused before the run: nothing simulated


@pytest.mark.parametrize("url", ["notaurl", "ftp://x/v1", "http://:8000/v1"])
@pytest.mark.parametrize("command", ["run", "simulate"])
def test_a_base_url_that_is_no_http_url_is_a_usage_error_at_once(
    tmp_path: Path, url: str, command: str,
) -> None:
    args = (["run", "--once", "--state", str(owing_state(tmp_path))] if command == "run"
            else ["simulate", "--sessions", "1", "--turns", "1"])
    result = invoke(*args, "--writer", "model", "--base-url", url, "--model", "m")
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert "--base-url" in line and "not an http:// or https:// URL" in line
    if command == "run":
        assert not (tmp_path / "state" / "memory").exists()  # no batch was tried


@pytest.mark.parametrize("flag", [["--base-url", "http://127.0.0.1:9/v1"], ["--model", "m"],
                                  ["--provider", "anthropic"]])
def test_simulate_refuses_a_model_option_without_the_model_writer(
    tmp_path: Path, flag: list[str],
) -> None:
    result = invoke("simulate", *flag, "--sessions", "1", "--turns", "1",
                    "--state", str(tmp_path / "sim"))
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert flag[0] in line and "--writer model" in line
    assert not (tmp_path / "sim").exists()
