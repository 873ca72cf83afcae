"""The HTTP client's policy as data: which errors retry and how long, Retry-After, the one
status → exception mapping, TLS verification by default."""

from __future__ import annotations

import email.utils
import random
import ssl
import time
from pathlib import Path

import httpx
import pytest

from translators.base import (
    BackendAuthError,
    BackendConflict,
    BackendNotFound,
    BackendRejected,
    BackendThrottled,
    BackendUnavailable,
)
from translators.nomad.client import NomadClient, retry_policy, ssl_context
from translators.nomad.config import NomadConfig
from translators.nomad.errors import error_for_status, error_for_transport, retry_after_seconds
from vkgate_core.settings import SettingsError


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (400, "bad request", BackendRejected),
        (401, "", BackendAuthError),
        (403, "Permission denied", BackendAuthError),
        (404, "job not found", BackendNotFound),
        (409, "conflict", BackendConflict),
        (422, "invalid", BackendRejected),
        (429, "slow down", BackendThrottled),
        (500, "rpc error: no leader", BackendUnavailable),
        (500, "1 error occurred:\n\t* Task group pod validation failed", BackendRejected),
        (
            500,
            "1 error occurred:\n\t* Failed to signal task: app, err: Task not running",
            BackendUnavailable,
        ),
        # a register with EnforceIndex that met a job (nomad/job_endpoint.go): not a retry
        (500, "Enforcing job modify index 0: job already exists", BackendConflict),
        (502, "", BackendUnavailable),
        (503, "", BackendUnavailable),
    ],
)
def test_status_mapping(status: int, body: str, kind: type) -> None:
    err = error_for_status(status, body, what="GET /x")
    assert type(err) is kind
    assert err.status == status


def test_long_bodies_are_truncated() -> None:
    err = error_for_status(500, "x" * 5000, what="GET /x")
    assert len(str(err)) < 400


def test_transport_errors_are_unavailable() -> None:
    err = error_for_transport(httpx.ConnectTimeout("timed out"), what="GET /v1/nodes")
    assert isinstance(err, BackendUnavailable) and "ConnectTimeout" in str(err)


def test_retry_after_seconds_and_http_date() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28 <= (retry_after_seconds(later) or 0) <= 31


@pytest.mark.parametrize(
    ("attempt", "retry_after", "delay"),
    [
        (0, None, 0.5),
        (2, None, 2.0),
        (3, None, None),  # steps used up
        (0, 10.0, 10.0),  # server asks for longer
        (1, 0.1, 1.0),  # our step is longer
        (0, 999.0, 60.0),  # capped
    ],
)
def test_retry_policy_is_data(attempt: int, retry_after: float | None, delay: float | None) -> None:
    policy = retry_policy((0.5, 1.0, 2.0))
    assert policy.wait(attempt, retry_after, random.Random(0)) == delay


@pytest.mark.parametrize(
    ("method", "status", "retried"),
    [
        ("GET", 500, True),
        ("GET", 503, True),
        ("GET", 429, True),
        ("GET", 403, False),
        ("GET", 404, False),
        ("POST", 429, True),
        ("POST", 500, False),  # a write that may have been applied is not repeated
        ("DELETE", 503, False),
    ],
)
def test_which_answers_are_retried(method: str, status: int, retried: bool) -> None:
    assert retry_policy((0.5,)).retries_status(method, status) is retried


def test_tls_is_verified_by_default() -> None:
    ctx = ssl_context(NomadConfig.from_settings({"address": "https://nomad:4646"}, environ={}))
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_skip_verify_is_explicit() -> None:
    ctx = ssl_context(
        NomadConfig.from_settings(
            {"address": "https://nomad:4646", "skip_verify": True}, environ={}
        )
    )
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_NONE


def test_a_missing_ca_file_fails_loudly(tmp_path: Path) -> None:
    cfg = NomadConfig.from_settings(
        {"address": "https://nomad:4646", "ca_cert": str(tmp_path / "nope.pem")}, environ={}
    )
    with pytest.raises(SettingsError, match=r"^backend\.nomad\.ca_cert: cannot load"):
        ssl_context(cfg)


async def test_every_call_carries_token_namespace_and_region() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=[], headers={"X-Nomad-Index": "42"})

    cfg = NomadConfig.from_settings({"token": "t", "namespace": "apps", "region": "eu"}, environ={})
    client = NomadClient(cfg, transport=httpx.MockTransport(handler))
    reply = await client.call("GET", "/jobs", params={"meta": True, "topic": ["Job", "Allocation"]})
    await client.aclose()
    req = seen[0]
    assert reply.index == 42
    assert req.headers["X-Nomad-Token"] == "t"
    assert req.url.params["namespace"] == "apps" and req.url.params["region"] == "eu"
    assert req.url.params["meta"] == "true"
    assert req.url.params.get_list("topic") == ["Job", "Allocation"]


async def test_blocking_query_sends_index_and_wait_and_outlasts_it() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=[], headers={"X-Nomad-Index": "8"})

    client = NomadClient(
        NomadConfig.from_settings({}, environ={}), transport=httpx.MockTransport(handler)
    )
    await client.blocking_get("/allocations", index=7, wait=60)
    await client.aclose()
    assert seen[0].url.params["index"] == "7" and seen[0].url.params["wait"] == "60000ms"
    assert seen[0].extensions["timeout"]["read"] > 60


def test_transport_errors_name_the_address_tried():
    request = httpx.Request("GET", "http://127.0.0.9:4646/v1/status/leader")
    err = error_for_transport(
        httpx.ConnectError("connection refused", request=request), what="GET /status/leader"
    )
    assert "nomad at http://127.0.0.9:4646 GET /status/leader: ConnectError" in str(err)
