"""One model endpoint over HTTP: a pooled client, bounded concurrency, retries.

Every batch of every worker goes through one :class:`Endpoint` per base
URL: one ``httpx.AsyncClient`` (its connection pool sized to the
concurrency limit), a semaphore of ``concurrency`` requests in flight, and
per request connect/read timeouts plus a total bound on the attempt.
Retries follow :mod:`memory.writers.model._retry` (429, 5xx, connection
errors and timeouts; never another 4xx); the semaphore is not held while
backing off. A cancelled caller cancels its request: httpx closes the
connection, so no request outlives the job that made it.

The API key is read from the environment when the endpoint opens and kept
only here; :func:`redact` scrubs it from any text built from a response
(a server may echo headers), so it never reaches an error, a log or a file.
Credentials in the base URL (userinfo, query values) are scrubbed the same
way, and the endpoint is named only as :func:`redact_url` prints it. A query
in the base URL (``/v1?api-version=...``) is sent with every request, after
the joined path.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self

import anyio
import httpx

from memory._errors import EndpointRefusedError, EndpointUnavailableError, EndpointUnreachableError
from memory.writers.model._retry import (
    parse_retry_after,
    retry_delay,
    retryable_status,
)
from memory.writers.model._settings import (
    ModelSettings,
    check_base_url,
    redact_url,
    split_query,
)
from memory.writers.model._wire import ResponseUnreadableError, auth_headers

__all__ = [
    "CallStats",
    "Endpoint",
    "probe_endpoint",
]


class _RedactedURLs(logging.Filter):
    """httpx logs each request's full URL (INFO): printed here only as :func:`redact_url` does."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, httpx.URL) for a in record.args):
            record.args = tuple(redact_url(str(a)) if isinstance(a, httpx.URL) else a
                                for a in record.args)
        return True


_HTTPX_LOG = logging.getLogger("httpx")
if not any(isinstance(f, _RedactedURLs) for f in _HTTPX_LOG.filters):
    _HTTPX_LOG.addFilter(_RedactedURLs())


async def probe_endpoint(settings: ModelSettings) -> None:
    """Raise :class:`EndpointUnreachableError` unless something listens at the base URL.

    A TCP connect to its host and port, within ``connect_timeout``; nothing
    is sent, so no key, no request and no cost. For a command that is about
    to run many batches (``simulate``): without it, a base URL with nothing
    behind it cost every batch its retries and ended in failed invariants
    that never named the endpoint. The message names the URL as
    :func:`redact_url` prints it, and what to do.
    """
    parts = urllib.parse.urlsplit(check_base_url(settings.base_url, "base_url"))
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with anyio.fail_after(settings.connect_timeout):
            stream = await anyio.connect_tcp(host, port)
    except TimeoutError:
        reason = f"no answer within {settings.connect_timeout:g} s"
    except OSError as exc:
        reason = _connect_failure(exc)
    else:
        await stream.aclose()
        return
    raise EndpointUnreachableError(
        f"nothing answers at {redact_url(settings.base_url)} ({reason}); start the model "
        f"server there, or pass the URL it listens on with --base-url")


