"""The kubelet server end to end over a real loopback TLS socket, with a fake translator:
authentication and authorization, logs (follow, disconnect, errors), exec over SPDY (our own
client, built on the codec) and WebSocket (the ``websockets`` library), stats and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from kubelet_helpers import (
    DictPods,
    FakeReviews,
    FakeTranslator,
    LogsOnlyTranslator,
    ScriptedExec,
    SpdyTestClient,
    TestCA,
    cat,
    echo_then_exit,
    make_ca,
    pod,
)
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect as ws_connect
from websockets.typing import Subprotocol

from gateway.config import KubeletSettings
from gateway.kubelet import KubeletServer
from translators.base import ContainerUsage, NodeUsage, PodRef, PodUsage

NODE = "vk-1"
ADMIN_TOKEN = "admin-token"
VIEWER_TOKEN = "viewer-token"


@dataclass
class Env:
    server: KubeletServer
    translator: Any
    reviews: FakeReviews
    ca: TestCA
    tmp: Path
    client_ctx: ssl.SSLContext  # presents the API server's client cert
    anon_ctx: ssl.SSLContext  # no client cert

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.port}"

    def http(self, *, cert: bool = True, token: str | None = None) -> httpx.AsyncClient:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(
            base_url=self.url,
            verify=self.client_ctx if cert else self.anon_ctx,
            headers=headers,
            timeout=10,
            trust_env=False,
        )


def _allow(spec: dict[str, Any]) -> bool:
    if "system:masters" in spec.get("groups", []):
        return True
    return bool(spec["user"] == "admin")


async def _start(tmp: Path, translator: Any, *, ready: Any = None, **settings: Any) -> Env:
    ca = make_ca("kubelet-ca")
    serving_cert, serving_key = ca.write(tmp, "serving", "vk-1", server_hosts=["127.0.0.1"])
    client_ca = make_ca("client-ca")
    (tmp / "client-ca.crt").write_bytes(client_ca.cert_pem)
    ccert, ckey = client_ca.write(tmp, "apiserver", "kube-apiserver", ["system:masters"])
    (tmp / "ca.crt").write_bytes(ca.cert_pem)
    reviews = FakeReviews(
        tokens={
            ADMIN_TOKEN: {"username": "admin", "groups": ["system:authenticated"]},
            VIEWER_TOKEN: {"username": "viewer", "uid": "u-2", "groups": ["viewers"]},
        },
        allow=_allow,
    )
    ks = KubeletSettings(
        address="127.0.0.1",
        port=0,
        cert_file=str(serving_cert),
        key_file=str(serving_key),
        client_ca_file=str(tmp / "client-ca.crt"),
        metrics_address="127.0.0.1:0",
        **settings,
    )
    server = KubeletServer(
        settings=ks,
        node_name=NODE,
        pods=DictPods(pod("p", containers=("app", "side")), pod("other", node="vk-2", uid="u2")),
        translator=translator,
        client=reviews,
        cert_check_interval=0,
        ready=ready,
    )
    await server.start()
    client_ctx = ssl.create_default_context(cafile=str(tmp / "ca.crt"))
    client_ctx.load_cert_chain(str(ccert), str(ckey))
    anon_ctx = ssl.create_default_context(cafile=str(tmp / "ca.crt"))
    return Env(server, translator, reviews, ca, tmp, client_ctx, anon_ctx)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    tr = FakeTranslator(script=echo_then_exit(3))
    tr.log_lines = {"app": [b"line 1\n", b"line 2\n", b"line 3\n"]}
    e = await _start(tmp_path, tr)
    yield e
    await e.server.stop()


# --------------------------------------------------------------------------- auth


async def test_no_credentials_is_401_with_reason(env: Env) -> None:
    async with env.http(cert=False) as c:
        r = await c.get("/healthz")
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("text/plain")
    assert "no client certificate" in r.text and "anonymous access is disabled" in r.text


async def test_bad_token_is_401_and_says_why(env: Env) -> None:
    async with env.http(cert=False, token="nope") as c:
        r = await c.get("/pods")
    assert r.status_code == 401
    assert "invalid bearer token" in r.text


async def test_token_without_rights_is_403_naming_user_and_subresources(env: Env) -> None:
    async with env.http(cert=False, token=VIEWER_TOKEN) as c:
        r = await c.get("/pods", headers={"accept": "application/json"})
    assert r.status_code == 403
    body = r.json()
    assert body["kind"] == "Status" and body["reason"] == "Forbidden" and body["code"] == 403
    assert "user=viewer" in body["message"] and "[pods, proxy]" in body["message"]
    sars = [b for p, b in env.reviews.calls if p.endswith("subjectaccessreviews")]
    assert [s["spec"]["resourceAttributes"]["subresource"] for s in sars] == ["pods", "proxy"]
    assert sars[0]["spec"]["resourceAttributes"] == {
        "verb": "get",
        "resource": "nodes",
        "subresource": "pods",
        "name": NODE,
        "group": "",
        "version": "v1",
    }
    assert sars[0]["spec"]["uid"] == "u-2"


async def test_token_reviews_and_decisions_are_cached(env: Env) -> None:
    async with env.http(cert=False, token=ADMIN_TOKEN) as c:
        for _ in range(3):
            assert (await c.get("/healthz")).status_code == 200
    assert env.reviews.count("tokenreviews") == 1
    assert env.reviews.count("subjectaccessreviews") == 1


async def test_client_certificate_authenticates_as_cn_with_o_groups(env: Env) -> None:
    async with env.http() as c:
        r = await c.get("/healthz")
    assert r.status_code == 200 and r.text == "ok"
    ((_, sar),) = [(p, b) for p, b in env.reviews.calls if p.endswith("subjectaccessreviews")]
    assert sar["spec"]["user"] == "kube-apiserver"
    assert sar["spec"]["groups"] == ["system:masters"]
    assert sar["spec"]["resourceAttributes"]["subresource"] == "healthz"
    assert env.reviews.count("tokenreviews") == 0


async def test_client_cert_from_another_ca_fails_the_handshake(env: Env) -> None:
    rogue = make_ca("rogue")
    c, k = rogue.write(env.tmp, "rogue", "kube-apiserver", ["system:masters"])
    ctx = ssl.create_default_context(cafile=str(env.tmp / "ca.crt"))
    ctx.load_cert_chain(str(c), str(k))
    async with httpx.AsyncClient(verify=ctx, trust_env=False) as client:
        with pytest.raises(httpx.HTTPError):
            await client.get(env.url + "/healthz")


# --------------------------------------------------------------------------- logs


async def test_logs_plain(env: Env) -> None:
    async with env.http() as c:
        r = await c.get("/containerLogs/default/p/app", params={"tailLines": "2"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert r.text == "line 2\nline 3\n"
    assert env.translator.log_calls[-1].tail_lines == 2


async def test_logs_limit_bytes_is_enforced_even_if_backend_ignores_it(env: Env) -> None:
    async with env.http() as c:
        r = await c.get("/containerLogs/default/p/app", params={"limitBytes": "9"})
    assert r.text == "line 1\nli"


@pytest.mark.parametrize(
    ("query", "status", "fragment"),
    [
        ({"tailLines": "-1"}, 400, "tailLines"),
        ({"sinceSeconds": "5", "sinceTime": "2026-03-01T10:00:00Z"}, 400, "at most one"),
        ({"follow": "maybe"}, 400, "follow"),
    ],
)
async def test_logs_bad_params_are_400(
    env: Env, query: dict[str, str], status: int, fragment: str
) -> None:
    async with env.http() as c:
        r = await c.get("/containerLogs/default/p/app", params=query)
    assert r.status_code == status and fragment in r.text


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/containerLogs/default/nope/app", 'pod "default/nope" not found'),
        ("/containerLogs/default/p/nope", 'container "nope" not found in pod "default/p"'),
        ("/containerLogs/default/p/side", "no logs for side"),  # backend BackendNotFound
    ],
)
async def test_logs_not_found_is_404(env: Env, path: str, fragment: str) -> None:
    async with env.http() as c:
        r = await c.get(path)
    assert r.status_code == 404 and fragment in r.text


async def test_logs_and_exec_of_an_ephemeral_container_that_never_ran_say_why(
    env: Env,
) -> None:
    """``kubectl debug -it`` falls back to the logs of an ephemeral container reported
    terminated: the answer is the reason it never ran, not a backend "not found"."""
    why = "spec.ephemeralContainers[dbg]: ephemeral containers are not supported by the x backend"
    p = env.server.api.pods.get_pod("default", "p")
    assert isinstance(p, dict)
    p["spec"]["ephemeralContainers"] = [{"name": "dbg", "image": "busybox"}]
    terminated = {"exitCode": 128, "reason": "UnsupportedPodFeature", "message": why}
    p["status"]["ephemeralContainerStatuses"] = [
        {"name": "dbg", "image": "busybox", "state": {"terminated": terminated}}
    ]
    async with env.http() as c:
        logs = await c.get("/containerLogs/default/p/dbg")
        run = await c.post("/run/default/p/dbg", params={"cmd": "ls"})
    assert logs.status_code == 400, logs.text
    assert 'container "dbg" of pod "default/p" never ran: ' + why in logs.text
    assert run.status_code == 400 and why in run.text
    # the pod's other containers are untouched
    async with env.http() as c:
        assert (await c.get("/containerLogs/default/p/app")).status_code == 200


async def _raw_get(env: Env, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", env.server.port, ssl=env.client_ctx, server_hostname="127.0.0.1"
    )
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    return reader, writer


async def _read_until(reader: asyncio.StreamReader, needle: bytes, buf: bytearray) -> None:
    async with asyncio.timeout(5):
        while needle not in buf:
            chunk = await reader.read(4096)
            if not chunk:
                raise AssertionError(f"EOF before {needle!r}; got {bytes(buf)!r}")
            buf += chunk


async def test_logs_follow_streams_live_and_stops_when_client_leaves(env: Env) -> None:
    reader, writer = await _raw_get(env, "/containerLogs/default/p/app?follow=true")
    buf = bytearray()
    await _read_until(reader, b"line 3\n", buf)
    assert b"transfer-encoding: chunked" in buf.lower()
    q = env.translator.follow_queues["app"]
    await q.put(b"live 4\n")
    await _read_until(reader, b"live 4\n", buf)
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    for _ in range(100):
        if env.translator.logs_closed:
            break
        await asyncio.sleep(0.02)
    assert env.translator.logs_closed == 1, "the backend stream is closed when the client leaves"


async def test_logs_follow_ends_cleanly_when_container_ends(env: Env) -> None:
    reader, writer = await _raw_get(env, "/containerLogs/default/p/app?follow=1")
    buf = bytearray()
    await _read_until(reader, b"line 3\n", buf)
    await env.translator.follow_queues["app"].put(b"bye\n")
    await env.translator.follow_queues["app"].put(None)
    await _read_until(reader, b"bye\n", buf)
    await _read_until(reader, b"\r\n0\r\n\r\n", buf)  # chunked terminator: a clean end
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


async def test_logs_follow_on_a_quiet_log_sends_headers_and_waits(env: Env) -> None:
    env.translator.log_lines["side"] = []
    reader, writer = await _raw_get(env, "/containerLogs/default/p/side?follow=true")
    buf = bytearray()
    await _read_until(reader, b"\r\n\r\n", buf)
    assert buf.startswith(b"HTTP/1.1 200")
    await env.translator.follow_queues["side"].put(b"late\n")
    await _read_until(reader, b"late\n", buf)
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


# --------------------------------------------------------------------------- exec over SPDY


async def _spdy_exec(
    env: Env, query: str, protocols: tuple[str, ...] = ("v4.channel.k8s.io",)
) -> tuple[SpdyTestClient, bytes]:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", env.server.port, ssl=env.client_ctx, server_hostname="127.0.0.1"
    )
    lines = [
        f"POST /exec/default/p/app?{query} HTTP/1.1",
        "Host: 127.0.0.1",
        "Connection: Upgrade",
        "Upgrade: SPDY/3.1",
        *[f"X-Stream-Protocol-Version: {p}" for p in protocols],
        "Content-Length: 0",
        "",
        "",
    ]
    writer.write("\r\n".join(lines).encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    return SpdyTestClient(reader, writer), head


async def test_exec_over_spdy_reports_output_and_exit_code(env: Env) -> None:
    client, head = await _spdy_exec(env, "command=sh&command=-c&command=exit+3&output=1&error=1")
    assert head.startswith(b"HTTP/1.1 101")
    assert b"x-stream-protocol-version: v4.channel.k8s.io" in head.lower()
    assert b"upgrade: spdy/3.1" in head.lower()
    err = await client.open("error")
    out = await client.open("stdout")
    errs = await client.open("stderr")
    await client.until(lambda: {err, out, errs} <= client.fin, wait_s=5)
    assert bytes(client.data[out]) == b"hi\n"
    status = json.loads(client.data[err])
    assert status["status"] == "Failure" and status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    await client.until(lambda: client.goaway is not None)
    ref, container, command, tty, stdin = env.translator.exec_calls[0]
    assert (ref, container, command, tty, stdin) == (
        PodRef("default", "p", "uid-1"),
        "app",
        ("sh", "-c", "exit 3"),
        False,
        False,
    )
    client.writer.close()


async def test_exec_over_spdy_with_stdin_and_success(env: Env) -> None:
    env.translator.script = cat
    client, head = await _spdy_exec(
        env, "command=cat&input=1&output=1", protocols=("v5.channel.k8s.io", "v4.channel.k8s.io")
    )
    assert b"v5.channel.k8s.io" in head
    err = await client.open("error")
    sin = await client.open("stdin")
    out = await client.open("stdout")
    await client.until(lambda: {err, sin, out} <= client.replies)
    payload = b"0123456789" * 20_000  # 200 KB: more than any SPDY window
    await client.write(sin, payload, fin=True)
    await client.until(lambda: err in client.fin, wait_s=10)
    assert bytes(client.data[out]) == payload
    assert json.loads(client.data[err]) == {"metadata": {}, "status": "Success"}
    client.writer.close()


async def test_exec_tty_routes_stderr_to_stdout_and_resizes(env: Env) -> None:
    async def script(s: ScriptedExec) -> int:
        await asyncio.sleep(0.2)
        await s.emit(2, b"err-on-tty\n")
        return 0

    env.translator.script = script
    client, _ = await _spdy_exec(env, "command=sh&tty=1&output=1&error=1")
    err = await client.open("error")
    out = await client.open("stdout")
    rsz = await client.open("resize")
    await client.until(lambda: {err, out, rsz} <= client.replies)
    await client.write(rsz, b'{"Width":80,"Height":24}{"Width":100,')
    await client.write(rsz, b'"Height":40}')
    await client.until(lambda: err in client.fin, wait_s=5)
    assert bytes(client.data[out]) == b"err-on-tty\n"
    assert env.translator.sessions[0].resizes == [(80, 24), (100, 40)]
    client.writer.close()


async def test_exec_old_protocol_gets_plain_error_text(env: Env) -> None:
    client, head = await _spdy_exec(env, "command=x&output=1", protocols=("v2.channel.k8s.io",))
    assert b"v2.channel.k8s.io" in head
    err = await client.open("error")
    out = await client.open("stdout")
    await client.until(lambda: err in client.fin and out in client.fin)
    assert bytes(client.data[err]).startswith(b"command terminated with non-zero exit code")
    client.writer.close()


async def test_exec_client_disconnect_cancels_backend(env: Env) -> None:
    env.translator.script = cat
    client, _ = await _spdy_exec(env, "command=cat&input=1&output=1")
    await client.open("error")
    sin = await client.open("stdin")
    out = await client.open("stdout")
    await client.write(sin, b"ping\n")
    await client.until(lambda: bytes(client.data.get(out, b"")) == b"ping\n")
    client.writer.close()
    for _ in range(100):
        if env.translator.sessions[0].cancelled:
            break
        await asyncio.sleep(0.02)
    assert env.translator.sessions[0].cancelled


async def test_exec_protocol_mismatch_is_403_status(env: Env) -> None:
    client, head = await _spdy_exec(env, "command=x&output=1", protocols=("v9.channel.k8s.io",))
    assert head.startswith(b"HTTP/1.1 403")
    assert b"x-accepted-stream-protocol-versions: v5.channel.k8s.io" in head.lower()
    client.writer.close()


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        ("output=1", "at least one command"),
        ("command=ls", "at least 1 of stdin, stdout, stderr"),
    ],
)
async def test_exec_bad_options_are_400(env: Env, query: str, fragment: str) -> None:
    async with env.http() as c:
        r = await c.post(f"/exec/default/p/app?{query}", headers={"accept": "application/json"})
    assert r.status_code == 400 and fragment in r.json()["message"]


async def test_exec_requires_upgrade(env: Env) -> None:
    async with env.http() as c:
        r = await c.post("/exec/default/p/app?command=ls&output=1")
    assert r.status_code == 400 and "Upgrade request required" in r.text


# --------------------------------------------------------------------------- exec over WebSocket


async def _ws(env: Env, query: str, protocols: list[str]) -> Any:
    url = f"wss://127.0.0.1:{env.server.port}/exec/default/p/app?{query}"
    return ws_connect(
        url,
        ssl=env.client_ctx,
        subprotocols=protocols,  # type: ignore[arg-type]
        proxy=None,
        compression=None,
        open_timeout=5,
    )


async def test_exec_over_websocket_v5_exit_code(env: Env) -> None:
    frames: list[bytes] = []
    async with await _ws(env, "command=sh&output=1&error=1", ["v5.channel.k8s.io"]) as ws:
        assert ws.subprotocol == "v5.channel.k8s.io"
        async for msg in ws:
            frames.append(msg)
    assert frames[0] == b"\x01"  # the empty hello on the lowest writable channel
    assert b"\x01hi\n" in frames
    (status_frame,) = [f for f in frames if f[:1] == b"\x03" and len(f) > 1]
    status = json.loads(status_frame[1:])
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"][0] == {"reason": "ExitCode", "message": "3"}


async def test_exec_over_websocket_v5_stdin_half_close(env: Env) -> None:
    env.translator.script = cat
    got = bytearray()
    async with await _ws(env, "command=cat&input=1&output=1", ["v5.channel.k8s.io"]) as ws:
        await ws.send(b"\x00hello ")
        await ws.send(b"\x00world")
        await ws.send(bytes([255, 0]))  # v5: close stdin
        async for msg in ws:
            if msg[:1] == b"\x01":
                got += msg[1:]
            if msg[:1] == b"\x03" and len(msg) > 1:
                assert json.loads(msg[1:])["status"] == "Success"
    assert bytes(got) == b"hello world"
    assert env.translator.sessions[0].stdin_closed


async def test_exec_over_websocket_base64(env: Env) -> None:
    texts: list[str] = []
    async with await _ws(env, "command=sh&output=1", ["v4.base64.channel.k8s.io"]) as ws:
        assert ws.subprotocol == "v4.base64.channel.k8s.io"
        async for msg in ws:
            texts.append(msg)
    assert "1aGkK" in texts  # '1' + base64("hi\n")
    status = [t for t in texts if t.startswith("3") and len(t) > 1]
    import base64

    assert json.loads(base64.b64decode(status[0][1:]))["reason"] == "NonZeroExitCode"


# --------------------------------------------------------------------------- unsupported


async def test_backend_without_exec_answers_501_status_before_upgrade(tmp_path: Path) -> None:
    e = await _start(tmp_path, LogsOnlyTranslator())
    try:
        client, head = await _spdy_exec(e, "command=ls&output=1")
        assert head.startswith(b"HTTP/1.1 501")
        assert b"content-type: application/json" in head.lower()
        body = await asyncio.wait_for(client.reader.read(4096), 5)
        status = json.loads(body)
        assert status["kind"] == "Status" and status["code"] == 501
        assert "exec is not supported by the logsonly backend" in status["message"]
        client.writer.close()
        async with e.http() as c:
            r = await c.get(
                "/attach/default/p/app?input=1&output=1", headers={"upgrade": "websocket"}
            )
            message = r.json()["message"]
            assert r.status_code == 501 and "attach with stdin (-i) is not supported" in message
            r = await c.post("/portForward/default/p")
            assert r.status_code == 501
            assert "port-forward is not supported by the logsonly backend" in r.text
            r = await c.get("/metrics/resource")
            assert r.status_code == 200
            samples = [ln for ln in r.text.splitlines() if not ln.startswith("#")]
            assert samples == ["resource_scrape_error 0", "scrape_error 0"]
    finally:
        await e.server.stop()


async def test_backend_exec_failure_is_a_status_on_the_error_stream(env: Env) -> None:
    from translators.base import BackendUnavailable

    async def boom(*a: Any, **k: Any) -> Any:
        raise BackendUnavailable("nomad is down")

    env.translator.exec = boom
    client, head = await _spdy_exec(env, "command=ls&output=1")
    assert head.startswith(b"HTTP/1.1 101")
    err = await client.open("error")
    await client.open("stdout")
    await client.until(lambda: err in client.fin)
    status = json.loads(client.data[err])
    assert status["status"] == "Failure" and "nomad is down" in status["message"]
    client.writer.close()


# --------------------------------------------------------------------------- stats, metrics, misc


def _usage() -> NodeUsage:
    t = _dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=_dt.UTC)
    return NodeUsage(
        time=t,
        pods=(
            PodUsage(
                PodRef("default", "p", "uid-1"),
                (
                    ContainerUsage(
                        "app", cpu_core_seconds=1.5, memory_working_set_bytes=1000, started_at=t
                    ),
                    ContainerUsage("side", cpu_core_seconds=0.5, memory_working_set_bytes=None),
                ),
                started_at=t,
            ),
        ),
    )


async def test_metrics_resource_parses_and_omits_unknowns(env: Env) -> None:
    env.translator.usage_value = _usage()
    async with env.http() as c:
        r = await c.get("/metrics/resource")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    cpu = {s.labels["container"]: s.value for s in fams["container_cpu_usage_seconds"].samples}
    assert cpu == {"app": 1.5, "side": 0.5}
    mem = fams["container_memory_working_set_bytes"].samples
    assert [(s.labels, s.value, s.timestamp) for s in mem] == [
        ({"container": "app", "namespace": "default", "pod": "p"}, 1000.0, 1772359200.0)
    ]
    assert fams["pod_cpu_usage_seconds"].samples[0].value == 2.0
    assert fams["pod_memory_working_set_bytes"].samples == []  # one container unknown
    assert fams["node_cpu_usage_seconds"].samples[0].value == 2.0
    assert fams["node_memory_working_set_bytes"].samples == []
    assert fams["resource_scrape_error"].samples[0].value == 0


async def test_stats_summary_shape(env: Env) -> None:
    env.translator.usage_value = _usage()
    async with env.http() as c:
        r = await c.get("/stats/summary", params={"only_cpu_and_memory": "true"})
    s = r.json()
    assert s["node"]["nodeName"] == NODE
    assert s["node"]["cpu"] == {
        "time": "2026-03-01T10:00:00Z",
        "usageCoreNanoSeconds": 2_000_000_000,
    }
    (p,) = s["pods"]
    assert p["podRef"] == {"name": "p", "namespace": "default", "uid": "uid-1"}
    assert [c["name"] for c in p["containers"]] == ["app", "side"]
    assert p["containers"][1]["memory"] == {"time": "2026-03-01T10:00:00Z"}


async def test_pods_lists_only_this_node(env: Env) -> None:
    async with env.http() as c:
        r = await c.get("/pods")
        rp = await c.get("/runningpods/")
    assert r.headers["content-type"] == "application/json"
    assert [p["metadata"]["name"] for p in r.json()["items"]] == ["p"]
    assert rp.json()["items"][0]["spec"]["containers"][0]["name"] == "app"


async def test_runningpods_leaves_out_a_pod_whose_final_delete_was_sent(env: Env) -> None:
    """The cache keeps the pod until the watch's DELETED arrives; running pods do not."""
    cast(DictPods, env.server.api.pods).finished_uids.add("uid-1")
    async with env.http() as c:
        rp = await c.get("/runningpods/")
        r = await c.get("/pods")
    assert rp.json()["items"] == []
    assert [p["metadata"]["name"] for p in r.json()["items"]] == ["p"]  # the cache, as it is


