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
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Sequence
from ssl import SSLContext
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from translators.base import BackendAuthError, BackendError, BackendRejected, BackendUnavailable
from translators.nomad.client import NomadClient
from translators.nomad.errors import PERMISSION_DENIED, error_for_status, error_for_transport

log = logging.getLogger(__name__)
#: The websockets client logs every frame at debug — the first one carries the ACL token
#: (docs/design/secrets.md) — so its logger never goes below INFO, whatever log.level says.
_WS_LOG = logging.getLogger(__name__ + ".websocket")
_WS_LOG.setLevel(logging.INFO)

HEARTBEAT_SECONDS = 10.0
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
    ) -> NomadExecSession:
        params = client.params(
            {"task": task, "command": json.dumps(list(command)), "tty": tty, "ws_handshake": True},
            namespace=namespace,
            region=region,
        )
        path = f"/client/allocation/{alloc_id}/exec"
        url = client.url(path, params)
        url = "ws" + url[len("http") :]
        secure = url.startswith("wss://")
        ssl = client.ssl if secure else None
        what = f"exec {alloc_id}/{task}"
        # the same connection policy as every other call: the client's TLS context and server
        # name (SNI and the name verified, else the address's host), and no proxy from the
        # environment (the httpx client has trust_env=False)
        tls: dict[str, Any] = {}
        if secure:
            tls["ssl"] = ssl if isinstance(ssl, SSLContext) else True
            if client.config.tls_server_name:
                tls["server_hostname"] = client.config.tls_server_name
        try:
            ws = await connect(
                url,
                **tls,
                proxy=None,
                open_timeout=client.config.connect_timeout + client.config.timeout,
                max_size=2**24,
                ping_interval=None,
                user_agent_header="vkgate",
                logger=_WS_LOG,
            )
        except InvalidStatus as exc:
            body = exc.response.body.decode("utf-8", errors="replace") if exc.response.body else ""
            endpoint, ns = client.endpoint("GET", path), client.namespace_of(params)
            error = error_for_status(
                exc.response.status_code, body, what=f"GET /v1{path}", needs=endpoint.refusal(ns)
            )
            raise client.refused(error, endpoint, ns) from exc
        except (OSError, WebSocketException, TimeoutError) as exc:
            raise error_for_transport(exc, what=what, address=client.config.address) from exc
        await ws.send(json.dumps({"version": 1, "auth_token": client.config.token}))
        endpoint = client.endpoint("GET", path)
        return cls(ws, needs=endpoint.refusal(client.namespace_of(params)))

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
                self._exit.set_exception(
                    BackendUnavailable("nomad exec: connection closed before the command exited")
                )
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
