"""``kubectl port-forward``: the kubelet's port-forward protocols, and where a connection goes.

Two protocols, as the kubelet serves them (docs/design/kubelet-contract.md, "Exec, attach and
port-forward"; docs/kubelet.md, "Port-forward"):

* **SPDY/3.1**, ``X-Stream-Protocol-Version: portforward.k8s.io`` (POST).  Every kubectl
  arrives this way: its default WebSocket tunnel (``SPDY/3.1+portforward.k8s.io``, kubectl ≥
  1.31) ends at the API server, which speaks SPDY to a node that does not declare
  ``ExtendWebSocketsToKubelet`` (tests/e2e/test_kubectl_nomad_portforward.py shows both
  kubectl modes reaching us as ``POST … upgrade=spdy/3.1``).  One session carries any number
  of forwarded connections, each a *pair* of client streams with the same ``requestID``
  header: ``streamType: error`` and ``streamType: data``, both with a ``port`` header.  A pair
  must be complete within the stream creation timeout; complete pairs run concurrently.
* **WebSocket** (GET, ``?port=`` repeated or comma-separated; subprotocol
  ``v4.channel.k8s.io``, ``v4.base64.channel.k8s.io`` or none): clients the API server passes
  through unchanged (the Python client's ``portforward``).  One connection per requested port:
  channel ``2i`` carries its data both ways, ``2i+1`` its errors, and each of the two starts
  with the port as 2 bytes little-endian.

Where a connection goes: the translator's ``PortForwarder`` when it has one (a tunnel of the
backend's own); else, when ``Features.routable_pod_ip``, a TCP connection to the pod's
``status.podIP`` and the port (``gateway.kubelet.api.dial``); else the request is refused with
``501`` naming the backend, before any upgrade.  Either way only a port of the pod's is
connected to: with host networking the pod's address is its host's, and a port that is not
the pod's (``gateway.kubelet.api.podports``, asked once per request) is refused on the
connection's error stream without being dialled.

A connection that cannot be made, or breaks, is reported on its error stream as the kubelet
words it — ``error forwarding port 8080 to pod default/web, uid 1f…: dial tcp 10.0.0.5:8080:
connect: connection refused`` — and the error stream is then closed; kubectl prints ``an
error occurred forwarding 8080 -> 8080: `` and that text.

Both directions are copied as they come, with back-pressure: a client that half-closes its
data stream (SPDY FIN) half-closes the pod connection and still gets the pod's answer; the
pod closing its side ends the connection — data and error streams closed (FIN), as the
kubelet closes both when its copy ends — and the client's tools close theirs then.  The
client leaving cancels every connection of the session.

Internal to ``gateway.kubelet.api``: ``routes`` calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gateway.kubelet import streams
from gateway.kubelet.api import podports
from gateway.kubelet.api.dial import dial
from gateway.kubelet.server import Exchange, HttpError, Request
from gateway.kubelet.streams import spdy, websocket
from gateway.metrics import Metrics
from translators.base import (
    PodRef,
    PortForwarder,
    PortStream,
    Translator,
    TranslatorError,
    WorkloadState,
)
from vkgate_core.kubetypes import Pod

log = logging.getLogger(__name__)

#: The SPDY stream protocol (``portforward.k8s.io``, the kubelet's only one).
SPDY_PROTOCOLS = ("portforward.k8s.io",)
#: WebSocket subprotocols of the kubelet's port-forward ("" = none offered: binary).
WEBSOCKET_PROTOCOLS = ("v4.channel.k8s.io", "v4.base64.channel.k8s.io")

Opener = Callable[[int], Awaitable[PortStream]]


# --------------------------------------------------------------------------- where to


class NotThePodsPort(Exception):
    """A port of the pod's address that is not the pod's (``podports``); the message goes on
    the connection's error stream."""


def opener(translator: Translator, pod: Pod, ref: PodRef, state: WorkloadState | None) -> Opener:
    """How this pod's connections are made; ``HttpError`` (before any upgrade) when they
    cannot be: ``501`` for a backend without a way, ``500`` for a pod without an address.
    ``state`` is the workload's latest (None: not known yet); it decides which ports are the
    pod's, and a connection to another raises ``NotThePodsPort`` without being made."""
    way = _way(translator, pod, ref)
    reach = podports.reach(pod, state)

    async def to_the_pods_port(port: int) -> PortStream:
        refused = reach.refusal(port)
        if refused:
            raise NotThePodsPort(refused)
        return await way(port)

    return to_the_pods_port