async def test_unknown_path_is_404_and_wrong_method_405(env: Env) -> None:
    async with env.http() as c:
        r = await c.get("/nope")
        r2 = await c.delete("/pods")
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/plain")
    assert r2.status_code == 405


async def test_own_metrics_on_plain_http_port(env: Env) -> None:
    async with env.http() as c:
        await c.get("/healthz")
    port = env.server.metrics_port
    async with httpx.AsyncClient(trust_env=False) as c:
        r = await c.get(f"http://127.0.0.1:{port}/metrics")
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    samples = fams["vkgate_kubelet_requests"].samples
    assert any(s.labels == {"path": "healthz", "method": "GET", "code": "200"} for s in samples)
    assert "vkgate_kubelet_request_duration_seconds" in fams


async def test_serving_certificate_reloads_when_files_change(env: Env) -> None:
    async def serial() -> int:
        _, w = await asyncio.open_connection(
            "127.0.0.1", env.server.port, ssl=env.client_ctx, server_hostname="127.0.0.1"
        )
        der = w.get_extra_info("ssl_object").getpeercert(binary_form=True)
        w.close()
        with contextlib.suppress(Exception):
            await w.wait_closed()
        from cryptography import x509

        return x509.load_der_x509_certificate(der).serial_number

    before = await serial()
    cert, key = env.ca.issue("vk-1", server_hosts=["127.0.0.1"])
    (env.tmp / "serving.key").write_bytes(key)
    (env.tmp / "serving.crt").write_bytes(cert)
    after = await serial()
    assert after != before
    from cryptography import x509

    assert after == x509.load_pem_x509_certificate(cert).serial_number


