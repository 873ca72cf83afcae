"""Lifecycle hooks wired into the pod sync (gateway/probes/hooks.py; docs/design/probes.md,
"Lifecycle hooks"), on the simulated backend and a fake clock, with the hook handlers scripted:
postStart keeps the container waiting until it returns, a failed or timed-out postStart is
Events + a restart, preStop runs before the backend is told to stop and uses up the grace
period, a failed preStop does not stop the deletion."""

from __future__ import annotations

import datetime as _dt
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from controller_harness import ControllerHarness
from pods_fakes import run_for

from gateway.probes.handlers import Result, Target
from gateway.probes.hooks import Hooks
from translators.base import PodRef, WorkloadState
from vkgate_core.clock import FakeClock

NODE = "vk-test"


class Script:
    """Hook handlers: ``exec`` commands ``["ok", seconds]``, ``["fail", message]`` or
    ``["hang"]`` (runs until the limit: a timeout); every run is logged with its time."""

    def __init__(self, clock: FakeClock, log: list[tuple[float, str]]) -> None:
        self.clock = clock
        self.log = log

    async def exec(self, command: list[str], target: Target, limit: float) -> Result:
        verb = command[0]
        self.log.append((self.clock.monotonic(), f"{target.container}:{command[-1]}:begin"))
        if verb == "ok":
            await self.clock.sleep(float(command[1]))
        elif verb == "hang":
            await self.clock.sleep(limit)
            return Result(False, f"command timed out: {command!r} timed out after {limit:g}s")
        self.log.append((self.clock.monotonic(), f"{target.container}:{command[-1]}:end"))
        if verb == "fail":
            return Result(False, command[1])
        return Result(True)

    async def http_get(self, action: Mapping[str, Any], target: Target, limit: float) -> Result:
        return Result(False, "dial tcp 127.0.0.9:80: connect: connection refused")


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[ControllerHarness]:
    harness = ControllerHarness(tmp_path, node=NODE)
    await harness.start()
    yield harness
    await harness.stop()


def wire(h: ControllerHarness) -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
    """Scripted hooks; returns (hook log, backend log: deletes and restarts with their time)."""
    assert h.ctl is not None and h.sim is not None
    hooks: list[tuple[float, str]] = []
    backend: list[tuple[float, str]] = []
    h.ctl.hooks.handlers = Script(h.clock, hooks)  # type: ignore[assignment]
    h.ctl.actor.resolver.can_exec = True  # the harness's wrapper hides the simulated exec
    inner = h.sim.delete

    async def delete(ref: PodRef, *, grace_seconds: int) -> WorkloadState | None:
        backend.append((h.clock.monotonic(), f"delete grace={grace_seconds}"))
        return await inner(ref, grace_seconds=grace_seconds)

    async def restart(pod: Any, container: str, why: str) -> None:
        backend.append((h.clock.monotonic(), f"restart {container}: {why}"))

    h.sim.delete = delete  # type: ignore[method-assign]
    h.ctl.hooks.restart = restart
    return hooks, backend


def pod(name: str, lifecycle: dict[str, Any], grace: int = 30) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "app", "lifecycle": lifecycle}],
        },
    }


def app(h: ControllerHarness, name: str) -> dict[str, Any]:
    p = h.kube.pod(name)
    assert p is not None
    return dict(p["status"]["containerStatuses"][0])


def ready(h: ControllerHarness, name: str) -> str:
    p = h.kube.pod(name)
    assert p is not None
    return next(c["status"] for c in p["status"]["conditions"] if c["type"] == "Ready")


async def test_post_start_keeps_the_container_waiting_until_it_returns(
    h: ControllerHarness,
) -> None:
    hooks, _ = wire(h)
    h.kube.add(pod("web", {"postStart": {"exec": {"command": ["ok", "20", "post"]}}}))
    await run_for(h.clock, 12)
    # the backend runs it and the hook started, but it has not returned: ContainerCreating
    assert [e for _, e in hooks] == ["app:post:begin"]
    cs = app(h, "web")
    assert cs["state"] == {"waiting": {"reason": "ContainerCreating"}}, cs
    assert cs["ready"] is False and cs["started"] is False
    p = h.kube.pod("web")
    assert p is not None and p["status"]["phase"] == "Pending"
    assert ready(h, "web") == "False"
    began = hooks[0][0]
    await run_for(h.clock, 25)
    assert [e for _, e in hooks] == ["app:post:begin", "app:post:end"]
    assert hooks[1][0] - began == pytest.approx(20, abs=0.3)
    cs = app(h, "web")
    assert "running" in cs["state"] and cs["ready"] is True, cs
    assert ready(h, "web") == "True"
    p = h.kube.pod("web")
    assert p is not None and p["status"]["phase"] == "Running"
    assert not h.kube.events("FailedPostStartHook")
    # once per container instance: later syncs do not run it again
    await run_for(h.clock, 20)
    assert len(hooks) == 2


