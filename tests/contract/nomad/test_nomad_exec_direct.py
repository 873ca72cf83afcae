"""Exec goes straight to the client agent that runs the allocation, as Nomad's CLI does
(``api/allocations_exec.go``, ``startConnection``), and through the server only when that agent
cannot be reached (docs/design/nomad.md, "Exec WebSocket").

Two WebSocket endpoints on loopback play the client agent ("node") and the server; respx
answers the HTTP calls, ``GET /v1/node/:id`` included (``HTTPAddr``, ``TLSEnabled``)."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from nomad_fixtures import NODE, captured
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.frames import CloseCode

from devstack.certs import issue, new_ca
from translators.base import BackendAuthError, PodRef, TranslatorContext
from translators.nomad import NomadTranslator
from translators.nomad import exec as nomad_exec
from translators.nomad.exec import ClientAgent
from vkgate_core.clock import FakeClock

pytestmark = pytest.mark.contract

DOC = captured("running")
JOB, ALLOC = DOC["job"], DOC["allocations"][0]
REF = PodRef(JOB["Meta"]["k8s.namespace"], JOB["Meta"]["k8s.name"], JOB["Meta"]["k8s.uid"])
NODE_ID = ALLOC["NodeID"]
API_1_6_3 = Path(__file__).resolve().parents[2] / "golden" / "nomad" / "api-1.6.3"


@dataclass
class Agent:
    """One Nomad agent's exec endpoint: records each request, prints its own name, exits 7 —
    or, with ``refuse``, closes as an ACL refusal does (1008, after the handshake frame)."""

    name: str
    refuse: bool = False
    paths: list[str] = field(default_factory=list)
    handshakes: list[dict[str, Any]] = field(default_factory=list)

    async def handler(self, ws: ServerConnection) -> None:
        self.paths.append(ws.request.path if ws.request else "")
        self.handshakes.append(json.loads(await ws.recv()))
        if self.refuse:
            await ws.close(CloseCode.POLICY_VIOLATION, "Permission denied")
            return
        out = base64.b64encode(f"{self.name}\n".encode()).decode()
        await ws.send(json.dumps({"stdout": {"data": out}}))
        await ws.send(json.dumps({"exited": True, "result": {"exit_code": 7}}))
        ws.transport.abort()


def port_of(server: Server) -> int:
    port: int = server.sockets[0].getsockname()[1]
    return port


def node_json(http_addr: str, *, tls: bool = False, status: str = "ready") -> dict[str, Any]:
    return {"ID": NODE_ID, "HTTPAddr": http_addr, "TLSEnabled": tls, "Status": status}


def translator(address: str, *, clock: FakeClock | None = None, **settings: Any) -> NomadTranslator:
    table = {"address": address, "token": "tok", "mhz_per_core": 1000, **settings}
    ctx = TranslatorContext(NODE, table, clock=clock or FakeClock())
    return NomadTranslator(ctx, environ={})


def mock_pod(nomad: respx.MockRouter, node: dict[str, Any] | httpx.Response) -> respx.Route:
    """The running pod's job and allocation, and its node (returned: the lookup route)."""
    nomad.get(f"/v1/job/{JOB['ID']}").mock(return_value=httpx.Response(200, json=JOB))
    nomad.get(f"/v1/job/{JOB['ID']}/allocations").mock(
        return_value=httpx.Response(200, json=[ALLOC])
    )
    answer = node if isinstance(node, httpx.Response) else httpx.Response(200, json=node)
    return nomad.get(f"/v1/node/{NODE_ID}").mock(return_value=answer)


async def run(t: NomadTranslator) -> tuple[bytes, int]:
    session = await t.exec(REF, "app", ["hostname"], tty=False, stdin=False)
    output = b"".join(data for _, data in [item async for item in session.output()])
    return output, await session.wait()


@contextlib.asynccontextmanager
async def agents(**node_options: Any) -> AsyncIterator[tuple[Agent, Server, Agent, str]]:
    """(node agent, its server socket, server agent, the server's http address)."""
    node, server = Agent("node", **node_options), Agent("server")
    async with (
        serve(node.handler, "127.0.0.1", 0) as node_srv,
        serve(server.handler, "127.0.0.1", 0) as server_srv,
    ):
        yield node, node_srv, server, f"http://127.0.0.1:{port_of(server_srv)}"


