"""The one status → exception mapping."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest

from gateway.kube import errors as e


def status(code: int, reason: str, message: str, **details: object) -> dict[str, object]:
    body: dict[str, object] = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
    if details:
        body["details"] = details
    return body


@pytest.mark.parametrize(
    ("code", "cls", "retryable"),
    [
        (400, e.ApiError, False),
        (401, e.Unauthorized, False),
        (403, e.Forbidden, False),
        (404, e.NotFound, False),
        (409, e.Conflict, False),
        (410, e.Gone, False),
        (422, e.Invalid, False),
        (429, e.TooManyRequests, True),
        (500, e.ServerError, True),
        (503, e.ServerError, True),
        (504, e.ServerError, True),
    ],
)
def test_status_codes_map_to_classes(code: int, cls: type[e.ApiError], retryable: bool):
    err = e.error_from_status(code, status(code, "SomeReason", "it went wrong"))
    assert type(err) is cls
    assert err.status == code
    assert err.reason == "SomeReason"
    assert err.message == "it went wrong"
    assert err.retryable is retryable
    assert f"{code} SomeReason: it went wrong" == str(err)


def test_status_body_as_bytes_and_causes_kept():
    body = status(422, "Invalid", 'Node "x" is invalid', causes=[{"field": "metadata.labels"}])
    import json

    err = e.error_from_status(422, json.dumps(body).encode())
    assert isinstance(err, e.Invalid)
    assert err.body["details"]["causes"][0]["field"] == "metadata.labels"


def test_non_json_body_is_truncated_and_flattened():
    html = "<html>\n" + "x" * 5000 + "\n</html>"
    err = e.error_from_status(502, html)
    assert isinstance(err, e.ServerError)
    assert len(err.message) <= e.BODY_LIMIT
    assert "\n" not in err.message
    assert err.message.endswith("…")


def test_empty_body_says_so():
    assert "empty response body" in e.error_from_status(500, b"").message


def test_retry_after_header_seconds_and_status_details():
    assert e.error_from_status(429, b"", retry_after="7").retry_after == 7.0
    err = e.error_from_status(429, status(429, "TooManyRequests", "slow", retryAfterSeconds=3))
    assert err.retry_after == 3.0


def test_retry_after_http_date():
    now = dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=dt.UTC)
    assert e.parse_retry_after("Sun, 01 Mar 2026 10:00:12 GMT", now=now) == 12.0
    assert e.parse_retry_after("garbage", now=now) is None
    assert e.parse_retry_after(None) is None


def test_watch_error_event_410_is_gone():
    err = e.error_from_status(410, status(410, "Expired", "too old resource version: 1 (5)"))
    assert isinstance(err, e.Gone)
    assert err.reason == "Expired"


def test_transport_error_is_unavailable_and_retryable():
    err = e.error_from_transport(
        httpx.ConnectError("[Errno 111] Connection refused"), context="GET https://k/x"
    )
    assert isinstance(err, e.ApiUnavailable)
    assert err.status is None and err.retryable
    assert "Connection refused" in str(err) and "GET https://k/x" in str(err)