async def test_a_failed_post_start_is_an_event_then_the_container_is_killed_and_restarted(
    h: ControllerHarness,
) -> None:
    hooks, backend = wire(h)
    h.kube.add(
        pod(
            "web",
            {
                "postStart": {"exec": {"command": ["fail", "no config", "post"]}},
                "preStop": {"exec": {"command": ["ok", "1", "pre"]}},
            },
        )
    )
    await run_for(h.clock, 12)
    [failed] = h.kube.events("FailedPostStartHook")
    assert failed["type"] == "Warning"
    assert failed["involvedObject"]["fieldPath"] == "spec.containers{app}"
    assert failed["message"].startswith(
        'Exec lifecycle hook ([fail no config post]) for Container "app"'
    )
    assert failed["message"].endswith("message: 'no config'")
    killing = [e for e in h.kube.events("Killing") if e["message"] == "FailedPostStartHook"]
    assert killing and killing[0]["type"] == "Normal"
    # killContainer: the preStop hook, then the kill (here: the Restarter's restart)
    assert [e for _, e in hooks] == [
        "app:post:begin",
        "app:post:end",
        "app:pre:begin",
        "app:pre:end",
    ]
    restarts = [(t, e) for t, e in backend if e.startswith("restart")]
    assert restarts == [(pytest.approx(hooks[3][0], abs=0.01), restarts[0][1])]
    assert restarts[0][1] == "restart app: Container app failed its postStart hook"
    # never reported running meanwhile
    cs = app(h, "web")
    assert cs["state"]["waiting"]["reason"] == "ContainerCreating", cs
    assert ready(h, "web") == "False"


async def test_a_post_start_that_does_not_return_in_time_fails(h: ControllerHarness) -> None:
    _, backend = wire(h)
    assert h.ctl is not None
    h.ctl.hooks.post_start_limit = 15.0
    h.kube.add(pod("web", {"postStart": {"exec": {"command": ["hang", "post"]}}}))
    await run_for(h.clock, 10)
    assert not h.kube.events("FailedPostStartHook")
    await run_for(h.clock, 15)
    [failed] = h.kube.events("FailedPostStartHook")
    assert "command timed out after 15s" in failed["message"], failed["message"]
    assert [e for _, e in backend if e.startswith("restart")] == [
        "restart app: Container app failed its postStart hook"
    ]


async def test_pre_stop_runs_before_the_stop_and_uses_up_the_grace_period(
    h: ControllerHarness,
) -> None:
    hooks, backend = wire(h)
    h.kube.add(pod("web", {"preStop": {"exec": {"command": ["ok", "12", "pre"]}}}, grace=30))
    await run_for(h.clock, 12)
    assert ready(h, "web") == "True"
    deleted_at = h.clock.monotonic()
    h.kube.user_delete("web", grace=30)
    await run_for(h.clock, 5)
    # Killing at once, the hook runs, the backend is not told yet
    assert [e["message"] for e in h.kube.events("Killing")] == ["Stopping container app"]
    assert [e for _, e in hooks] == ["app:pre:begin"]
    assert not backend
    await run_for(h.clock, 12)
    assert [e for _, e in hooks] == ["app:pre:begin", "app:pre:end"]
    [(when, what)] = backend[:1]
    # the stop gets what the hook left: 30 - 12 s
    assert what == "delete grace=18"
    assert when - deleted_at == pytest.approx(12, abs=0.6)
    assert hooks[1][0] <= when
    await run_for(h.clock, 25)
    assert h.kube.pod("web") is None  # the deletion completed within the grace period
    assert not h.kube.events("FailedPreStopHook")


