"""Logs (``/v1/client/fs/logs`` frames → kubectl semantics) and exec (the allocation exec
WebSocket) against the protocol as Nomad speaks it: respx for HTTP, a small WebSocket server
on 127.0.0.1 playing Nomad's exec endpoint."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
import respx
from nomad_fixtures import ADDRESS, NODE, MakeTranslator, captured, mock_node
from websockets.asyncio.server import ServerConnection, serve

from translators.base import (
    BackendNotFound,
    BackendRejected,
    LogOptions,
    PodRef,
    TranslatorContext,
)
from translators.nomad import NomadTranslator

pytestmark = pytest.mark.contract


def frame(data: bytes, file: str = "alloc/logs/app.stdout.0", offset: int = 0) -> bytes:
    return json.dumps(
        {"File": file, "Offset": offset, "Data": base64.b64encode(data).decode()}
    ).encode()


class Body(httpx.AsyncByteStream):
    def __init__(self, *chunks: bytes, hang: bool = False) -> None:
        self.chunks, self.hang = chunks, hang

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for c in self.chunks:
            yield c
        if self.hang:
            await asyncio.Event().wait()


def split(data: bytes, every: int = 7) -> list[bytes]:
    """Chunk boundaries anywhere, even inside a JSON frame."""
    return [data[i : i + every] for i in range(0, len(data), every)]


@pytest.fixture
def succeeded() -> dict[str, Any]:
    return captured("succeeded")


def ref_of(doc: dict[str, Any]) -> PodRef:
    meta = doc["job"]["Meta"]
    return PodRef(meta["k8s.namespace"], meta["k8s.name"], meta["k8s.uid"])


def mock_job(
    nomad: respx.MockRouter, doc: dict[str, Any], *, allocs: list[Any] | None = None
) -> None:
    job = doc["job"]
    nomad.get(f"/v1/job/{job['ID']}").mock(return_value=httpx.Response(200, json=job))
    nomad.get(f"/v1/job/{job['ID']}/allocations").mock(
        return_value=httpx.Response(200, json=doc["allocations"] if allocs is None else allocs)
    )


async def read(it: AsyncIterator[bytes]) -> bytes:
    return b"".join([c async for c in it])


async def test_logs_decode_frames_split_anywhere_stdout_then_stderr(
    make_translator: MakeTranslator, succeeded: dict[str, Any]
) -> None:
    alloc = succeeded["allocations"][0]["ID"]
    t = await make_translator()
    stdout = b"{}" + frame(b"hello\n") + b"\n{}" + frame(b"world\n", offset=6)
    stdout += json.dumps(
        {"File": "alloc/logs/app.stdout.0", "FileEvent": "file truncated"}
    ).encode()
    stderr = frame(b"oops\n", file="alloc/logs/app.stderr.0")
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, succeeded)

        def logs(request: httpx.Request) -> httpx.Response:
            kind = request.url.params["type"]
            assert request.url.params["task"] == "app"
            assert request.url.params["follow"] == "false"
            body = stdout if kind == "stdout" else stderr
            return httpx.Response(200, stream=Body(*split(body)))

        nomad.get(f"/v1/client/fs/logs/{alloc}").mock(side_effect=logs)
        out = await read(t.logs(ref_of(succeeded), "app", LogOptions()))
    assert out == b"hello\nworld\noops\n"


async def test_tail_lines_reads_from_the_end_and_keeps_the_last_lines(
    make_translator: MakeTranslator, succeeded: dict[str, Any]
) -> None:
    alloc = succeeded["allocations"][0]["ID"]
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, succeeded)

        def logs(request: httpx.Request) -> httpx.Response:
            assert request.url.params["origin"] == "end"
            if request.url.params["type"] == "stderr":
                return httpx.Response(200, stream=Body())
            return httpx.Response(200, stream=Body(frame(b"1\n2\n3\n4\n5\n")))

        route = nomad.get(f"/v1/client/fs/logs/{alloc}").mock(side_effect=logs)
        out = await read(t.logs(ref_of(succeeded), "app", LogOptions(tail_lines=2, stream="All")))
    assert out == b"4\n5\n"
    assert int(route.calls[0].request.url.params["offset"]) > 0


async def test_limit_bytes_and_timestamps(
    make_translator: MakeTranslator, succeeded: dict[str, Any]
) -> None:
    alloc = succeeded["allocations"][0]["ID"]
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, succeeded)
        nomad.get(f"/v1/client/fs/logs/{alloc}").mock(
            return_value=httpx.Response(200, stream=Body(frame(b"abcdef\nxyz\n")))
        )
        limited = await read(
            t.logs(ref_of(succeeded), "app", LogOptions(limit_bytes=4, stream="Stdout"))
        )
        nomad.get(f"/v1/client/fs/logs/{alloc}").mock(
            return_value=httpx.Response(200, stream=Body(frame(b"abc\nxy"), frame(b"z\n")))
        )
        stamped = await read(
            t.logs(ref_of(succeeded), "app", LogOptions(timestamps=True, stream="Stdout"))
        )
    assert limited == b"abcd"
    lines = stamped.decode().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["abc", "xyz"]
    # Nomad stores no per-line times: backlog lines carry the run's start, a lower bound in
    # whole seconds (no fraction that would look precise), not the time vkgate read them
    started = succeeded["allocations"][0]["TaskStates"]["app"]["StartedAt"]
    stamps = {line.split(" ")[0] for line in lines}
    assert stamps == {started[:19] + "Z"}


async def test_previous_needs_a_previous_allocation(
    make_translator: MakeTranslator, succeeded: dict[str, Any]
) -> None:
    alloc = succeeded["allocations"][0]
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, succeeded)
        nomad.get(f"/v1/allocation/{alloc['ID']}").mock(
            return_value=httpx.Response(200, json={**alloc, "PreviousAllocation": ""})
        )
        with pytest.raises(BackendRejected, match="previous terminated container"):
            await read(t.logs(ref_of(succeeded), "app", LogOptions(previous=True)))
        nomad.get(f"/v1/allocation/{alloc['ID']}").mock(
            return_value=httpx.Response(200, json={**alloc, "PreviousAllocation": "prev-alloc"})
        )
        nomad.get("/v1/allocation/prev-alloc").mock(
            return_value=httpx.Response(200, json={**alloc, "ID": "prev-alloc"})
        )
        nomad.get("/v1/client/fs/logs/prev-alloc").mock(
            return_value=httpx.Response(200, stream=Body(frame(b"before the reschedule\n")))
        )
        out = await read(
            t.logs(ref_of(succeeded), "app", LogOptions(previous=True, stream="Stdout"))
        )
    assert out == b"before the reschedule\n"


async def test_unknown_container_and_not_started_task(
    make_translator: MakeTranslator, succeeded: dict[str, Any]
) -> None:
    alloc = succeeded["allocations"][0]["ID"]
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, succeeded)
        with pytest.raises(BackendNotFound, match='container "nope"'):
            await read(t.logs(ref_of(succeeded), "nope", LogOptions()))
        nomad.get(f"/v1/client/fs/logs/{alloc}").mock(
            return_value=httpx.Response(404, text='task "app" not started yet. No logs available')
        )
        with pytest.raises(BackendRejected, match="waiting to start"):
            await read(t.logs(ref_of(succeeded), "app", LogOptions()))


async def test_follow_ends_when_the_task_is_dead(
    make_translator: MakeTranslator,
) -> None:
    doc = captured("running")
    alloc = doc["allocations"][0]
    t = await make_translator()
    dead = json.loads(json.dumps(alloc))
    dead["TaskStates"]["app"]["State"] = "dead"
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, doc)

        def logs(request: httpx.Request) -> httpx.Response:
            stdout = request.url.params["type"] == "stdout"
            if request.url.params["follow"] == "false":  # the backlog, then a follow after it
                return httpx.Response(200, stream=Body(frame(b"tick\n")) if stdout else Body())
            assert request.url.params["offset"] == ("5" if stdout else "0")
            return httpx.Response(200, stream=Body(hang=True))

        nomad.get(f"/v1/client/fs/logs/{alloc['ID']}").mock(side_effect=logs)
        watch = nomad.get(f"/v1/allocation/{alloc['ID']}").mock(
            side_effect=[
                httpx.Response(200, json=alloc, headers={"X-Nomad-Index": "50"}),
                httpx.Response(200, json=dead, headers={"X-Nomad-Index": "51"}),
            ]
        )
        out = await asyncio.wait_for(read(t.logs(ref_of(doc), "app", LogOptions(follow=True))), 10)
    assert out == b"tick\n"
    assert watch.calls[1].request.url.params["index"] == "50"  # a blocking query, not a poll


# --------------------------------------------------------------------------- exec


class FakeExec:
    """Nomad's exec endpoint: handshake, stdin frames, tty_size, then output and exit."""

    def __init__(self, exit_code: int = 3) -> None:
        self.exit_code = exit_code
        self.requests: list[dict[str, Any]] = []
        self.frames: list[dict[str, Any]] = []

    async def handler(self, ws: ServerConnection) -> None:
        url = urlparse(ws.request.path if ws.request else "")
        self.requests.append({"path": url.path, "query": parse_qs(url.query)})
        stdin = b""
        async for raw in ws:
            msg = json.loads(raw)
            self.frames.append(msg)
            if "stdin" in msg and msg["stdin"].get("data"):
                stdin += base64.b64decode(msg["stdin"]["data"])
            if msg.get("stdin", {}).get("close"):
                break
        command = json.loads(self.requests[-1]["query"]["command"][0])
        out = ("ran " + " ".join(command) + "\n").encode() + stdin
        await ws.send(json.dumps({"stdout": {"data": base64.b64encode(out).decode()}}))
        await ws.send(json.dumps({"stderr": {"data": base64.b64encode(b"warn\n").decode()}}))
        await ws.send(json.dumps({"stdout": {"close": True}}))
        await ws.send(json.dumps({"exited": True, "result": {"exit_code": self.exit_code}}))
        ws.transport.abort()  # Nomad drops the connection without a close frame


