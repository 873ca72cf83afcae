"""The push path: Nomad's event stream (heartbeats, a connection cut mid-event, resume from the
last index, replayed events), the resync after a reconnect and the ownership filter."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import httpx
import pytest
import respx
from nomad_fixtures import ADDRESS, MakeTranslator, captured

from translators.base import Phase, WorkloadState
from translators.nomad.events import EventStream

pytestmark = pytest.mark.contract


class Body(httpx.AsyncByteStream):
    """A streamed response body: the given chunks, then an optional error (a dropped TCP
    connection) or, with ``hang``, silence until cancelled."""

    def __init__(self, *chunks: bytes, error: Exception | None = None, hang: bool = False):
        self.chunks, self.error, self.hang = chunks, error, hang

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.error is not None:
            raise self.error
        if self.hang:
            await asyncio.Event().wait()


def line(index: int, *events: dict[str, Any]) -> bytes:
    return json.dumps({"Index": index, "Events": list(events)}).encode() + b"\n"


def alloc_event(alloc: dict[str, Any], index: int) -> dict[str, Any]:
    return {
        "Topic": "Allocation",
        "Type": "AllocationUpdated",
        "Key": alloc["ID"],
        "Namespace": "default",
        "Index": index,
        "Payload": {"Allocation": alloc},
    }


def job_event(job: dict[str, Any], index: int) -> dict[str, Any]:
    return {
        "Topic": "Job",
        "Type": "JobRegistered",
        "Key": job["ID"],
        "Namespace": "default",
        "Index": index,
        "Payload": {"Job": job, "Deleted": False},
    }


async def hang_forever(request: httpx.Request) -> httpx.Response:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def next_state(it: AsyncIterator[WorkloadState]) -> WorkloadState:
    return await asyncio.wait_for(anext(it), 5)


async def test_stream_cut_mid_event_resumes_from_the_last_index(
    make_translator: MakeTranslator,
) -> None:
    running = captured("running")
    job_a, alloc_a = running["job"], running["allocations"][0]
    finished = copy.deepcopy(captured("succeeded"))
    job_b, alloc_b = finished["job"], finished["allocations"][0]
    # A's task dies with exit 0 at index 101
    dead = copy.deepcopy(alloc_a)
    dead["ModifyIndex"] = 101
    dead["ClientStatus"] = "complete"
    ts = dead["TaskStates"]["app"]
    ts.update({"State": "dead", "FinishedAt": "2026-11-22T09:30:00.5Z"})
    ts["Events"].append(
        {"Type": "Terminated", "Time": 1795339800000000000, "Details": {"exit_code": "0"}}
    )
    torn = line(102, job_event(job_b, 102), alloc_event(alloc_b, 102))[:60]
    foreign_alloc = {**alloc_a, "ID": "f0000000-0000", "JobID": "someone-elses-job"}

    t = await make_translator()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        nomad.get("/v1/jobs").mock(
            return_value=httpx.Response(200, json=[job_a], headers={"X-Nomad-Index": "100"})
        )
        nomad.get("/v1/nodes").mock(
            return_value=httpx.Response(
                200, json=[{"ID": alloc_a["NodeID"], "Address": "192.0.2.7"}]
            )
        )

        def allocations(request: httpx.Request) -> Any:
            if "index" in request.url.params:  # the backstop's blocking query
                return hang_forever(request)
            return httpx.Response(200, json=[alloc_a], headers={"X-Nomad-Index": "100"})

        nomad.get("/v1/allocations").mock(side_effect=allocations)
        foreign = nomad.get("/v1/job/someone-elses-job").mock(
            return_value=httpx.Response(200, json={"ID": "someone-elses-job", "Meta": None})
        )
        stream = nomad.get("/v1/event/stream").mock(
            side_effect=[
                httpx.Response(
                    200,
                    stream=Body(
                        b"{}\n",
                        line(101, alloc_event(dead, 101), alloc_event(foreign_alloc, 101)),
                        torn,
                        error=httpx.RemoteProtocolError("peer closed connection"),
                    ),
                ),
                httpx.Response(
                    200,
                    stream=Body(
                        line(101, alloc_event(dead, 101), alloc_event(foreign_alloc, 101)),
                        line(102, job_event(job_b, 102), alloc_event(alloc_b, 102)),
                        b"{}\n",
                        hang=True,
                    ),
                ),
            ]
        )
        it = cast(AsyncGenerator[WorkloadState, None], t.changes())
        first = await next_state(it)
        assert (first.ref.name, first.phase) == ("running", Phase.RUNNING)
        assert first.host_ip == first.pod_ip == "192.0.2.7"  # from the node list
        second = await next_state(it)
        assert (second.ref.name, second.phase) == ("running", Phase.SUCCEEDED)
        assert second.containers[0].exit_code == 0
        third = await next_state(it)  # only arrives through the resumed stream
        assert (third.ref.name, third.phase) == ("succeeded", Phase.SUCCEEDED)
        await it.aclose()

    params = [c.request.url.params for c in stream.calls]
    assert params[0]["index"] == "100"  # starts where the initial list left off
    assert params[1]["index"] == "101"  # resumes at the last complete batch
    assert set(params[1].get_list("topic")) == {"Job", "Allocation", "Evaluation"}
    assert params[1]["namespace"] == "default"
    assert foreign.call_count == 1  # the other owner's job is looked up once, then ignored


async def test_silent_stream_reconnects_after_the_idle_timeout(
    make_translator: MakeTranslator,
) -> None:
    t = await make_translator(stream_idle_timeout=0.2)
    events = EventStream(t.client, namespace="default", index=7, idle_timeout=0.2, sleep=t._sleep)
    with respx.mock(base_url=ADDRESS) as nomad:
        route = nomad.get("/v1/event/stream").mock(
            side_effect=[
                httpx.Response(200, stream=Body(b"{}\n", hang=True)),
                httpx.Response(
                    200, stream=Body(line(9, {"Topic": "Job", "Payload": {}}), hang=True)
                ),
            ]
        )
        it = aiter(events)
        assert await asyncio.wait_for(anext(it), 5) is None  # reconnected: resync needed
        assert await asyncio.wait_for(anext(it), 5) == [{"Topic": "Job", "Payload": {}}]
        await it.aclose()  # type: ignore[attr-defined]
    assert [c.request.url.params["index"] for c in route.calls] == ["7", "7"]
    assert events.index == 9


async def test_a_refused_stream_backs_off_with_the_retry_steps(
    make_translator: MakeTranslator, sleeps: list[float]
) -> None:
    t = await make_translator()
    events = EventStream(t.client, namespace="default", backoff=(0.5, 1.0, 2.0), sleep=t._sleep)
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get("/v1/event/stream").mock(
            side_effect=[
                httpx.ConnectError("refused"),
                httpx.Response(403, text="Permission denied"),
                httpx.Response(500, text="no leader"),
                httpx.Response(200, stream=Body(line(3, {"Topic": "Job"}), hang=True)),
            ]
        )
        it = aiter(events)
        assert await asyncio.wait_for(anext(it), 5) == [{"Topic": "Job"}]
        await it.aclose()  # type: ignore[attr-defined]
    assert sleeps == [0.5, 1.0, 2.0]


async def test_close_stops_the_feed_even_when_the_consumer_never_closed_it(
    make_translator: MakeTranslator,
) -> None:
    """A consumer that drops the changes() generator mid-stream must not leave stream/backstop
    tasks running against a closed HTTP client (it crashed at asyncio.run() shutdown)."""
    running = captured("running")
    job_a, alloc_a = running["job"], running["allocations"][0]
    t = await make_translator()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        nomad.get("/v1/jobs").mock(
            return_value=httpx.Response(200, json=[job_a], headers={"X-Nomad-Index": "100"})
        )
        nomad.get("/v1/nodes").mock(return_value=httpx.Response(200, json=[]))

        def allocations(request: httpx.Request) -> Any:
            if "index" in request.url.params:
                return hang_forever(request)
            return httpx.Response(200, json=[alloc_a], headers={"X-Nomad-Index": "100"})

        nomad.get("/v1/allocations").mock(side_effect=allocations)
        nomad.get("/v1/event/stream").mock(
            return_value=httpx.Response(200, stream=Body(b"{}\n", hang=True))
        )
        it = cast(AsyncGenerator[WorkloadState, None], t.changes())
        await next_state(it)  # the feed is live; the consumer now just stops iterating
        feed_tasks = [task for feed in t._feeds for task in feed.tasks]
        assert feed_tasks and not any(task.done() for task in feed_tasks)
        await t.close()
        assert all(task.done() for task in feed_tasks)


class CutBody(httpx.AsyncByteStream):
    """A heartbeat, then silence until ``cut`` is set, then a dropped connection."""

    def __init__(self, cut: asyncio.Event) -> None:
        self.cut = cut

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b"{}\n"
        await self.cut.wait()
        raise httpx.ReadError("connection reset")


async def test_the_stream_says_whether_it_is_live(make_translator: MakeTranslator) -> None:
    """``change_stream_live()``: the agent relies on the stream to see stops only while it is
    connected (docs/design/pod-sync.md, "Waiting for a stop")."""
    running = captured("running")
    job_a, alloc_a = running["job"], running["allocations"][0]
    t = await make_translator()
    cut = asyncio.Event()
    assert not t.change_stream_live()  # no feed yet
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        nomad.get("/v1/jobs").mock(
            return_value=httpx.Response(200, json=[job_a], headers={"X-Nomad-Index": "100"})
        )
        nomad.get("/v1/nodes").mock(return_value=httpx.Response(200, json=[]))

        def allocations(request: httpx.Request) -> Any:
            if "index" in request.url.params:
                return hang_forever(request)
            return httpx.Response(200, json=[alloc_a], headers={"X-Nomad-Index": "100"})

        nomad.get("/v1/allocations").mock(side_effect=allocations)
        connects = 0

        def streams(request: httpx.Request) -> Any:
            nonlocal connects
            connects += 1
            if connects == 1:
                return httpx.Response(200, stream=CutBody(cut))
            return hang_forever(request)  # the reconnect never gets through

        nomad.get("/v1/event/stream").mock(side_effect=streams)
        it = cast(AsyncGenerator[WorkloadState, None], t.changes())
        await next_state(it)
        for _ in range(100):
            if t.change_stream_live():
                break
            await asyncio.sleep(0.01)
        assert t.change_stream_live()
        cut.set()  # dropped: reconnecting (the second connect hangs)
        for _ in range(100):
            if connects == 2:
                break
            await asyncio.sleep(0.01)
        assert connects == 2 and not t.change_stream_live()
        await it.aclose()
        await t.close()