async def test_a_failed_pre_stop_is_a_warning_and_the_deletion_goes_on(
    h: ControllerHarness,
) -> None:
    _, backend = wire(h)
    h.kube.add(pod("web", {"preStop": {"httpGet": {"path": "/quit", "port": 80}}}))
    h.ctl.actor.resolver.features = dataclass_replace(h)  # type: ignore[union-attr]
    await run_for(h.clock, 12)
    h.kube.user_delete("web", grace=30)
    await run_for(h.clock, 3)
    [failed] = h.kube.events("FailedPreStopHook")
    assert failed["type"] == "Warning"
    assert failed["message"] == (
        'HTTP lifecycle hook (/quit) for Container "app" in Pod '
        f'"web_default({failed["involvedObject"]["uid"]})" failed - error: dial tcp '
        "127.0.0.9:80: connect: connection refused"
    )
    assert backend and backend[0][1] == "delete grace=30"
    await run_for(h.clock, 10)
    assert h.kube.pod("web") is None


async def test_a_pre_stop_that_outlasts_the_grace_period_is_cut_and_the_stop_gets_the_minimum(
    h: ControllerHarness,
) -> None:
    hooks, backend = wire(h)
    h.kube.add(pod("web", {"preStop": {"exec": {"command": ["hang", "pre"]}}}, grace=10))
    await run_for(h.clock, 12)
    h.kube.user_delete("web", grace=10)
    await run_for(h.clock, 12)
    # the hook ran for the whole grace period; the kubelet still gives SIGTERM 2 s
    assert backend[0][1] == "delete grace=2"
    assert [e for _, e in hooks] == ["app:pre:begin"]
    await run_for(h.clock, 10)
    assert h.kube.pod("web") is None
    assert not h.kube.events("ForceDeleted")


def dataclass_replace(h: ControllerHarness) -> Any:
    """The harness's features with a routable pod address (httpGet hooks may run)."""
    import dataclasses

    assert h.ctl is not None
    return dataclasses.replace(h.ctl.actor.resolver.features, routable_pod_ip=True)


def test_hooks_forget_cancels_what_runs() -> None:
    """A pod gone from the API: its hook tasks end (nothing is left running)."""
    import asyncio

    from gateway.kube.events import EventRecorder

    async def main() -> None:
        clock = FakeClock()
        hooks = Hooks(
            Script(clock, []),  # type: ignore[arg-type]
            EventRecorder(None, host="n", clock=clock),  # type: ignore[arg-type]
            clock=clock,
            set_starting=lambda uid, name, on: True,
            queue=lambda key: None,
        )
        p = pod("web", {"preStop": {"exec": {"command": ["ok", "100", "pre"]}}})
        p["metadata"].update(namespace="default", uid="u-1")
        from translators.base import ContainerState

        state = WorkloadState(
            ref=PodRef("default", "web", "u-1"),
            backend_id="b",
            phase="Running",  # type: ignore[arg-type]
            containers=(ContainerState(name="app", state="running"),),
        )
        hooks.start_pre_stop(p, state, 30)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert hooks.running == 1 and hooks.pre_stop("u-1") == "running"
        hooks.forget("u-1")
        await asyncio.sleep(0)
        assert hooks.running == 0 and hooks.pre_stop("u-1") == ""

    asyncio.run(main())


HOOKS = {
    "postStart": {"exec": {"command": ["true"]}},
    "preStop": {"httpGet": {"port": 8080, "path": "/quit"}},
}
SLEEP = {"preStop": {"sleep": {"seconds": 5}}}


def _refusals(lifecycle: dict[str, Any], features: Any, *, can_exec: bool, backend: str) -> Any:
    from gateway.pods.resolve.features import check_probes

    spec = {"containers": [{"name": "app", "lifecycle": lifecycle}]}
    found = check_probes({"spec": spec}, features, can_exec=can_exec, backend=backend)
    assert all(u.reason == "UnsupportedPodFeature" for u in found)
    return [(u.feature, u.message) for u in found]


def test_nomad_runs_exec_http_and_sleep_hooks() -> None:
    from translators.nomad.translator import NomadTranslator

    for lifecycle in (HOOKS, SLEEP):
        assert _refusals(lifecycle, NomadTranslator.features, can_exec=True, backend="nomad") == []


