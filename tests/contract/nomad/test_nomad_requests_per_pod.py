"""Nomad requests per pod (docs/design/nomad.md, "Requests per pod"): one create and one delete
against the stateful fake Nomad, counted by the client's own counter (``NomadClient.requests``,
exposed as ``vkgate_backend_requests_total``).  With the event stream up, a delete's status
comes from the stream (its allocation events are fed as the stream would deliver them)."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1] / "common"))
from harness_nomad import NomadHarness, nomad
from nomad_fixtures import ADDRESS

from translators.api import TranslatorContext
from translators.base import BackendConflict
from translators.nomad import NomadTranslator
from vkgate_core.clock import FakeClock

pytestmark = pytest.mark.contract


@pytest.fixture
async def h(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[NomadHarness]:
    async with nomad(tmp_path, monkeypatch) as harness:
        assert isinstance(harness, NomadHarness)
        yield harness


async def translator(h: NomadHarness, clock: FakeClock) -> NomadTranslator:
    """On a fake clock whose sleeps wait for ``advance`` (a wait for the stream really waits)."""
    t = NomadTranslator(
        TranslatorContext(node_name=h.node_name, settings={"address": ADDRESS}, clock=clock),
        environ={},
    )
    await h.made.started(t)
    await t.create(h.pod("warm"))  # the first create reads the client nodes' CPU speed once
    return t


def stream_events(h: NomadHarness, uid: str) -> list[dict[str, Any]]:
    """What Nomad's event stream carries for the pod's job and allocations now."""
    events: list[dict[str, Any]] = []
    for job in h.fake.jobs_of(uid):
        jid, ns = job["ID"], job["Namespace"]
        events.append(
            {"Topic": "Job", "Type": "JobRegistered", "Key": jid, "Namespace": ns,
             "Index": job["ModifyIndex"], "Payload": {"Job": job}}
        )  # fmt: skip
    for a in h.fake.allocs_of(uid):  # a purged job's too: they still stop
        events.append(
            {"Topic": "Allocation", "Type": "AllocationUpdated", "Key": a["ID"],
             "Namespace": a["Namespace"], "Index": a["ModifyIndex"], "Payload": {"Allocation": a}}
        )  # fmt: skip
    return events


def held(t: NomadTranslator, uid: str) -> bool:
    """The translator still follows the pod's job (purged, its allocations stopping)."""
    return any(v.ref.uid == uid for v in t.book.views.values())


async def streamed_running_pod(
    h: NomadHarness, monkeypatch: pytest.MonkeyPatch, clock: FakeClock | None = None
) -> tuple[NomadTranslator, Any]:
    """A translator whose event stream counts as live, and a pod placed and Running on it."""
    t = await translator(h, clock or FakeClock())
    monkeypatch.setattr(t, "change_stream_live", lambda: True)
    pod = h.pod("web")
    await t.create(pod)
    h.fake.advance()
    await t._apply_events(stream_events(h, pod.uid), "")
    return t, pod