def closed_port() -> int:
    """A loopback port nothing listens on: a dial there is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@contextlib.contextmanager
def blackhole() -> Iterator[int]:
    """A loopback port whose accept queue is full: Linux drops further SYNs, so a dial there
    hangs like one to a client agent behind a firewall that drops packets."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port: int = listener.getsockname()[1]
    fill = []
    try:
        for _ in range(4):
            c = socket.socket()
            c.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                c.connect(("127.0.0.1", port))
            fill.append(c)
        time.sleep(0.05)
        yield port
    finally:
        for c in fill:
            c.close()
        listener.close()


# --------------------------------------------------------------------------- the route taken


async def test_exec_goes_straight_to_the_client_agent_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with agents() as (node, node_srv, server, address):
        t = translator(address)
        try:
            with (
                caplog.at_level(logging.DEBUG, logger="translators.nomad.exec"),
                respx.mock(base_url=address) as nomad,
            ):
                node_addr = f"127.0.0.1:{port_of(node_srv)}"
                lookup = mock_pod(nomad, node_json(node_addr))
                out, code = await run(t)
        finally:
            await t.close()
    assert (out, code) == (b"node\n", 7)
    assert server.paths == []
    (path,) = node.paths
    assert path.startswith(f"/v1/client/allocation/{ALLOC['ID']}/exec?")
    assert "task=app" in path and "ws_handshake=true" in path and "tok" not in path
    assert node.handshakes == [{"version": 1, "auth_token": "tok"}]
    assert "namespace" not in lookup.calls[0].request.url.params  # nodes have no namespace
    used = [r.getMessage() for r in caplog.records if "exec " in r.getMessage()]
    assert used == [f"nomad exec {ALLOC['ID']}/app: direct to client agent {node_addr}"]


