"""Mass graceful delete: the fast re-list (``DELETING_INTERVAL``) only without a live change
stream (docs/design/pod-sync.md, "Waiting for a stop").  1,000 pods whose backend takes 20 s to
stop, on a fake clock, counting the backend's list calls while they stop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pods_fakes import FakeKube, Polled, run_for, settle, sim_context

from gateway.config import Settings
from gateway.kube.events import EventRecorder
from gateway.pods.controller import PodController
from translators.base import StreamHealth, Vanished, WorkloadState
from translators.simulated import SimulatedTranslator
from vkgate_core.clock import FakeClock

NODE = "vk-mass"
PODS = 1000
STOP_SECONDS = 20


class Streamed(Polled):
    """The simulated backend with its change stream and a switch for the stream's health."""

    def __init__(self, inner: SimulatedTranslator) -> None:
        super().__init__(inner)
        self.live = True

    def changes(self) -> AsyncIterator[WorkloadState | Vanished]:
        return self.inner.changes()

    def change_stream_live(self) -> bool:
        return self.live


async def until(clock: FakeClock, done: Any, limit: float = 60.0) -> None:
    """Advance fake time until ``done()`` (1,000 pods take more loop rounds than seconds)."""
    waited = 0.0
    while not done():
        assert waited < limit
        await run_for(clock, 1.0, step=1.0)
        waited += 1.0


async def start(
    tmp_path: Path, streamed: bool, pods: int = PODS
) -> tuple[PodController, FakeKube, Any]:
    clock = FakeClock()
    kube = FakeKube(clock)
    s = Settings()
    s.node.name = NODE
    s.pods.workers = 8
    s.pods.reconcile_interval = 10.0
    sim = SimulatedTranslator(
        sim_context(clock, NODE), state_file=str(tmp_path / "sim.json"), start_delay=0.5
    )
    translator: Polled = Streamed(sim) if streamed else Polled(sim)
    events = EventRecorder(kube, host=NODE, clock=clock)  # type: ignore[arg-type]
    ctl = PodController(kube, translator, events, s, clock=clock)  # type: ignore[arg-type]
    await ctl.start()
    await settle()
    for i in range(pods):
        kube.add(
            {
                "kind": "Pod",
                "metadata": {
                    "name": f"p{i}",
                    "annotations": {"vkgate.io/sim-stop-seconds": str(STOP_SECONDS)},
                },
                "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "x"}]},
            }
        )
    await until(
        clock,
        lambda: all(kube.pod(f"p{i}")["status"].get("phase") == "Running" for i in range(pods)),  # type: ignore[index]
    )
    translator.lists_before_delete = translator.inner.calls["list"]  # type: ignore[attr-defined]
    for i in range(pods):
        kube.user_delete(f"p{i}", grace=60)
    # the deletes are sent: every pod waits for its stop
    await until(clock, lambda: ctl.stats["backend_deletes"] == pods)
    assert ctl.actor.acts.stopping()
    return ctl, kube, translator


@pytest.mark.parametrize(
    ("streamed", "pods"), [(True, PODS), (False, 100)], ids=["stream-1000", "no-stream-100"]
)
async def test_pending_deletes_relist_every_second_only_without_a_live_stream(
    tmp_path: Path, streamed: bool, pods: int
) -> None:
    ctl, kube, translator = await start(tmp_path, streamed, pods)
    assert isinstance(translator, StreamHealth) is streamed
    try:
        lists = translator.inner.calls["list"]
        await run_for(ctl.clock, 14, step=1.0)  # < STOP_SECONDS: all still stopping
        during = translator.inner.calls["list"] - lists
        assert all(kube.pod(f"p{i}") is not None for i in range(pods))
        if streamed:
            assert during <= 2  # the normal 10 s interval, not one per second
        else:
            assert during >= 13  # no stream: DELETING_INTERVAL (1 s)
        # past STOP_SECONDS: the stops are seen (by the stream, or the lists)
        await until(ctl.clock, lambda: all(kube.pod(f"p{i}") is None for i in range(pods)), 20)
    finally:
        await ctl.stop()


