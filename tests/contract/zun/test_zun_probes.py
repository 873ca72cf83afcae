"""Probes on Zun (docs/design/probes.md, "Per backend"): vkgate's own prober, not Zun's
``healthcheck``.

Zun (18.0.0) takes a container ``healthcheck`` (Docker HEALTHCHECK: cmd, interval, retries,
timeout; microversion 1.22) and shows it back, but only as the configuration it was given: its
view has no health state, and its Docker driver maps ``State.Status`` alone
(``zun/container/docker/driver.py``), never ``State.Health``.  A healthcheck therefore cannot
make a pod unready or restart it, so vkgate runs the pod's probes itself: an ``exec`` probe
through Zun's exec API (``POST …/execute?run=true``, the path ``kubectl exec`` takes), httpGet,
tcpSocket and grpc straight to the container's address.  These tests run against Zun's own API
code (tests/contract/zun/zun_upstream.py, the ``zun-server`` extra)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import pytest
from fake_zun import FakeOpenStack
from zun_pods import resolved_pod, simple_pod

from gateway.kube.events import EventRecorder
from gateway.probes.handlers import Handlers
from gateway.probes.manager import Prober
from translators.zun import ZunTranslator
from vkgate_core.clock import FakeClock
from vkgate_core.kubetypes import Pod

pytestmark = pytest.mark.contract


def upstream_or_skip(fake: FakeOpenStack) -> None:
    if fake.upstream is None:
        pytest.skip("the zun package (test extra zun-server) is not installed")


class Events:
    def __init__(self) -> None:
        self.recorded: list[dict[str, Any]] = []

    async def record(self, obj: Any, **kw: Any) -> None:
        self.recorded.append(kw)


async def test_an_exec_readiness_probe_runs_through_zuns_exec_api(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    upstream_or_skip(fake)
    ready = {"now": False}

    def exec_(command: str) -> tuple[str, int]:
        if command == "cat /tmp/ready":
            return ("ok\n", 0) if ready["now"] else ("cat: /tmp/ready: No such file\n", 1)
        return "", 0

    fake.script("busybox:1.36", exec=exec_)
    probe = {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 5}
    raw = simple_pod("probed", restart="Always", readinessProbe=probe)
    await zun.create(resolved_pod(raw))
    await clock.advance(3)
    (state,) = await zun.list()
    assert state.containers[0].state == "running" and state.pod_ip

    verdicts: list[bool] = []

    def set_readiness(uid: str, name: str, ok: bool) -> bool:
        changed = not verdicts or verdicts[-1] != ok
        verdicts.append(ok)
        return changed

    events = Events()
    prober = Prober(
        Handlers(executor=zun),
        cast(EventRecorder, events),
        clock=clock,
        set_readiness=set_readiness,
        queue=lambda key: None,
    )
    prober.sync(cast(Pod, raw), state)

    async def run_for(seconds: float) -> None:
        """The fake clock onwards, letting each exec (a real request to the fake, through
        the translator's client) finish between steps."""
        for _ in range(int(seconds * 4)):
            await clock.advance(0.25)
            await asyncio.sleep(0.01)

    try:
        await run_for(1)
        assert verdicts == [False]  # unready until the probe passes
        assert events.recorded[-1]["reason"] == "Unhealthy"
        assert "No such file" in events.recorded[-1]["message"]
        ready["now"] = True
        await run_for(5)
        assert verdicts[-1] is True
    finally:
        prober.stop()
    # each attempt is one Zun exec, answered by Zun's own API layer
    calls = [c for c in fake.exec_calls if c["command"] == "cat /tmp/ready"]
    assert len(calls) >= 2 and all(c["run"] and not c["interactive"] for c in calls)
    executes = [a for a in fake.upstream_answers if a[1].endswith("/execute")]
    assert executes and all(a[0] == "POST" and a[2] == 200 for a in executes), executes
    # vkgate sent no healthcheck: the probe is not Zun's to run
    sent = next(iter(fake.containers.values()))
    assert not sent.get("healthcheck")


async def test_zun_takes_a_healthcheck_and_shows_it_back_without_a_health_state(
    fake: FakeOpenStack,
) -> None:
    """Why vkgate does not map probes onto Zun's healthcheck: sent through Zun's own API code
    it is stored and read back as configuration; nothing in Zun's view says healthy or not."""
    upstream_or_skip(fake)
    assert fake.upstream is not None
    who = {
        "project_id": fake.shadow[fake.project_id],
        "user_id": fake.user_id,
        "admin": False,
    }
    body = {
        "name": "hc",
        "image": "busybox:1.36",
        "command": ["sleep", "600"],
        "healthcheck": {"cmd": "cat /tmp/ready", "interval": 5, "retries": 3, "timeout": 1},
    }
    status, created, _ = fake.upstream.call(
        "POST",
        "/v1/containers",
        version="container 1.22",
        body=json.dumps(body).encode(),
        **who,
    )
    assert status == 202, created
    status, shown, _ = fake.upstream.call(
        "GET", f"/v1/containers/{created['uuid']}", version="container 1.22", **who
    )
    assert status == 200, shown
    assert shown["healthcheck"] == {
        "test": "cat /tmp/ready",
        "interval": 5,
        "retries": 3,
        "timeout": 1,
    }
    health_keys = {k for k in shown if "health" in k.lower()}
    assert health_keys == {"healthcheck"}, health_keys
    # and below 1.22 Zun refuses the field: a healthcheck is not even portable across clouds
    status, refused, _ = fake.upstream.call(
        "POST",
        "/v1/containers",
        version="container 1.21",
        body=json.dumps({**body, "name": "hc-old"}).encode(),
        **who,
    )
    assert status >= 400, refused
