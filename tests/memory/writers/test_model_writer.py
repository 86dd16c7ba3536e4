"""ModelWriter and its endpoint on ``httpx.MockTransport``: timing rules on virtual time.

Retries, Retry-After, the total timeout, the concurrency limit, cancellation,
the daily budget's wait and the per-batch budget run on a virtual clock (no
real waiting); the reuse of edits after a concurrent update runs through the
real runtime with two workers.
"""

from __future__ import annotations

import datetime
import itertools
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from memory._errors import (
    ConcurrentUpdateError,
    EndpointRefusedError,
    EndpointUnavailableError,
    ModelWriterFailedError,
)
from memory.ledger import estimate_tokens
from memory.ledger._records import SourceRecord
from memory.runtime._runtime import open_runtime
from memory.runtime._session_state import BoundaryOutcome
from memory.workspace import WorkspaceSnapshot
from memory.writers import Batch, run_write_cycle
from memory.writers.model import (
    Endpoint,
    ModelSettings,
    ModelWriter,
    RetryPolicy,
    UsageFile,
    read_model_usage,
    render_model_prompt,
)
from supervisors import Backoff
from tests.memory._runtime import chain, config
from tests.model_server import completion_body, first_user_text, good_actions

NOON = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC).timestamp()
Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


def virtual_noon() -> float:
    return NOON + anyio.current_time()


def settings(**overrides: Any) -> ModelSettings:
    options: dict[str, Any] = {"base_url": "http://model.test/v1", "model": "mock-1",
                               "total_timeout": 5.0,
                               "retry": RetryPolicy(attempts=3,
                                                   backoff=Backoff(initial=1.0, maximum=8.0))}
    options.update(overrides)
    return ModelSettings(**options)


def good(request: httpx.Request, path: str = "topics/notes.md") -> httpx.Response:
    body = json.loads(request.content)
    answer = good_actions(first_user_text(body), path=path)
    return httpx.Response(200, json=completion_body("openai", body, answer))


def record(node: str, session: str = "s1") -> SourceRecord:
    return SourceRecord(session_id=session, message_id=node, role="user", speaker="user",
                        content=f"I like tea number {node}.", timestamp=NOON, tokens=5)


def batch_of(*nodes: str, session: str = "s1") -> Batch:
    return Batch(session, tuple(record(n, session) for n in nodes), "")


def snapshot(files: dict[str, str], revision: str = "r1") -> WorkspaceSnapshot:
    return WorkspaceSnapshot(revision, tuple(sorted(files)), files.__getitem__)


# -- the endpoint ------------------------------------------------------------------------


@pytest.mark.virtual_time
async def test_429_is_retried_after_retry_after_then_answers() -> None:
    answers = [httpx.Response(429, headers={"retry-after": "30"}), httpx.Response(200, json={})]

    async def handler(request: httpx.Request) -> httpx.Response:
        return answers.pop(0)

    async with Endpoint(settings(), transport=httpx.MockTransport(handler)) as endpoint:
        started = anyio.current_time()
        document, stats = await endpoint.post("/chat/completions", {}, {})
    assert document == {} and stats.retries == 1
    assert 30.0 <= anyio.current_time() - started < 31.0


@pytest.mark.virtual_time
@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_other_4xx_are_never_retried(status: int) -> None:
    calls = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(status, text="no")

    async with Endpoint(settings(), transport=httpx.MockTransport(handler)) as endpoint:
        with pytest.raises(EndpointRefusedError) as caught:
            await endpoint.post("/chat/completions", {}, {})
    assert calls == 1 and caught.value.status == status
    assert "http://model.test/v1/chat/completions" in str(caught.value)


@pytest.mark.virtual_time
@pytest.mark.parametrize("status", [401, 500])
async def test_credentials_in_the_base_url_are_in_no_failure_message(status: int) -> None:
    secret = "pw-" + "9f3c" * 6

    async def handler(request: httpx.Request) -> httpx.Response:  # echoes what it got
        return httpx.Response(status, text=f"bad url {request.url} (password {secret})")

    url = f"http://user:{secret}@model.test/v1?api-version=2024-02-01&api_key={secret}"
    async with Endpoint(settings(base_url=url), transport=httpx.MockTransport(handler)) as ep:
        with pytest.raises((EndpointRefusedError, EndpointUnavailableError)) as caught:
            await ep.post("/chat/completions", {}, {})
    message = str(caught.value)
    assert secret not in message and secret not in repr(ep)
    assert "http://[redacted]@model.test/v1/chat/completions?api-version=[redacted]&" \
           "api_key=[redacted] (model mock-1)" in message  # the endpoint is still named
    assert f"HTTP {status}" in message or f"with {status}" in message


