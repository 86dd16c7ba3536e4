"""The model writer's pure rules: retries, budgets, the strict parser, actions -> edits, settings."""

from __future__ import annotations

import datetime
import json
import random
from typing import Any

import pytest

from memory._errors import SettingsError
from memory.workspace import normalise_topic, parse_topic
from memory.writers.model import (
    DailySpend,
    EditAction,
    Endpoint,
    RetryPolicy,
    batch_budget_allows,
    build_request,
    daily_wait,
    merge_usage,
    model_settings,
    parse_actions,
    parse_retry_after,
    read_response,
    refuses_form,
    retry_delay,
    retryable_status,
    to_topic_edits,
)
from memory.writers.model._edits import ActionsUnreadableError
from memory.writers.model._settings import ModelSettings, redact_url, split_query
from supervisors import Backoff

NOON = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC).timestamp()


# -- retries -------------------------------------------------------------------------


def test_only_429_and_5xx_are_retried() -> None:
    assert retryable_status(429) and retryable_status(500) and retryable_status(503)
    assert not any(retryable_status(s) for s in (400, 401, 403, 404, 408, 409, 422, 200))


def test_backoff_grows_exponentially_within_its_jitter_and_cap() -> None:
    policy = RetryPolicy(backoff=Backoff(initial=0.5, factor=2.0, maximum=4.0, jitter=0.25))
    rng = random.Random(3)
    for retry, base in ((1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0)):
        delays = [retry_delay(policy, retry, None, rng) for _ in range(200)]
        assert min(delays) >= base * 0.75 and max(delays) <= base * 1.25
        assert max(delays) - min(delays) > base * 0.3  # jitter spreads the workers


def test_retry_after_is_a_floor_capped_by_the_policy() -> None:
    policy = RetryPolicy(max_retry_after=60.0, backoff=Backoff(initial=0.5, jitter=0.0))
    rng = random.Random(0)
    assert retry_delay(policy, 1, 7.0, rng) == 7.0
    assert retry_delay(policy, 1, 0.0, rng) == 0.5
    assert retry_delay(policy, 1, 3600.0, rng) == 60.0


def test_retry_after_reads_seconds_and_http_dates_against_now() -> None:
    assert parse_retry_after("3", NOON) == 3.0
    assert parse_retry_after(" 1.5 ", NOON) == 1.5
    assert parse_retry_after("Tue, 01 Dec 2026 12:00:30 GMT", NOON) == 30.0
    assert parse_retry_after("Tue, 01 Dec 2026 11:00:00 GMT", NOON) == 0.0  # past: now
    assert parse_retry_after("-4", NOON) == 0.0
    for bad in (None, "", "soon", "nan", "inf"):
        assert parse_retry_after(bad, NOON) is None


# -- budgets -----------------------------------------------------------------------


def test_the_batch_budget_bounds_the_calls_of_one_batch() -> None:
    assert batch_budget_allows(None, 10**9, 10**9)
    assert batch_budget_allows(1000, 400, 600)
    assert not batch_budget_allows(1000, 401, 600)


def test_a_spent_day_waits_until_the_next_utc_midnight() -> None:
    spend = DailySpend().add(900, NOON)
    assert spend == DailySpend("2026-12-01", 900)
    assert daily_wait(1000, spend, NOON) == 0.0
    spent = spend.add(100, NOON + 1)
    assert daily_wait(1000, spent, NOON) == 12 * 3600.0
    assert daily_wait(None, spent, NOON) == 0.0
    tomorrow = NOON + 12 * 3600.0
    assert daily_wait(1000, spent, tomorrow) == 0.0  # a new day
    assert spent.add(5, tomorrow) == DailySpend("2026-12-02", 5)


def test_usage_totals_add_up_and_the_day_rolls_over() -> None:
    document = merge_usage({}, "m", {"batches": 1, "prompt_tokens": 10, "seconds": 0.5}, 12, NOON)
    document = merge_usage(document, "m", {"batches": 1, "prompt_tokens": 5}, 3, NOON)
    assert document["models"]["m"]["batches"] == 2
    assert document["models"]["m"]["prompt_tokens"] == 15
    assert document["daily"] == {"day": "2026-12-01", "tokens": 15}
    later = merge_usage(document, "n", {"calls": 1}, 4, NOON + 86400)
    assert later["daily"] == {"day": "2026-12-02", "tokens": 4}
    assert later["models"]["m"]["batches"] == 2 and later["models"]["n"]["calls"] == 1


