"""KubeClient on its production (lean HTTP/1.1) path against a loopback fake API server:
retries, rate limit, paging, patch types, watch, auth.  Transport failures on cue (refused,
read timeout) go through ``HttpxSender`` with a ``MockTransport`` that raises them, and a
few tests run on both senders: one pipeline above either."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from kube_fakes import SleepRecorder

from gateway.kube import errors as e
from gateway.kube.client import (
    KubeClient,
    KubeConfig,
    RetryPolicy,
    load_config,
    resource_of,
)
from tests.kube_loopback import StartApi
from vkgate_core.clock import FakeClock
from vkgate_core.ratelimit import TokenBucket

Handler = Callable[[httpx.Request], Any]
MakeClient = Callable[..., Awaitable[KubeClient]]


def _kube(server: str, clock: FakeClock | None, **kw: Any) -> KubeClient:
    kw.setdefault("qps", 0)
    return KubeClient(
        KubeConfig(server=server, token_source=lambda: "Bearer s3cret"),
        clock=clock or SleepRecorder(),
        rng=random.Random(0),
        **kw,
    )


@pytest.fixture
def client(loopback: StartApi) -> MakeClient:
    """``await client(handler, clock, **kw)``: a KubeClient on the lean path, against a
    loopback API server answering with ``handler``."""

    async def make(handler: Handler, clock: FakeClock | None = None, **kw: Any) -> KubeClient:
        api = await loopback(handler)
        return _kube(api.url, clock, **kw)

    return make


def httpx_client(handler: Handler, clock: FakeClock | None = None, **kw: Any) -> KubeClient:
    """A KubeClient on ``HttpxSender`` over ``httpx.MockTransport(handler)``."""
    return _kube("https://kube.test", clock, transport=httpx.MockTransport(handler), **kw)


@pytest.fixture(params=["http11", "httpx"])
def either(request: pytest.FixtureRequest, client: MakeClient) -> MakeClient:
    """``client`` on each sender in turn: what the pipeline does cannot depend on the sender."""
    if request.param == "http11":
        return client

    async def make(handler: Handler, clock: FakeClock | None = None, **kw: Any) -> KubeClient:
        return httpx_client(handler, clock, **kw)

    return make


def st(code: int, reason: str = "R") -> httpx.Response:
    return httpx.Response(
        code, json={"kind": "Status", "code": code, "reason": reason, "message": "m"}
    )


def scripted(*responses: httpx.Response | Exception) -> tuple[Handler, list[httpx.Request]]:
    seen: list[httpx.Request] = []
    queue = list(responses)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, Exception):
            raise item
        return item

    return handler, seen


@pytest.mark.parametrize("code", [500, 502, 503, 504, 429])
async def test_get_retried_on_retryable_status(code: int, client: MakeClient):
    clock = SleepRecorder()
    handler, seen = scripted(st(code), st(code), httpx.Response(200, json={"ok": 1}))
    c = await client(handler, clock)
    assert await c.get("/api/v1/nodes/x") == {"ok": 1}
    assert len(seen) == 3
    assert len(clock.slept) == 2
    # policy delays 0.2, 0.5 with ±20 % jitter
    assert 0.16 <= clock.slept[0] <= 0.24 and 0.4 <= clock.slept[1] <= 0.6
    await c.aclose()


@pytest.mark.parametrize("code", [400, 401, 403, 404, 409, 410, 422])
async def test_get_not_retried_on_client_errors(code: int, client: MakeClient):
    handler, seen = scripted(st(code))
    c = await client(handler)
    with pytest.raises(e.ApiError) as info:
        await c.get("/api/v1/nodes/x")
    assert info.value.status == code
    assert len(seen) == 1
    await c.aclose()


async def test_connection_errors_retried_until_budget_then_unavailable():
    clock = SleepRecorder()
    handler, seen = scripted(httpx.ConnectError("refused"))
    c = httpx_client(handler, clock, retry=RetryPolicy(delays=(0.1, 0.2, 0.3)))
    with pytest.raises(e.ApiUnavailable, match="refused"):
        await c.get("/api/v1/nodes/x")
    assert len(seen) == 4
    assert len(clock.slept) == 3
    await c.aclose()


async def test_writes_not_retried_on_5xx_but_on_429_with_retry_after(client: MakeClient):
    clock = SleepRecorder()
    handler, seen = scripted(st(503))
    c = await client(handler, clock)
    with pytest.raises(e.ServerError):
        await c.create("/api/v1/namespaces/a/pods", {"metadata": {"name": "p"}})
    assert len(seen) == 1
    handler2, seen2 = scripted(
        httpx.Response(429, headers={"Retry-After": "4"}, json={"kind": "Status", "code": 429}),
        httpx.Response(201, json={"metadata": {"name": "p"}}),
    )
    c2 = await client(handler2, clock)
    await c2.create("/api/v1/namespaces/a/pods", {"metadata": {"name": "p"}})
    assert len(seen2) == 2
    assert clock.slept[-1] == 4.0  # Retry-After beats the 0.2 s policy delay
    await c.aclose()
    await c2.aclose()


async def test_each_retried_attempt_takes_a_token_and_is_counted(client: MakeClient):
    clock = SleepRecorder()
    handler, seen = scripted(
        httpx.Response(429, headers={"Retry-After": "1"}, json={"kind": "Status", "code": 429}),
        httpx.Response(201, json={"metadata": {"name": "p"}}),
    )
    bucket = TokenBucket(qps=1, burst=1, clock=clock)
    c = await client(handler, clock)
    await c.create("/api/v1/namespaces/a/pods", {"metadata": {"name": "p"}}, limiter=bucket)
    assert len(seen) == 2
    assert c.stats[("create", "pods")] == 2
    # the Retry-After second refilled the one-token bucket: the repeat did not wait for it
    assert clock.slept == [1.0]
    await c.create("/api/v1/namespaces/a/pods", {"metadata": {"name": "p"}}, limiter=bucket)
    assert clock.slept == [1.0, 1.0]  # the next request had to wait for a token
    await c.aclose()


async def test_a_write_is_retried_when_the_connection_was_refused():
    clock = SleepRecorder()
    handler, seen = scripted(
        httpx.ConnectError("refused"), httpx.Response(201, json={"metadata": {"name": "p"}})
    )
    c = httpx_client(handler, clock)
    await c.create("/api/v1/namespaces/a/pods", {"metadata": {"name": "p"}})
    assert len(seen) == 2
    await c.aclose()


async def test_a_write_is_not_retried_after_a_read_timeout():
    handler, seen = scripted(httpx.ReadTimeout("slow"))
    c = httpx_client(handler)
    with pytest.raises(e.ApiUnavailable, match="ReadTimeout"):
        await c.create("/api/v1/namespaces/a/pods", {"metadata": {"name": "p"}})
    assert len(seen) == 1
    await c.aclose()


def test_retry_after_is_capped():
    policy = RetryPolicy(max_retry_after=30.0)
    assert policy.wait(0, 3600.0, random.Random(0)) == 30.0
    assert policy.wait(len(policy.delays), 3600.0, random.Random(0)) is None


async def test_client_applies_rate_limit(client: MakeClient):
    clock = SleepRecorder()
    c = await client(lambda r: httpx.Response(200, json={}), clock, qps=5, burst=2)
    for _ in range(4):
        await c.get("/api/v1/nodes")
    assert clock.slept == pytest.approx([0.2, 0.2])
    await c.aclose()


async def test_list_follows_continue_with_limit_500(client: MakeClient):
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        token = request.url.params.get("continue")
        if token is None:
            return httpx.Response(
                200,
                json={
                    "kind": "PodList",
                    "items": [{"n": 1}],
                    "metadata": {"continue": "c1", "resourceVersion": "10"},
                },
            )
        return httpx.Response(
            200,
            json={"kind": "PodList", "items": [{"n": 2}], "metadata": {"resourceVersion": "10"}},
        )

    c = await client(handler)
    out = await c.list("/api/v1/pods", params={"fieldSelector": "spec.nodeName=vk"})
    assert out["items"] == [{"n": 1}, {"n": 2}]
    assert out["metadata"]["resourceVersion"] == "10"
    assert seen[0].url.params["limit"] == "500"
    assert seen[0].url.params["fieldSelector"] == "spec.nodeName=vk"
    assert seen[1].url.params["continue"] == "c1"
    await c.aclose()


@pytest.mark.parametrize(
    ("patch_type", "content_type"),
    [
        ("strategic", "application/strategic-merge-patch+json"),
        ("merge", "application/merge-patch+json"),
        ("json", "application/json-patch+json"),
        ("apply", "application/apply-patch+yaml"),
    ],
)
async def test_patch_content_types_and_field_manager(
    patch_type: str, content_type: str, client: MakeClient
):
    handler, seen = scripted(httpx.Response(200, json={}))
    c = await client(handler)
    await c.patch("/api/v1/nodes/n/status", {"a": 1}, patch_type=patch_type, field_manager="vkgate")  # type: ignore[arg-type]
    assert seen[0].headers["content-type"] == content_type
    assert seen[0].url.params["fieldManager"] == "vkgate"
    assert json.loads(seen[0].content) == {"a": 1}
    await c.aclose()


async def test_auth_header_and_write_stats(either: MakeClient):
    handler, seen = scripted(httpx.Response(200, json={"metadata": {}}))
    c = await either(handler)
    await c.get("/api/v1/nodes/n")
    await c.patch("/api/v1/namespaces/a/pods/p/status", {})
    await c.patch("/api/v1/namespaces/a/pods/p/status", {})
    await c.delete("/api/v1/namespaces/a/pods/p")
    await c.replace("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n", {})
    assert seen[0].headers["authorization"] == "Bearer s3cret"
    assert c.stats == {
        ("patch", "pods/status"): 2,
        ("delete", "pods"): 1,
        ("update", "leases"): 1,
    }
    await c.aclose()


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("/api/v1/nodes/n/status", "nodes/status"),
        ("/api/v1/namespaces/a/pods", "pods"),
        ("/api/v1/namespaces/a", "namespaces"),
        ("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n", "leases"),
        ("/api/v1/namespaces/a/events/e", "events"),
    ],
)
def test_resource_of(path: str, resource: str):
    assert resource_of(path) == resource


def stream(*lines: str, hold: asyncio.Event | None = None) -> httpx.Response:
    async def body() -> AsyncIterator[bytes]:
        for line in lines:
            yield (line + "\n").encode()
        if hold is not None:
            await hold.wait()

    return httpx.Response(200, content=body())


async def test_watch_yields_events_and_passes_params(either: MakeClient):
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return stream(
            json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a"}}}),
            "",
            json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}),
        )

    c = await either(handler)
    events = [ev async for ev in c.watch("/api/v1/pods", params={"resourceVersion": "5"})]
    assert [ev["type"] for ev in events] == ["ADDED", "BOOKMARK"]
    assert seen[0].url.params["watch"] == "true"
    assert seen[0].url.params["resourceVersion"] == "5"
    await c.aclose()


async def test_a_watch_event_with_unicode_line_breaks_in_a_string_is_one_event(
    either: MakeClient,
):
    """U+0085, U+2028 and U+2029 inside a pod's strings, raw as JSON allows (Go writes NEL
    raw): one event, its string byte for byte, on both senders (httpx's ``aiter_lines`` broke
    the line there: "malformed watch event", the watch restarted, again and again)."""
    value = "a\u0085b\u2028c\u2029d"
    raw = json.dumps(
        {"type": "ADDED", "object": {"metadata": {"name": "a", "annotations": {"x": value}}}},
        ensure_ascii=False,
    )
    assert "\u0085" in raw
    c = await either(lambda r: stream(raw))
    events = [ev async for ev in c.watch("/api/v1/pods")]
    assert [ev["object"]["metadata"]["annotations"]["x"] for ev in events] == [value]
    await c.aclose()


async def test_watch_http_410_raises_gone(client: MakeClient):
    c = await client(lambda r: st(410, "Expired"))
    with pytest.raises(e.Gone):
        async for _ in c.watch("/api/v1/pods"):
            pass
    await c.aclose()


async def test_watch_error_event_410_raises_gone(either: MakeClient):
    err = {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "code": 410,
            "reason": "Expired",
            "message": "too old resource version",
        },
    }
    c = await either(lambda r: stream(json.dumps({"type": "ADDED", "object": {}}), json.dumps(err)))
    got: list[str] = []
    with pytest.raises(e.Gone, match="too old"):
        async for ev in c.watch("/api/v1/pods"):
            got.append(ev["type"])
    assert got == ["ADDED"]
    await c.aclose()


KUBECONFIG = """
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: {ca}
users:
- name: u
  user:
    client-certificate-data: {crt}
    client-key-data: {key}
    token: tok-123
contexts:
- name: ctx
  context: {{cluster: c, user: u}}
current-context: ctx
"""


def test_load_config_reads_cert_and_token(tmp_path: Path):
    import base64

    def b64(s: str) -> str:
        return base64.b64encode(s.encode()).decode()

    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(ca=b64("CA PEM"), crt=b64("CERT PEM"), key=b64("KEY PEM")))
    cfg = load_config(str(path))
    assert cfg.server == "https://127.0.0.1:6443"
    assert cfg.token == "Bearer tok-123"
    assert cfg.ca_file and Path(cfg.ca_file).read_text() == "CA PEM"
    assert cfg.cert_file and Path(cfg.cert_file).read_text() == "CERT PEM"
    assert cfg.key_file and Path(cfg.key_file).read_text() == "KEY PEM"
    assert "tok-123" not in repr(cfg)


def test_load_config_missing_file_is_startup_error(tmp_path: Path):
    from gateway.errors import StartupError

    with pytest.raises(StartupError, match="cannot load Kubernetes credentials"):
        load_config(str(tmp_path / "nope"))
