"""The one retry layer (vkgate_core.retry, docs/design/retry.md) on its own: which answers are
retried for which methods, how long it waits (fake sleep), Retry-After honoured and capped,
per-request overrides, and the success path going through with exactly one inner call."""

from __future__ import annotations

import random

import httpx
import pytest

from vkgate_core.retry import (
    IDEMPOTENT,
    NO_RETRY,
    RETRY,
    RetryPolicy,
    RetryTransport,
    parse_retry_after,
)


class Slept(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def scripted(*answers: httpx.Response | Exception) -> tuple[httpx.MockTransport, list[str]]:
    """Answers in order (the last one repeats); records each request's method."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        answer = answers[min(len(seen) - 1, len(answers) - 1)]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.MockTransport(handler), seen


def client(
    inner: httpx.MockTransport, slept: Slept, policy: RetryPolicy | None = None
) -> httpx.AsyncClient:
    policy = policy or RetryPolicy(delays=(0.5, 1.0, 2.0))
    return httpx.AsyncClient(
        base_url="http://api.test",
        transport=RetryTransport(inner, policy=policy, sleep=slept, rng=random.Random(0)),
    )


async def test_success_is_one_call_and_no_sleep() -> None:
    inner, seen = scripted(httpx.Response(200, json={}))
    slept = Slept()
    async with client(inner, slept) as c:
        assert (await c.get("/x")).status_code == 200
    assert seen == ["GET"] and slept == []


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
async def test_get_is_retried_on_retryable_statuses_with_the_delays(status: int) -> None:
    inner, seen = scripted(httpx.Response(status), httpx.Response(status), httpx.Response(200))
    slept = Slept()
    async with client(inner, slept) as c:
        assert (await c.get("/x")).status_code == 200
    assert len(seen) == 3 and slept == [0.5, 1.0]


async def test_the_budget_ends_with_the_last_answer_returned() -> None:
    inner, seen = scripted(httpx.Response(503, text="down"))
    slept = Slept()
    async with client(inner, slept) as c:
        resp = await c.get("/x")
    assert resp.status_code == 503 and resp.text == "down"
    assert len(seen) == 4 and slept == [0.5, 1.0, 2.0]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422, 501])
async def test_client_errors_are_not_retried(status: int) -> None:
    inner, seen = scripted(httpx.Response(status))
    slept = Slept()
    async with client(inner, slept) as c:
        assert (await c.get("/x")).status_code == status
    assert len(seen) == 1 and slept == []


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
async def test_writes_are_not_retried_on_5xx(method: str) -> None:
    inner, seen = scripted(httpx.Response(500))
    slept = Slept()
    async with client(inner, slept) as c:
        assert (await c.request(method, "/x", content=b"{}")).status_code == 500
    assert seen == [method] and slept == []


async def test_writes_are_retried_on_429_with_the_body_sent_again() -> None:
    bodies: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        return httpx.Response(429 if len(bodies) == 1 else 201)

    slept = Slept()
    async with client(httpx.MockTransport(handler), slept) as c:
        assert (await c.post("/x", content=b'{"a":1}')).status_code == 201
    assert bodies == [b'{"a":1}', b'{"a":1}'] and slept == [0.5]


async def test_a_write_is_retried_when_the_connection_was_never_made() -> None:
    inner, seen = scripted(httpx.ConnectError("refused"), httpx.Response(201))
    slept = Slept()
    async with client(inner, slept) as c:
        assert (await c.post("/x", content=b"{}")).status_code == 201
    assert seen == ["POST", "POST"]


async def test_a_write_is_not_retried_after_a_read_timeout() -> None:
    inner, seen = scripted(httpx.ReadTimeout("slow"))
    slept = Slept()
    async with client(inner, slept) as c:
        with pytest.raises(httpx.ReadTimeout):
            await c.post("/x", content=b"{}")
    assert seen == ["POST"] and slept == []


async def test_reads_are_retried_on_transport_errors_then_raise_the_last() -> None:
    inner, seen = scripted(httpx.ReadTimeout("slow"))
    slept = Slept()
    async with client(inner, slept) as c:
        with pytest.raises(httpx.ReadTimeout):
            await c.get("/x")
    assert len(seen) == 4 and slept == [0.5, 1.0, 2.0]


async def test_retry_after_lengthens_the_wait_and_is_capped() -> None:
    inner, _ = scripted(
        httpx.Response(429, headers={"Retry-After": "7"}),
        httpx.Response(503, headers={"Retry-After": "3600"}),
        httpx.Response(503, headers={"Retry-After": "0"}),
        httpx.Response(200),
    )
    slept = Slept()
    policy = RetryPolicy(delays=(0.5, 1.0, 2.0), max_retry_after=30.0)
    async with client(inner, slept, policy) as c:
        assert (await c.get("/x")).status_code == 200
    # server asks for longer; then capped at 30 s; then our own step is longer
    assert slept == [7.0, 30.0, 2.0]


async def test_retry_after_as_an_http_date() -> None:
    import datetime as dt

    now = dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=dt.UTC)
    assert parse_retry_after("Sun, 01 Mar 2026 10:00:30 GMT", now=now) == 30.0
    assert parse_retry_after("Sun, 01 Mar 2026 09:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
    assert parse_retry_after("-5") == 0.0


async def test_jitter_stays_within_its_bounds() -> None:
    policy = RetryPolicy(delays=(1.0,) * 200, jitter=0.2)
    rng = random.Random(1)
    waits = [policy.wait(i, None, rng) for i in range(200)]
    assert all(w is not None and 0.8 <= w <= 1.2 for w in waits)
    assert len({round(w or 0, 6) for w in waits}) > 100  # really random, not a constant


async def test_no_retry_per_request() -> None:
    inner, seen = scripted(httpx.Response(503))
    slept = Slept()
    async with client(inner, slept) as c:
        assert (await c.get("/x", extensions={RETRY: NO_RETRY})).status_code == 503
    assert len(seen) == 1 and slept == []


async def test_a_write_declared_idempotent_is_retried_on_5xx() -> None:
    inner, seen = scripted(httpx.Response(500), httpx.Response(200))
    slept = Slept()
    async with client(inner, slept) as c:
        resp = await c.post("/x", content=b"{}", extensions={IDEMPOTENT: True})
    assert resp.status_code == 200 and seen == ["POST", "POST"]


async def test_a_read_declared_not_idempotent_is_not_retried_on_5xx() -> None:
    inner, seen = scripted(httpx.Response(500), httpx.Response(200))
    slept = Slept()
    async with client(inner, slept) as c:
        assert (await c.get("/x", extensions={IDEMPOTENT: False})).status_code == 500
    assert seen == ["GET"]


async def test_before_retry_runs_before_each_repeat_only() -> None:
    inner, seen = scripted(httpx.Response(503), httpx.Response(503), httpx.Response(200))
    hooks: list[int] = []

    async def before(request: httpx.Request) -> None:
        hooks.append(len(seen))

    transport = RetryTransport(
        inner, policy=RetryPolicy(delays=(0.1, 0.1)), sleep=Slept(), before_retry=before
    )
    async with httpx.AsyncClient(base_url="http://api.test", transport=transport) as c:
        assert (await c.get("/x")).status_code == 200
    assert hooks == [1, 2]