async def test_an_agent_that_refuses_the_connection_falls_back_to_the_server(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    async with agents() as (node, _, server, address):
        t = translator(address, clock=clock)
        try:
            with (
                caplog.at_level(logging.DEBUG, logger="translators.nomad.exec"),
                respx.mock(base_url=address) as nomad,
            ):
                lookup = mock_pod(nomad, node_json(f"127.0.0.1:{closed_port()}"))
                first = await run(t)
                # within the TTL: neither looked up nor dialled again
                await clock.advance(nomad_exec.NODE_TTL - 1)
                second = await run(t)
                assert lookup.call_count == 1
                await clock.advance(2)
                await run(t)
                assert lookup.call_count == 2
        finally:
            await t.close()
    assert first == second == (b"server\n", 7)
    assert node.paths == [] and len(server.paths) == 3
    messages = [r.getMessage() for r in caplog.records if "exec " in r.getMessage()]
    assert "not reachable" in messages[0] and f"through {address}" in messages[0]
    assert messages[1] == f"nomad exec {ALLOC['ID']}/app: through {address}"


async def test_an_agent_whose_dial_times_out_falls_back_within_the_dial_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert nomad_exec.NODE_DIAL_TIMEOUT == 1.0  # Nomad's api.ClientConnTimeout
    monkeypatch.setattr(nomad_exec, "NODE_DIAL_TIMEOUT", 0.3)
    async with agents() as (_, _, server, address):
        t = translator(address)
        try:
            with blackhole() as port, respx.mock(base_url=address) as nomad:
                mock_pod(nomad, node_json(f"127.0.0.1:{port}"))
                started = time.monotonic()
                out, code = await run(t)
                took = time.monotonic() - started
        finally:
            await t.close()
    assert (out, code) == (b"server\n", 7)
    assert 0.3 <= took < 2.0
    assert len(server.paths) == 1


async def test_an_agent_that_never_answers_the_upgrade_falls_back() -> None:
    """TCP accepted, no HTTP answer: the WebSocket open timeout (connect + call timeout)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        async with agents() as (_, _, server, address):
            t = translator(address, timeout=0.3, connect_timeout=0.1)
            try:
                with respx.mock(base_url=address) as nomad:
                    mock_pod(nomad, node_json(f"127.0.0.1:{silent.getsockname()[1]}"))
                    out, _ = await run(t)
            finally:
                await t.close()
    assert out == b"server\n" and len(server.paths) == 1


@pytest.mark.parametrize(
    "node",
    [
        httpx.Response(403, text="Permission denied"),  # no node:read
        node_json("", status="ready"),  # no HTTP address advertised
        node_json("127.0.0.1:1", status="down"),
    ],
    ids=["lookup-refused", "no-http-addr", "node-down"],
)
async def test_without_a_usable_node_address_exec_goes_through_the_server(
    node: dict[str, Any] | httpx.Response,
) -> None:
    async with agents() as (_, _, server, address):
        t = translator(address)
        try:
            with respx.mock(base_url=address) as nomad:
                lookup = mock_pod(nomad, node)
                out, _ = await run(t)
        finally:
            await t.close()
    assert out == b"server\n" and len(server.paths) == 1
    assert lookup.call_count == 1  # a refused lookup is not retried


def test_the_agent_address_of_a_captured_1_6_3_node() -> None:
    node = json.loads((API_1_6_3 / "nodes.json").read_text())["node"]
    agent = ClientAgent.from_node(node)
    assert agent == ClientAgent(node["ID"], node["HTTPAddr"], False)
    assert agent is not None and agent.host_port == ("127.0.0.1", int(node["HTTPAddr"][10:]))
    assert ClientAgent("n", "[::1]:4646", True).host_port == ("::1", 4646)


# --------------------------------------------------------------------------- ACL and TLS


async def test_an_acl_refusal_on_the_direct_path_names_what_exec_needs() -> None:
    async with agents(refuse=True) as (node, node_srv, server, address):
        t = translator(address)
        try:
            with respx.mock(base_url=address) as nomad:
                mock_pod(nomad, node_json(f"127.0.0.1:{port_of(node_srv)}"))
                with pytest.raises(BackendAuthError) as refused:
                    await run(t)
        finally:
            await t.close()
    assert str(refused.value) == (
        'nomad exec: Permission denied (needs namespace "default" capability alloc-exec, and'
        ' namespace "default" capability alloc-node-exec for a task without filesystem'
        " isolation, e.g. raw_exec)"
    )
    assert len(node.paths) == 1 and server.paths == []  # refused by the agent, not retried


@pytest.mark.parametrize(
    ("region", "name"), [("", "client.global.nomad"), ("eu", "client.eu.nomad")]
)
async def test_the_direct_connection_verifies_the_client_agents_name(
    tmp_path: Path, region: str, name: str
) -> None:
    """The client agent's certificate names ``client.<region>.nomad`` (no IP SAN), as Nomad's
    TLS guide issues it; vkgate presents its API client certificate, sends and verifies that
    name — not ``tls_server_name``, which names the servers."""
    ca = new_ca(tmp_path, "ca", "nomad test CA")
    names = ["client.global.nomad", "client.eu.nomad"]
    agent_cert = issue(ca, tmp_path, "agent", cn=names[0], dns=names, server=True)
    mine = issue(ca, tmp_path, "vkgate", cn="vkgate", client=True)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(agent_cert.cert, agent_cert.key)
    ctx.load_verify_locations(ca.files.cert)
    ctx.verify_mode = ssl.CERT_REQUIRED
    sni: list[str | None] = []
    ctx.sni_callback = lambda _sock, server_name, _ctx: sni.append(server_name)
    node = Agent("node")
    address = "https://nomad.test:4646"
    async with serve(node.handler, "127.0.0.1", 0, ssl=ctx) as node_srv:
        settings: dict[str, Any] = {
            "ca_cert": str(ca.files.cert),
            "client_cert": str(mine.cert),
            "client_key": str(mine.key),
            "tls_server_name": "server.global.nomad",
            "region": region,
        }
        t = translator(address, **settings)
        try:
            with respx.mock(base_url=address) as nomad:
                mock_pod(nomad, node_json(f"127.0.0.1:{port_of(node_srv)}", tls=True))
                out, code = await run(t)
        finally:
            await t.close()
    assert (out, code) == (b"node\n", 7)
    assert sni == [name]
