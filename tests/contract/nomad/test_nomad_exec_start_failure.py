"""A command Nomad cannot start: no ``exited`` frame, the socket closes with code 1011 and the
driver's error as the reason (captured from ``nomad agent -dev`` 1.11.3, raw_exec:
``rpc error: code = Unknown desc = failed to start command: fork/exec /no/such/binary: no such
file or directory``).  The session must fail with that reason, never report exit code 0."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
import respx
from nomad_fixtures import NODE, captured, mock_node
from websockets.asyncio.server import ServerConnection, serve
from websockets.frames import CloseCode

from translators.base import BackendRejected, BackendUnavailable, PodRef, TranslatorContext
from translators.nomad import NomadTranslator

pytestmark = pytest.mark.contract

NOT_FOUND = (
    "rpc error: code = Unknown desc = failed to start command: "
    "fork/exec /no/such/binary: no such file or directory"
)


async def run_exec(handler: Any) -> tuple[list[tuple[int, bytes]], BaseException | int]:
    doc = captured("running")
    job = doc["job"]
    meta = job["Meta"]
    async with serve(handler, "127.0.0.1", 0) as server:
        address = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        t = NomadTranslator(
            TranslatorContext(NODE, {"address": address, "mhz_per_core": 1000}), environ={}
        )
        try:
            with respx.mock(base_url=address) as nomad:
                nomad.get(f"/v1/job/{job['ID']}").mock(return_value=httpx.Response(200, json=job))
                nomad.get(f"/v1/job/{job['ID']}/allocations").mock(
                    return_value=httpx.Response(200, json=doc["allocations"])
                )
                mock_node(nomad, doc["allocations"][0], address.removeprefix("http://"))
                session = await t.exec(
                    PodRef(meta["k8s.namespace"], meta["k8s.name"], meta["k8s.uid"]),
                    "app",
                    ["/no/such/binary"],
                    tty=False,
                    stdin=False,
                )
            output = [item async for item in session.output()]
            try:
                result: BaseException | int = await session.wait()
            except BackendUnavailable as exc:
                result = exc
            except BackendRejected as exc:
                result = exc
        finally:
            await t.close()
    return output, result


async def test_command_that_cannot_start_fails_with_nomads_reason() -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.recv()  # the handshake
        await ws.close(CloseCode.INTERNAL_ERROR, NOT_FOUND)

    output, result = await run_exec(handler)
    assert output == []
    assert isinstance(result, BackendRejected)
    assert str(result) == (
        "nomad exec: failed to start command: fork/exec /no/such/binary: no such file or directory"
    )
    assert result.reason == "ExecFailed"


async def test_dropped_connection_without_exit_is_unavailable() -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.recv()
        out = base64.b64encode(b"partial\n").decode()
        await ws.send(json.dumps({"stdout": {"data": out}}))
        ws.transport.abort()  # no exited frame, no close frame

    output, result = await run_exec(handler)
    assert output == [(1, b"partial\n")]
    assert isinstance(result, BackendUnavailable)
    assert str(result) == "nomad exec: connection closed before the command exited (no close frame)"


async def test_normal_close_without_exit_names_the_close_code() -> None:
    """Nomad 1.6.3 ends a docker exec whose code it lost with a normal close after the output's
    close frames (docs/design/nomad.md, "Exec WebSocket"): the error says so."""

    async def handler(ws: ServerConnection) -> None:
        await ws.recv()
        await ws.send(json.dumps({"stdout": {"close": True}}))
        await ws.close(CloseCode.NORMAL_CLOSURE)

    output, result = await run_exec(handler)
    assert output == []
    assert isinstance(result, BackendUnavailable)
    assert str(result) == (
        "nomad exec: connection closed before the command exited (close code 1000)"
    )
