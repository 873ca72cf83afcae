"""A pod whose template fails: Pending/TranslationFailed with one Event, a slow backstop retry
while the templates stay as they are, and an immediate retry (then create) when they change."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pods_fakes import FakeKube, Polled, run_for, settle, sim_context

from gateway.app import App
from gateway.config import Settings
from gateway.kube.events import EventRecorder
from gateway.pods.controller import PodController
from gateway.pods.translation import BACKSTOP, TranslationRetries
from translators.base import ResolvedPod, TranslationError, WorkloadState
from translators.render.engine import Renderer
from translators.simulated import SimulatedTranslator
from vkgate_core.clock import FakeClock

NODE = "vk-test"
TEMPLATE = "sim/pod.j2"
#: Fails on line 3 for a pod without the ``needed`` annotation (StrictUndefined).
BROKEN = '{\n  "name": "{{ pod.metadata.name }}",\n  "needs": "{{ pod.metadata.annotations[\'needed\'] }}"\n}\n'
FIXED = '{\n  "name": "{{ pod.metadata.name }}",\n  "needs": "{{ pod.metadata.annotations.get(\'needed\', \'\') }}"\n}\n'
#: A different error, on line 2.
OTHER = '{\n  "name": "{{ pod.metadata.nope }}"\n}\n'


class Templated(Polled):
    """The simulated backend behind a real template render (the simulated translator itself
    renders nothing); records when each pod was rendered."""

    def __init__(self, inner: SimulatedTranslator, renderer: Renderer, clock: FakeClock) -> None:
        super().__init__(inner)
        self.renderer = renderer
        self.clock = clock
        self.renders: list[tuple[str, float]] = []
        #: When set, a failed render waits for this before raising (a render in flight).
        self.gate: asyncio.Event | None = None

    async def create(self, pod: ResolvedPod) -> WorkloadState:
        self.renders.append((pod.name, self.clock.monotonic()))
        try:
            self.renderer.render(TEMPLATE, {"pod": pod.pod}, schema="")
        except TranslationError:
            if self.gate is not None:
                await self.gate.wait()
            raise
        return await super().create(pod)

    def times(self, name: str) -> list[float]:
        return [t for n, t in self.renders if n == name]


def settings() -> Settings:
    s = Settings()
    s.node.name = NODE
    s.pods.workers = 4
    s.pods.reconcile_interval = 5.0
    return s


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = FakeClock()
        self.kube = FakeKube(self.clock)
        self.renderer = Renderer(overlay={TEMPLATE: BROKEN})
        self.sim = SimulatedTranslator(
            sim_context(self.clock, NODE),
            state_file=str(tmp_path / "sim.json"),
            start_delay=1.0,
        )
        self.translator = Templated(self.sim, self.renderer, self.clock)
        self.ctl: PodController | None = None

    async def start(self) -> PodController:
        events = EventRecorder(self.kube, host=NODE, clock=self.clock)  # type: ignore[arg-type]
        self.ctl = PodController(
            self.kube,  # type: ignore[arg-type]
            self.translator,
            events,
            settings(),
            clock=self.clock,
            host_ip=lambda: "127.0.0.9",
            rng=random.Random(7),
        )
        self.renderer.subscribe(self.ctl.templates_changed)  # what gateway.app does
        await self.ctl.start()
        await settle()
        await self.clock.advance(0)
        await settle()
        assert self.ctl.ready.is_set()
        return self.ctl

    def failed_events(self, name: str) -> list[dict[str, Any]]:
        return [
            e for e in self.kube.events("TranslationFailed") if e["involvedObject"]["name"] == name
        ]

    def status(self, name: str) -> dict[str, Any]:
        p = self.kube.pod(name)
        assert p is not None
        status: dict[str, Any] = p["status"]
        return status


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    if harness.ctl is not None:
        await harness.ctl.stop()


def pod(name: str, **annotations: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "nginx:1.27"}]},
    }


async def test_template_error_is_pending_translation_failed_with_one_event(h: Harness) -> None:
    await h.start()
    h.kube.add(pod("web"))
    await run_for(h.clock, 2)
    status = h.status("web")
    assert status["phase"] == "Pending"
    assert status["reason"] == "TranslationFailed"
    assert "sim/pod.j2:3" in status["message"] and "needed" in status["message"]
    # kubectl get pods prints a container's waiting reason as STATUS, not ContainerCreating
    (app,) = status["containerStatuses"]
    assert app["state"]["waiting"] == {"reason": "TranslationFailed", "message": status["message"]}
    events = h.failed_events("web")
    assert len(events) == 1
    assert events[0]["type"] == "Warning" and events[0]["count"] == 1
    assert events[0]["message"] == status["message"]
    assert h.sim.calls["create"] == 0


async def test_no_hot_loop_while_the_template_stays_broken(h: Harness) -> None:
    await h.start()
    h.kube.add(pod("web"))
    await run_for(h.clock, 2)
    writes = h.kube.status_writes("web")
    await run_for(h.clock, 600, step=1.0)  # ten fake minutes, no template change
    times = h.translator.times("web")
    # backstop 60 s, 120 s, 240 s (+<=10 %): 4 renders in ten minutes, never two in a minute
    assert 3 <= len(times) <= 5
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(g >= BACKSTOP.base for g in gaps), gaps
    assert gaps == sorted(gaps)  # growing
    # one Event, not re-counted per retry; the unchanged status is not rewritten
    events = h.failed_events("web")
    assert len(events) == 1 and events[0]["count"] == 1
    assert h.kube.status_writes("web") == writes
    assert h.status("web")["reason"] == "TranslationFailed"
    # capped: about one render per 10 minutes; the Event is refreshed every 30 minutes
    before = len(h.translator.times("web"))
    await run_for(h.clock, 3000, step=5.0)
    later = len(h.translator.times("web")) - before
    assert 4 <= later <= 6, later
    assert h.failed_events("web")[0]["count"] in (2, 3)


async def test_template_change_retries_at_once_and_the_pod_runs(h: Harness) -> None:
    ctl = await h.start()
    h.kube.add(pod("web"))
    await run_for(h.clock, 5)
    assert len(h.translator.times("web")) == 1
    assert ctl.queue.due_in("default/web") is not None
    assert ctl.queue.due_in("default/web") > 50  # type: ignore[operator]

    h.renderer.set_overlay({TEMPLATE: FIXED})
    changed_at = h.clock.monotonic()
    await settle()  # no fake time passes
    assert h.translator.times("web")[-1] == changed_at  # immediately, not at the backstop
    assert h.sim.calls["create"] == 1
    await run_for(h.clock, 6)  # the simulated start delay, seen by the next reconcile
    status = h.status("web")
    assert status["phase"] == "Running"
    assert "reason" not in status and "message" not in status
    assert len(h.failed_events("web")) == 1
    assert "default/web" not in ctl.translation
    # later template changes do not touch the running pod
    h.renderer.set_overlay({TEMPLATE: FIXED + "\n"})
    await run_for(h.clock, 2)
    assert len(h.translator.times("web")) == 2 and h.sim.calls["create"] == 1


async def test_only_pods_that_failed_to_translate_are_retried(h: Harness) -> None:
    await h.start()
    h.kube.add(pod("ok", needed="yes"))
    h.kube.add(pod("bad1"))
    h.kube.add(pod("bad2"))
    await run_for(h.clock, 6)
    assert h.status("ok")["phase"] == "Running"
    assert {h.status(n)["reason"] for n in ("bad1", "bad2")} == {"TranslationFailed"}
    renders = {n: len(h.translator.times(n)) for n in ("ok", "bad1", "bad2")}
    assert renders == {"ok": 1, "bad1": 1, "bad2": 1}

    # a new version that still fails, differently: retried at once, the new error reported
    h.renderer.set_overlay({TEMPLATE: OTHER})
    await run_for(h.clock, 0.5)
    renders = {n: len(h.translator.times(n)) for n in ("ok", "bad1", "bad2")}
    assert renders == {"ok": 1, "bad1": 2, "bad2": 2}
    for name in ("bad1", "bad2"):
        assert "sim/pod.j2:2" in h.status(name)["message"]
        messages = sorted(e["message"] for e in h.failed_events(name))
        assert len(messages) == 2 and "sim/pod.j2:2" in messages[0] + messages[1]
    assert h.sim.calls["create"] == 1


async def test_wakeups_that_change_nothing_do_not_render_again(h: Harness) -> None:
    ctl = await h.start()
    h.kube.add(pod("web"))
    await run_for(h.clock, 2)
    for _ in range(20):  # e.g. status-only watch events, a relist after 410
        ctl.queue.add("default/web")
        await run_for(h.clock, 2)
    assert len(h.translator.times("web")) == 1
    due = ctl.queue.due_in("default/web")
    assert due is not None and 10 < due < 30  # still the 60 s (+jitter) backstop
    events = h.failed_events("web")
    assert len(events) == 1 and events[0]["count"] == 1


async def test_a_pod_change_renders_at_once(h: Harness) -> None:
    await h.start()
    h.kube.add(pod("web"))
    await run_for(h.clock, 2)
    p = h.kube.pod("web")
    assert p is not None
    p["metadata"]["annotations"]["needed"] = "yes"  # kubectl annotate
    h.kube._bump(p)
    h.kube._emit("MODIFIED", p)
    await settle()
    assert len(h.translator.times("web")) == 2 and h.sim.calls["create"] == 1


async def test_same_error_after_a_template_change_is_counted_once_more(h: Harness) -> None:
    await h.start()
    h.kube.add(pod("web"))
    await run_for(h.clock, 2)
    h.renderer.set_overlay({TEMPLATE: BROKEN + "\n"})  # changed, same error on the same line
    await run_for(h.clock, 0.5)
    assert len(h.translator.times("web")) == 2
    events = h.failed_events("web")
    assert len(events) == 1 and events[0]["count"] == 2


async def test_change_while_the_failing_render_is_in_flight_is_not_missed(h: Harness) -> None:
    ctl = await h.start()
    h.translator.gate = asyncio.Event()
    h.kube.add(pod("web"))
    await run_for(h.clock, 0.5)
    assert len(h.translator.times("web")) == 1  # rendered the broken version, not yet failed
    h.renderer.set_overlay({TEMPLATE: FIXED})  # nothing known to retry yet
    h.translator.gate.set()
    await run_for(h.clock, 0.5)
    assert len(h.translator.times("web")) == 2
    assert h.sim.calls["create"] == 1
    assert "default/web" not in ctl.translation


async def test_deleted_pod_is_forgotten(h: Harness) -> None:
    ctl = await h.start()
    h.kube.add(pod("web"))
    await run_for(h.clock, 2)
    assert "default/web" in ctl.translation
    h.kube.user_delete("web")
    await run_for(h.clock, 2)
    assert h.kube.pod("web") is None
    assert len(ctl.translation) == 0
    h.renderer.set_overlay({TEMPLATE: FIXED})
    await run_for(h.clock, 1)
    assert len(h.translator.times("web")) == 1 and h.sim.calls["create"] == 0


# -- the policy on its own ----------------------------------------------------------------


def test_backstop_delays_grow_to_the_cap() -> None:
    r = TranslationRetries(clock=FakeClock(), rng=random.Random(1))
    delays = [r.failed("ns/p", "u1", "m", started=0).delay for _ in range(8)]
    for got, want in zip(delays, [60, 120, 240, 480, 600, 600, 600, 600], strict=True):
        assert want <= got <= min(600, want * 1.1)


async def test_event_refresh_and_new_pod_under_the_same_name() -> None:
    clock = FakeClock()
    r = TranslationRetries(clock=clock, event_refresh=1800)
    assert r.failed("ns/p", "u1", "m", started=0).record_event
    await clock.advance(1700)
    assert not r.failed("ns/p", "u1", "m", started=0).record_event
    await clock.advance(200)
    assert r.failed("ns/p", "u1", "m", started=0).record_event
    assert not r.failed("ns/p", "u1", "m", started=0).record_event
    v = r.failed("ns/p", "u2", "m", started=0)  # re-created pod: a first failure again
    assert v.record_event and v.delay <= 66 and r.attempts("ns/p") == 1
    r.forget("ns/p", "u1")  # the old pod's DELETED arrives late: the new one stays
    assert "ns/p" in r
    assert r.changed() == {"ns/p": "u2"}
    v = r.failed("ns/p", "u2", "m", started=0)  # stale generation: retry now
    assert v.delay == 0.0 and v.record_event


def test_app_subscribes_the_pods_controller_to_template_changes(tmp_path: Path) -> None:
    s = settings()
    s.kubelet.enabled = False
    clock = FakeClock()
    kube = FakeKube(clock)
    sim = SimulatedTranslator(None, node_name=NODE, state_file=str(tmp_path / "s.json"))
    app = App(s, kube=kube, translator=sim, clock=clock)  # type: ignore[arg-type]
    p = kube.add(pod("web"))
    app.pods.reflector.store["default/web"] = p
    app.pods.translation.failed("default/web", p["metadata"]["uid"], "m", started=0)
    assert "default/web" not in app.pods.queue
    app.renderer.set_overlay({"nomad/extra.j2": "{}"})
    assert "default/web" in app.pods.queue
    assert app.pods.queue.due_in("default/web") == 0.0
