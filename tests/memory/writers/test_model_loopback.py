"""ModelWriter against a real HTTP server on 127.0.0.1, through the whole runtime.

Every scripted behaviour of ``tests/model_server.py`` ends one of two ways:
an installed commit with the batch marked, or a failed batch with nothing
marked and the cause in the structured log. Both wire formats, both
backends. Backoff sleeps are recorded (and skipped) by an injected sleep;
the only real waits are the short read timeout a slow server forces.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

import anyio
import pytest

from memory.runtime._runtime import open_runtime
from memory.runtime._session_state import BoundaryOutcome
from memory.writers.model import (
    ModelSettings,
    ModelWriter,
    RetryPolicy,
    UsageFile,
    read_model_usage,
)
from supervisors import Backoff
from tests.memory._runtime import chain, config, marked
from tests.model_server import ScriptedModel

PROVIDERS = ("openai", "anthropic")
NODES = ["u1", "a1", "u2", "a2"]
KEY = "sk-loopback-" + secrets.token_hex(16)


def settings_for(server: ScriptedModel, provider: str, **overrides: Any) -> ModelSettings:
    options: dict[str, Any] = {
        "base_url": server.base_url, "model": "scripted-1", "provider": provider,
        "read_timeout": 0.3, "total_timeout": 5.0,
        "retry": RetryPolicy(attempts=3, backoff=Backoff(initial=0.01, maximum=0.05))}
    options.update(overrides)
    return ModelSettings(**options)


class Run:
    """One session of four turns flushed through a ModelWriter on ``server``."""

    def __init__(self, tmp_path: Path, server: ScriptedModel, provider: str,
                 **overrides: Any) -> None:
        self.state = tmp_path / "state"
        self.server = server
        self.events: list[dict[str, Any]] = []
        self.slept: list[float] = []
        self.writer = ModelWriter(
            settings_for(server, provider, **overrides),
            env={"OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY},
            on_event=self.events.append, sleep=self.sleep,
            usage_file=UsageFile(str(self.state / "memory")))
        self.outcome: BoundaryOutcome | None = None
        self.session = ""

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await anyio.lowlevel.checkpoint()

    async def __call__(self) -> Run:
        cfg = config(on_event=self.events.append, max_failures=5,
                     retry_backoff=Backoff(initial=30.0, factor=2.0, maximum=60.0, jitter=0.0),
                     worker_backoff=Backoff(initial=0.01, factor=2.0, maximum=0.05, jitter=0.0))
        try:
            async with open_runtime(self.state, self.writer, config=cfg) as rt:
                self.session = await rt.sessions.create(title="loopback")
                await chain(rt, self.session, "ROOT", NODES)
                self.outcome = await rt.flush(self.session)
        finally:
            await self.writer.aclose()
        return self

    @property
    def marked(self) -> list[str]:
        return sorted(marked(self.state, self.session))

    def jobs(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "job"]

    def usage(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "model_usage"]

    def notes(self) -> str:
        return (self.state / "memory" / "topics" / "notes.md").read_text()


WRITTEN = [
    (["good"], 0),
    (["invented"], 0),  # invented ids are stripped and reassigned by the transaction
    (["malformed", "good"], 1),  # repaired in one round
    (["outside", "good"], 1),
    (["sources", "good"], 1),
    (["empty", "good"], 1),
    (["429", "good"], 0),
    (["500", "500", "good"], 0),
    (["reset", "good"], 0),
    (["slow", "good"], 0),
]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(("script", "repairs"), WRITTEN, ids=["+".join(s) for s, _ in WRITTEN])
async def test_a_batch_the_model_gets_right_is_installed_and_marked(
    tmp_path: Path, provider: str, script: list[str], repairs: int,
) -> None:
    with ScriptedModel(script).running() as server:
        run = await Run(tmp_path, server, provider)()
    assert run.outcome is BoundaryOutcome.WRITTEN
    assert run.marked == sorted(NODES)
    assert server.behaviours == script
    text = run.notes()
    assert text.count("Sources: [") == 4  # each turn cited, handles expanded into links
    assert "^deadbeef" not in text and "e-0000000001" not in text
    [usage] = run.usage()
    assert usage["result"] == "ok" and usage["model"] == "scripted-1"
    assert usage["repairs"] == repairs
    retried = sum(b in ("429", "500", "reset", "slow") for b in script)
    assert usage["retries"] == retried and usage["calls"] == 1 + repairs
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    if "429" in script:
        assert max(run.slept) >= 1.0  # Retry-After: 1 honoured
    if repairs:  # the refusal went back to the model with the reason
        last = server.requests[-1]["body"]["messages"][-1]["content"]
        assert "refused" in last
    stats = run.writer.statistics()
    assert stats["batches"] == 1 and stats["retries"] == retried
    saved = read_model_usage(str(run.state / "memory"))["models"]["scripted-1"]
    assert saved["batches"] == 1 and saved["retries"] == retried
    assert saved["prompt_tokens"] == usage["prompt_tokens"]


FAILED = [
    (["malformed"] * 3, "not JSON"),
    (["outside"] * 3, "not archived"),
    (["sources"] * 3, "sources/ is read-only"),
    (["empty"] * 3, "the answer is empty"),
    (["500"] * 3, "failed 3 attempt(s); last: HTTP 500"),
    (["429"] * 3, "HTTP 429"),
    (["reset"] * 3, "RemoteProtocolError"),
    (["slow"] * 3, "ReadTimeout"),
    (["401"], "refused the request with 401"),
    (["400"], "refused the request with 400"),  # names no structured form: the batch's
]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(("script", "cause"), FAILED, ids=[s[0] for s, _ in FAILED])
async def test_a_batch_the_model_gets_wrong_fails_and_marks_nothing(
    tmp_path: Path, provider: str, script: list[str], cause: str,
) -> None:
    with ScriptedModel(script, default="never").running() as server:
        run = await Run(tmp_path, server, provider)()
    assert run.outcome is not BoundaryOutcome.WRITTEN
    assert run.marked == []
    assert server.behaviours == script  # the bounded loop stopped: no fourth call
    assert not (run.state / "memory" / "topics" / "notes.md").exists()
    [job] = run.jobs()
    assert job["result"] == "writer" and cause in job["error"]
    assert KEY not in job["error"]
    [usage] = run.usage()
    assert usage["result"] == "failed"
    # Every call made counts, answered or not: one per repair round, or one call
    # whose attempts all failed (its retries with it); the usage file says the same.
    posts = 1 if script[0] in ("500", "429", "reset", "slow", "401", "400") else len(script)
    assert (usage["calls"], usage["retries"]) == (posts, len(script) - posts)
    saved = read_model_usage(str(run.state / "memory"))["models"]["scripted-1"]
    assert (saved["calls"], saved["retries"], saved["failed"]) == (posts, len(script) - posts, 1)
    assert run.writer.mode == "json_schema"  # no failure of a batch weakens the next ones
    if script == ["400"]:
        assert 'set mode = "tools"' in job["error"]  # what to do if it was the form after all


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_auto_mode_steps_down_when_the_endpoint_refuses_json_schema(
    tmp_path: Path, provider: str,
) -> None:
    with ScriptedModel(refuse_response_format=True).running() as server:
        run = await Run(tmp_path, server, provider)()
    assert run.outcome is BoundaryOutcome.WRITTEN
    bodies = [r["body"] for r in server.requests]
    if provider == "openai":  # json_schema refused with 400, then a forced tool call
        assert "response_format" in bodies[0] and "tools" in bodies[1]
        assert run.writer.mode == "tools"
    else:  # Anthropic takes the schema as a forced tool from the start
        assert len(bodies) == 1 and bodies[0]["tool_choice"]["type"] == "tool"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_text_mode_reads_the_json_in_the_answer(tmp_path: Path, provider: str) -> None:
    with ScriptedModel().running() as server:
        run = await Run(tmp_path, server, provider, mode="text")()
    assert run.outcome is BoundaryOutcome.WRITTEN
    body = server.requests[0]["body"]
    assert "tools" not in body and "response_format" not in body


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_cancelled_job_leaves_no_request_running(tmp_path: Path, provider: str) -> None:
    with ScriptedModel(default="slow", slow_seconds=5.0).running() as server:
        run = Run(tmp_path, server, provider, read_timeout=30.0)
        with anyio.move_on_after(0.5):
            await run()
        with anyio.fail_after(3):
            while server.disconnects < 1:  # the server sees the request go away
                await anyio.sleep(0.01)
    assert run.marked == [] and server.disconnects == 1


URL_KEY = "sk-in-url-" + secrets.token_hex(16)
URL_FORMS = {  # how the base URL is given: as is, or carrying a credential of its own
    "plain": "{url}",
    "userinfo": "http://user:{key}@{rest}",
    "query": "{url}?api_key={key}",
}


@pytest.mark.parametrize("url_form", URL_FORMS)
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_no_api_key_reaches_the_state_dir_or_the_log(
    tmp_path: Path, provider: str, url_form: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")

    def base_url(server: ScriptedModel) -> str:
        return URL_FORMS[url_form].format(url=server.base_url, key=URL_KEY,
                                          rest=server.base_url.removeprefix("http://"))

    with ScriptedModel(["401"]).running() as server:
        refused = await Run(tmp_path / "a", server, provider, base_url=base_url(server))()
    with ScriptedModel(["500", "good"]).running() as server:
        written = await Run(tmp_path / "b", server, provider, base_url=base_url(server))()
        headers = server.requests[0]["headers"]
    if url_form == "plain":  # (httpx sends userinfo as Basic auth instead)
        assert KEY in (headers.get("authorization", "") + headers.get("x-api-key", ""))  # sent
    assert refused.outcome is not BoundaryOutcome.WRITTEN
    assert written.outcome is BoundaryOutcome.WRITTEN
    [job] = refused.jobs()
    assert "refused the request with 401" in job["error"]  # the failure was reported
    for secret in (KEY, URL_KEY):
        for root, _, files in os.walk(tmp_path):
            for name in files:
                assert secret.encode() not in Path(root, name).read_bytes(), name
        for run in (refused, written):
            assert secret not in json.dumps(run.events, default=str)
            assert secret not in repr(run.writer) and secret not in repr(run.writer.endpoint)
            assert secret not in repr(run.writer.settings)
            assert secret not in json.dumps(run.writer.statistics())
        assert secret not in caplog.text


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_query_in_the_base_url_follows_the_joined_path_on_every_request(
    tmp_path: Path, provider: str,
) -> None:
    with ScriptedModel(["500", "good"]).running() as server:
        run = await Run(tmp_path, server, provider,
                        base_url=server.base_url + "?api-version=2024-02-01")()
    assert run.outcome is BoundaryOutcome.WRITTEN
    path = "/v1/messages" if provider == "anthropic" else "/v1/chat/completions"
    assert [(r["path"], r["query"]) for r in server.requests] == \
        [(path, "api-version=2024-02-01")] * 2  # the retry keeps it too


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_answer_of_no_edits_logs_the_batch_and_marks_it(
    tmp_path: Path, provider: str,
) -> None:
    # "never" is no behaviour: a second call would fail the batch.
    with ScriptedModel(["nothing"], default="never").running() as server:
        run = await Run(tmp_path, server, provider)()
    assert server.behaviours == ["nothing"]  # asked once, never again
    assert run.outcome is BoundaryOutcome.WRITTEN
    assert run.marked == sorted(NODES)
    log = (run.state / "memory" / "topics" / "conversations.md").read_text()
    assert ": nothing new to keep (4 turns).[^e-" in log
    assert log.count("openprogram/") >= 4  # every turn of the batch is cited
    assert not (run.state / "memory" / "topics" / "notes.md").exists()
    [usage] = run.usage()
    assert usage["result"] == "ok" and usage["calls"] == 1
