"""EventRecorder: core/v1 Event shape, aggregation of repeats, never raising."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from gateway.kube.client import KubeClient, KubeConfig, RetryPolicy
from gateway.kube.events import EventRecorder
from vkgate_core.clock import FakeClock

POD = {"metadata": {"namespace": "team-a", "name": "web", "uid": "pod-uid", "resourceVersion": "5"}}


class Server:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self.codes: list[int] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, request.url.path, body))
        code = self.codes.pop(0) if self.codes else (201 if request.method == "POST" else 200)
        if code >= 400:
            return httpx.Response(
                code, json={"kind": "Status", "code": code, "reason": "X", "message": "no"}
            )
        return httpx.Response(code, json=body or {})


def make_client(server: Server, clock: FakeClock, *, qps: float, burst: int = 100) -> KubeClient:
    return KubeClient(
        KubeConfig(server="https://k"),
        transport=httpx.MockTransport(server.handler),
        clock=clock,
        qps=qps,
        burst=burst,
        retry=RetryPolicy(delays=()),
    )


async def run_for(clock: FakeClock, seconds: float, step: float = 0.1) -> None:
    """Advance fake time in steps, letting the senders' round trips finish in between."""
    import asyncio

    for _ in range(round(seconds / step)):
        await clock.advance(step)
        for _ in range(20):
            await asyncio.sleep(0)


@pytest.fixture
def server() -> Server:
    return Server()


@pytest.fixture
def recorder(server: Server) -> EventRecorder:
    clock = FakeClock()
    client = make_client(server, clock, qps=0)
    return EventRecorder(client, component="vkgate", host="vk-1", clock=clock)


async def test_first_event_is_posted_with_kubelet_shape(recorder: EventRecorder, server: Server):
    await recorder.record(
        POD,
        type="Warning",
        reason="Failed",
        message="image not found",
        field_path="spec.containers{app}",
    )
    method, path, body = server.requests[0]
    assert (method, path) == ("POST", "/api/v1/namespaces/team-a/events")
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "team-a",
        "name": "web",
        "uid": "pod-uid",
        "resourceVersion": "5",
        "fieldPath": "spec.containers{app}",
    }
    assert body["source"] == {"component": "vkgate", "host": "vk-1"}
    assert (body["type"], body["reason"], body["message"], body["count"]) == (
        "Warning",
        "Failed",
        "image not found",
        1,
    )
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-03-01T10:00:00Z"
    assert body["metadata"]["name"].startswith("web.")


async def test_repeats_are_aggregated_with_patch(recorder: EventRecorder, server: Server):
    for _ in range(3):
        await recorder.record(POD, type="Normal", reason="Pulled", message="pulled nginx")
    assert [r[0] for r in server.requests] == ["POST", "PATCH", "PATCH"]
    name = server.requests[0][2]["metadata"]["name"]
    assert server.requests[2][1] == f"/api/v1/namespaces/team-a/events/{name}"
    assert server.requests[2][2]["count"] == 3
    await recorder.record(POD, type="Normal", reason="Pulled", message="pulled redis")
    assert server.requests[-1][0] == "POST"  # a different message is a different event


async def test_expired_event_starts_a_new_series(recorder: EventRecorder, server: Server):
    await recorder.record(POD, type="Normal", reason="Started", message="started")
    server.codes = [404]
    await recorder.record(POD, type="Normal", reason="Started", message="started")
    assert [r[0] for r in server.requests] == ["POST", "PATCH", "POST"]


async def test_never_raises_and_failed_post_is_not_aggregated(
    recorder: EventRecorder, server: Server
):
    server.codes = [500]
    await recorder.record(POD, type="Normal", reason="Started", message="started")  # no exception
    await recorder.record(POD, type="Normal", reason="Started", message="started")
    assert [r[0] for r in server.requests] == ["POST", "POST"]


async def test_node_events_go_to_default_namespace(recorder: EventRecorder, server: Server):
    node = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "vk-1", "uid": "n-uid"}}
    await recorder.record(node, type="Normal", reason="NodeReady", message="ready")
    _, path, body = server.requests[0]
    assert path == "/api/v1/namespaces/default/events"
    assert body["involvedObject"]["kind"] == "Node"
    assert "namespace" not in body["involvedObject"]