@pytest.mark.virtual_time
async def test_connection_errors_and_5xx_back_off_exponentially_then_give_up() -> None:
    times: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        times.append(anyio.current_time())
        if len(times) == 1:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(503)

    policy = RetryPolicy(attempts=4,
                         backoff=Backoff(initial=2.0, factor=2.0, maximum=60.0, jitter=0.25))
    async with Endpoint(settings(retry=policy), transport=httpx.MockTransport(handler)) as endpoint:
        with pytest.raises(EndpointUnavailableError, match="failed 4 attempt"):
            await endpoint.post("/chat/completions", {}, {})
    gaps = [b - a for a, b in itertools.pairwise(times)]
    for gap, base in zip(gaps, (2.0, 4.0, 8.0), strict=True):
        assert base * 0.75 <= gap <= base * 1.25


@pytest.mark.virtual_time
async def test_an_attempt_past_the_total_timeout_is_abandoned_and_retried() -> None:
    calls = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls < 3:
            await anyio.sleep(3600)
        return httpx.Response(200, json={"ok": True})

    async with Endpoint(settings(), transport=httpx.MockTransport(handler)) as endpoint:
        started = anyio.current_time()
        document, stats = await endpoint.post("/chat/completions", {}, {})
    assert document == {"ok": True} and stats.retries == 2
    assert anyio.current_time() - started < 30  # two 5 s attempts and their backoffs


async def test_the_concurrency_limit_holds_requests_back() -> None:
    release = anyio.Event()
    arrived = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal arrived
        arrived += 1
        await release.wait()
        return httpx.Response(200, json={})

    ep = Endpoint(settings(concurrency=2), transport=httpx.MockTransport(handler))
    async with ep, anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(ep.post, "/chat/completions", {}, {})
        await anyio.wait_all_tasks_blocked()
        assert arrived == 2 and ep.in_flight == 2
        release.set()
    assert arrived == 6 and ep.peak_in_flight == 2


@pytest.mark.virtual_time
async def test_a_cancelled_call_cancels_its_request_at_once() -> None:
    started = anyio.Event()
    ended: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            ended.append(anyio.current_time())
        raise AssertionError("unreachable")

    async with Endpoint(settings(), transport=httpx.MockTransport(handler)) as endpoint:
        async with anyio.create_task_group() as tg:
            tg.start_soon(endpoint.post, "/chat/completions", {}, {})
            await started.wait()
            cancelled_at = anyio.current_time()
            tg.cancel_scope.cancel()
        # ended with the cancel, not at a timeout; and no retry started another request
        assert ended == [cancelled_at] and endpoint.in_flight == 0


# -- structured output: when to step down ----------------------------------------------