def _way(translator: Translator, pod: Pod, ref: PodRef) -> Opener:
    if isinstance(translator, PortForwarder):
        forwarder = translator

        async def through_backend(port: int) -> PortStream:
            return await forwarder.port_forward(ref, port)

        return through_backend
    reason = refusal(translator)
    if reason:
        raise HttpError(501, reason)
    status = pod.get("status") or {}
    ip = str(status.get("podIP") or "")
    if not ip:
        phase = status.get("phase") or "unknown"
        raise HttpError(
            500, f'pod "{ref.key}" has no IP address yet (phase {phase}): nothing to forward to'
        )

    async def to_pod_ip(port: int) -> PortStream:
        return await dial(ip, port)

    return to_pod_ip


def refusal(translator: Translator) -> str:
    """Why ``kubectl port-forward`` cannot work on this backend; "" when it can."""
    if isinstance(translator, PortForwarder):
        return ""
    features = getattr(translator, "features", None)
    if features is not None and features.routable_pod_ip:
        return ""
    return (
        f"port-forward is not supported by the {translator.kind} backend: it has no tunnel "
        "to a pod and its pod addresses are not reachable from vkgate"
    )


# --------------------------------------------------------------------------- one connection


class ClientSide(Protocol):
    """The client's half of one forwarded connection (a SPDY data stream, a WebSocket
    channel)."""

    async def read(self) -> bytes:
        """Bytes from the client; ``b""`` once it sent everything or went away."""
        ...

    async def write(self, data: bytes) -> None: ...

    async def close(self) -> None:
        """The pod sent everything (half-close toward the client)."""
        ...

    def aborted(self) -> bool:
        """True when the client dropped this connection (not a half-close)."""
        ...


class _PodFailed(Exception):
    """The pod's side of a connection broke; its message goes on the error stream."""


async def _to_pod(client: ClientSide, conn: PortStream) -> None:
    while data := await client.read():
        try:
            await conn.write(data)
        except (TranslatorError, OSError) as exc:
            # the pod stopped reading (closed, reset): what it still sends is read below,
            # and a broken connection shows there
            log.debug("port-forward: writing to the pod: %s", exc)
            return
    await conn.close_write()


async def _to_client(client: ClientSide, conn: PortStream) -> None:
    while True:
        try:
            data = await conn.read()
        except (TranslatorError, OSError) as exc:
            raise _PodFailed(str(exc)) from exc
        if not data:
            break
        await client.write(data)
    await client.close()


async def pump(client: ClientSide, conn: PortStream) -> str:
    """Copy both ways until the pod's side ended, or the client dropped the connection;
    returns the pod side's failure ("" when none).  The client's half-close half-closes the
    pod connection and the pod's answer still flows back; the pod's end ends the connection
    at once (the client's tools wait for the error stream to close before they close their
    own side, so waiting for the client here would wait forever).  The pod connection is
    closed in every case."""
    up = asyncio.create_task(_to_pod(client, conn))
    down = asyncio.create_task(_to_client(client, conn))
    failure = ""
    try:
        pending: set[asyncio.Task[None]] = {up, down}
        while down in pending:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if up not in pending and client.aborted():
                break
        if not down.cancelled() and down.done():
            error = down.exception()
            if isinstance(error, _PodFailed):
                failure = str(error)
            elif error is not None:  # writing to the client failed: it is gone
                log.debug("port-forward: the client went away: %s", error)
    finally:
        for t in (up, down):
            t.cancel()
        for t in (up, down):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        with contextlib.suppress(Exception):
            await conn.close()
    return failure


@dataclass
class Forwarding:
    """What every connection of one request shares."""

    ref: PodRef
    opener: Opener
    metrics: Metrics | None = None

    def error_text(self, port: int, reason: str) -> bytes:
        """The kubelet's words (``portforward.httpStreamHandler.portForward``)."""
        return (
            f"error forwarding port {port} to pod {self.ref.key}, uid {self.ref.uid}: {reason}"
        ).encode()

    async def connect(self, client: ClientSide, port: int) -> bytes:
        """One forwarded connection from start to end; the error text ("" on success)."""
        try:
            conn = await self.opener(port)
        except (NotThePodsPort, TranslatorError, OSError) as exc:
            log.info("port-forward %s:%d: %s", self.ref.key, port, exc)
            return self.error_text(port, str(exc))
        gauge = self.metrics.portforward_connections if self.metrics is not None else None
        if gauge is not None:
            gauge.inc()
        try:
            failure = await pump(client, conn)
        finally:
            if gauge is not None:
                gauge.dec()
        if failure:
            log.info("port-forward %s:%d: %s", self.ref.key, port, failure)
            return self.error_text(port, failure)
        return b""


