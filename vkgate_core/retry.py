"""The one retry layer for HTTP requests: an ``httpx`` transport wrapper (docs/design/retry.md).

The HTTP clients of the backends (Nomad, Zun) send through ``RetryTransport(inner,
policy=..., sleep=...)``, and the Kubernetes client calls the same loop (``retry_after_first``)
above its sender, so *when* a request is retried and *how long* it waits is decided in exactly
one place:

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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

import httpx

__all__ = [
    "IDEMPOTENT",
    "MAYBE_RETRIED",
    "NO_RETRY",
    "RETRY",
    "RetryPolicy",
    "RetryTransport",
    "parse_retry_after",
    "retry_after_first",
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


class Answer(Protocol):
    """What the retry loop reads of a response: httpx's, or a kube client sender's."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...


A = TypeVar("A", bound=Answer)

#: Statuses some policy may retry; anything else returns at once (the fast path's one lookup).
MAYBE_RETRIED = frozenset({429, *range(500, 600)})


async def retry_after_first(
    method: str,
    send: Callable[[], Awaitable[A]],
    answer: A | None,
    error: httpx.TransportError | None,
    *,
    policy: RetryPolicy,
    sleep: Sleep,
    rng: random.Random,
    idempotent: bool | None = None,
    before_retry: Callable[[], Awaitable[None]] | None = None,
    discard: Callable[[A], Awaitable[None]] | None = None,
    what: str = "",
) -> A:
    """The retry loop, after a first attempt gave ``answer`` (a status in ``MAYBE_RETRIED``) or
    raised ``error``: repeat ``send`` while ``policy`` says so, then return the last answer or
    raise the last error.  ``discard`` releases an answer that is replaced by a retry;
    ``before_retry`` runs before every repeated attempt."""
    attempt = 0
    while True:
        after: float | None = None
        if answer is not None:
            if not policy.retries_status(method, answer.status_code, idempotent=idempotent):
                return answer
            after = parse_retry_after(answer.headers.get("retry-after"))
        elif error is not None and not policy.retries_error(method, error, idempotent=idempotent):
            raise error
        delay = policy.wait(attempt, after, rng)
        if delay is None:
            if answer is not None:
                return answer
            assert error is not None
            raise error
        got = answer.status_code if answer is not None else repr(error)
        log.debug("%s %s: %s; retry %d in %.2fs", method, what, got, attempt + 1, delay)
        if answer is not None and discard is not None:
            await discard(answer)
        attempt += 1
        await sleep(delay)
        if before_retry is not None:
            await before_retry()
        answer = error = None
        try:
            answer = await send()
        except httpx.TransportError as exc:
            error = exc


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

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response: httpx.Response | None = None
        try:
            response = await self.inner.handle_async_request(request)
        except httpx.TransportError as exc:
            error: httpx.TransportError | None = exc
        else:
            if response.status_code not in MAYBE_RETRIED:
                return response
            error = None
        ext = request.extensions
        policy: RetryPolicy | None = ext.get(RETRY)
        hook = self._before_retry

        async def before() -> None:
            if hook is not None:
                await hook(request)

        async def close(answer: httpx.Response) -> None:
            await answer.aclose()

        return await retry_after_first(
            request.method,
            lambda: self.inner.handle_async_request(request),
            response,
            error,
            policy=policy if policy is not None else self.policy,
            sleep=self._sleep,
            rng=self._rng,
            idempotent=ext.get(IDEMPOTENT),
            before_retry=before,
            discard=close,
            what=str(request.url),
        )

    async def aclose(self) -> None:
        await self.inner.aclose()
