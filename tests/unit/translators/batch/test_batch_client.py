"""Error mapping and backoff policy of the Batch client, as data, with no I/O."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest
from azure.core.exceptions import HttpResponseError, ServiceRequestError
from azure.core.rest import HttpRequest

from translators.base import (
    BackendAuthError,
    BackendConflict,
    BackendNotFound,
    BackendRejected,
    BackendThrottled,
    BackendUnavailable,
)
from translators.batch.client import RetryPolicy, map_error, retry_after_seconds
from translators.batch.submit import plan_chunks, task_bytes
from translators.batch.transport import _HttpxResponse


def http_error(status: int, code: str, headers: dict[str, str] | None = None) -> HttpResponseError:
    body = {"code": code, "message": {"lang": "en-US", "value": f"{code} happened"}}
    raw = httpx.Response(status, json=body, headers=headers or {})
    resp = _HttpxResponse(request=HttpRequest("GET", "https://x/"), internal_response=raw)
    resp._content = raw.content
    from azure.batch._patch import BatchErrorFormat

    return HttpResponseError(response=resp, error_format=BatchErrorFormat)


@pytest.mark.parametrize(
    ("status", "code", "kind", "reason"),
    [
        (404, "TaskNotFound", BackendNotFound, None),
        (409, "TaskExists", BackendConflict, None),
        (401, "Unauthorized", BackendAuthError, None),
        (403, "AuthenticationFailed", BackendAuthError, None),
        (429, "TooManyRequests", BackendThrottled, None),
        (503, "ServerBusy", BackendThrottled, None),
        (500, "InternalError", BackendUnavailable, None),
        (400, "InvalidPropertyValue", BackendRejected, "InvalidPropertyValue"),
        (413, "RequestBodyTooLarge", BackendRejected, "RequestBodyTooLarge"),
    ],
)
def test_status_mapping(status: int, code: str, kind: type, reason: str | None) -> None:
    err = map_error(http_error(status, code), what="get_task")
    assert type(err) is kind
    assert err.status == status
    assert code in str(err) and "get_task" in str(err)
    if reason:
        assert err.reason == reason


def test_throttled_carries_retry_after() -> None:
    err = map_error(http_error(429, "TooManyRequests", {"Retry-After": "12"}))
    assert isinstance(err, BackendThrottled) and err.retry_after == 12.0


def test_connection_errors_are_unavailable() -> None:
    assert isinstance(map_error(ServiceRequestError("refused")), BackendUnavailable)


def test_retry_after_http_date() -> None:
    now = dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=dt.UTC)
    assert retry_after_seconds("Sun, 01 Mar 2026 10:00:30 GMT", now=now) == 30.0
    assert retry_after_seconds("garbage") is None
    assert retry_after_seconds("-5") == 0.0


@pytest.mark.parametrize(
    ("status", "code", "retry"),
    [
        (429, "TooManyRequests", True),
        (503, "ServerBusy", True),
        (500, "OperationTimedOut", True),
        (500, "InternalError", False),
        (400, "InvalidPropertyValue", False),
        (404, "JobNotFound", False),
    ],
)
def test_retry_policy_is_data(status: int, code: str, retry: bool) -> None:
    policy = RetryPolicy(delays=(0.5, 1.0), max_retry_after=10)
    err = map_error(http_error(status, code))
    assert (policy.delay(0, err) is not None) is retry
    if retry:
        assert [policy.delay(i, err) for i in range(3)] == [0.5, 1.0, None]


def test_retry_after_is_capped() -> None:
    policy = RetryPolicy(max_retry_after=10)
    err = map_error(http_error(429, "TooManyRequests", {"Retry-After": "3600"}))
    assert policy.delay(0, err) == 10


def test_plan_chunks_respects_count_and_bytes() -> None:
    tasks = [{"id": f"t{i}", "commandLine": "x" * 100} for i in range(250)]
    chunks = plan_chunks(tasks, max_tasks=100, max_bytes=1_000_000)
    assert [len(c) for c in chunks] == [100, 100, 50]
    small = plan_chunks(tasks, max_tasks=100, max_bytes=2_000)
    assert all(sum(task_bytes(t) for t in c) + 13 <= 2_000 for c in small)
    assert [t for c in small for t in c] == tasks  # order kept, nothing lost