# --------------------------------------------------------------------------- SPDY


class _SpdyData:
    """A SPDY data stream as the client's side (``close`` = FIN)."""

    def __init__(self, stream: spdy.SpdyStream) -> None:
        self.stream = stream

    async def read(self) -> bytes:
        return await self.stream.read()

    async def write(self, data: bytes) -> None:
        await self.stream.write(data)

    async def close(self) -> None:
        await self.stream.close()

    def aborted(self) -> bool:
        return self.stream.reset_status is not None


@dataclass
class _Pair:
    """The two streams of one ``requestID``."""

    request_id: str
    data: spdy.SpdyStream | None = None
    error: spdy.SpdyStream | None = None
    complete: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, stream: spdy.SpdyStream) -> str:
        """Take ``stream`` (an ``error`` or ``data`` stream: ``stream_problem`` checked); the
        reason it cannot be taken, else ""."""
        if stream.header("streamtype") == "error":
            if self.error is not None:
                return "error stream already assigned"
            self.error = stream
        else:
            if self.data is not None:
                return "data stream already assigned"
            self.data = stream
        if self.data is not None and self.error is not None:
            self.complete.set()
        return ""

    async def print_error(self, text: bytes) -> None:
        if self.error is not None and text:
            with contextlib.suppress(ConnectionError):
                await self.error.write(text)

    async def close(self) -> None:
        """FIN on both streams; what the client still sends on them is dropped."""
        for st in (self.error, self.data):
            if st is not None:
                await st.close()
                st.discard()


def stream_problem(stream: spdy.SpdyStream) -> str:
    """Why the kubelet would refuse this stream ("" when it is fine): a valid ``port`` and a
    ``streamType`` of ``error`` or ``data``."""
    port = stream.header("port")
    if not port:
        return '"port" header is required'
    try:
        number = int(port, 10)
    except ValueError:
        return f"unable to parse {port!r} as a port"
    if not 0 < number < 65536:
        return f"port {port!r} must be > 0" if number < 1 else f"port {port!r} out of range"
    kind = stream.header("streamtype")
    if not kind:
        return '"streamType" header is required'
    if kind not in ("error", "data"):
        return f"invalid stream type {kind!r}"
    return ""


def request_id(stream: spdy.SpdyStream) -> str:
    """The ``requestID`` header; clients too old to send one get the kubelet's guess (an
    error stream and the data stream after it belong together)."""
    rid = stream.header("requestid")
    if rid:
        return rid
    if stream.header("streamtype") == "error":
        return str(stream.id)
    return str(stream.id - 2)


class SpdyForwarding:
    """One SPDY port-forward session: pairs streams up and runs each complete pair."""

    def __init__(
        self, session: spdy.SpdySession, forwarding: Forwarding, *, creation_timeout: float
    ) -> None:
        self.session = session
        self.forwarding = forwarding
        self.creation_timeout = creation_timeout
        self._pairs: dict[str, _Pair] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run(self) -> None:
        runner = asyncio.create_task(self.session.run())
        try:
            while (stream := await self.session.accept()) is not None:
                await self._take(stream)
            await self.session.closed.wait()  # a GOAWAY: running connections may finish
        finally:
            for task in list(self._tasks):
                task.cancel()
            for task in list(self._tasks):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self.session.close()
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await runner

    async def _take(self, stream: spdy.SpdyStream) -> None:
        problem = stream_problem(stream)
        if problem:
            log.info("port-forward %s: refusing stream: %s", self.forwarding.ref.key, problem)
            await stream.reset(spdy.RstStatus.CANCEL)
            return
        rid = request_id(stream)
        pair = self._pairs.get(rid)
        if pair is None:
            pair = self._pairs[rid] = _Pair(rid)
            self._spawn(self._expire(pair))
        error = pair.add(stream)
        if error:
            await pair.print_error(f"error processing stream for request {rid}: {error}".encode())
        elif pair.complete.is_set():
            self._spawn(self._forward(pair))

    async def _expire(self, pair: _Pair) -> None:
        """A pair still incomplete after the creation timeout is dropped with an error."""
        try:
            await asyncio.wait_for(pair.complete.wait(), self.creation_timeout)
        except TimeoutError:
            await pair.print_error(
                f"(request={pair.request_id}) timed out waiting for streams".encode()
            )
            await pair.close()
        finally:
            if self._pairs.get(pair.request_id) is pair:
                del self._pairs[pair.request_id]

    async def _forward(self, pair: _Pair) -> None:
        assert pair.data is not None and pair.error is not None
        port = int(pair.data.header("port"))
        try:
            text = await self.forwarding.connect(_SpdyData(pair.data), port)
            await pair.print_error(text)
        finally:
            await pair.close()