async def test_streams_not_created_in_time_end_the_connection(env: Env) -> None:
    env.server.api.creation_timeout = 0.3
    client, head = await _spdy_exec(env, "command=ls&output=1")
    assert head.startswith(b"HTTP/1.1 101")
    await client.open("error")  # but never the stdout stream it asked for
    await client.until(lambda: client.eof or client.goaway is not None, wait_s=5)
    assert env.translator.exec_calls == [], "the backend exec never started"
    client.writer.close()


async def test_attach_maps_to_the_translators_attach(env: Env) -> None:
    calls: list[tuple[str, bool, bool]] = []

    async def attach(ref: PodRef, container: str, *, tty: bool, stdin: bool) -> ScriptedExec:
        calls.append((container, tty, stdin))
        return ScriptedExec(echo_then_exit(0, b"attached\n"))

    env.translator.attach = attach
    frames: list[bytes] = []
    url = f"wss://127.0.0.1:{env.server.port}/attach/default/p/app?output=1"
    v4 = Subprotocol("v4.channel.k8s.io")
    async with ws_connect(
        url, ssl=env.client_ctx, subprotocols=[v4], proxy=None, compression=None
    ) as ws:
        async for msg in ws:
            assert isinstance(msg, bytes)
            frames.append(msg)
    assert b"\x01attached\n" in frames
    assert calls == [("app", False, False)]