def _connect_failure(exc: OSError) -> str:
    """Why a connect failed, in words: anyio's "all attempts failed" hides the errno in a cause."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            words = os.strerror(seen.errno) if seen.errno and seen.errno > 0 else seen.strerror
            if words:
                return words[0].lower() + words[1:]
        seen = seen.__cause__
    return str(exc) or type(exc).__name__


@dataclass(frozen=True, slots=True)
class CallStats:
    retries: int
    seconds: float  # first byte sent to the last attempt's answer, backoffs included


Sleep = Callable[[float], Awaitable[None]]
OnRetry = Callable[[int, int, float, str], None]
"""``on_retry(attempt, attempts, seconds, error)``: attempt ``attempt`` failed with ``error``;
the next starts after ``seconds`` (a CLI draws it: a wait is not a hang)."""


class Endpoint:
    """See the module docstring. Use as ``async with`` or call :meth:`aclose`."""

    def __init__(
        self, settings: ModelSettings, *, env: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None, sleep: Sleep = anyio.sleep,
        clock: Callable[[], float] = time.time, rng: random.Random | None = None,
        on_retry: OnRetry | None = None,
    ) -> None:
        self.settings = settings
        self._on_retry = on_retry
        check_base_url(settings.base_url, "base_url")  # a usage error now, not retried later
        source = os.environ if env is None else env
        self.__key = source.get(settings.key_variable) or None
        self._base, self._query = split_query(settings.base_url)
        self.__url_secrets = _url_secrets(settings.base_url)
        self._transport = transport
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._client: httpx.AsyncClient | None = None
        self._slots: anyio.Semaphore | None = None
        self.in_flight = 0
        self.peak_in_flight = 0

    def __repr__(self) -> str:
        return f"Endpoint({redact_url(self.settings.base_url)!r}, model={self.settings.model!r})"

    def redact(self, text: str) -> str:
        for secret in (self.__key, *self.__url_secrets):
            if secret:
                text = text.replace(secret, "[redacted]")
        return text

    def _open(self) -> tuple[httpx.AsyncClient, anyio.Semaphore]:
        if self._client is None or self._slots is None:
            s = self.settings
            self._client = httpx.AsyncClient(
                base_url=self._base.rstrip("/"),
                params=httpx.QueryParams(self._query) if self._query else None,
                timeout=httpx.Timeout(connect=s.connect_timeout, read=s.read_timeout,
                                      write=s.read_timeout, pool=None),
                limits=httpx.Limits(max_connections=s.concurrency,
                                    max_keepalive_connections=s.concurrency),
                transport=self._transport,
            )
            self._slots = anyio.Semaphore(s.concurrency)
        return self._client, self._slots

    async def aclose(self) -> None:
        client, self._client, self._slots = self._client, None, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def post(
        self, path: str, headers: Mapping[str, str], body: Mapping[str, Any],
    ) -> tuple[object, CallStats]:
        """POST ``body`` as JSON; the decoded 2xx body and the call's stats."""
        client, slots = self._open()
        policy = self.settings.retry
        content = json.dumps(body).encode("utf-8")
        sent = {**headers, **auth_headers(self.settings.provider, self.__key)}
        started = anyio.current_time()
        url = self._base.rstrip("/") + path + (f"?{self._query}" if self._query else "")
        where = f"{redact_url(url)} (model {self.settings.model})"
        last = "no attempt"
        for attempt in range(1, policy.attempts + 1):
            retry_after: float | None = None
            try:
                async with slots:
                    self.in_flight += 1
                    self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                    try:
                        with anyio.fail_after(self.settings.total_timeout):
                            response = await client.post(path, content=content, headers=sent)
                    finally:
                        self.in_flight -= 1
            except (httpx.TransportError, TimeoutError) as exc:
                last = f"{type(exc).__name__}: {self.redact(str(exc)) or 'no detail'}"
            else:
                status = response.status_code
                if 200 <= status < 300:
                    try:
                        document = response.json()
                    except ValueError:
                        unreadable = ResponseUnreadableError(
                            f"{where} answered {status} with a body that is not JSON")
                        unreadable.retries = attempt - 1
                        raise unreadable from None
                    return document, CallStats(attempt - 1, anyio.current_time() - started)
                excerpt = self.redact(response.text[:300]).replace("\n", " ")
                if not retryable_status(status):
                    refused = EndpointRefusedError(
                        f"{where} refused the request with {status}: {excerpt}", status, excerpt)
                    refused.retries = attempt - 1
                    raise refused
                last = f"HTTP {status}: {excerpt}"
                retry_after = parse_retry_after(response.headers.get("retry-after"), self._clock())
            if attempt < policy.attempts:
                delay = retry_delay(policy, attempt, retry_after, self._rng)
                if self._on_retry is not None:
                    self._on_retry(attempt, policy.attempts, delay, last)
                await self._sleep(delay)
        unavailable = EndpointUnavailableError(
            f"{where} failed {policy.attempts} attempt(s); last: {last}")
        unavailable.retries = policy.attempts - 1
        raise unavailable


def _url_secrets(url: str) -> tuple[str, ...]:
    """What :func:`redact_url` hides in ``url``, to scrub from text a server echoes.

    Longest first, so a password is not half-replaced inside its userinfo;
    pieces shorter than four characters are left (no credential is that short,
    and replacing them would garble every message).
    """
    base, query = split_query(url)
    netloc = base.partition("//")[2].partition("/")[0]
    pieces = [netloc.rpartition("@")[0]] if "@" in netloc else []
    pieces += [part for part in pieces[0].split(":")] if pieces else []
    for piece in query.split("&"):
        pieces.append(piece.partition("=")[2] if "=" in piece else piece)
    for piece in list(pieces):
        pieces.append(urllib.parse.unquote(piece))
    return tuple(sorted({p for p in pieces if len(p) >= 4}, key=len, reverse=True))