async def test_events_have_their_own_budget_and_do_not_drain_the_clients(server: Server):
    """A burst of Events must not queue the status writes behind it (the kubelet keeps
    eventRecordQPS/eventBurst apart from its API QPS): events spend only their own tokens."""
    import asyncio

    clock = FakeClock()
    client = make_client(server, clock, qps=1, burst=1)
    recorder = EventRecorder(client, host="vk-1", clock=clock, qps=10, burst=5)
    for i in range(5):  # five events within the event burst: no waiting at all
        await asyncio.wait_for(
            recorder.record(POD, type="Normal", reason=f"R{i}", message="m"), timeout=1
        )
    # the client's single token is still there for a status write, without advancing time
    await asyncio.wait_for(client.patch("/api/v1/namespaces/team-a/pods/web/status", {}), 1)
    assert [m for m, _, _ in server.requests] == ["POST"] * 5 + ["PATCH"]
    # the sixth event waits for the event bucket only
    sixth = asyncio.ensure_future(recorder.record(POD, type="Normal", reason="R5", message="m"))
    await asyncio.sleep(0)
    assert not sixth.done()
    await clock.advance(0.1)
    await asyncio.wait_for(sixth, timeout=1)
    assert len(server.requests) == 7


async def test_started_recorder_never_blocks_the_caller_and_stop_drains(server: Server):
    """With the sender running, record() only enqueues: a pod sync never waits for its Events
    even when the event budget is spent; stop() writes what is still queued."""
    import asyncio

    clock = FakeClock()
    client = make_client(server, clock, qps=0)
    recorder = EventRecorder(client, host="vk-1", clock=clock, qps=1, burst=1)
    await recorder.start()
    for i in range(3):  # budget for one; the caller must not wait for the other two
        await asyncio.wait_for(
            recorder.record(POD, type="Normal", reason=f"R{i}", message="m"), timeout=0.5
        )
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(server.requests) == 1  # the sender waits on the event bucket, not the caller
    await clock.advance(2)
    stopping = asyncio.ensure_future(recorder.stop(drain_seconds=1))
    await clock.advance(1)
    await asyncio.wait_for(stopping, timeout=2)
    assert [b["reason"] for _, _, b in server.requests] == ["R0", "R1", "R2"]


async def test_full_queue_drops_with_a_count_instead_of_blocking(server: Server):
    clock = FakeClock()
    client = make_client(server, clock, qps=0)
    recorder = EventRecorder(client, host="vk-1", clock=clock, qps=1, burst=1, queue_size=2)
    await recorder.start()
    for i in range(6):
        await recorder.record(POD, type="Normal", reason=f"R{i}", message="m")
    assert (
        recorder.counts["dropped"] == 4
    )  # two fit in the queue (none sent yet: no await in between)
    await recorder.stop(drain_seconds=0)
    # the bucket let one through; the other was still queued at stop: dropped, counted
    assert (recorder.counts["posted"], recorder.counts["dropped"]) == (1, 5)


async def test_dropped_events_are_a_prometheus_counter(server: Server):
    from prometheus_client.parser import text_string_to_metric_families

    from gateway.kubelet.service import add_component_collectors
    from gateway.metrics import Metrics

    clock = FakeClock()
    client = make_client(server, clock, qps=0)
    recorder = EventRecorder(client, host="vk-1", clock=clock, qps=1, burst=1, queue_size=2)
    metrics = Metrics(process=False)
    add_component_collectors(metrics, events=recorder)
    await recorder.start()
    for i in range(5):
        await recorder.record(POD, type="Normal", reason=f"R{i}", message="m")
    await recorder.record(POD, type="Normal", reason="R0", message="m")
    await run_for(clock, 10)
    await recorder.stop(drain_seconds=1)

    def outcomes() -> dict[str, float]:
        text = metrics.render().decode()
        [fam] = [f for f in text_string_to_metric_families(text) if f.name == "vkgate_events"]
        return {s.labels["outcome"]: s.value for s in fam.samples if s.name.endswith("_total")}

    assert outcomes() == {"posted": 2.0, "aggregated": 0.0, "failed": 0.0, "dropped": 4.0}
    assert [m for m, _, _ in server.requests] == ["POST", "POST"]


async def test_every_event_of_a_1000_pod_burst_arrives_within_the_event_budget(server: Server):
    """4 Events per pod for 1,000 pods, recorded at once: all are written (none dropped),
    at the event bucket's pace (50/s after a burst of 100), never faster."""

    clock = FakeClock()
    client = make_client(server, clock, qps=0)
    recorder = EventRecorder(client, host="vk-1", clock=clock, qps=50, burst=100)
    await recorder.start()
    pods = [
        {"metadata": {"namespace": "ns", "name": f"p{i}", "uid": f"uid-{i}"}} for i in range(1000)
    ]
    for reason in ("Accepted", "Created", "Started", "Killing"):
        for p in pods:
            await recorder.record(p, type="Normal", reason=reason, message=reason.lower())
    assert recorder.counts["dropped"] == 0
    await run_for(clock, 30)
    sent_at_30s = len(server.requests)
    assert 100 + 50 * 29 <= sent_at_30s <= 100 + 50 * 30 + 4  # the bucket, not more
    await run_for(clock, 60)
    await recorder.stop(drain_seconds=1)
    posts = [b for m, _, b in server.requests if m == "POST"]
    assert len(posts) == 4000
    assert {(b["involvedObject"]["name"], b["reason"]) for b in posts} == {
        (p["metadata"]["name"], r)
        for p in pods
        for r in ("Accepted", "Created", "Started", "Killing")
    }
    assert recorder.counts["dropped"] == 0 and recorder.counts["posted"] == 4000


