"""ZunClient one-off error paths with respx: retries as data, Retry-After, re-auth, the
status → exception mapping, negotiation fallbacks."""

from __future__ import annotations

import httpx
import pytest
import respx

from translators.base import (
    BackendAuthError,
    BackendConflict,
    BackendError,
    BackendNotFound,
    BackendRejected,
    BackendThrottled,
    BackendUnavailable,
)
from translators.zun.auth import StaticAuth
from translators.zun.client import ZunClient, ZunQuotaExceeded, error_for, retry_policy

BASE = "https://zun.example/v1"
VERSIONS = {
    "OpenStack-API-Minimum-Version": "container 1.1",
    "OpenStack-API-Maximum-Version": "container 1.40",
}


def zun_error(status: int, detail: str, **headers: str) -> httpx.Response:
    body = {
        "errors": [
            {
                "request_id": "",
                "code": "",
                "status": status,
                "title": "",
                "detail": detail,
                "links": [],
            }
        ]
    }
    return httpx.Response(status, json=body, headers={**VERSIONS, **headers})


@pytest.fixture
def slept() -> list[float]:
    return []


@pytest.fixture
def client(slept: list[float]) -> ZunClient:
    async def sleep(s: float) -> None:
        slept.append(s)

    return ZunClient(
        StaticAuth("tok", BASE, "p1"), retry=retry_policy((0.5, 1.0, 2.0)), sleep=sleep
    )


@pytest.fixture
def api():
    with respx.mock(assert_all_called=False) as router:
        router.get(BASE).mock(return_value=httpx.Response(200, json={"id": "v1"}, headers=VERSIONS))
        yield router


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
async def test_get_is_retried_on_transient_statuses_with_the_backoff(
    api, client: ZunClient, slept: list[float], status: int
) -> None:
    route = api.get(BASE + "/containers/abc").mock(
        side_effect=[
            zun_error(status, "busy"),
            zun_error(status, "busy"),
            httpx.Response(200, json={"uuid": "abc"}, headers=VERSIONS),
        ]
    )
    assert (await client.get_container("abc"))["uuid"] == "abc"
    assert route.call_count == 3
    assert slept == [0.5, 1.0]


async def test_retries_stop_after_the_policy_and_raise(
    api, client: ZunClient, slept: list[float]
) -> None:
    api.get(BASE + "/containers/abc").mock(return_value=zun_error(503, "maintenance"))
    with pytest.raises(BackendUnavailable, match="503 maintenance"):
        await client.get_container("abc")
    assert slept == [0.5, 1.0, 2.0]


async def test_retry_after_is_honoured(api, client: ZunClient, slept: list[float]) -> None:
    api.get(BASE + "/containers/abc").mock(
        side_effect=[
            zun_error(429, "slow down", **{"Retry-After": "7"}),
            httpx.Response(200, json={}, headers=VERSIONS),
        ]
    )
    await client.get_container("abc")
    assert slept == [7.0]


async def test_post_create_is_not_retried_on_a_5xx(
    api, client: ZunClient, slept: list[float]
) -> None:
    route = api.post(BASE + "/containers").mock(return_value=zun_error(500, "boom"))
    with pytest.raises(BackendUnavailable):
        await client.create_container({"name": "x", "image": "busybox"})
    assert route.call_count == 1 and slept == []


async def test_post_is_retried_when_the_connection_was_refused(
    api, client: ZunClient, slept: list[float]
) -> None:
    route = api.post(BASE + "/containers").mock(
        side_effect=[
            httpx.ConnectError("refused"),
            httpx.Response(202, json={"uuid": "u"}, headers=VERSIONS),
        ]
    )
    assert (await client.create_container({"image": "busybox"}))["uuid"] == "u"
    assert route.call_count == 2


async def test_get_timeouts_are_retried_then_reported(
    api, client: ZunClient, slept: list[float]
) -> None:
    api.get(BASE + "/containers/abc").mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(BackendUnavailable, match="ReadTimeout"):
        await client.get_container("abc")
    assert len(slept) == 3


async def test_401_invalidates_the_token_and_retries_once(api, client: ZunClient) -> None:
    route = api.get(BASE + "/containers/abc").mock(
        side_effect=[
            httpx.Response(401, json={"error": {"code": 401, "message": "expired"}}),
            httpx.Response(200, json={"uuid": "abc"}, headers=VERSIONS),
        ]
    )
    await client.get_container("abc")
    assert route.call_count == 2
    assert isinstance(client.auth, StaticAuth) and client.auth.invalidations == 1