async def test_exec_streams_stdin_output_and_exit_code() -> None:
    doc = captured("running")
    alloc = doc["allocations"][0]
    fake = FakeExec(exit_code=3)
    async with serve(fake.handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        address = f"http://127.0.0.1:{port}"
        t = NomadTranslator(
            TranslatorContext(NODE, {"address": address, "token": "tok-123", "mhz_per_core": 1000}),
            environ={},
        )
        try:
            with respx.mock(base_url=address) as nomad:
                mock_job(nomad, doc)
                mock_node(nomad, alloc, f"127.0.0.1:{port}")
                session = await t.exec(
                    ref_of(doc), "app", ["/bin/sh", "-c", "cat"], tty=False, stdin=True
                )
            await session.resize(120, 40)
            await session.write_stdin(b"from stdin\n")
            await session.close_stdin()
            output = [item async for item in session.output()]
            code = await session.wait()
        finally:
            await t.close()
    assert code == 3
    assert output == [(1, b"ran /bin/sh -c cat\nfrom stdin\n"), (2, b"warn\n")]
    req = fake.requests[0]
    assert req["path"] == f"/v1/client/allocation/{alloc['ID']}/exec"
    assert req["query"]["task"] == ["app"] and req["query"]["ws_handshake"] == ["true"]
    assert "tok-123" not in json.dumps(req["query"])  # the token travels in the handshake
    assert fake.frames[0] == {"version": 1, "auth_token": "tok-123"}
    assert {"tty_size": {"width": 120, "height": 40}} in fake.frames


async def test_exec_in_a_finished_pod_is_rejected(
    make_translator: MakeTranslator, succeeded: dict[str, Any]
) -> None:
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, succeeded)
        with pytest.raises(BackendRejected, match="not running"):
            await t.exec(ref_of(succeeded), "app", ["ls"], tty=False, stdin=False)
