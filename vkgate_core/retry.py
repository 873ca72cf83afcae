"""The one retry layer for HTTP requests: an ``httpx`` transport wrapper (docs/design/retry.md).

Every HTTP client of vkgate (the Kubernetes client, the Nomad and Zun backends) sends through
``RetryTransport(inner, policy=..., sleep=...)``, so *when* a request is retried and *how long*
it waits is decided in exactly one place:

* **Idempotent methods** (``GET``, ``HEAD``, ``OPTIONS`` by default) are retried on a transport
  error (refused, reset, timeout) and on a retryable status (429, 500, 502, 503, 504).
* **Every other method** only when the server cannot have acted on it: ``429`` (throttling is
  decided before the request is processed) or a connection that was never established
  (``httpx.ConnectError`` / ``ConnectTimeout``: nothing was sent), so a retry never applies a
  write twice.
* **Delays** are data (``RetryPolicy.delays``, its length is the retry budget), each scaled by
  a random factor in ``[1 - jitter, 1 + jitter]``; a server's ``Retry-After`` (seconds or an
  HTTP date) lengthens the wait, capped at ``max_retry_after``: ``max(delay, min(after, cap))``.
* **Per request**: ``extensions={RETRY: policy}`` replaces the policy for one request
  (``NO_RETRY`` for callers with their own loop, or for long-lived streams), and
  ``extensions={IDEMPOTENT: True}`` declares a write safe to repeat (an API that dedupes).

The last answer is returned as it is (or the last transport error raised), so each client maps
it to its own error types exactly as before.  On the success path the wrapper costs one await
and one set lookup; sleeping goes through an injected ``sleep`` so tests use fake time.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import email.utils
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

__all__ = [
    "IDEMPOTENT",
    "NO_RETRY",
    "RETRY",
    "RetryPolicy",
    "RetryTransport",
    "parse_retry_after",
]

log = logging.getLogger("vkgate.retry")

Sleep = Callable[[float], Awaitable[None]]
BeforeRetry = Callable[[httpx.Request], Awaitable[None]]

#: Request extension: a ``RetryPolicy`` that replaces the transport's policy for this request.
RETRY = "vkgate.retry"
#: Request extension: ``True`` declares this request safe to repeat whatever its method.
IDEMPOTENT = "vkgate.idempotent"

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)


def parse_retry_after(value: str | None, *, now: _dt.datetime | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date (RFC 9110 §10.2.3).

    None when the header is absent or unparsable; never negative.
    """
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return max(0.0, (when - (now or _dt.datetime.now(_dt.UTC))).total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    """When to retry a request and how long to wait first.  Pure data + pure functions."""

    #: Wait before retry n (0-based); the length is the retry budget.
    delays: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 4.0)
    #: Each delay is multiplied by a random factor in [1 - jitter, 1 + jitter].
    jitter: float = 0.0
    #: Upper bound for a server-sent Retry-After.
    max_retry_after: float = 30.0
    #: Methods retried on transport errors and on every status in ``statuses``.
    idempotent: frozenset[str] = frozenset({"GET", "HEAD", "OPTIONS"})
    #: Statuses retried for idempotent requests.
    statuses: frozenset[int] = frozenset({429, 500, 502, 503, 504})
    #: Statuses retried for every method: the server did not act on the request.
    always: frozenset[int] = frozenset({429})

    def wait(self, attempt: int, retry_after: float | None, rng: random.Random) -> float | None:
        """Seconds before retry ``attempt`` (0-based), or None when the budget is spent."""
        if attempt >= len(self.delays):
            return None
        base = self.delays[attempt]
        if self.jitter:
            base *= rng.uniform(1 - self.jitter, 1 + self.jitter)
        if retry_after is not None:
            base = max(base, min(retry_after, self.max_retry_after))
        return base

    def retries_status(self, method: str, status: int, *, idempotent: bool | None = None) -> bool:
        safe = method in self.idempotent if idempotent is None else idempotent
        return status in self.always or (safe and status in self.statuses)

    def retries_error(
        self, method: str, exc: httpx.TransportError, *, idempotent: bool | None = None
    ) -> bool:
        safe = method in self.idempotent if idempotent is None else idempotent
        return safe or isinstance(exc, _NOT_SENT)


#: For callers with their own retry loop, and for long-lived streams.
NO_RETRY = RetryPolicy(delays=())


class RetryTransport(httpx.AsyncBaseTransport):
    """Wraps an ``httpx`` transport with ``RetryPolicy`` (see the module docstring).

    ``before_retry(request)`` runs before every repeated attempt (not the first): the
    Kubernetes client takes a rate-limit token and counts the write there.
    """

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        *,
        policy: RetryPolicy | None = None,
        sleep: Sleep | None = None,
        rng: random.Random | None = None,
        before_retry: BeforeRetry | None = None,
    ) -> None:
        self.inner = inner
        self.policy = policy if policy is not None else RetryPolicy()
        self._sleep: Sleep = sleep if sleep is not None else asyncio.sleep
        self._rng = rng if rng is not None else random.Random()
        self._before_retry = before_retry
        # the fast path's one lookup: statuses no policy would retry return at once
        self._maybe = frozenset({429, *range(500, 600)})

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self.inner.handle_async_request(request)
        except httpx.TransportError as exc:
            return await self._retry(request, None, exc)
        if response.status_code not in self._maybe:
            return response
        return await self._retry(request, response, None)

    async def _retry(
        self,
        request: httpx.Request,
        response: httpx.Response | None,
        error: httpx.TransportError | None,
    ) -> httpx.Response:
        ext = request.extensions
        policy: RetryPolicy | None = ext.get(RETRY)
        if policy is None:
            policy = self.policy
        safe: bool | None = ext.get(IDEMPOTENT)
        method = request.method
        attempt = 0
        while True:
            after: float | None = None
            if response is not None:
                if not policy.retries_status(method, response.status_code, idempotent=safe):
                    return response
                after = parse_retry_after(response.headers.get("Retry-After"))
            elif error is not None and not policy.retries_error(method, error, idempotent=safe):
                raise error
            delay = policy.wait(attempt, after, self._rng)
            if delay is None:
                if response is not None:
                    return response
                assert error is not None
                raise error
            what = response.status_code if response is not None else repr(error)
            log.debug("%s %s: %s; retry %d in %.2fs", method, request.url, what, attempt + 1, delay)
            if response is not None:
                await response.aclose()
            attempt += 1
            await self._sleep(delay)
            if self._before_retry is not None:
                await self._before_retry(request)
            response = error = None
            try:
                response = await self.inner.handle_async_request(request)
            except httpx.TransportError as exc:
                error = exc

    async def aclose(self) -> None:
        await self.inner.aclose()
