"""How a model writer is configured: defaults, ``[writer]`` of scriptorium.toml, env, flags.

Each later source wins: the defaults below, the ``[writer]`` table of
``<state>/scriptorium.toml``, the ``SCRIPTORIUM_MODEL_*`` environment
variables, then the command line. The API key is none of these: only the
*name* of the environment variable that holds it is configured
(``api_key_env``; default ``OPENAI_API_KEY`` or ``ANTHROPIC_API_KEY``), and
the key is read from the environment when the endpoint opens. A key in the
file is refused, so it is never on disk under the state directory.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from memory._errors import SettingsError
from memory.writers.model._retry import RetryPolicy
from memory.writers.model._wire import MODES, PROVIDERS

__all__ = [
    "ENV_PREFIX", "ModelSettings", "check_base_url", "model_settings", "redact_url",
    "split_query",
]

_HIDDEN = "[redacted]"


def redact_url(url: str) -> str:
    """``url`` fit to print: its userinfo and every query value (and fragment) replaced.

    A base URL may carry a credential (``http://user:secret@host/v1``, or
    ``?api_key=secret``); an endpoint's name goes into errors, events and
    the log, so it is printed only through this. Query keys are kept (they
    say which parameter was set); a bare query part counts as a value. A
    URL that does not parse is not printed at all.
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "[an unparsable URL, redacted]"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{_HIDDEN}@{netloc.rpartition('@')[2]}"
    query = "&".join(f"{piece.partition('=')[0]}={_HIDDEN}" if "=" in piece else _HIDDEN
                     for piece in parts.query.split("&") if piece)
    fragment = _HIDDEN if parts.fragment else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def split_query(url: str) -> tuple[str, str]:
    """``url`` without its query (and fragment), and the query: paths join before the query.

    ``http://host/v1?api-version=2024-02-01`` (Azure style) is the base
    ``http://host/v1`` and the query ``api-version=2024-02-01`` that every
    request carries; appending a path to the whole string would put it
    after the query.
    """
    base, _, rest = url.partition("?")
    base = base.partition("#")[0]
    return base, rest.partition("#")[0]

