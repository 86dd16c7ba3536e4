"""The two wire formats: OpenAI-compatible chat completions and Anthropic Messages.

Pure: a request is built as ``(path, headers, body)`` without the API key
(the transport adds it at the last moment, so no key ever sits in a value
that could be logged), and a response body is read into a
:class:`Completion`. ``mode`` asks for structured output the strongest way
the endpoint takes: ``json_schema`` (OpenAI ``response_format``; Anthropic
has no such field and is asked through a forced tool instead), ``tools``
(a forced tool call whose arguments are the edits) or ``text`` (JSON in the
answer, read by the strict parser).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memory.writers.model._edits import EDITS_SCHEMA, EDITS_TOOL

__all__ = ["MODES", "PROVIDERS", "Completion", "ResponseUnreadableError", "build_request",
           "read_response", "refuses_form"]

PROVIDERS = ("openai", "anthropic")
MODES = ("json_schema", "tools", "text")
ANTHROPIC_VERSION = "2023-06-01"
_TOOL_DESCRIPTION = "Record the memory edits for this batch."


class ResponseUnreadableError(ValueError):
    """A 2xx body that is not a completion of the provider's format (not retried: a bug)."""

    retries = 0  # attempts before the one that answered it (set by the transport)


@dataclass(frozen=True, slots=True)
class Completion:
    """The answer: text, or a tool call's arguments (already decoded), and the usage."""

    answer: str | dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    raw_text: str  # what to send back as the assistant's turn in a repair round


def build_request(
    provider: str, *, model: str, system: str, turns: Sequence[tuple[str, str]],
    mode: str, max_tokens: int,
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """``(path under the base URL, headers without credentials, JSON body)``.

    ``turns`` alternate ``("user", text)`` and ``("assistant", text)``.
    """
    messages = [{"role": role, "content": text} for role, text in turns]
    if provider == "openai":
        body: dict[str, Any] = {
            "model": model, "temperature": 0, "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": system}, *messages],
        }
        if mode == "json_schema":
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": EDITS_TOOL, "strict": True, "schema": EDITS_SCHEMA}}
        elif mode == "tools":
            body["tools"] = [{"type": "function", "function": {
                "name": EDITS_TOOL, "description": _TOOL_DESCRIPTION, "parameters": EDITS_SCHEMA}}]
            body["tool_choice"] = {"type": "function", "function": {"name": EDITS_TOOL}}
        return "/chat/completions", {"content-type": "application/json"}, body
    if provider == "anthropic":
        body = {"model": model, "max_tokens": max_tokens, "temperature": 0,
                "system": system, "messages": messages}
        if mode in ("json_schema", "tools"):
            body["tools"] = [{"name": EDITS_TOOL, "description": _TOOL_DESCRIPTION,
                              "input_schema": EDITS_SCHEMA}]
            body["tool_choice"] = {"type": "tool", "name": EDITS_TOOL}
        return "/messages", {"content-type": "application/json",
                             "anthropic-version": ANTHROPIC_VERSION}, body
    raise ValueError(f"unknown provider {provider!r}; one of {', '.join(PROVIDERS)}")


# What a refusal of each structured form names: the request field it refused.
_FORM_WORDS = {"response_format": ("response_format", "json_schema", "structured output",
                                   "guided"),
               "tools": ("tool", "function")}


def refuses_form(provider: str, mode: str, refusal: str) -> bool:
    """Pure: whether a 400/422's body says the endpoint does not take ``mode``'s form.

    It must name the field the form was sent in (``response_format`` for
    OpenAI's json_schema; ``tools``/``tool_choice`` for a forced tool, which
    is also how Anthropic takes json_schema). A refusal that names neither
    (a prompt over the context length, a bad ``max_tokens``) is the batch's,
    and stepping down on it weakened every later batch for nothing.
    """
    if mode == "text":
        return False
    form = "response_format" if provider == "openai" and mode == "json_schema" else "tools"
    text = refusal.lower()
    return any(word in text for word in _FORM_WORDS[form])


def auth_headers(provider: str, api_key: str | None) -> dict[str, str]:
    """The credential header (none without a key: local servers need none)."""
    if not api_key:
        return {}
    if provider == "anthropic":
        return {"x-api-key": api_key}
    return {"authorization": f"Bearer {api_key}"}


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def read_response(provider: str, document: object) -> Completion:
    """The completion in a 2xx body; :class:`ResponseUnreadableError` if it has none."""
    if not isinstance(document, dict):
        raise ResponseUnreadableError("the response body is not a JSON object")
    usage = document.get("usage") if isinstance(document.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    if provider == "openai":
        choices = document.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ResponseUnreadableError("the response has no choices")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise ResponseUnreadableError("the response's first choice has no message")
        prompt, completion = _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls:
            function = calls[0].get("function") if isinstance(calls[0], dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if isinstance(arguments, str):
                return Completion(arguments, prompt, completion, arguments)
            raise ResponseUnreadableError("the tool call has no arguments")
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        return Completion(text, prompt, completion, text)
    if provider == "anthropic":
        blocks = document.get("content")
        if not isinstance(blocks, list):
            raise ResponseUnreadableError("the response has no content list")
        prompt, completion = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
        texts: list[str] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            tool_input = block.get("input")
            if block.get("type") == "tool_use" and isinstance(tool_input, dict):
                return Completion(tool_input, prompt, completion, json.dumps(tool_input))
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
        text = "".join(texts)
        return Completion(text, prompt, completion, text)
    raise ValueError(f"unknown provider {provider!r}")
