"""``scriptorium mcp``'s refusals: one line naming the flag and what to do, exit 2, nothing served.

The serving itself is tested in tests/memory/mcp (stdio and HTTP, real processes).
"""

from __future__ import annotations

import errno
import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import memory.mcp
from memory.cli import main
from memory.mcp import HttpAddress, check_exposure, parse_http_address
from store import SessionCore


def run(state: Path, *args: str, token: str | None = None) -> tuple[int, str]:
    env = {"SCRIPTORIUM_MCP_TOKEN": token or ""}
    result = CliRunner().invoke(main, ["mcp", "--state", str(state), *args], env=env)
    return result.exit_code, result.output


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state to serve, and a server that fails instead of listening if a refusal lets it through."""

    async def served(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the address was served")

    monkeypatch.setattr(memory.mcp, "serve_http", served)
    SessionCore.create(tmp_path / "state", "demo").close()
    return tmp_path / "state"


@pytest.mark.parametrize(("args", "token", "said"), [
    (["--http", "0.0.0.0:8765"], None, "0.0.0.0 is not a loopback address"),
    (["--http", "192.168.1.5:8765"], "secret", "add --allow-remote"),
    (["--http", "[::]:8765"], "secret", ":: is not a loopback address"),
    (["--http", "example.com:8765"], "secret", "example.com is not a loopback address"),
    (["--http", "0.0.0.0:8765", "--allow-remote"], None, "needs a bearer token"),
    (["--http", "8765"], None, "is not HOST:PORT"),
    (["--http", "127.0.0.1:99999"], None, "is not HOST:PORT"),
    (["--http", "127.0.0.1:8765", "--backend", "trio"], None, "asyncio only"),
])
def test_a_refused_address_is_one_line_and_exit_2(state: Path, args: list[str],
                                                  token: str | None, said: str) -> None:
    code, output = run(state, *args, token=token)
    assert code == 2
    assert said in output and "--http" in output
    assert len(output.strip().splitlines()) == 1, output


def test_a_port_in_use_is_one_line_and_exit_2(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real server, on a loopback port already taken
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, output = run(state, "--http", f"127.0.0.1:{port}")
    assert code == 2
    assert f"--http 127.0.0.1:{port}" in output and "pick another port" in output
    assert len(output.strip().splitlines()) == 1, output


def test_a_disk_error_while_serving_is_not_blamed_on_the_port(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def full_disk(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(state / "memory"))

    monkeypatch.setattr(memory.mcp, "serve_http", full_disk)
    code, output = run(state, "--http", "127.0.0.1:0")
    assert code == 3 and "pick another port" not in output, output
    assert "No space left on device" in output and len(output.strip().splitlines()) == 1


def test_loopback_is_served_without_a_token_and_beyond_it_only_with_both() -> None:
    for host in ("127.0.0.1", "127.3.4.5", "::1", "localhost"):
        check_exposure(HttpAddress(host, 1), allow_remote=False, token=None)
    remote = parse_http_address("[2001:db8::1]:80")
    assert remote == HttpAddress("2001:db8::1", 80) and not remote.loopback
    assert remote.url() == "http://[2001:db8::1]:80/mcp"
    check_exposure(remote, allow_remote=True, token="s")
    for allow_remote, token in ((False, "s"), (True, None), (True, ""), (False, None)):
        with pytest.raises(ValueError, match="--http"):
            check_exposure(remote, allow_remote=allow_remote, token=token)


def test_without_the_mcp_extra_the_command_says_what_to_install(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in sys.modules if name == "mcp" or name.startswith(
            ("mcp.", "memory.mcp"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)  # what an install without the extra has
    code, output = run(state)
    assert code == 2
    # this project's extra, from its checkout: 'scriptorium[mcp]' is someone else's PyPI name
    assert "a package of the mcp extra is missing: mcp; " in output
    assert "pip install -e '.[mcp]' (from the Scriptorium checkout)" in output
    assert "scriptorium[" not in output
    assert len(output.strip().splitlines()) == 1, output