# -- the strict parser -----------------------------------------------------------------


GOOD: dict[str, Any] = {"edits": [{
    "action": "append", "path": "topics/food.md", "section": "## Food",
                   "text": "Likes tea.[^e1]\n\n[^e1]: Time: `2026-12-01`; Sources: openprogram/s/n1",
                   "delete_blocks": []}]}


def test_the_parser_reads_the_object_as_text_fenced_text_or_tool_arguments() -> None:
    expected = [EditAction("append", "topics/food.md", "## Food", GOOD["edits"][0]["text"])]
    assert parse_actions(json.dumps(GOOD)) == expected
    assert parse_actions("```json\n" + json.dumps(GOOD) + "\n```") == expected
    assert parse_actions(GOOD) == expected
    assert parse_actions('{"edits": []}') == []


@pytest.mark.parametrize(("answer", "says"), [
    ("", "empty"),
    ("Sure! Here are the edits: {}", "not JSON"),
    ('{"edits": [], "note": "hi"}', "single key"),
    ('{"edits": {}}', "must be a list"),
    ('{"edits": [{"action": "rename", "path": "topics/a.md"}]}', "append, write or delete"),
    ('{"edits": [{"action": "append", "path": "topics/a.md", "text": " "}]}', "no text"),
    ('{"edits": [{"action": "delete", "path": "topics/a.md", "why": "x"}]}', "unknown key"),
    ('{"edits": [{"action": "delete", "path": "topics/a.md", "delete_blocks": ["zz"]}]}',
     "8-hex"),
    ('{"edits": [{"action": "write", "path": 3, "text": "x"}]}', "path"),
])
def test_the_parser_refuses_anything_else_and_says_what(answer: str, says: str) -> None:
    with pytest.raises(ActionsUnreadableError, match=says):
        parse_actions(answer)


# -- actions -> topic edits -------------------------------------------------------------

BASE = """# Food

## Drinks

The owner drinks coffee.[^e-0123456789] ^0badf00d

## Meals

The owner cooks pasta.[^e-1123456789] ^1badf00d

[^e-0123456789]: Time: `2026-11`; Sources: [a](../sources/openprogram/_v2/s.md#source-0000000000000000)
[^e-1123456789]: Time: `2026-11`; Sources: [b](../sources/openprogram/_v2/s.md#source-1111111111111111)
"""


def test_an_append_lands_in_its_section_and_its_footnotes_after_the_existing_ones() -> None:
    actions = [EditAction("append", "topics/food.md", "## Drinks",
                          "The owner now drinks tea.[^e1]\n\n"
                          "[^e1]: Time: `2026-12-01`; Sources: openprogram/s/n2")]
    [edit] = to_topic_edits(actions, {"topics/food.md": BASE}.get)
    assert edit.text is not None
    lines = edit.text.split("\n")
    assert lines.index("The owner now drinks tea.[^m1xe1]") < lines.index("## Meals")
    assert lines.index("The owner now drinks tea.[^m1xe1]") > lines.index("## Drinks")
    assert lines[-2] == "[^m1xe1]: Time: `2026-12-01`; Sources: openprogram/s/n2"
    topic = parse_topic(edit.text, "topics/food.md", strict=False)
    assert [p.ids for p in topic.paragraphs] == [("0badf00d",), (), ("1badf00d",)]
    normalise_topic("topics/food.md", edit.text, base=parse_topic(BASE, "topics/food.md"),
                    existing_ids={"0badf00d", "1badf00d"}, used_ids=set(), used_labels=set())


def test_appends_make_missing_sections_and_files_and_never_share_a_label() -> None:
    first = EditAction("append", "topics/food.md", "Snacks",
                       "Likes biscuits.[^e1]\n\n[^e1]: Time: `2026`; Sources: openprogram/s/n3")
    second = EditAction("append", "topics/food.md", "## Snacks",
                        "Likes crisps.[^e1]\n\n[^e1]: Time: `2026`; Sources: openprogram/s/n4")
    fresh = EditAction("append", "topics/travel.md", "",
                       "# Travel\n\nGoes to Oslo.[^e1]\n\n[^e1]: Time: `2026`; "
                       "Sources: openprogram/s/n5")
    edits = {e.path: e for e in to_topic_edits([first, second, fresh],
                                               {"topics/food.md": BASE}.get)}
    food = edits["topics/food.md"].text
    assert food is not None and food.count("## Snacks") == 1
    assert "[^m1xe1]" in food and "[^m2xe1]" in food
    assert food.index("Likes biscuits") < food.index("Likes crisps") < food.index("[^e-0123456789]:")
    assert edits["topics/travel.md"].text == (
        "# Travel\n\nGoes to Oslo.[^m1xe1]\n\n[^m1xe1]: Time: `2026`; Sources: openprogram/s/n5\n")