async def test_several_senders_write_concurrently_and_repeats_stay_in_order():
    """Throughput: with a slow API server several Events are in flight at once (one sender
    would be bound by the round trip).  Repeats of one Event go through one sender, so they
    aggregate (1 POST + PATCHes), never race into two Events."""
    import asyncio

    gate = asyncio.Event()
    in_flight = 0
    peak = 0
    requests: list[tuple[str, str]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await gate.wait()
        in_flight -= 1
        body = json.loads(request.content)
        requests.append((request.method, body.get("reason", "")))
        return httpx.Response(201 if request.method == "POST" else 200, json=body)

    clock = FakeClock()
    client = KubeClient(
        KubeConfig(server="https://k"),
        transport=httpx.MockTransport(handler),
        clock=clock,
        qps=0,
        retry=RetryPolicy(delays=()),
    )
    recorder = EventRecorder(client, host="vk-1", clock=clock, qps=0, senders=4)
    await recorder.start()
    pods = [{"metadata": {"namespace": "ns", "name": f"p{i}", "uid": f"u{i}"}} for i in range(40)]
    for p in pods:
        await recorder.record(p, type="Normal", reason="Started", message="m")
    for _ in range(3):
        await recorder.record(pods[0], type="Warning", reason="BackOff", message="again")
    for _ in range(20):
        await asyncio.sleep(0)
    assert peak == 4
    gate.set()
    await recorder.stop(drain_seconds=5)
    assert len([r for r in requests if r == ("POST", "Started")]) == 40
    assert [m for m, r in requests if r == "BackOff"] == ["POST"]
    assert recorder.counts["aggregated"] == 2


async def test_senders_hold_events_back_while_pod_work_is_due(server: Server) -> None:
    """An Event waits (at most YIELD_MAX) while ``busy()``; then it is written."""
    from gateway.kube.events import YIELD_MAX

    clock = FakeClock()
    rec = EventRecorder(make_client(server, clock, qps=0), host="vk-1", clock=clock)
    busy = [True]
    rec.busy = lambda: busy[0]
    await rec.start()
    await rec.record(POD, type="Normal", reason="Created", message="m")
    await run_for(clock, YIELD_MAX / 2)
    assert server.requests == []  # held back: pod work is due
    busy[0] = False
    await run_for(clock, 0.2)
    assert [b["reason"] for _, _, b in server.requests] == ["Created"]

    busy[0] = True  # pod work never ends: the Event goes out after YIELD_MAX anyway
    await rec.record(POD, type="Normal", reason="Started", message="m")
    await run_for(clock, YIELD_MAX + 0.3)
    assert [b["reason"] for _, _, b in server.requests] == ["Created", "Started"]
    await rec.stop()


class _Obj(dict[str, Any]):
    """A dict that can be weakly referenced: to see whether anything still holds it."""


async def test_a_queued_event_does_not_hold_its_pod(server: Server) -> None:
    """A queued Event keeps the involvedObject reference, not the pod: at 10,000 pods the
    queue held 40,000 Events and with them a pod version each (docs/benchmarks.md)."""
    import gc
    import weakref

    clock = FakeClock()
    client = make_client(server, clock, qps=0)
    recorder = EventRecorder(client, host="vk-1", clock=clock, qps=1, burst=1)
    await recorder.start()
    meta = _Obj(namespace="team-a", name="web", uid="pod-uid", resourceVersion="5")
    pod = _Obj(metadata=meta, spec={"containers": [{"name": "app", "image": "x" * 4096}]})
    pod_ref, meta_ref = weakref.ref(pod), weakref.ref(meta)
    for reason in ("Scheduled", "Pulled", "Created", "Started"):
        await recorder.record(pod, type="Normal", reason=reason, message="m", field_path="")
    assert recorder._queued == 4  # queued, none written: the bucket lets one go, no await yet
    del pod, meta
    gc.collect()
    assert pod_ref() is None and meta_ref() is None
    await run_for(clock, 5)
    await recorder.stop(drain_seconds=0)
    reasons = sorted(b["reason"] for _, _, b in server.requests)  # several senders: any order
    assert reasons == ["Created", "Pulled", "Scheduled", "Started"]
    assert server.requests[0][2]["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "team-a",
        "name": "web",
        "uid": "pod-uid",
        "resourceVersion": "5",
    }


def test_the_default_queue_holds_the_events_of_10000_pods() -> None:
    from gateway.config import KubeSettings

    assert KubeSettings().event_queue >= 40_000
    assert EventRecorder(object(), clock=FakeClock()).queue_size >= 40_000  # type: ignore[arg-type]