def test_batch_refuses_every_hook_naming_the_field() -> None:
    """No exec into a task and no pod address: Azure Batch runs no hook, a sleep included."""
    from translators.base import Executor
    from translators.batch.translator import BatchTranslator

    assert not issubclass(BatchTranslator, Executor)
    why = (
        "lifecycle hooks are not run on the batch backend (no exec into the container, no pod "
        "address vkgate can reach)"
    )
    got = _refusals(HOOKS, BatchTranslator.features, can_exec=False, backend="batch")
    assert got == [
        ("lifecycle.postStart.exec", f"spec.containers[app].lifecycle.postStart: {why}"),
        ("lifecycle.preStop.httpGet", f"spec.containers[app].lifecycle.preStop: {why}"),
    ]
    got = _refusals(SLEEP, BatchTranslator.features, can_exec=False, backend="batch")
    assert got == [("lifecycle.preStop.sleep", f"spec.containers[app].lifecycle.preStop: {why}")]


def test_a_hook_is_refused_only_for_the_handler_the_backend_cannot_run() -> None:
    """Exec but no pod address: exec and sleep hooks run, an httpGet hook is refused unless it
    names its host (dialled as it is, as for probes); an address but no exec: the reverse."""
    from translators.base import Features

    no_address = Features(routable_pod_ip=False)
    got = _refusals(HOOKS, no_address, can_exec=True, backend="x")
    assert got == [
        (
            "lifecycle.preStop.httpGet",
            "spec.containers[app].lifecycle.preStop: the x backend gives pods no address vkgate "
            "can reach",
        )
    ]
    assert _refusals(SLEEP, no_address, can_exec=True, backend="x") == []
    hosted = {"preStop": {"httpGet": {"host": "drain.example", "port": 80, "path": "/"}}}
    assert _refusals(hosted, no_address, can_exec=True, backend="x") == []
    got = _refusals(HOOKS, Features(routable_pod_ip=True), can_exec=False, backend="y")
    assert got == [
        (
            "lifecycle.postStart.exec",
            "spec.containers[app].lifecycle.postStart: exec hooks need exec into the container, "
            "which the y backend lacks",
        )
    ]


class _Events:
    def __init__(self) -> None:
        self.got: list[tuple[str, str]] = []

    async def record(self, obj: Any, *, type: str, reason: str, message: str, **_: Any) -> None:
        self.got.append((reason, message))


def _direct(clock: FakeClock) -> tuple[Hooks, list[tuple[float, str]], dict[str, Any]]:
    """A ``Hooks`` on its own: (hooks, hook log, what it reported: starting, queued, restarts)."""
    log: list[tuple[float, str]] = []
    seen: dict[str, Any] = {"starting": {}, "queued": [], "restarts": [], "events": _Events()}

    def set_starting(uid: str, name: str, on: bool) -> bool:
        changed = seen["starting"].get(name) != on
        seen["starting"][name] = on
        return changed

    async def restart(pod: Any, container: str, why: str) -> None:
        seen["restarts"].append(container)

    hooks = Hooks(
        Script(clock, log),  # type: ignore[arg-type]
        seen["events"],
        clock=clock,
        set_starting=set_starting,
        queue=seen["queued"].append,
        restart=restart,
    )
    return hooks, log, seen


def _running(clock: FakeClock, started: Any) -> WorkloadState:
    from translators.base import ContainerState

    return WorkloadState(
        ref=PodRef("default", "web", "u-1"),
        backend_id="b",
        phase="Running",  # type: ignore[arg-type]
        containers=(ContainerState(name="app", state="running", started_at=started),),
    )


