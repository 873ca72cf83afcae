"""``kubectl exec`` on a Nomad task: the allocation exec WebSocket as an ``ExecSession``.

Protocol (Nomad ``/v1/client/allocation/:id/exec``): the command is a JSON array in the
query; with ``ws_handshake=true`` the first client frame is ``{"version":1,"auth_token":…}``
so the token never appears in a URL or proxy log.  Client frames carry
``{"stdin":{"data":b64}}``, ``{"stdin":{"close":true}}``, ``{"tty_size":{…}}`` and ``{}``
heartbeats (every 10 s, as Nomad's own client does); server frames carry stdout/stderr data,
their ``close`` markers and finally ``{"exited":true,"result":{"exit_code":n}}``, after which
Nomad drops the connection without a close frame (treated as a normal end).  A command that
cannot start (``fork/exec /no/such/binary: no such file or directory``) gets no ``exited``
frame: Nomad closes with code 1011 and the error as the reason, which ``wait()`` raises as
``BackendRejected`` (the kubelet API turns it into an error status, kubectl exits 1).

A reader task turns server frames into ``(stream, bytes)`` items (1 = stdout, 2 = stderr)
on a queue; ``wait()`` returns the exit code, or raises ``BackendUnavailable`` when the
connection broke before Nomad reported one.

Where the WebSocket goes (docs/design/nomad.md, "Exec WebSocket"): first straight to the client
agent that runs the allocation (``Node.HTTPAddr``, looked up and cached by ``ClientAgents``),
as Nomad's own CLI does (``api/allocations_exec.go``, ``startConnection``).  When the client
agent cannot be reached (TCP dial longer than ``NODE_DIAL_TIMEOUT``, refused, TLS or upgrade
failure) the session goes to ``address``, and the server forwards it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import socket
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from ssl import SSLContext
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from translators.base import BackendAuthError, BackendError, BackendRejected, BackendUnavailable
from translators.nomad.client import NomadClient, Query
from translators.nomad.errors import PERMISSION_DENIED, error_for_status, error_for_transport
from vkgate_core.retry import NO_RETRY

log = logging.getLogger(__name__)
#: The websockets client logs every frame at debug — the first one carries the ACL token
#: (docs/design/secrets.md) — so its logger never goes below INFO, whatever log.level says.
_WS_LOG = logging.getLogger(__name__ + ".websocket")
_WS_LOG.setLevel(logging.INFO)

HEARTBEAT_SECONDS = 10.0
#: How long the TCP dial to a client agent may take before exec goes through the server:
#: Nomad's ``api.ClientConnTimeout`` (api/api.go, 1 s; it bounds the dial only).
NODE_DIAL_TIMEOUT = 1.0
#: How long a node's HTTP address is reused, and a client agent that could not be reached is
#: skipped, before ``GET /v1/node/:id`` is asked again.
NODE_TTL = 30.0
#: gRPC's wrapper around the driver's error, as Nomad forwards it in the close reason.
_RPC_PREFIX = re.compile(r"^rpc error: code = \w+ desc = ")


def close_error(exc: ConnectionClosed, *, needs: str = "") -> BackendError | None:
    """Nomad reports a command it could not start (missing binary, bad task) by closing the
    socket with an error code and the reason, instead of an ``exited`` frame.  An ACL refusal
    arrives the same way (code 1008, ``Permission denied``: the token is checked after the
    handshake frame), and names what exec needs (``needs``, from ``acl.py``)."""
    frame = exc.rcvd
    if frame is None or frame.code in (1000, 1001) or not frame.reason:
        return None
    reason = _RPC_PREFIX.sub("", frame.reason)
    if reason.endswith(PERMISSION_DENIED):
        return BackendAuthError(
            f"nomad exec: {reason}" + (f" ({needs})" if needs else ""), status=403
        )
    return BackendRejected(f"nomad exec: {reason}", reason="ExecFailed")


def _no_exit_message(ws: ClientConnection) -> str:
    """Why a session has no exit code, with how the connection ended: a normal close (1000)
    without ``exited`` is Nomad dropping the code (docs/design/nomad.md, "Exec WebSocket"), no
    close frame at all (1006) a broken connection."""
    code, reason = ws.close_code, ws.close_reason
    how = "no close frame" if code in (None, 1006) else f"close code {code}"
    if reason:
        how += f": {reason}"
    return f"nomad exec: connection closed before the command exited ({how})"


def client_server_name(region: str) -> str:
    """The TLS name of a client agent: ``client.<region>.nomad``, region ``global`` when none
    is known — what Nomad's API client verifies on a node connection (``Config.ClientConfig``
    in api/api.go), whatever ``tls_server_name`` says (that one names the servers)."""
    return f"client.{region or 'global'}.nomad"


@dataclass(frozen=True)
class ClientAgent:
    """Where one Nomad client agent serves its HTTP API: ``Node.HTTPAddr`` (``host:port``) and
    ``Node.TLSEnabled`` of ``GET /v1/node/:id``."""

    node_id: str
    address: str
    tls: bool

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> ClientAgent | None:
        """None for a node that cannot be reached directly: ``down`` or no HTTP address
        advertised (the cases Nomad's ``getNodeClientImpl`` refuses)."""
        address = str(node.get("HTTPAddr") or "")
        if not address or node.get("Status") == "down":
            return None
        return cls(str(node.get("ID") or ""), address, bool(node.get("TLSEnabled")))

    @property
    def host_port(self) -> tuple[str, int]:
        parts = urllib.parse.urlsplit("//" + self.address)
        if not parts.hostname or not parts.port:
            raise OSError(f"cannot parse the client agent's address {self.address!r}")
        return parts.hostname, parts.port


class ClientAgents:
    """NodeID → its ``ClientAgent`` (or None: not reachable directly), from ``GET
    /v1/node/:id`` (``node:read``), each answer kept ``ttl`` seconds.  A failed lookup and an
    agent that could not be reached count as None for the rest of the entry's time, so a
    network where clients are out of reach costs one dial per node and ``ttl``, not one per
    exec."""

    def __init__(
        self, client: NomadClient, *, monotonic: Callable[[], float], ttl: float = NODE_TTL
    ) -> None:
        self.client = client
        self._monotonic = monotonic
        self._ttl = ttl
        self._entries: dict[str, tuple[float, ClientAgent | None]] = {}

    async def find(self, node_id: str, *, region: str) -> ClientAgent | None:
        now = self._monotonic()
        entry = self._entries.get(node_id)
        if entry is not None and entry[0] > now:
            return entry[1]
        agent: ClientAgent | None = None
        try:
            node = await self.client.get(
                f"/node/{node_id}", namespace="", region=region, retry=NO_RETRY
            )
        except BackendError as exc:
            log.debug(
                "nomad: node %s not looked up, exec goes through the server: %s", node_id, exc
            )
        else:
            agent = ClientAgent.from_node(node if isinstance(node, Mapping) else {})
        self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
        self._entries[node_id] = (now + self._ttl, agent)
        return agent

    def unreachable(self, node_id: str) -> None:
        """The node's agent did not answer: skip it until its entry expires."""
        entry = self._entries.get(node_id)
        if entry is not None:
            self._entries[node_id] = (entry[0], None)


async def _dial(host: str, port: int) -> socket.socket:
    """A TCP connection within ``NODE_DIAL_TIMEOUT``, name lookup included (as Go's
    ``net.Dialer.Timeout`` bounds them together)."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(NODE_DIAL_TIMEOUT):
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        error = OSError(f"no address for {host}")
        for family, kind, proto, _, addr in infos:
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, addr)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            except BaseException:
                sock.close()
                raise
            return sock
        raise error


def _ws_options(client: NomadClient) -> dict[str, Any]:
    return {
        "proxy": None,
        "open_timeout": client.config.connect_timeout + client.config.timeout,
        "max_size": 2**24,
        "ping_interval": None,
        "user_agent_header": "vkgate",
        "logger": _WS_LOG,
    }


def _tls_context(client: NomadClient) -> SSLContext | bool:
    return client.ssl if isinstance(client.ssl, SSLContext) else True


async def _connect_direct(
    client: NomadClient, agent: ClientAgent, path: str, params: Query, *, region: str
) -> ClientConnection:
    """The exec WebSocket straight to the client agent: same CA and client certificate, server
    name ``client.<region>.nomad``; the TCP dial gets ``NODE_DIAL_TIMEOUT``."""
    scheme = "wss" if agent.tls else "ws"
    url = f"{scheme}://{agent.address}/v1{path}?{urllib.parse.urlencode(params)}"
    tls: dict[str, Any] = {}
    if agent.tls:
        tls = {
            "ssl": _tls_context(client),
            "server_hostname": client_server_name(region or client.config.region),
        }
    sock = await _dial(*agent.host_port)
    try:
        return await connect(url, sock=sock, **tls, **_ws_options(client))
    except BaseException:
        sock.close()
        raise


class NomadExecSession:
    """One running command; implements ``translators.base.ExecSession``."""

    def __init__(self, ws: ClientConnection, *, needs: str = "") -> None:
        self._ws = ws
        self._needs = needs
        self._queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self._exit: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        # an exit error nobody waits for (client went away) must not be logged as unretrieved
        self._exit.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._reader = asyncio.create_task(self._read())
        self._heartbeat = asyncio.create_task(self._beat())

    @classmethod
    async def open(
        cls,
        client: NomadClient,
        *,
        alloc_id: str,
        task: str,
        command: Sequence[str],
        tty: bool,
        namespace: str,
        region: str,
        node_id: str = "",
        agents: ClientAgents | None = None,
    ) -> NomadExecSession:
        """Open the session: to the client agent of ``node_id`` when ``agents`` finds it and it
        answers, else through ``address`` (module docstring)."""
        params = client.params(
            {"task": task, "command": json.dumps(list(command)), "tty": tty, "ws_handshake": True},
            namespace=namespace,
            region=region,
        )
        path = f"/client/allocation/{alloc_id}/exec"
        endpoint = client.endpoint("GET", path)
        what = f"exec {alloc_id}/{task}"
        agent = await agents.find(node_id, region=region) if agents and node_id else None
        ws: ClientConnection | None = None
        if agent is not None and agents is not None:
            try:
                ws = await _connect_direct(client, agent, path, params, region=region)
            except (OSError, WebSocketException, TimeoutError) as exc:
                agents.unreachable(node_id)
                log.debug(
                    "nomad %s: client agent %s not reachable (%s), through %s",
                    what, agent.address, str(exc) or type(exc).__name__, client.config.address,
                )  # fmt: skip
            else:
                log.debug("nomad %s: direct to client agent %s", what, agent.address)
        if ws is None:
            ws = await cls._connect_server(client, alloc_id, params, what=what)
            if agent is None:
                log.debug("nomad %s: through %s", what, client.config.address)
        await ws.send(json.dumps({"version": 1, "auth_token": client.config.token}))
        return cls(ws, needs=endpoint.refusal(client.namespace_of(params)))

    @staticmethod
    async def _connect_server(
        client: NomadClient, alloc_id: str, params: Query, *, what: str
    ) -> ClientConnection:
        path = f"/client/allocation/{alloc_id}/exec"
        url = client.url(path, params)
        url = "ws" + url[len("http") :]
        # the same connection policy as every other call: the client's TLS context and server
        # name (SNI and the name verified, else the address's host), and no proxy from the
        # environment (the httpx client has trust_env=False)
        tls: dict[str, Any] = {}
        if url.startswith("wss://"):
            tls["ssl"] = _tls_context(client)
            if client.config.tls_server_name:
                tls["server_hostname"] = client.config.tls_server_name
        try:
            return await connect(url, **tls, **_ws_options(client))
        except InvalidStatus as exc:
            body = exc.response.body.decode("utf-8", errors="replace") if exc.response.body else ""
            endpoint, ns = client.endpoint("GET", path), client.namespace_of(params)
            error = error_for_status(
                exc.response.status_code, body, what=f"GET /v1{path}", needs=endpoint.refusal(ns)
            )
            raise client.refused(error, endpoint, ns) from exc
        except (OSError, WebSocketException, TimeoutError) as exc:
            raise error_for_transport(exc, what=what, address=client.config.address) from exc

    async def _send(self, frame: dict[str, Any]) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self._ws.send(json.dumps(frame))

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            await self._send({})

    async def _read(self) -> None:
        try:
            async for raw in self._ws:
                try:
                    frame = json.loads(raw)
                except ValueError:
                    continue
                for key, stream in (("stdout", 1), ("stderr", 2)):
                    data = (frame.get(key) or {}).get("data")
                    if data:
                        await self._queue.put((stream, base64.b64decode(data)))
                if frame.get("exited"):
                    result = frame.get("result") or {}
                    if not self._exit.done():
                        self._exit.set_result(int(result.get("exit_code", 0)))
                    break
        except ConnectionClosed as exc:
            error = close_error(exc, needs=self._needs)
            if error is not None and not self._exit.done():
                self._exit.set_exception(error)
        finally:
            if not self._exit.done():
                self._exit.set_exception(BackendUnavailable(_no_exit_message(self._ws)))
            await self._queue.put(None)
            self._heartbeat.cancel()
            with contextlib.suppress(Exception):
                await self._ws.close()

    # -- ExecSession ---------------------------------------------------------------------

    async def write_stdin(self, data: bytes) -> None:
        await self._send({"stdin": {"data": base64.b64encode(data).decode()}})

    async def close_stdin(self) -> None:
        await self._send({"stdin": {"close": True}})

    async def resize(self, width: int, height: int) -> None:
        await self._send({"tty_size": {"width": width, "height": height}})

    async def output(self) -> AsyncIterator[tuple[int, bytes]]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            yield item

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    async def cancel(self) -> None:
        self._reader.cancel()
        self._heartbeat.cancel()
        with contextlib.suppress(Exception):
            await self._ws.close()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader
        if not self._exit.done():
            self._exit.set_exception(BackendUnavailable("nomad exec: cancelled"))