async def test_self_signed_certificate_when_no_files(tmp_path: Path) -> None:
    ks = KubeletSettings(
        address="127.0.0.1",
        port=0,
        metrics_address="",
        authorization="always-allow",
        anonymous=True,
    )
    server = KubeletServer(
        settings=ks,
        node_name="vk-dev",
        pods=DictPods(),
        translator=FakeTranslator(),
        client=None,
        hosts=lambda: ["10.1.2.3"],
    )
    await server.start()
    try:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        _, w = await asyncio.open_connection("127.0.0.1", server.port, ssl=ctx)
        der = w.get_extra_info("ssl_object").getpeercert(binary_form=True)
        w.close()
        from cryptography import x509

        cert = x509.load_der_x509_certificate(der)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = {str(v) for v in sans.get_values_for_type(x509.IPAddress)} | set(
            sans.get_values_for_type(x509.DNSName)
        )
        assert {"10.1.2.3", "127.0.0.1", "vk-dev"} <= names
        async with httpx.AsyncClient(verify=False, trust_env=False) as c:
            r = await c.get(f"https://127.0.0.1:{server.port}/healthz")
        assert r.status_code == 200  # anonymous + always-allow: the dev setup
        assert server.metrics_port is None
    finally:
        await server.stop()


async def test_malformed_and_oversized_requests_get_an_answer(env: Env) -> None:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", env.server.port, ssl=env.client_ctx, server_hostname="127.0.0.1"
    )
    writer.write(b"NOT HTTP AT ALL\r\n\r\n")
    data = await asyncio.wait_for(reader.read(), 5)
    assert data.startswith(b"HTTP/1.1 400") and b"bad request" in data
    writer.close()
    async with env.http() as c:
        r = await c.post("/run/default/p/app?cmd=ls", content=b"x" * (1024 * 1024 + 10))
    assert r.status_code == 413 and "larger than" in r.text


