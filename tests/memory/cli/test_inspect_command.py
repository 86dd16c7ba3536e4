"""``scriptorium inspect`` and ``run --inspect`` as a user runs them: a URL, loopback, a token.

Real processes (the server must start, print where it listens, answer, and
stop on Ctrl-C with exit 0); a non-loopback address is refused in one line
(exit 2) unless ``--allow-remote``, and then only a request with the token
is answered.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from memory.cli import main
from memory.cli._cli_errors import CliError
from memory.cli._live_inspector import load_inspector
from tests.conftest import BACKENDS
from tests.memory.cli._states import owing_state

# Ctrl-C as a terminal delivers it, even when the suite runs in the background of a
# shell without job control, which starts it (and so these children) with SIGINT ignored.
SCRIPTORIUM = [sys.executable, "-c", ("import signal; signal.signal(signal.SIGINT, "
               "signal.default_int_handler); from memory.cli import main; main()")]


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*SCRIPTORIUM, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})


def _stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGINT)
    return process.wait(timeout=30)


def test_inspect_prints_its_url_serves_the_state_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    state = owing_state(tmp_path)
    process = _start("inspect", "--state", str(state))
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/"), url
        page = httpx.get(url)
        assert page.status_code == 200 and "demo" in page.text
        assert httpx.get(url, headers={"Host": "evil.example"}).status_code == 400  # rebinding
        assert httpx.post(url).status_code == 405
    finally:
        assert _stop(process) == 0


def test_a_remote_address_needs_allow_remote(tmp_path: Path) -> None:
    state = owing_state(tmp_path)
    result = CliRunner().invoke(main, ["inspect", "--host", "0.0.0.0", "--state", str(state)])
    assert result.exit_code == 2
    assert "--allow-remote" in result.stderr and len(result.stderr.splitlines()) == 1


def test_with_allow_remote_only_the_token_is_answered(tmp_path: Path) -> None:
    state = owing_state(tmp_path)
    process = _start("inspect", "--state", str(state), "--host", "0.0.0.0", "--allow-remote",
                     "--token", "s3cret-token", "--json")
    try:
        assert process.stdout is not None
        document = "".join(process.stdout.readline() for _ in range(3))  # indented JSON
        url = httpx.URL(json.loads(document)["url"])
        assert url.params["token"] == "s3cret-token"
        local = f"http://127.0.0.1:{url.port}"
        assert httpx.get(local + "/").status_code == 401
        assert httpx.get(local + "/?token=wrong").status_code == 401
        with httpx.Client(base_url=local) as client:
            assert client.get("/?token=s3cret-token").status_code == 200
            assert client.get("/memory").status_code == 200  # the cookie carries it on
    finally:
        assert _stop(process) == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_inspect_logs_the_url_of_the_live_inspector(tmp_path: Path, backend: str) -> None:
    state = owing_state(tmp_path)
    process = _start("run", "--state", str(state), "--backend", backend, "--inspect")
    try:
        assert process.stderr is not None
        line = ""
        while "inspector" not in line:
            line = process.stderr.readline()
            assert line, "run stopped before it logged the inspector's URL"
        url = line.split("url=", 1)[1].strip()
        document = httpx.get(url + "runtime.json").json()
        assert document["running"] and document["tree"]["id"] == "runtime"
        assert httpx.get(url + "runtime").status_code == 200
    finally:
        assert _stop(process) == 0


def test_without_the_inspect_extra_the_error_says_what_to_install_from_the_checkout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in sys.modules if name.startswith(("memory.inspector",
                                                                   "starlette"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "starlette", None)  # what an install without the extra has
    with pytest.raises(CliError) as refused:
        load_inspector()
    message = str(refused.value)
    assert "a package of the inspect extra is missing: starlette; " in message
    assert "pip install -e '.[inspect]' (from the Scriptorium checkout)" in message
    assert "scriptorium[" not in message  # someone else's PyPI project