ENV_PREFIX = "SCRIPTORIUM_MODEL_"
_SECRET_KEYS = frozenset({"api_key", "key", "token", "authorization"})


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """One endpoint and how the writer uses it (no secret in here: it is logged freely)."""

    base_url: str
    model: str
    provider: str = "openai"
    api_key_env: str = ""  # "" : OPENAI_API_KEY / ANTHROPIC_API_KEY by provider
    mode: str = "auto"  # json_schema, then tools, then text, as the endpoint accepts
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    total_timeout: float = 300.0  # one HTTP attempt, headers to last byte
    concurrency: int = 4  # requests in flight to this endpoint
    max_tokens: int = 4096  # completion tokens per call
    batch_tokens: int | None = None  # prompt + completion over one batch's calls
    daily_tokens: int | None = None  # per UTC day; then batches wait
    repair_rounds: int = 2
    structure_tokens: int = 6000  # the workspace part of the prompt
    full_files: int = 3  # related files shown in full within structure_tokens
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def __repr__(self) -> str:
        # Settings are logged freely: the base URL only with its credentials hidden.
        shown = ", ".join(f"{f.name}={redact_url(self.base_url)!r}" if f.name == "base_url"
                          else f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"ModelSettings({shown})"

    @property
    def key_variable(self) -> str:
        if self.api_key_env:
            return self.api_key_env
        return "ANTHROPIC_API_KEY" if self.provider == "anthropic" else "OPENAI_API_KEY"


_FLOATS = ("connect_timeout", "read_timeout", "total_timeout")
_INTS = ("concurrency", "max_tokens", "repair_rounds", "structure_tokens", "full_files")
_OPTIONAL_INTS = ("batch_tokens", "daily_tokens")
_STRINGS = ("base_url", "model", "provider", "api_key_env", "mode")
_RETRY_BACKOFF = {"retry_initial": "initial", "retry_maximum": "maximum"}
KNOWN = frozenset((*_FLOATS, *_INTS, *_OPTIONAL_INTS, *_STRINGS, "retry_attempts",
                   *_RETRY_BACKOFF, "kind"))


def _check(name: str, value: object, where: str) -> object:
    if name in _STRINGS:
        if not isinstance(value, str):
            raise SettingsError(where, f"{name} must be a string")
        return value
    number: object = value
    if isinstance(value, str):  # from the environment
        try:
            number = float(value) if name in _FLOATS or name == "retry_initial" \
                or name == "retry_maximum" else int(value)
        except ValueError:
            raise SettingsError(where, f"{name} must be a number, not {value!r}") from None
    if name in _FLOATS or name in ("retry_initial", "retry_maximum"):
        if (isinstance(number, bool) or not isinstance(number, (int, float))
                or not math.isfinite(number) or number <= 0):
            raise SettingsError(where, f"{name} must be a positive number of seconds")
        return float(number)
    if isinstance(number, bool) or not isinstance(number, int) or number < (
            0 if name in ("repair_rounds", "full_files") else 1):
        raise SettingsError(where, f"{name} must be a {'non-negative' if name in ('repair_rounds', 'full_files') else 'positive'} integer, not {value!r}")
    return number


def check_base_url(url: str, where: str) -> str:
    """``url`` if it is an ``http(s)://`` URL with a host; else :class:`SettingsError` at once.

    A base URL that is no HTTP URL (``notaurl``, ``ftp://x``) fails the
    same way on every attempt: retried as a connection error it cost each
    batch its whole backoff and said nothing of the cause.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        host, _port = parts.hostname, parts.port  # a bad port raises here
    except ValueError:
        host = None
        parts = urllib.parse.urlsplit("")
    if parts.scheme not in ("http", "https") or not host:
        raise SettingsError(where, f"base_url {redact_url(url)!r} is not an http:// or https:// "
                                   "URL with a host; give one such as http://127.0.0.1:8000/v1")
    return url


def _layer(settings: dict[str, Any], source: Mapping[str, Any], where: str,
           origins: dict[str, str] | None = None) -> None:
    for name, value in source.items():
        if value is None or name == "kind":
            continue
        if name.lower() in _SECRET_KEYS:
            raise SettingsError(where, f"{name}: API keys are read from the environment only "
                                       f"(name the variable with api_key_env); remove it")
        if name not in KNOWN:
            raise SettingsError(where, f"unknown writer setting {name}; the settings are "
                                       f"{', '.join(sorted(KNOWN))}")
        settings[name] = _check(name, value, where)
        if origins is not None:
            origins[name] = where


def model_settings(
    table: Mapping[str, Any], env: Mapping[str, str], flags: Mapping[str, Any], *,
    where: str = "scriptorium.toml [writer]",
) -> ModelSettings:
    """Pure: the layered settings; :class:`SettingsError` naming the source of a bad value."""
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}  # which source set each value, to name it in an error
    _layer(merged, table, where, origins)
    from_env = {name: env[ENV_PREFIX + name.upper()] for name in KNOWN - {"kind"}
                if ENV_PREFIX + name.upper() in env}
    if (ENV_PREFIX + "API_KEY") in env:
        raise SettingsError(ENV_PREFIX + "API_KEY", "name the key's variable with "
                            f"{ENV_PREFIX}API_KEY_ENV instead; the key itself is not a setting")
    for name, value in from_env.items():
        _layer(merged, {name: value}, f"${ENV_PREFIX}{name.upper()}", origins)
    for name, value in flags.items():
        _layer(merged, {name: value}, f"--{name.replace('_', '-')}", origins)
    for name in ("base_url", "model"):
        if not merged.get(name):
            raise SettingsError(where, f"the model writer needs {name} (--{name.replace('_', '-')},"
                                       f" ${ENV_PREFIX}{name.upper()} or [writer] {name})")
    if merged.get("provider", "openai") not in PROVIDERS:
        raise SettingsError(where, f"provider must be one of {', '.join(PROVIDERS)}")
    if merged.get("mode", "auto") not in ("auto", *MODES):
        raise SettingsError(where, f"mode must be auto or one of {', '.join(MODES)}")
    check_base_url(merged["base_url"], origins.get("base_url", where))
    retry = RetryPolicy()
    backoff = retry.backoff
    if "retry_attempts" in merged:
        retry = replace(retry, attempts=merged.pop("retry_attempts"))
    for name, attr in _RETRY_BACKOFF.items():
        if name in merged:
            backoff = replace(backoff, **{attr: merged.pop(name)})
    retry = replace(retry, backoff=backoff)
    known = {f.name for f in fields(ModelSettings)}
    return ModelSettings(retry=retry, **{k: v for k, v in merged.items() if k in known})