async def test_run_returns_output_and_fails_on_nonzero_exit(env: Env) -> None:
    async with env.http() as c:
        r = await c.post("/run/default/p/app", params={"cmd": "sh -c 'exit 3'"})
        assert r.status_code == 500 and r.text == "hi\ncommand terminated with exit code 3\n"
        env.translator.script = echo_then_exit(0, b"fine\n")
        r = await c.post("/run/default/p/app", params={"cmd": "true"})
        assert r.status_code == 200 and r.text == "fine\n"
    assert env.translator.exec_calls[0][2] == ("sh", "-c", "exit 3")


async def test_readyz_on_the_metrics_port_reports_the_reason(tmp_path: Path) -> None:
    reason: list[str | None] = ["backend unreachable: connection refused"]
    env = await _start(tmp_path, FakeTranslator(), ready=lambda: reason[0])
    try:
        url = f"http://127.0.0.1:{env.server.metrics_port}"
        async with httpx.AsyncClient(trust_env=False) as c:
            not_ready = await c.get(url + "/readyz")
            reason[0] = None
            ready = await c.get(url + "/readyz")
            alive = await c.get(url + "/healthz")
    finally:
        await env.server.stop()
    assert not_ready.status_code == 503 and "connection refused" in not_ready.text
    assert ready.status_code == 200 and alive.status_code == 200