async def test_a_second_401_is_an_auth_error(api, client: ZunClient) -> None:
    api.get(BASE + "/containers/abc").mock(
        return_value=httpx.Response(
            401,
            json={
                "error": {
                    "code": 401,
                    "message": "The request you have made requires authentication.",
                }
            },
        )
    )
    with pytest.raises(BackendAuthError, match="requires authentication"):
        await client.get_container("abc")


async def test_every_call_carries_token_and_microversion(api, client: ZunClient) -> None:
    route = api.get(BASE + "/containers/abc").mock(
        return_value=httpx.Response(200, json={}, headers=VERSIONS)
    )
    await client.get_container("abc")
    sent = route.calls.last.request.headers
    assert sent["X-Auth-Token"] == "tok"
    assert sent["OpenStack-API-Version"] == "container 1.40"


async def test_negotiation_falls_back_to_the_root_version_document(client: ZunClient) -> None:
    with respx.mock(assert_all_called=False) as router:
        router.get(BASE).mock(return_value=httpx.Response(200, json={"id": "v1"}))
        router.get("https://zun.example/").mock(
            return_value=httpx.Response(
                200, json={"versions": [{"id": "v1", "min_version": "1.1", "max_version": "1.36"}]}
            )
        )
        neg = await client.negotiate()
    assert neg.version == (1, 36)
    assert "entrypoint" in neg.disabled and not client.supports("entrypoint")
    assert client.supports("tty")


async def test_tls_is_verified_by_default() -> None:
    c = ZunClient(StaticAuth("t", BASE))
    assert c._http._transport.inner._pool._ssl_context.verify_mode.name == "CERT_REQUIRED"
    await c.aclose()


@pytest.mark.parametrize(
    ("status", "detail", "method", "expected", "retryable"),
    [
        (400, "Invalid input for field/attribute cpu", "POST", BackendRejected, False),
        (404, "Image nosuch could not be found.", "POST", BackendRejected, False),
        (404, "Container abc could not be found.", "GET", BackendNotFound, False),
        (401, "expired", "GET", BackendAuthError, True),
        (
            403,
            "Policy doesn't allow container:delete_force to be performed.",
            "DELETE",
            BackendAuthError,
            True,
        ),
        (403, "Quota exceeded for resources: ['containers']", "POST", ZunQuotaExceeded, True),
        (406, "Version 1.41 was requested but ...", "GET", BackendRejected, False),
        (409, "Cannot delete container abc in Running state.", "DELETE", BackendConflict, True),
        (429, "slow down", "GET", BackendThrottled, True),
        (500, "boom", "GET", BackendUnavailable, True),
        (502, "bad gateway", "GET", BackendUnavailable, True),
        (418, "teapot", "GET", BackendError, True),
    ],
)
def test_status_to_exception_mapping(
    status: int, detail: str, method: str, expected: type, retryable: bool
) -> None:
    err = error_for(zun_error(status, detail), method=method, path="/containers/abc")
    assert type(err) is expected
    assert err.retryable is retryable
    assert err.status == status
    assert detail[:40] in str(err)


def test_image_not_found_at_create_is_err_image_pull() -> None:
    err = error_for(
        zun_error(404, "Image nosuch could not be found."), method="POST", path="/containers"
    )
    assert isinstance(err, BackendRejected) and err.reason == "ErrImagePull"


def test_error_messages_are_truncated_and_keystone_bodies_understood() -> None:
    long = error_for(zun_error(400, "x" * 5000), method="POST", path="/containers")
    assert len(str(long)) < 400
    ks = error_for(
        httpx.Response(
            401,
            json={
                "error": {
                    "code": 401,
                    "message": "The request you have made requires authentication.",
                }
            },
        ),
        method="GET",
        path="/x",
    )
    assert "requires authentication" in str(ks)
    text = error_for(httpx.Response(502, text="<html>proxy</html>"), method="GET", path="/x")
    assert "<html>proxy</html>" in str(text)


def test_rejected_values_are_not_echoed_into_messages() -> None:
    detail = "Invalid input for field/attribute environment. Value: {'DB_PASSWORD': 's3cr3t'}. 1 is not of type 'string'"
    err = error_for(zun_error(400, detail), method="POST", path="/containers")
    assert "s3cr3t" not in str(err)
    assert "field/attribute environment" in str(err) and "(value redacted)" in str(err)