async def test_an_instance_the_pod_already_shows_running_does_not_run_its_post_start_again() -> (
    None
):
    """After a vkgate restart (or a fail-over) the pod's status already says the container
    runs: its postStart passed under the earlier process, and the kubelet would not run it
    again — no hook, no flap to ContainerCreating (Ready would drop: Services too)."""
    clock = FakeClock()
    hooks, log, seen = _direct(clock)
    started = clock.now()
    p = pod("web", {"postStart": {"exec": {"command": ["ok", "1", "post"]}}})
    p["metadata"].update(namespace="default", uid="u-1")
    p["status"] = {
        "containerStatuses": [
            {
                "name": "app",
                "restartCount": 0,
                "state": {"running": {"startedAt": started.strftime("%Y-%m-%dT%H:%M:%SZ")}},
            }
        ]
    }
    hooks.sync(p, _running(clock, started))  # type: ignore[arg-type]
    await run_for(clock, 3)
    assert log == [] and seen["starting"] == {"app": False}
    # a new instance (the backend restarted it) does run it
    later = started + _dt.timedelta(seconds=30)
    hooks.sync(p, _running(clock, later))  # type: ignore[arg-type]
    await run_for(clock, 3)
    assert [e for _, e in log] == ["app:post:begin", "app:post:end"]
    hooks.stop()


async def test_a_post_start_that_fails_while_the_pod_is_deleted_restarts_nothing() -> None:
    clock = FakeClock()
    hooks, _, seen = _direct(clock)
    p = pod("web", {"postStart": {"exec": {"command": ["fail", "late", "post"]}}})
    p["metadata"].update(namespace="default", uid="u-1")
    hooks.sync(p, _running(clock, clock.now()))  # type: ignore[arg-type]
    deleting = {**p, "metadata": {**p["metadata"], "deletionTimestamp": "2026-01-01T00:00:30Z"}}
    hooks.sync(deleting, _running(clock, clock.now()))  # type: ignore[arg-type]
    await run_for(clock, 3)
    assert [r for r, _ in seen["events"].got] == ["FailedPostStartHook"]
    assert seen["restarts"] == []
    hooks.stop()


class _KillsAndRestarts:
    """A backend that can restart and kill one container (Nomad's pair)."""

    kind = "fake"

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def restart_container(self, ref: PodRef, container: str) -> None:
        self.calls.append(f"restart {container}")

    async def kill_container(self, ref: PodRef, container: str, *, grace_seconds: int) -> None:
        self.calls.append(f"kill {container} grace={grace_seconds}")


@pytest.mark.parametrize(
    ("policy", "want"),
    [("Always", "restart app"), ("OnFailure", "restart app"), ("Never", "kill app grace=7")],
)
async def test_a_failed_hook_or_probe_kills_and_restarts_per_restart_policy(
    h: ControllerHarness, policy: str, want: str
) -> None:
    """The kubelet restarts a killed container unless restartPolicy is Never: then it is only
    killed (``Killer``: SIGTERM, SIGKILL after terminationGracePeriodSeconds)."""
    assert h.ctl is not None
    backend = _KillsAndRestarts()
    h.ctl.translator = backend  # type: ignore[assignment]
    p = pod("web", {}, grace=7)
    p["metadata"].update(namespace="default", uid="u-1")
    p["spec"]["restartPolicy"] = policy
    await h.ctl._restart_container(p, "app", "Container app failed its postStart hook")  # type: ignore[arg-type]
    assert backend.calls == [want]


async def test_hooks_the_node_ignores_are_not_run(tmp_path: Path) -> None:
    """A backend that can run no hook (the harness's: no exec, no pod address) and a node
    that lists them in ``node.ignore_pod_fields``: the pod runs without them — no postStart
    holding the container in ContainerCreating, no preStop before the stop — with a Warning
    PodFieldIgnored each."""
    harness = ControllerHarness(
        tmp_path, node=NODE, ignore_pod_fields=["lifecycle.postStart", "lifecycle.preStop"]
    )
    ctl = await harness.start()
    try:
        log: list[tuple[float, str]] = []
        ctl.hooks.handlers = Script(harness.clock, log)  # type: ignore[assignment]
        harness.kube.add(
            pod(
                "web",
                {
                    "postStart": {"exec": {"command": ["ok", "30", "post"]}},
                    "preStop": {"sleep": {"seconds": 20}},
                },
            )
        )
        await run_for(harness.clock, 12)
        cs = app(harness, "web")
        assert "running" in cs["state"] and cs["ready"] is True, cs
        assert len(harness.kube.events("PodFieldIgnored")) == 2
        harness.kube.user_delete("web", grace=30)
        await run_for(harness.clock, 8)
        assert harness.kube.pod("web") is None  # stopped at once: no 20 s preStop sleep
        assert log == [] and ctl.hooks.running == 0
    finally:
        await harness.stop()
