"""The push path: Nomad's event stream (heartbeats, a connection cut mid-event, resume from the
last index, replayed events), the resync after a reconnect and the ownership filter."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, cast

import httpx
import pytest
import respx
from nomad_fixtures import ADDRESS, MakeTranslator, Sleeps, captured

from tests.fake_time import FakeTime
from translators.base import Phase, Vanished, WorkloadState
from translators.nomad.events import EventStream
from translators.nomad.placements import blocked_placements
from vkgate_core.clock import FakeClock

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


async def test_a_pod_string_with_unicode_line_breaks_does_not_tear_the_stream(
    make_translator: MakeTranslator,
) -> None:
    """Nomad's JSON writes U+0085 (NEL) raw, and U+2028/U+2029 may be; Python's
    ``str.splitlines`` (httpx's ``aiter_lines``) breaks lines at them, which tore every event
    of a pod with such a string in its job (an env value, an annotation) and reconnected at the
    same index forever.  ndjson lines end at "\n" only; the string arrives byte for byte."""
    t = await make_translator(stream_idle_timeout=5)
    events = EventStream(t.client, namespace="default", index=7, idle_timeout=5, sleep=t._sleep)
    value = "a\u0085b\u2028c\u2029d\x1ce\re"
    job = {"ID": "j", "Meta": {"k8s.note": value}}
    raw = json.dumps(
        {"Index": 9, "Events": [{"Topic": "Job", "Payload": {"Job": job}}]}, ensure_ascii=False
    ).encode()
    assert "\u0085".encode() in raw and "\u2028".encode() in raw  # raw, as Nomad sends NEL
    with respx.mock(base_url=ADDRESS) as nomad:
        route = nomad.get("/v1/event/stream").mock(
            return_value=httpx.Response(200, stream=Body(raw[:20], raw[20:] + b"\n{}\n", hang=True))
        )
        it = aiter(events)
        [batch] = [await asyncio.wait_for(anext(it), 5)]
        await it.aclose()  # type: ignore[attr-defined]
    assert batch == [{"Topic": "Job", "Payload": {"Job": job}}]
    assert batch[0]["Payload"]["Job"]["Meta"]["k8s.note"] == value
    assert route.call_count == 1  # no reconnect


class CountedBody(httpx.AsyncByteStream):
    """Chunks as Nomad writes them, counting how many the reader took, then silence."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks, self.taken = chunks, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.taken += 1
            yield chunk
        await asyncio.Event().wait()


async def test_the_connection_is_drained_while_the_consumer_is_busy(
    make_translator: MakeTranslator,
) -> None:
    """Nomad drops a subscriber ``event_buffer_size`` index batches behind.  The consumer
    awaits lists and reads (a resync after a reconnect takes seconds at thousands of jobs), so
    a reader task drains the connection meanwhile: every line is read off the socket before
    the consumer asks for its second batch.  (With the consumer pulling the lines itself, the
    connection was read no further than the consumer had got, and Nomad dropped the stream
    18 times in a 5,000-pod run.)"""
    t = await make_translator(stream_idle_timeout=5)
    events = EventStream(t.client, namespace="default", index=7, idle_timeout=5, sleep=t._sleep)
    body = CountedBody(*(line(i, {"Topic": "Job", "Index": i}) for i in range(8, 58)))
    with respx.mock(base_url=ADDRESS) as nomad:
        route = nomad.get("/v1/event/stream").mock(return_value=httpx.Response(200, stream=body))
        it = aiter(events)
        first = await asyncio.wait_for(anext(it), 5)
        for _ in range(50):  # the consumer is busy: it does not ask for the next batch
            await asyncio.sleep(0)
            if body.taken == 50:
                break
        assert body.taken == 50
        assert events.index == 57  # the resume point moves with what was read
        rest = [await asyncio.wait_for(anext(it), 5) for _ in range(49)]
        await it.aclose()  # type: ignore[attr-defined]
    assert [b[0]["Index"] for b in [first, *rest]] == list(range(8, 58))  # in order, none lost
    assert route.call_count == 1


async def test_a_consumer_far_behind_gets_one_resync_instead_of_the_backlog(
    make_translator: MakeTranslator,
) -> None:
    """The backlog is bounded (``max_backlog`` batches): past it, the unhandled batches are
    dropped and the consumer is told to resync (``None``), as after a reconnect; the
    connection stays up and the batches after the drop still arrive."""
    t = await make_translator(stream_idle_timeout=5)
    events = EventStream(
        t.client, namespace="default", index=7, idle_timeout=5, sleep=t._sleep, max_backlog=5
    )
    body = CountedBody(*(line(i, {"Topic": "Job", "Index": i}) for i in range(8, 16)))
    with respx.mock(base_url=ADDRESS) as nomad:
        route = nomad.get("/v1/event/stream").mock(return_value=httpx.Response(200, stream=body))
        it = aiter(events)
        reading = asyncio.ensure_future(anext(it))  # starts the reader; the consumer then waits
        for _ in range(50):
            await asyncio.sleep(0)
            if body.taken == 8:
                break
        got = [await asyncio.wait_for(reading, 5)]
        while len(got) < 7:
            got.append(await asyncio.wait_for(anext(it), 5))
            if got[-1] is not None and got[-1][0]["Index"] == 15:
                break
        await it.aclose()  # type: ignore[attr-defined]
    assert events.overflows == 1
    # 8..12 filled the backlog, 13 overflowed it: they were dropped for a resync
    assert [None if b is None else b[0]["Index"] for b in got] == [None, 13, 14, 15]
    assert route.call_count == 1


async def test_a_reconnect_resumes_at_the_newest_index_nomad_has_answered_with(
    make_translator: MakeTranslator,
) -> None:
    """Nomad starts a subscriber whose index has left its buffer at the *oldest* batch it
    holds: after a drop that is ``event_buffer_size`` batches behind, and the next batch drops
    it again.  So a reconnect resumes at the newest ``X-Nomad-Index`` any answer carried (the
    resync after the reconnect lists what lies between); the first connection starts where
    the list it follows left off."""
    t = await make_translator(stream_idle_timeout=5)
    events = EventStream(t.client, namespace="default", index=7, idle_timeout=5, sleep=t._sleep)
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get("/v1/jobs").mock(
            return_value=httpx.Response(200, json=[], headers={"X-Nomad-Index": "480"})
        )
        route = nomad.get("/v1/event/stream").mock(
            side_effect=[
                httpx.Response(200, stream=Body(line(9, {"Topic": "Job"}))),  # Nomad ends it
                httpx.Response(200, stream=Body(line(481, {"Topic": "Job"}), hang=True)),
            ]
        )
        await t.client.get("/jobs")  # any answer: a register's, a list's
        it = aiter(events)
        assert await asyncio.wait_for(anext(it), 5) == [{"Topic": "Job"}]
        assert await asyncio.wait_for(anext(it), 5) is None  # reconnected: resync
        assert await asyncio.wait_for(anext(it), 5) == [{"Topic": "Job"}]
        await it.aclose()  # type: ignore[attr-defined]
    assert [c.request.url.params["index"] for c in route.calls] == ["7", "480"]
    assert t.client.newest_index() == 480 and t.client.newest_index("elsewhere") == 0


async def test_reconnects_before_the_consumer_resyncs_cost_one_resync(
    make_translator: MakeTranslator,
) -> None:
    """Nomad dropped the stream four times in two seconds at the end of a 5,000-pod burst.
    A resync the consumer has not begun yet lists after every later reconnect too, so the
    reconnects in between add no resync of their own; one after the consumer began does."""
    t = await make_translator(stream_idle_timeout=5)
    events = EventStream(t.client, namespace="default", index=7, idle_timeout=5, sleep=t._sleep)
    with respx.mock(base_url=ADDRESS) as nomad:
        route = nomad.get("/v1/event/stream").mock(
            side_effect=[
                *(  # each ends after one line: Nomad dropped the subscriber
                    httpx.Response(200, stream=Body(line(i, {"Topic": "Job", "Index": i})))
                    for i in range(8, 13)
                ),
                httpx.Response(200, stream=Body(hang=True)),
            ]
        )
        it = aiter(events)
        got = [await asyncio.wait_for(anext(it), 5)]  # the first batch; the reader goes on
        for _ in range(100):
            await asyncio.sleep(0)
            if route.call_count == 6:
                break
        got += [await asyncio.wait_for(anext(it), 5) for _ in range(5)]
        await it.aclose()  # type: ignore[attr-defined]
    indexes = [None if b is None else b[0]["Index"] for b in got]
    assert route.call_count == 6
    assert indexes == [8, None, 9, 10, 11, 12]


async def test_a_pushed_view_reaches_every_running_feed_once(
    make_translator: MakeTranslator,
) -> None:
    """``ChangeFeed.push``: a state the translator learned outside the stream is yielded by
    each running ``changes()``, once (the same state again is not news), and by none after
    it ended."""
    t = await make_translator()
    doc = captured("running")
    view = t.book.merge_job(doc["job"], region="")
    assert view is not None
    feed = t.changes()
    [chg] = t._feeds
    chg.scopes = []  # no stream, no lists: only what is pushed
    pending = asyncio.ensure_future(anext(feed))
    await asyncio.sleep(0)
    chg.push([view])
    chg.push([view])
    state = await asyncio.wait_for(pending, 5)
    assert isinstance(state, WorkloadState) and state.ref.uid == view.ref.uid
    second = asyncio.ensure_future(anext(feed))
    await asyncio.sleep(0.05)
    assert not second.done()  # the same state is not yielded twice
    second.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await second  # the generator ends with it
    await feed.aclose()  # type: ignore[attr-defined]
    assert not chg._emitters
    chg.push([view])  # no running changes(): nothing to reach, no error


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


class QueueBody(httpx.AsyncByteStream):
    """A heartbeat, then whatever the test puts on ``lines``; ``None`` drops the connection."""

    def __init__(self, lines: asyncio.Queue[bytes | None]) -> None:
        self.lines = lines

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b"{}\n"
        while (item := await self.lines.get()) is not None:
            yield item
        raise httpx.ReadError("connection reset")


def eval_event(ev: dict[str, Any], index: int) -> dict[str, Any]:
    return {
        "Topic": "Evaluation",
        "Type": "JobDeregistered",
        "Key": ev["ID"],
        "Namespace": "default",
        "Index": index,
        "Payload": {"Evaluation": ev},
    }


async def until(done: Callable[[], bool]) -> None:
    for _ in range(500):
        if done():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("timed out")


async def test_a_live_stream_stands_in_for_the_backstop_lists_and_reports_a_purge(
    make_translator: MakeTranslator, sleeps: Sleeps
) -> None:
    """While the stream is connected: no blocking allocation query, a full resync only every
    ``backstop_live_interval`` (300 s on the translator's clock), no evaluation reads for an
    unplaced job (its reason comes as an Evaluation event), and a job purged by someone else
    — on Nomad 1.6.3 only a ``job-deregister`` evaluation says so — becomes ``Vanished``
    after one job read.  Once the stream drops, the blocking query is back (docs/design/
    nomad.md, "Change feed at rest")."""
    running = captured("running")
    job_a, alloc_a = running["job"], running["allocations"][0]
    unplaced = captured("unschedulable")
    job_p = unplaced["job"]
    t = await make_translator()
    clock = FakeClock()
    t.clock = FakeTime(sleep=sleeps, now=clock.now)
    lines: asyncio.Queue[bytes | None] = asyncio.Queue()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        nomad.get("/v1/jobs").mock(
            return_value=httpx.Response(200, json=[job_a, job_p], headers={"X-Nomad-Index": "100"})
        )
        nomad.get("/v1/nodes").mock(return_value=httpx.Response(200, json=[]))
        calls = {"list": 0, "blocking": 0}

        def allocations(request: httpx.Request) -> Any:
            if "index" in request.url.params:
                calls["blocking"] += 1
                return hang_forever(request)
            calls["list"] += 1
            return httpx.Response(200, json=[alloc_a], headers={"X-Nomad-Index": "100"})

        nomad.get("/v1/allocations").mock(side_effect=allocations)
        # no reason yet at the first resync (its evaluation is still pending), later one
        evals = nomad.get("/v1/evaluations", params={"status": "blocked"}).mock(
            side_effect=[
                httpx.Response(200, json=[]),
                httpx.Response(200, json=unplaced["evaluations"]),
            ]
        )
        job_read = nomad.get(f"/v1/job/{job_a['ID']}").mock(
            return_value=httpx.Response(404, text="job not found")
        )
        connects = 0

        def streams(request: httpx.Request) -> Any:
            nonlocal connects
            connects += 1
            if connects == 1:
                return httpx.Response(200, stream=QueueBody(lines))
            return hang_forever(request)

        nomad.get("/v1/event/stream").mock(side_effect=streams)
        it = cast(AsyncGenerator[WorkloadState | Vanished, None], t.changes())
        first = {(await next_state(it)).ref.name for _ in range(2)}  # type: ignore[union-attr]
        assert first == {"running", "unschedulable"}
        await until(t.change_stream_live)
        assert (calls, evals.call_count) == ({"list": 1, "blocking": 0}, 1)  # the first resync

        await clock.advance(299)
        await lines.put(b"{}\n")  # a heartbeat wakes the check: not due yet
        await asyncio.sleep(0.05)
        assert calls == {"list": 1, "blocking": 0}
        await clock.advance(2)
        await lines.put(b"{}\n")
        await until(lambda: calls["list"] == 2)  # 301 s: one full resync, no blocking query
        await t.list()  # the controller's list while the stream is live
        assert calls == {"list": 3, "blocking": 0} and evals.call_count == 1

        deregister = {"ID": "e-1", "JobID": job_a["ID"], "Namespace": "default"}
        await lines.put(line(105, eval_event({**deregister, "TriggeredBy": "job-deregister"}, 105)))
        gone = await next_state(it)
        assert isinstance(gone, Vanished) and gone.ref.name == "running"
        assert job_read.call_count == 1

        await lines.put(None)  # the stream drops; its reconnect hangs
        await until(lambda: calls["blocking"] == 1)
        assert not t.change_stream_live()
        states = {s.ref.name: s for s in await t.list()}
        assert evals.call_count == 2  # without the stream the list asks them
        assert states["unschedulable"].reason == "Unschedulable"
        await it.aclose()


async def test_a_job_missing_from_the_resync_after_a_reconnect_is_vanished(
    make_translator: MakeTranslator,
) -> None:
    """A Nomad that lost its state (kill -9, restart) while the stream reconnected: the resync
    after the reconnect no longer lists the job, and the feed says so at once rather than
    leave it to the controller's next list (300 s apart while the stream is live)."""
    running = captured("running")
    job_a, alloc_a = running["job"], running["allocations"][0]
    t = await make_translator()
    lines: asyncio.Queue[bytes | None] = asyncio.Queue()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        listed = [job_a]
        nomad.get("/v1/jobs").mock(
            side_effect=lambda request: httpx.Response(
                200, json=list(listed), headers={"X-Nomad-Index": "100"}
            )
        )
        nomad.get("/v1/nodes").mock(return_value=httpx.Response(200, json=[]))

        def allocations(request: httpx.Request) -> Any:
            if "index" in request.url.params:
                return hang_forever(request)
            return httpx.Response(
                200, json=[alloc_a] if listed else [], headers={"X-Nomad-Index": "100"}
            )

        nomad.get("/v1/allocations").mock(side_effect=allocations)
        nomad.get("/v1/event/stream").mock(
            side_effect=lambda request: httpx.Response(200, stream=QueueBody(lines))
        )
        it = cast(AsyncGenerator[WorkloadState | Vanished, None], t.changes())
        first = await next_state(it)
        assert isinstance(first, WorkloadState) and first.ref.name == "running"
        listed.clear()  # Nomad comes back empty
        await lines.put(None)  # the stream drops and reconnects: a resync
        gone = await next_state(it)
        assert isinstance(gone, Vanished) and gone.ref.uid == first.ref.uid
        await it.aclose()


async def test_the_reasons_of_many_unplaced_jobs_cost_one_request_per_namespace(
    make_translator: MakeTranslator,
) -> None:
    """A resync after a reconnect in a burst finds most jobs unplaced (queued in Nomad's
    scheduler): their reasons come from one list of the namespace's blocked evaluations, each
    job the words of its own (a 5,000-pod burst asked 0.96 evaluation lists per pod, one per
    unplaced job)."""
    unplaced = captured("unschedulable")
    t = await make_translator()
    jobs = []
    for i in range(3):
        job = copy.deepcopy(unplaced["job"])
        job["ID"] = f"{job['ID']}-{i}"
        jobs.append(job)
    blocked = [
        {**ev, "JobID": jobs[0]["ID"]}
        for ev in unplaced["evaluations"]
        if ev["Status"] == "blocked"
    ]
    views = [t.book.merge_job(job, region="") for job in jobs]
    with respx.mock(base_url=ADDRESS) as nomad:
        route = nomad.get("/v1/evaluations", params={"status": "blocked"}).mock(
            return_value=httpx.Response(200, json=blocked)
        )
        await blocked_placements(t.client, [v for v in views if v is not None])
    assert route.call_count == 1
    assert route.calls.last.request.url.params["namespace"] == "default"
    texts = [v.placement if v is not None else None for v in views]
    assert texts[0] and 'Dimension "cpu" exhausted' in texts[0]
    assert texts[1:] == ["", ""]  # still queued: no reason yet, asked again at the next list
