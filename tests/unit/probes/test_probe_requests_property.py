"""Arbitrary strings in an httpGet probe's path and header are either refused at admission
(gateway.pods.resolve.admission.probe_requests) or reach the wire as one well-formed request
line and header lines (gateway.probes.wire, gateway.probes.handlers): what the probe client
writes to a loopback server is parsed strictly, and nothing follows the one request."""

from __future__ import annotations

import asyncio
import re
import urllib.parse
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.pods.resolve.admission import probe_requests
from gateway.probes import wire
from gateway.probes.handlers import Handlers, Target
from translators.base import PodRef

#: Any character but half a surrogate pair, and often the ones that end or split a line.
CHARS = st.one_of(
    st.characters(exclude_categories=("Cs",)),
    st.sampled_from("\r\n\t \x00\x7f\x0b\x0c:;/?#%é\u0085\u2028\ufeff"),
)
TEXT = st.text(alphabet=CHARS, max_size=30)
#: What a request line and a header line are, strictly (RFC 9112).
REQUEST_LINE = re.compile(r"GET ([\x21-\x7e]+) HTTP/1\.1")
HEADER_LINE = re.compile(r"([!#$%&'*+\-.^_`|~0-9A-Za-z]+): (.*)")
VISIBLE_ASCII = "".join(chr(c) for c in range(0x21, 0x7F))
TARGET = Target(ref=PodRef("ns", "web", "u1"), container="app", pod_ip="127.0.0.1", ports={})


def expected_target(path: str) -> str:
    """Go's ``url.URL.RequestURI`` of the path: no fragment, ``/`` first, non-ASCII escaped."""
    p = path.split("#", 1)[0] or "/"
    return urllib.parse.quote(p if p.startswith("/") else "/" + p, safe=VISIBLE_ASCII)


def expected_headers(port: int, name: str, value: str) -> list[tuple[str, str]]:
    out = {
        "Host": f"127.0.0.1:{port}",
        "User-Agent": wire.USER_AGENT,
        "Accept": "*/*",
    }
    out = {k: v for k, v in out.items() if k.lower() != name.lower()}
    out[name] = value.strip(" \t")
    return [*out.items(), ("Connection", "close")]


def parse(sent: bytes) -> tuple[str, list[tuple[str, str]]]:
    """The request-target and the header lines of exactly one request head, or AssertionError."""
    assert sent.endswith(b"\r\n\r\n") and sent.count(b"\r\n\r\n") == 1, sent
    lines = sent[:-4].decode("utf-8").split("\r\n")
    for line in lines:
        assert "\r" not in line and "\n" not in line, line
    request = REQUEST_LINE.fullmatch(lines[0])
    assert request is not None, lines[0]
    headers = []
    for line in lines[1:]:
        m = HEADER_LINE.fullmatch(line)
        assert m is not None, line
        headers.append((m[1], m[2]))
    return request[1], headers


async def attempt(action: dict[str, Any]) -> tuple[bool, list[bytes], int]:
    received: list[bytes] = []
    answered = asyncio.Event()

    async def answer(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        got = b""
        try:
            async with asyncio.timeout(5):
                got = await r.readuntil(b"\r\n\r\n")
                w.write(b"HTTP/1.1 204 No Content\r\n\r\n")
                await w.drain()
                got += await r.read()  # anything after the head, until the client closes
        finally:
            received.append(got)
            w.close()
            answered.set()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        res = await Handlers(executor=None).run("httpGet", {**action, "port": port}, TARGET, 5.0)
        if res.ok:
            await asyncio.wait_for(answered.wait(), 5)
    finally:
        server.close()
        await server.wait_closed()
    return res.ok, received, port


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(path=TEXT, name=TEXT, value=TEXT)
def test_a_pod_string_is_refused_or_sent_as_one_well_formed_request(
    path: str, name: str, value: str
) -> None:
    action: dict[str, Any] = {"path": path, "httpHeaders": [{"name": name, "value": value}]}
    pod = {"spec": {"containers": [{"name": "app", "readinessProbe": {"httpGet": action}}]}}
    refused = probe_requests(pod, allow_host=False)
    ok, received, port = asyncio.run(attempt(action))
    if refused:
        # refused at admission, and the client, should it be asked, sends nothing
        assert not ok and received == []
        return
    assert ok, (path, name, value)
    (sent,) = received
    target, headers = parse(sent)
    assert target == expected_target(path)
    assert headers == expected_headers(port, name, value)


@settings(deadline=None, max_examples=500)
@given(path=TEXT, name=TEXT, value=TEXT, host=TEXT)
def test_the_wire_never_holds_a_line_the_pod_wrote(
    path: str, name: str, value: str, host: str
) -> None:
    """Without sockets, more examples, the host too: ``wire.request`` either refuses or writes
    one head whose every line is well-formed."""
    action = {"path": path, "httpHeaders": [{"name": name, "value": value}]}
    try:
        sent = wire.request(action, host=host or "10.0.0.5", port=8080)
    except wire.Refused as exc:
        assert wire.problems("httpGet", {**action, "host": host}), exc
        return
    assert not wire.problems("httpGet", {**action, "host": host})
    target, headers = parse(sent)
    assert target == expected_target(path)
    assert len(headers) == len(expected_headers(8080, name, value))