async def test_a_stream_that_goes_down_brings_the_fast_relist_back(tmp_path: Path) -> None:
    ctl, _, translator = await start(tmp_path, True, pods=50)
    try:
        lists = translator.inner.calls["list"]
        await run_for(ctl.clock, 5, step=1.0)
        assert translator.inner.calls["list"] - lists <= 1
        translator.live = False  # e.g. Nomad's event stream reconnecting
        lists = translator.inner.calls["list"]
        await run_for(ctl.clock, 5, step=1.0)
        assert translator.inner.calls["list"] - lists >= 4  # within a second of the drop
    finally:
        await ctl.stop()


async def test_a_live_stream_lists_rarely_and_reports_a_vanished_workload_at_once(
    tmp_path: Path,
) -> None:
    """With the stream connected the controller lists every ``streamed_reconcile_interval``
    (300 s), not every ``reconcile_interval``; a workload deleted behind the agent's back
    arrives as ``Vanished`` and its pod is handled at once, as a list would (docs/design/
    pod-sync.md, "Lists while the stream is live")."""
    clock = FakeClock()
    kube = FakeKube(clock)
    s = Settings()
    s.node.name = NODE
    s.pods.reconcile_interval = 5.0
    sim = SimulatedTranslator(
        sim_context(clock, NODE), state_file=str(tmp_path / "sim.json"), start_delay=0.5
    )
    translator = Streamed(sim)
    events = EventRecorder(kube, host=NODE, clock=clock)  # type: ignore[arg-type]
    ctl = PodController(kube, translator, events, s, clock=clock)  # type: ignore[arg-type]
    await ctl.start()
    await settle()
    try:
        for i in range(3):
            kube.add(
                {
                    "kind": "Pod",
                    "metadata": {"name": f"p{i}"},
                    "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "x"}]},
                }
            )
        await until(
            clock,
            lambda: all(kube.pod(f"p{i}")["status"].get("phase") == "Running" for i in range(3)),  # type: ignore[index]
        )
        lists = sim.calls["list"]
        await run_for(clock, 120, step=1.0)
        assert sim.calls["list"] - lists <= 1  # 24 at the 5 s interval (one: the first wait)
        translator.live = False
        await run_for(clock, 20, step=1.0)
        assert sim.calls["list"] - lists >= 3  # the stream is down: every 5 s again
        translator.live = True
        await run_for(clock, 6, step=1.0)  # the loop picks the long interval up again
        lists, creates = sim.calls["list"], sim.calls["create"]
        uid = kube.pod("p1")["metadata"]["uid"]  # type: ignore[index]
        del sim._records[uid]  # someone deleted the workload
        sim._touch(uid)
        # the pod (restartPolicy Always) gets a new workload within a few seconds, no list
        await until(clock, lambda: sim.calls["create"] > creates, 10)
        assert sim.calls["list"] == lists
        # gone within VANISH_GRACE of its create (a Nomad that lost its state a second after
        # the pod started): left to a list, which comes at once, not 300 s later
        kube.add(
            {
                "kind": "Pod",
                "metadata": {"name": "young"},
                "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "x"}]},
            }
        )
        await until(clock, lambda: kube.pod("young")["status"].get("phase") == "Running", 10)  # type: ignore[index]
        lists, creates = sim.calls["list"], sim.calls["create"]
        uid = kube.pod("young")["metadata"]["uid"]  # type: ignore[index]
        del sim._records[uid]
        sim._touch(uid)
        await until(clock, lambda: sim.calls["create"] > creates, 10)
        assert sim.calls["list"] > lists
    finally:
        await ctl.stop()


async def test_a_streamed_mass_delete_asks_for_no_list(tmp_path: Path) -> None:
    """With the stream live a backend delete asks for no list: neither the stop (the stream
    reports its end) nor the final delete's purge.  Each used to ask for one soon, a full
    backend list every ``MIN_LIST_SPACING`` (0.5 s) through a mass delete — against Nomad a
    job and an allocation list of every pod, back to back (docs/design/nomad.md, "Requests per
    pod")."""
    ctl, kube, translator = await start(tmp_path, True, pods=200)
    try:
        lists = translator.lists_before_delete
        await until(ctl.clock, lambda: all(kube.pod(f"p{i}") is None for i in range(200)), 40)
        assert translator.inner.calls["list"] - lists <= 1  # was 3 here (a list per 0.5 s)
    finally:
        await ctl.stop()