async def settle(rounds: int = 30) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_with_the_event_stream_a_create_and_a_delete_cost_at_most_3_requests_each(
    h: NomadHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    t = await translator(h, clock)
    monkeypatch.setattr(t, "change_stream_live", lambda: True)
    pod = h.pod("web")
    before = Counter(t.client.requests)
    await t.create(pod)
    create = Counter(t.client.requests) - before
    h.fake.advance()  # placed and running: the stream says so
    await t._apply_events(stream_events(h, pod.uid), "")
    h.fake.sigterm_ends = False  # the task takes a moment to stop
    before = Counter(t.client.requests)
    await t.delete(pod.ref, grace_seconds=30)
    await settle()
    delete = Counter(t.client.requests) - before
    assert h.workloads(pod.uid) == 0  # purged at once ...
    assert held(t, pod.uid)  # ... its allocation still stopping: the view waits for the stream
    listed = [[c.state for c in s.containers] for s in await t.list() if s.ref.uid == pod.uid]
    assert listed == [["running"]]  # listed with it, not vanished
    before_list = Counter(t.client.requests)
    h.fake.advance()  # the task ended
    await t._apply_events(stream_events(h, pod.uid), "")  # the allocation's event
    await settle()
    assert not held(t, pod.uid)  # forgotten once ended, without waiting on a timer
    assert create == {("POST", "/jobs"): 1}  # registered only if new: no read first
    assert delete == {("DELETE", "/job/:job_id"): 1}  # one purge
    assert Counter(t.client.requests) == before_list  # the end cost nothing
    assert sum(create.values()) <= 3 and sum(delete.values()) <= 3
    # the pod's final delete (the controller's purge step once it saw the end): nothing left
    before = Counter(t.client.requests)
    await t.delete(pod.ref, grace_seconds=0)
    assert Counter(t.client.requests) == before


async def test_the_final_delete_after_the_end_sends_nothing(
    h: NomadHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream's event that shows the purged job's allocation ended wakes both the
    background wait and the controller, whose plan deletes again: the job was purged by the
    first delete, so neither sends a request (at a 1,000-pod mass delete 38 % of the jobs were
    once purged twice)."""
    t, pod = await streamed_running_pod(h, monkeypatch)
    h.fake.sigterm_ends = False
    await t.delete(pod.ref, grace_seconds=30)
    await settle()
    before = Counter(t.client.requests)
    h.fake.advance()  # the allocation ends ...
    await t._apply_events(stream_events(h, pod.uid), "")
    await t.delete(pod.ref, grace_seconds=0)  # ... and the final delete runs at once
    await settle()
    assert not held(t, pod.uid) and not t._purges.pending[next(iter(t._purges.pending))].cancelled()
    assert Counter(t.client.requests) == before


async def test_without_the_stream_a_delete_asks_nomad_when_the_allocations_end(
    h: NomadHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    t = await translator(h, clock)
    pod = h.pod("web")
    await t.create(pod)
    h.fake.advance()
    h.fake.sigterm_ends = False
    real = t.client.blocking_get

    async def blocking_get(*args: Any, **kw: Any) -> Any:
        await asyncio.sleep(0.01)  # Nomad holds the query until its index moves
        return await real(*args, **kw)

    monkeypatch.setattr(t.client, "blocking_get", blocking_get)
    before = Counter(t.client.requests)
    await t.delete(pod.ref, grace_seconds=30)
    await settle()
    assert held(t, pod.uid)  # still stopping (its allocation read after the purge says so)
    h.fake.advance()  # the task ended: the blocking query answers
    for _ in range(100):
        if not held(t, pod.uid):
            break
        await asyncio.sleep(0.01)
    delete = Counter(t.client.requests) - before
    assert not held(t, pod.uid) and h.workloads(pod.uid) == 0
    # purge, read the allocations, wait (blocking queries) for their end; the job was
    # registered here without a Variable, so none is deleted
    assert delete[("DELETE", "/job/:job_id")] == 1
    assert set(delete) == {("DELETE", "/job/:job_id"), ("GET", "/job/:job_id/allocations")}


async def test_a_job_registered_elsewhere_still_has_its_variable_deleted(h: NomadHarness) -> None:
    """After a restart this process does not know whether the job has a Variable: it deletes
    it as before (a 404 is fine)."""
    clock = FakeClock()
    t = await translator(h, clock)
    pod = h.pod("web")
    await t.create(pod)
    h.fake.advance()
    t._variables.no_variable.clear()  # as after a restart
    before = Counter(t.client.requests)
    await t.delete(pod.ref, grace_seconds=30)
    await settle()
    assert (Counter(t.client.requests) - before)[("DELETE", "/var/nomad/jobs/:job_id")] == 1


async def test_a_stop_waits_for_the_connected_stream_without_asking_nomad(
    h: NomadHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stopped allocation's end reaches the stream 25 s after the stop (a busy Nomad): no
    blocking allocation query while the stream stays connected; once it drops, one query
    finds the end and the job is purged."""
    clock = FakeClock()
    t = await translator(h, clock)
    live = {"stream": True}
    monkeypatch.setattr(t, "change_stream_live", lambda: live["stream"])
    pod, late = h.pod("web"), h.pod("late")
    for p in (pod, late):
        await t.create(p)
    h.fake.advance()
    for p in (pod, late):
        await t._apply_events(stream_events(h, p.uid), "")
    h.fake.sigterm_ends = False
    before = Counter(t.client.requests)
    for p in (pod, late):
        await t.delete(p.ref, grace_seconds=60)
    for _ in range(5):  # 25 s
        await clock.advance(5)
        await settle()
    assert Counter(t.client.requests) - before == {("DELETE", "/job/:job_id"): 2}  # the purges
    h.fake.advance()  # both tasks end; only one's event arrives before the stream drops
    await t._apply_events(stream_events(h, pod.uid), "")  # the end, on the stream
    await settle()
    assert not held(t, pod.uid) and held(t, late.uid)
    live["stream"] = False  # dropped before the other end arrived: Nomad is asked
    await clock.advance(30)
    await settle()
    assert not held(t, late.uid)
    assert Counter(t.client.requests) - before == {
        ("DELETE", "/job/:job_id"): 2,  # two purges
        ("GET", "/job/:job_id/allocations"): 1,
    }


async def test_an_end_the_stream_skipped_is_found_by_the_resync_after_the_reconnect(
    h: NomadHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reconnect resumes at the newest index known, past the events in between, so the
    resync that follows is what shows a stopping job's allocations ended: it wakes the
    purge's wait at once, not at its next 30 s check or the end of the grace period."""
    clock = FakeClock()
    t, pod = await streamed_running_pod(h, monkeypatch, clock)
    h.fake.sigterm_ends = False
    await t.delete(pod.ref, grace_seconds=60)
    await clock.advance(5)
    await settle()
    assert held(t, pod.uid)
    h.fake.advance()  # the task ends; its event falls in what the reconnect skips
    before = Counter(t.client.requests)
    await t._resync("", "default", False)  # the feed's resync after the reconnect
    await settle()
    assert not held(t, pod.uid)
    assert Counter(t.client.requests) - before == {
        ("GET", "/jobs"): 1,
        ("GET", "/allocations"): 1,
    }


async def test_at_the_end_of_a_short_grace_nomad_is_asked_before_a_sigkill(
    h: NomadHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream has not shown the stopped allocation's end when the delete's grace is over:
    one read of the allocations (not the view: the stream lags at a mass delete) finds it
    ended, so no SIGKILL is sent, and the end is pushed to the pod at once (without it the
    controller waited for the lagging stream, or reached the deadline: ForceDeleted)."""
    clock = FakeClock()
    t, pod = await streamed_running_pod(h, monkeypatch, clock)
    pushed: list[list[str]] = []

    class Feed:
        tasks: set[Any] = set()

        def push(self, views: Any) -> None:
            pushed.append([c.state for c in t._state(views[0]).containers])

    monkeypatch.setattr(t, "_feeds", [Feed()])
    before = Counter(t.client.requests)
    await t.delete(pod.ref, grace_seconds=5)  # the task ends at once; its event is late
    await settle()
    for _ in range(3):
        await clock.advance(2)
        await settle()
    assert not held(t, pod.uid)
    assert pushed == [["terminated"]]
    assert Counter(t.client.requests) - before == {
        ("DELETE", "/job/:job_id"): 1,  # the purge
        ("GET", "/job/:job_id/allocations"): 1,
    }


async def test_a_late_allocation_event_of_a_purged_job_reads_nothing(
    h: NomadHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The allocation of a job purged here still has events on the way (its client's last
    update, the garbage collection): not a job to look up (was a 404 read per pod)."""
    t, pod = await streamed_running_pod(h, monkeypatch)
    await t.delete(pod.ref, grace_seconds=30)
    await settle()
    late = stream_events(h, pod.uid)  # the stopped allocation's events
    await t._apply_events(late, "")
    await settle()
    assert h.workloads(pod.uid) == 0  # purged
    before = Counter(t.client.requests)
    touched, gone = await t._apply_events([e for e in late if e["Topic"] == "Allocation"], "")
    assert Counter(t.client.requests) == before and not touched and not gone


async def test_a_create_whose_job_exists_adopts_it_with_one_read(h: NomadHarness) -> None:
    """A restarted agent creates a pod it had created before: the register is refused
    (EnforceIndex), one read finds the pod's own job, and it is adopted, not registered
    again; a job of that ID held by another pod is a conflict; a stopped one is registered
    over."""
    first = await translator(h, FakeClock())
    pod = h.pod("web")
    await first.create(pod)
    version = h.fake.jobs_of(pod.uid)[0]["JobModifyIndex"]
    again = await translator(h, FakeClock())  # the restarted agent
    before = Counter(again.client.requests)
    state = await again.create(pod)
    assert Counter(again.client.requests) - before == {
        ("POST", "/jobs"): 1,
        ("GET", "/job/:job_id"): 1,
    }
    assert state.ref.uid == pod.uid
    [job] = h.fake.jobs_of(pod.uid)
    assert job["JobModifyIndex"] == version  # not registered again
    # stopped (a delete that never purged): registered over, running again
    job["Stop"] = True
    await again.create(pod)
    [job] = h.fake.jobs_of(pod.uid)
    assert job["Stop"] is False and job["JobModifyIndex"] > version
    # held by another pod (same ID): refused, the job left alone
    job["Meta"] = {**job["Meta"], "k8s.uid": "another-pod"}
    with pytest.raises(BackendConflict, match="belongs to another pod"):
        await again.create(pod)


async def test_requests_by_endpoint_are_an_own_metric(h: NomadHarness) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from gateway.kubelet.service import add_component_collectors
    from gateway.metrics import Metrics
    from translators.base import BackendRequests

    t = await translator(h, FakeClock())
    assert isinstance(t, BackendRequests)
    metrics = Metrics(process=False)
    add_component_collectors(metrics, backend=t)
    await t.create(h.pod("web"))
    text = metrics.render().decode()
    [fam] = [f for f in text_string_to_metric_families(text) if f.name == "vkgate_backend_requests"]
    got = {
        (s.labels["method"], s.labels["endpoint"]): s.value
        for s in fam.samples
        if s.name.endswith("_total")
    }
    assert got[("POST", "/jobs")] == 2.0  # the warm-up pod and this one
    assert all(not any(c.isdigit() for c in e) for _, e in got)  # endpoints, never IDs


async def test_a_mass_delete_without_the_stream_leaves_half_the_connections_free(
    h: NomadHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each purged job's end is awaited with a blocking query while the stream is down; 40 at
    once would hold every one of the 8 connections (creates and lists then wait for the pool):
    at most 4 run at a time."""
    clock = FakeClock()
    t = await translator(h, clock)
    pods = [h.pod(f"p{i}") for i in range(40)]
    for pod in pods:
        await t.create(pod)
    h.fake.advance()
    real = t.client.blocking_get
    waiting = peak = 0

    async def blocking_get(*args: Any, **kw: Any) -> Any:
        nonlocal waiting, peak
        waiting += 1
        peak = max(peak, waiting)
        try:
            await asyncio.sleep(0.01)  # Nomad holds the query a moment
            return await real(*args, **kw)
        finally:
            waiting -= 1

    monkeypatch.setattr(t.client, "blocking_get", blocking_get)
    h.fake.sigterm_ends = False  # the tasks take a moment to stop: the waits overlap
    await asyncio.gather(*(t.delete(pod.ref, grace_seconds=30) for pod in pods))
    await asyncio.sleep(0.05)
    h.fake.advance()
    for _ in range(200):
        if not any(held(t, pod.uid) for pod in pods):
            break
        await asyncio.sleep(0.01)
    assert not any(held(t, pod.uid) for pod in pods)  # every end seen in the end
    assert 1 < peak <= t.config.max_connections // 2 == 4


async def test_the_purges_own_deregister_evaluation_costs_no_job_read(
    h: NomadHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job-deregister evaluation of the agent's own purge can reach the stream consumer
    before the purge's answer reaches the agent: it is not news, and asks Nomad nothing (at a
    5,000-pod mass delete those reads filled the connection pool and stalled the delete)."""
    t, pod = await streamed_running_pod(h, monkeypatch)
    view = next(v for v in t.book.views.values() if v.ref.uid == pod.uid)
    real_call = t.client.call
    gone: list[Any] = []

    async def call(method: str, path: str, **kw: Any) -> Any:
        reply = await real_call(method, path, **kw)
        if method == "DELETE" and path.startswith("/job/"):  # the purge: its evaluation first
            ev = {"ID": "e-stop", "JobID": view.job_id, "Namespace": view.namespace}
            event = {
                "Topic": "Evaluation",
                "Type": "JobDeregistered",
                "Payload": {"Evaluation": {**ev, "TriggeredBy": "job-deregister"}},
            }
            gone.append((await t._apply_events([event], ""))[1])
        return reply

    monkeypatch.setattr(t.client, "call", call)
    before = Counter(t.client.requests)
    await t.delete(pod.ref, grace_seconds=30)
    assert gone == [()]
    assert Counter(t.client.requests) - before == {("DELETE", "/job/:job_id"): 1}


async def test_own_allocations_are_not_held_by_others_after_a_listing(h: NomadHarness) -> None:
    """Default region (""): a job Nomad describes (its JSON says "global": an event, or a
    read after a restart) is held under the key it is found by, so a listing keeps it and the
    capacity refresh does not count this node's own allocations as other jobs' (before, the
    listing dropped such views and the next capacity subtracted their allocations)."""
    first = await translator(h, FakeClock())
    pods = [h.pod(f"p{i}") for i in range(3)]
    for pod in pods:
        await first.create(pod)
    h.fake.advance()
    t = await translator(h, FakeClock())  # restarted: knows the jobs from Nomad's JSON
    for pod in pods:
        await t._apply_events(stream_events(h, pod.uid), "")
    await t.list()
    assert {v.ref.uid for v in t.book.views.values()} >= {p.uid for p in pods}
    # each holds the other's warm-up pod as another job's: the same size
    assert await t.capacity() == await first.capacity()