def test_write_and_delete_become_whole_file_edits() -> None:
    actions = [EditAction("write", "topics/a.md", text="# A\n"),
               EditAction("delete", "topics/b.md", delete_blocks=("0badf00d",))]
    edits = to_topic_edits(actions, lambda path: None)
    assert [(e.path, e.text, e.delete_blocks) for e in edits] == [
        ("topics/a.md", "# A\n", frozenset()), ("topics/b.md", None, frozenset({"0badf00d"}))]


# -- wire formats ----------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("mode", ["json_schema", "tools", "text"])
def test_requests_carry_no_credentials_and_ask_for_the_schema(provider: str, mode: str) -> None:
    path, headers, body = build_request(provider, model="m", system="rules",
                                        turns=[("user", "hi")], mode=mode, max_tokens=99)
    assert not {"authorization", "x-api-key"} & set(headers)
    assert path == ("/messages" if provider == "anthropic" else "/chat/completions")
    asks = ("response_format" in body, "tools" in body)
    if provider == "openai":
        assert asks == {"json_schema": (True, False), "tools": (False, True),
                        "text": (False, False)}[mode]
        assert body["messages"][0] == {"role": "system", "content": "rules"}
    else:
        assert asks == (False, mode != "text") and body["system"] == "rules"


def test_responses_are_read_from_text_tool_calls_and_tool_use() -> None:
    openai_tool = {"choices": [{"message": {"content": None, "tool_calls": [
        {"function": {"name": "write_memory", "arguments": '{"edits": []}'}}]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
    completion = read_response("openai", openai_tool)
    assert completion.answer == '{"edits": []}' and completion.prompt_tokens == 5
    anthropic_tool = {"content": [{"type": "tool_use", "input": {"edits": []}}],
                      "usage": {"input_tokens": 7, "output_tokens": 1}}
    completion = read_response("anthropic", anthropic_tool)
    assert completion.answer == {"edits": []} and completion.completion_tokens == 1
    empty = read_response("anthropic", {"content": []})
    assert empty.answer == "" and empty.prompt_tokens == 0


# -- settings --------------------------------------------------------------------------


def test_settings_layer_the_file_then_the_environment_then_the_flags() -> None:
    table = {"base_url": "http://file/v1", "model": "from-file", "concurrency": 2,
             "daily_tokens": 1000}
    env = {"SCRIPTORIUM_MODEL_MODEL": "from-env", "SCRIPTORIUM_MODEL_CONCURRENCY": "8",
           "SCRIPTORIUM_MODEL_RETRY_ATTEMPTS": "2"}
    settings = model_settings(table, env, {"model": "from-flag", "provider": None})
    assert settings.base_url == "http://file/v1" and settings.model == "from-flag"
    assert settings.concurrency == 8 and settings.daily_tokens == 1000
    assert settings.retry.attempts == 2
    assert settings.key_variable == "OPENAI_API_KEY"
    assert model_settings(table, {}, {"provider": "anthropic"}).key_variable == "ANTHROPIC_API_KEY"


@pytest.mark.parametrize(("table", "env", "says"), [
    ({"api_key": "sk-x"}, {}, "environment only"),
    ({}, {"SCRIPTORIUM_MODEL_API_KEY": "sk-x"}, "API_KEY_ENV"),
    ({"model": "m"}, {}, "needs base_url"),
    ({"base_url": "u", "model": "m", "concurrency": 0}, {}, "positive integer"),
    ({"base_url": "u", "model": "m", "read_timeout": "nan"}, {}, "positive number"),
    ({"base_url": "u", "model": "m", "provider": "gemini"}, {}, "provider"),
    ({"base_url": "u", "model": "m", "colour": "red"}, {}, "unknown writer setting"),
])
def test_bad_settings_name_the_source_and_never_echo_a_key(
    table: dict[str, object], env: dict[str, str], says: str,
) -> None:
    with pytest.raises(SettingsError, match=says) as caught:
        model_settings(table, env, {})
    assert "sk-x" not in str(caught.value)


REDACTED_URLS = [
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ("http://user:s3cret@host/v1", "http://[redacted]@host/v1"),
    ("http://s3cret@host:8080/v1", "http://[redacted]@host:8080/v1"),
    ("https://host/v1?api_key=s3cret", "https://host/v1?api_key=[redacted]"),
    ("https://host/v1?api-version=2024-02-01&key=s3cret",
     "https://host/v1?api-version=[redacted]&key=[redacted]"),
    ("https://host/v1?s3cret", "https://host/v1?[redacted]"),
    ("https://u:p%40ss@host/v1?k=s3cret#s3cret", "https://[redacted]@host/v1?k=[redacted]#[redacted]"),
    ("https://host/a@b/v1", "https://host/a@b/v1"),  # an @ in the path is no userinfo
    ("http://[::1/v1?k=s3cret", "[an unparsable URL, redacted]"),
]


@pytest.mark.parametrize(("url", "shown"), REDACTED_URLS)
def test_a_base_url_is_printed_without_its_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "s3cret" not in repr(ModelSettings(base_url=url, model="m"))


SPLIT_URLS = [
    ("http://host/v1", ("http://host/v1", "")),
    ("http://host/v1/?api-version=2024-02-01", ("http://host/v1/", "api-version=2024-02-01")),
    ("http://host/v1?a=1&b=2#frag", ("http://host/v1", "a=1&b=2")),
    ("http://host/v1#frag", ("http://host/v1", "")),
]


@pytest.mark.parametrize(("url", "parts"), SPLIT_URLS)
def test_a_base_url_splits_into_the_base_paths_join_and_the_query(
    url: str, parts: tuple[str, str],
) -> None:
    assert split_query(url) == parts


@pytest.mark.parametrize("url", ["notaurl", "ftp://x/v1", "http://", "127.0.0.1:8000/v1",
                                 "http://host:port/v1", "file:///tmp/v1"])
def test_a_base_url_that_is_no_http_url_is_refused_at_once_naming_its_source(url: str) -> None:
    """Not retried as a connection error: the settings refuse it, naming where it came from."""
    with pytest.raises(SettingsError, match="not an http:// or https:// URL") as caught:
        model_settings({}, {}, {"base_url": url, "model": "m"})
    assert caught.value.where == "--base-url"
    with pytest.raises(SettingsError) as caught:
        model_settings({}, {"SCRIPTORIUM_MODEL_BASE_URL": url, "SCRIPTORIUM_MODEL_MODEL": "m"},
                       {})
    assert caught.value.where == "$SCRIPTORIUM_MODEL_BASE_URL"
    with pytest.raises(SettingsError) as caught:
        model_settings({"base_url": url, "model": "m"}, {}, {}, where="s/scriptorium.toml [writer]")
    assert caught.value.where == "s/scriptorium.toml [writer]"
    with pytest.raises(SettingsError, match="base_url"):  # settings built by hand: the endpoint
        Endpoint(ModelSettings(base_url=url, model="m"))


def test_a_base_url_with_a_credential_is_refused_without_it() -> None:
    with pytest.raises(SettingsError) as caught:
        model_settings({}, {}, {"base_url": "ftp://user:s3cret@host/v1?key=s3cret", "model": "m"})
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(("provider", "mode", "refusal", "refused"), [
    ("openai", "json_schema", "response_format is not supported", True),
    ("openai", "json_schema", "Unsupported value: 'json_schema'", True),
    ("openai", "json_schema", "maximum context length is 8192 tokens", False),
    ("openai", "json_schema", "", False),
    ("openai", "json_schema", "tool_choice is not supported", False),  # not what was sent
    ("openai", "tools", "This model does not support tools", True),
    ("openai", "tools", "function calling is not enabled", True),
    ("openai", "tools", "max_tokens is too large", False),
    ("anthropic", "json_schema", "tool_choice: unknown type", True),  # sent as a forced tool
    ("anthropic", "json_schema", "prompt is too long", False),
    ("openai", "text", "response_format", False),  # nothing below text
])
def test_a_refusal_names_the_structured_form_or_is_the_batchs(
    provider: str, mode: str, refusal: str, refused: bool,
) -> None:
    assert refuses_form(provider, mode, refusal) is refused