@pytest.mark.virtual_time
@pytest.mark.parametrize(("refusal", "steps_down"), [
    ("This model's maximum context length is 8192 tokens.", False),
    ("", False),  # says nothing: the batch's refusal, not the form's
    ("Invalid parameter: 'response_format' of type 'json_schema' is not supported.", True),
])
async def test_a_400_steps_the_mode_down_only_when_it_names_the_structured_form(
    refusal: str, steps_down: bool,
) -> None:
    """A refusal that is the batch's own must not weaken every later batch's output."""
    bodies: list[dict[str, Any]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        if len(bodies) == 1:
            return httpx.Response(400, json={"error": {"message": refusal}})
        if "response_format" in bodies[-1] and steps_down:
            return httpx.Response(400, json={"error": {"message": refusal}})
        return good(request)

    writer = ModelWriter(settings(), transport=httpx.MockTransport(handler))
    if steps_down:  # refused for the form: sent again as a forced tool call, and kept so
        assert await writer.write(batch_of("n1"), snapshot({}))
        assert await writer.write(batch_of("n2"), snapshot({}))
        assert writer.mode == "tools"
        assert ["response_format" in b for b in bodies] == [True, False, False]
    else:  # the batch fails with the refusal and what to do; the next batch keeps the form
        with pytest.raises(EndpointRefusedError, match='400.*set mode = "tools"'):
            await writer.write(batch_of("n1"), snapshot({}))
        assert writer.mode == "json_schema"
        assert await writer.write(batch_of("n2"), snapshot({}))
        assert ["response_format" in b for b in bodies] == [True, True]
    await writer.aclose()


# -- budgets -----------------------------------------------------------------------------


@pytest.mark.virtual_time(cushion=0.05)  # the writer's thread hops finish before a jump
async def test_a_spent_daily_budget_makes_the_batch_wait_not_fail() -> None:
    """The wait (till midnight) is far past the writer timeout, yet the batch is written."""
    calls: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        calls.append(virtual_noon())
        return good(request)

    writer = ModelWriter(settings(daily_tokens=10), transport=httpx.MockTransport(handler),
                         clock=virtual_noon)
    committed: list[Any] = []

    async def snap() -> WorkspaceSnapshot:
        return snapshot({})

    async def archive(batch: Batch) -> None:
        return None

    async def commit(batch: Batch, edits: Any, base: str) -> list[dict[str, Any]]:
        committed.append(edits)
        return [{"tool": "commit", "status": "ok", "topic_paths": ["topics/notes.md"]}]

    outcomes = []
    for nodes in (("n1",), ("n2",)):
        outcomes.append(await run_write_cycle(
            batch_of(*nodes), writer, snapshot=snap, archive=archive, commit=commit,
            timeout=60.0))
    await writer.aclose()
    assert [o.error for o in outcomes] == [None, None]
    assert len(calls) == 2 and writer.daily.tokens > 0
    midnight = NOON + 12 * 3600
    assert calls[0] < midnight <= calls[1] < midnight + 60  # the second waited for the new day


@pytest.mark.virtual_time
async def test_the_batch_budget_fails_a_batch_before_it_overspends() -> None:
    calls = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return good(request)

    writer = ModelWriter(settings(batch_tokens=100, max_tokens=200),
                         transport=httpx.MockTransport(handler), counter=estimate_tokens)
    with pytest.raises(ModelWriterFailedError, match="token budget"):
        await writer.write(batch_of("n1"), snapshot({}))
    await writer.aclose()
    assert calls == 0


# -- reuse after a concurrent update ------------------------------------------------------


async def test_edits_are_reused_when_their_files_did_not_change_and_redone_when_they_did(
) -> None:
    calls = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return good(request)

    writer = ModelWriter(settings(), transport=httpx.MockTransport(handler))
    batch = batch_of("n1")
    first = await writer.write(batch, snapshot({"topics/other.md": "x"}, "r1"))
    # another commit changed another file: the same edits, no call
    again = await writer.write(batch, snapshot({"topics/other.md": "y"}, "r2"))
    assert again == first and calls == 1 and writer.totals["reused"] == 1
    # another commit changed the file the edits touch: a new call
    await writer.write(batch, snapshot({"topics/notes.md": "# Notes\n"}, "r3"))
    assert calls == 2
    await writer.aclose()


@pytest.mark.parametrize(("same_file", "expected_calls"), [(False, 2), (True, 3)])
async def test_two_workers_racing_call_the_model_again_only_for_a_touched_file(
    tmp_path: Path, same_file: bool, expected_calls: int,
) -> None:
    # The order is forced: both workers take their snapshot, alpha's edits commit,
    # and only then does beta get its answer, so beta's dry run and commit both
    # meet memory moved past its snapshot. That is contention, retried; never a
    # refusal sent to the model to repair (it was once: "block ids would vanish").
    both_asked, alpha_written = anyio.Event(), anyio.Event()
    asked: list[str] = []

    def on_event(event: dict[str, Any]) -> None:
        if event["event"] == "job" and event["session"] == "alpha":
            alpha_written.set()

    async def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        session = json.loads(next(line for line in first_user_text(body).split("\n")
                                  if line.startswith('{"ref"')))["ref"].split("/")[1]
        asked.append(session)
        if len(asked) == 2:
            both_asked.set()
        await both_asked.wait()  # both workers hold a snapshot from before either commit
        if session == "beta":
            await alpha_written.wait()
        return good(request, "topics/notes.md" if same_file else f"topics/{session}.md")

    writer = ModelWriter(settings(), transport=httpx.MockTransport(handler))
    async with open_runtime(tmp_path, writer,
                            config=config(writer_workers=2, on_event=on_event)) as rt:
        sessions = [await rt.sessions.create(session_id=s) for s in ("alpha", "beta")]
        for sid in sessions:
            await chain(rt, sid, "ROOT", [f"{sid}1", f"{sid}2"])
        results: dict[str, BoundaryOutcome] = {}

        async def flush(sid: str) -> None:
            results[sid] = await rt.flush(sid)

        async with anyio.create_task_group() as tg:
            for sid in sessions:
                tg.start_soon(flush, sid)
    await writer.aclose()
    assert results == dict.fromkeys(sessions, BoundaryOutcome.WRITTEN)
    assert sorted(asked) == sorted(["alpha", "beta", "beta"][:expected_calls])
    assert writer.totals["repairs"] == 0
    assert writer.totals["reused"] == (0 if same_file else 1)


# -- the bounded prompt -------------------------------------------------------------------


def test_the_workspace_shown_is_bounded_in_tokens_core_first() -> None:
    files = {f"topics/subject-{i:04d}.md": f"# Subject {i}\n\n## Part\n" for i in range(2000)}
    files["topics/core.md"] = "# Core\n\n## Identity\n\nThe owner is Ada.[^e-0123456789] ^0badf00d\n"
    view = render_model_prompt(batch_of("n1"), snapshot(files), count=estimate_tokens,
                               structure_tokens=300, full_files=1)
    assert list(view.shown) == ["topics/core.md"]
    assert 0 < len(view.outlined) < 100
    workspace = view.text.split("## Observed")[0]
    assert estimate_tokens(workspace) <= 300 + 60  # the bound, plus the section's own lines
    assert "more topic file(s) not shown" in view.text
    assert '"ref": "openprogram/s1/n1"' in view.text
    assert "The owner is Ada." in view.text


@pytest.mark.virtual_time(cushion=0.05)
async def test_usage_reaches_the_usage_file_at_most_every_second_and_on_close(
    tmp_path: Path,
) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return good(request)

    memory = tmp_path / "memory"
    (memory / ".scriptorium").mkdir(parents=True)
    writer = ModelWriter(settings(), transport=httpx.MockTransport(handler),
                         usage_file=UsageFile(str(memory)), clock=virtual_noon)

    def saved() -> int:
        models = read_model_usage(str(memory))["models"]
        return int(models["mock-1"]["batches"]) if models else 0

    await writer.write(batch_of("n1"), snapshot({}))
    assert saved() == 1  # the first batch is written at once
    await writer.write(batch_of("n2"), snapshot({}))
    await writer.write(batch_of("n3"), snapshot({}))
    assert saved() == 1  # the next ones wait for the second to pass...
    await anyio.sleep(1.0)
    await writer.write(batch_of("n4"), snapshot({}))
    assert saved() == 4  # ...and go together
    await writer.write(batch_of("n5"), snapshot({}))
    await writer.aclose()
    assert saved() == 5  # closing flushes the rest
    assert read_model_usage(str(memory))["daily"]["day"] == "2026-12-01"


def test_the_dry_run_gives_the_commits_verdicts_and_installs_nothing(tmp_path: Path) -> None:
    from memory.workspace import ArchiveCache, TopicEdit, Transactions

    memory = tmp_path / "memory"
    (memory / ".scriptorium").mkdir(parents=True)
    archive = ArchiveCache(str(memory))
    batch = batch_of("n1")
    archive.append("s1", batch.records)
    transactions = Transactions(str(memory), archived=archive.archived)
    good_text = ("# Notes\n\nLikes tea.[^e1]\n\n"
                 "[^e1]: Time: `2026-12-01`; Sources: openprogram/s1/n1\n")
    edits = [TopicEdit("topics/notes.md", good_text),
             TopicEdit("topics/other.md", good_text.replace("s1/n1", "s9/n9")),
             TopicEdit("sources/openprogram/forged.md", good_text)]
    before = transactions.revision()
    audit = transactions.check(edits, batch_sources={"openprogram/s1/n1"})
    assert [entry["status"] for entry in audit] == ["ok", "error", "error"]
    assert "not archived" in audit[1]["error"] and "topics/" in audit[2]["error"]
    assert transactions.revision() == before and not (memory / "topics").exists()
    committed = transactions.commit(edits, base_revision=before,
                                    batch_sources={"openprogram/s1/n1"})
    assert [e["status"] for e in committed.audit[:3]] == [e["status"] for e in audit]
    # Judged against a revision memory has left, the edits are not refused: the
    # writer is told memory moved, as the commit would tell it.
    with pytest.raises(ConcurrentUpdateError):
        transactions.check(edits[:1], batch_sources={"openprogram/s1/n1"}, base_revision=before)
    assert transactions.check(edits[:1], batch_sources={"openprogram/s1/n1"},
                              base_revision=committed.revision)