# --------------------------------------------------------------------------- WebSocket


def parse_ports(query: Mapping[str, list[str]]) -> list[int]:
    """The ``port`` query values of a WebSocket request (``NewV4Options``'s rules)."""
    values = query.get("port") or []
    if not values:
        raise HttpError(400, 'query parameter "port" is required')
    ports: list[int] = []
    for value in values:
        if not value:
            raise HttpError(400, 'query parameter "port" cannot be empty')
        for part in value.split(","):
            try:
                port = int(part, 10)
            except ValueError:
                raise HttpError(400, f"unable to parse {value!r} as a port") from None
            if not 0 < port < 65536:
                raise HttpError(400, f"port {value!r} must be > 0 and < 65536")
            ports.append(port)
    return ports


class _WsData:
    """Channel ``2i`` of a WebSocket port-forward as the client's side."""

    def __init__(self, ch: websocket.WebSocketChannels, channel: int) -> None:
        self.ch = ch
        self.channel = channel

    async def read(self) -> bytes:
        return await self.ch.read(self.channel)

    async def write(self, data: bytes) -> None:
        await self.ch.write(self.channel, data)

    async def close(self) -> None:
        return None  # v4 has no half-close: the pair ends instead

    def aborted(self) -> bool:
        return self.ch.gone.is_set()


async def serve_websocket(
    req: Request, ex: Exchange, forwarding: Forwarding, ports: Sequence[int], *, idle_timeout: float
) -> None:
    reader, writer, trailing, protocol = await websocket.accept(req, ex, WEBSOCKET_PROTOCOLS)
    data = {2 * i for i in range(len(ports))}
    ch = websocket.WebSocketChannels(
        reader,
        writer,
        protocol=protocol or "channel.k8s.io",
        readable=data,
        writable=data | {c + 1 for c in data},
        initial_data=trailing,
        idle_timeout=idle_timeout,
    )

    async def one(index: int, port: int) -> None:
        prefix = struct.pack("<H", port)
        await ch.write(2 * index, prefix)
        await ch.write(2 * index + 1, prefix)
        text = await forwarding.connect(_WsData(ch, 2 * index), port)
        ch.stop_reading(2 * index)
        if text:
            await ch.write(2 * index + 1, text)

    tasks = [asyncio.create_task(one(i, p)) for i, p in enumerate(ports)]
    gone = asyncio.create_task(ch.gone.wait())
    try:  # until every port's connection ended, or the client left
        pending = set(tasks)
        while pending and not gone.done():
            await asyncio.wait({*pending, gone}, return_when=asyncio.FIRST_COMPLETED)
            pending = {t for t in tasks if not t.done()}
    finally:
        for t in (*tasks, gone):
            t.cancel()
        for t in (*tasks, gone):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await ch.close()


# --------------------------------------------------------------------------- the request


async def serve(
    req: Request,
    ex: Exchange,
    forwarding: Forwarding,
    *,
    creation_timeout: float = streams.STREAM_CREATION_TIMEOUT,
    idle_timeout: float = streams.IDLE_TIMEOUT,
) -> None:
    """Upgrade ``req`` (SPDY/3.1 or WebSocket) and forward until the client leaves."""
    if req.upgrade == "spdy/3.1":
        session, protocol = await streams.upgrade_spdy(
            req, ex, SPDY_PROTOCOLS, idle_timeout=idle_timeout
        )
        log.debug("port-forward %s: SPDY/3.1, %s", forwarding.ref.key, protocol)
        await SpdyForwarding(session, forwarding, creation_timeout=creation_timeout).run()
    elif req.upgrade == "websocket":
        ports = parse_ports(req.query)
        log.debug("port-forward %s: WebSocket, ports %s", forwarding.ref.key, ports)
        await serve_websocket(req, ex, forwarding, ports, idle_timeout=idle_timeout)
    else:
        raise HttpError(400, "Upgrade request required (SPDY/3.1 or websocket)")
