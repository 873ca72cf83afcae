"""PodController end to end on a fake API server and the simulated backend, with a fake clock."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pods_fakes import FakeKube, Polled, run_for, settle, sim_context

from gateway.config import Settings
from gateway.kube.events import EventRecorder
from gateway.pods.controller import PodController
from gateway.pods.status.manager import FIRST_STATUS_DELAY
from translators.simulated import SimulatedTranslator, fake_ip
from vkgate_core.clock import FakeClock

NODE = "vk-test"


def settings(**pods: Any) -> Settings:
    s = Settings()
    s.node.name = NODE
    s.pods.workers = 4
    s.pods.reconcile_interval = 5.0
    s.pods.config_refresh_interval = 10.0
    for k, v in pods.items():
        setattr(s.pods, k, v)
    return s


class Harness:
    def __init__(self, tmp_path: Path, *, notify: bool = False, **pods: Any) -> None:
        self.clock = FakeClock()
        self.kube = FakeKube(self.clock)
        self.state_file = tmp_path / "sim.json"
        self.notify = notify
        self.pods_settings = pods
        self.ctl: PodController | None = None
        self.sim: SimulatedTranslator | None = None

    def translator(self) -> Any:
        self.sim = SimulatedTranslator(
            sim_context(self.clock, NODE),
            state_file=str(self.state_file),
            start_delay=1.0,
        )
        return self.sim if self.notify else Polled(self.sim)

    async def start(self) -> PodController:
        events = EventRecorder(self.kube, host=NODE, clock=self.clock)  # type: ignore[arg-type]
        self.ctl = PodController(
            self.kube,  # type: ignore[arg-type]
            self.translator(),
            events,
            settings(**self.pods_settings),
            clock=self.clock,
            host_ip=lambda: "127.0.0.9",
            allocatable=lambda: {"cpu": "8", "memory": "16Gi"},
        )
        await self.ctl.start()
        await settle()
        await self.clock.advance(0)
        await settle()
        assert self.ctl.ready.is_set()
        return self.ctl

    async def stop(self) -> None:
        if self.ctl is not None:
            await self.ctl.stop()
            self.ctl = None

    def workloads(self) -> dict[str, Any]:
        if not self.state_file.exists():
            return {}
        data: dict[str, Any] = json.loads(self.state_file.read_text() or "{}")
        return data


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    await harness.stop()


def pod(name: str, *, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    spec.setdefault("containers", [{"name": "app", "image": "nginx:1.27"}])
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
        "spec": {"nodeName": NODE, **spec},
    }


def conds(p: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in p["status"].get("conditions", [])}


async def test_create_to_running_with_few_writes(h: Harness) -> None:
    await h.start()
    h.kube.add(pod("web"))
    await run_for(h.clock, FIRST_STATUS_DELAY / 2)
    assert h.kube.status_writes("web") == 0  # the first status waits for the backend a moment
    await run_for(h.clock, FIRST_STATUS_DELAY / 2 + 0.5)
    p = h.kube.pod("web")
    assert p is not None and p["status"]["phase"] == "Pending"  # start_delay 1 s: not yet
    assert p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    await run_for(h.clock, 6)
    p = h.kube.pod("web")
    assert p is not None
    assert p["status"]["phase"] == "Running"
    assert set(conds(p).values()) == {"True"}
    assert p["status"]["podIP"] == fake_ip(p["metadata"]["uid"])
    assert p["status"]["hostIP"] == "127.0.0.9"
    assert h.kube.status_writes("web") <= 3
    reasons = [e["reason"] for e in h.kube.events()]
    for r in ("Accepted", "Created", "Started"):
        assert r in reasons
    assert h.sim is not None and h.sim.calls["create"] == 1
    # steady state: more reconciles, no more writes
    before = h.kube.status_writes("web")
    await run_for(h.clock, 20)
    assert h.kube.status_writes("web") == before


async def test_one_backend_list_per_interval_for_all_pods(h: Harness) -> None:
    await h.start()
    for i in range(30):
        h.kube.add(pod(f"p{i}"))
    await run_for(h.clock, 3)
    assert h.sim is not None
    start = h.sim.calls["list"]
    await run_for(h.clock, 20)
    lists = h.sim.calls["list"] - start
    assert 3 <= lists <= 5  # every 5 s, not per pod
    assert all(h.kube.pod(f"p{i}")["status"]["phase"] == "Running" for i in range(30))  # type: ignore[index]


async def test_exit_codes_and_terminal_pods_are_frozen(h: Harness) -> None:
    await h.start()
    ok = h.kube.add(pod("ok", restartPolicy="Never", annotations={"vkgate.io/sim-exit-code": "0"}))
    bad = h.kube.add(
        pod("bad", restartPolicy="Never", annotations={"vkgate.io/sim-exit-code": "3"})
    )
    await run_for(h.clock, 12)
    p_ok, p_bad = h.kube.pod("ok"), h.kube.pod("bad")
    assert p_ok is not None and p_bad is not None
    assert p_ok["status"]["phase"] == "Succeeded"
    assert p_bad["status"]["phase"] == "Failed"
    assert p_bad["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert [e["reason"] for e in h.kube.events() if e["involvedObject"]["name"] == "bad"].count(
        "Failed"
    ) == 1
    # the workloads vanish from the backend: terminal pods stay as they are, nothing resubmitted
    assert h.sim is not None
    h.sim._records.clear()
    writes = len(h.kube.writes)
    await run_for(h.clock, 12)
    assert h.sim.calls["create"] == 2
    assert h.kube.pod("ok")["status"] == p_ok["status"]  # type: ignore[index]
    assert not [w for w in h.kube.writes[writes:] if w[0] == "PATCH"]
    del ok, bad


async def test_graceful_delete_finishes_before_grace_ends(h: Harness) -> None:
    await h.start()
    h.kube.add(pod("g", annotations={"vkgate.io/sim-stop-seconds": "2"}))
    await run_for(h.clock, 3)
    uid = h.kube.pod("g")["metadata"]["uid"]  # type: ignore[index]
    h.kube.user_delete("g", grace=30)
    await run_for(h.clock, 1)
    assert h.kube.pod("g") is not None  # still stopping
    assert "Killing" in [e["reason"] for e in h.kube.events()]
    await run_for(h.clock, 3)
    assert h.kube.pod("g") is None, (
        "the pod must be deleted once the backend stopped, not after 30 s"
    )
    deletes = [w for w in h.kube.writes if w[0] == "DELETE"]
    assert deletes[-1][2] == {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
    assert uid not in h.workloads()


async def test_a_workload_that_stops_within_the_delete_call_is_finished_at_once(
    h: Harness,
) -> None:
    """The backend's delete returns the final state: status and final DELETE follow at once,
    without waiting for a list to show the workload gone."""
    await h.start()
    h.kube.add(pod("quick-stop"))
    await run_for(h.clock, 3)
    assert h.ctl is not None
    lists = h.ctl.stats["lists"]
    h.kube.user_delete("quick-stop", grace=30)
    await run_for(h.clock, 0.25)
    assert h.kube.pod("quick-stop") is None
    assert h.ctl.stats["lists"] == lists  # no list was needed to confirm the stop
    assert h.ctl.stats["backend_deletes"] == 1  # nor a second delete after DELETED
    [final] = [w for w in h.kube.writes if w[0] == "PATCH" and "status" in w[2]][-1:]
    [cs] = final[2]["status"]["containerStatuses"]
    assert cs["state"]["terminated"]["exitCode"] == 143  # the backend's own end, not "lost"
    assert final[2]["status"]["phase"] == "Failed"
    assert h.kube.events("Failed") == []  # stopped by the delete: Killing, not a failure


async def test_force_delete_at_deadline_when_backend_never_confirms(h: Harness) -> None:
    await h.start()
    h.kube.add(pod("stuck", annotations={"vkgate.io/sim-never-stop": "true"}))
    await run_for(h.clock, 3)
    h.kube.user_delete("stuck", grace=5)
    await run_for(h.clock, 4)
    assert h.kube.pod("stuck") is not None
    await run_for(h.clock, 3)
    assert h.kube.pod("stuck") is None
    [ev] = h.kube.events("ForceDeleted")
    assert ev["type"] == "Warning" and "grace period (5s)" in ev["message"]


async def test_pod_not_yet_submitted_is_deleted_at_once(h: Harness) -> None:
    await h.start()
    h.kube.add(
        pod(
            "blocked",
            containers=[
                {
                    "name": "app",
                    "env": [
                        {
                            "name": "X",
                            "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}},
                        }
                    ],
                }
            ],
        )
    )
    await run_for(h.clock, 1)
    h.kube.user_delete("blocked", grace=30)
    await run_for(h.clock, 0.5)
    assert h.kube.pod("blocked") is None
    assert h.sim is not None and h.sim.calls["create"] == 0


async def test_missing_mandatory_key_then_configmap_appears(h: Harness) -> None:
    await h.start()
    h.kube.add(
        pod(
            "cfg",
            containers=[
                {
                    "name": "app",
                    "env": [
                        {
                            "name": "A",
                            "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "a"}},
                        },
                        {
                            "name": "OPT",
                            "valueFrom": {
                                "configMapKeyRef": {"name": "other", "key": "x", "optional": True}
                            },
                        },
                    ],
                }
            ],
        )
    )
    await run_for(h.clock, 2)
    p = h.kube.pod("cfg")
    assert p is not None and p["status"]["phase"] == "Pending"
    waiting = p["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "CreateContainerConfigError"
    assert 'configmap "settings" not found' in waiting["message"]
    [ev] = h.kube.events("MandatoryConfigMapNotFound")
    assert ev["type"] == "Warning" and ev["involvedObject"]["fieldPath"] == "spec.containers{app}"
    assert h.kube.events("OptionalConfigMapNotFound")[0]["type"] == "Normal"
    h.kube.add(
        {
            "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "default"},
            "data": {"a": "42"},
        }
    )
    await run_for(h.clock, 14)  # within one refresh interval (+ start delay)
    p = h.kube.pod("cfg")
    assert p is not None and p["status"]["phase"] == "Running"
    assert h.sim is not None
    [rec] = h.sim._records.values()
    assert rec.extra["containers"]["app"]["env"][0] == ["A", "42"]


async def test_env_secret_podip_and_expansion_reach_the_backend(h: Harness) -> None:
    await h.start()
    h.kube.add(
        {
            "kind": "Secret",
            "metadata": {"name": "db", "namespace": "default"},
            "data": {"pw": base64.b64encode(b"hunter2").decode()},
        }
    )
    h.kube.add(
        pod(
            "envs",
            containers=[
                {
                    "name": "app",
                    "command": ["serve", "--bind=$(MY_IP):8080"],
                    "env": [
                        {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
                        {"name": "URL", "value": "http://$(MY_IP)/"},
                    ],
                }
            ],
        )
    )
    await run_for(h.clock, 6)
    p = h.kube.pod("envs")
    assert p is not None
    ip = p["status"]["podIP"]
    assert h.sim is not None
    [rec] = h.sim._records.values()
    got = dict(rec.extra["containers"]["app"]["env"])
    assert got["MY_IP"] == ip and got["URL"] == f"http://{ip}/"
    assert got["HOST"] == "127.0.0.9"
    assert got["PW"].startswith("<secret:")
    assert rec.extra["containers"]["app"]["command"] == ["serve", f"--bind={ip}:8080"]


async def test_the_kubelet_api_reads_the_workloads_latest_state(h: Harness) -> None:
    """``PodLookup.workload``: what port-forward asks for the pod's network
    (docs/kubelet.md, "Port-forward") is the state the backend last reported."""
    ctl = await h.start()
    h.kube.add(pod("web"))
    await run_for(h.clock, 8)
    p = h.kube.pod("web")
    assert p is not None and p["status"]["phase"] == "Running"
    state = ctl.workload(p["metadata"]["uid"])
    assert state is not None and state.pod_ip == p["status"]["podIP"]
    assert not state.host_network  # the simulated pod has an address of its own
    assert ctl.workload("no-such-uid") is None


async def test_restart_adopts_and_cleans_orphans(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    await h.start()
    for i in range(5):
        h.kube.add(pod(f"a{i}"))
    await run_for(h.clock, 3)
    assert len(h.workloads()) == 5
    await h.stop()
    # while the gateway is down: one pod deleted for good
    h.kube.objects.pop("/api/v1/namespaces/default/pods/a0")
    await h.start()
    await run_for(h.clock, 3)
    assert h.sim is not None
    assert h.sim.calls["create"] == 0, "adopted workloads must not be submitted again"
    assert len(h.workloads()) == 4
    assert all(h.kube.pod(f"a{i}")["status"]["phase"] == "Running" for i in range(1, 5))  # type: ignore[index]
    await h.stop()


async def test_relist_after_410_sees_deletions_made_while_disconnected(h: Harness) -> None:
    ctl = await h.start()
    h.kube.add(pod("x"))
    await run_for(h.clock, 3)
    assert len(h.workloads()) == 1
    h.kube.pause()
    h.kube.objects.pop("/api/v1/namespaces/default/pods/x")  # deleted; the watch never says so
    h.kube.expire_watches()
    await run_for(h.clock, 3)
    assert ctl.reflector.counts["gone"] == 1
    assert ctl.get_pod("default", "x") is None
    assert h.workloads() == {}


async def test_vanished_running_workload_of_a_never_pod_fails_with_not_found(h: Harness) -> None:
    await h.start()
    h.kube.add(pod("v", restartPolicy="Never"))
    await run_for(h.clock, 6)
    assert h.kube.pod("v")["status"]["phase"] == "Running"  # type: ignore[index]
    assert h.sim is not None
    h.sim._records.clear()  # lost by the backend
    await run_for(h.clock, 6)
    p = h.kube.pod("v")
    assert p is not None
    assert p["status"]["phase"] == "Failed" and p["status"]["reason"] == "NotFound"
    assert "restartPolicy Never" in p["status"]["message"]
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 137 and "simulated backend" in term["message"]
    assert h.sim.calls["create"] == 1
    assert h.kube.events("NotFound")[0]["type"] == "Warning"


@pytest.mark.parametrize("policy", ["Always", "OnFailure"])
async def test_vanished_workload_of_a_pod_that_must_run_is_created_again(
    h: Harness, policy: str
) -> None:
    """Backend state loss: the kubelet's answer is to run the containers again — re-create the
    workload, count a restart, keep the pod (never Failed while it should run)."""
    await h.start()
    h.kube.add(pod("v", restartPolicy=policy))
    await run_for(h.clock, 6)
    assert h.kube.pod("v")["status"]["phase"] == "Running"  # type: ignore[index]
    assert h.sim is not None
    h.sim._records.clear()  # lost by the backend
    await run_for(h.clock, 12)
    p = h.kube.pod("v")
    assert p is not None
    assert p["status"]["phase"] == "Running", p["status"]
    assert p["status"]["containerStatuses"][0]["restartCount"] == 1
    assert h.sim.calls["create"] == 2
    (event,) = h.kube.events("WorkloadLost")
    assert event["type"] == "Warning" and f"restartPolicy {policy}" in event["message"]
    assert not h.kube.events("NotFound")


async def test_workload_missing_soon_after_create_while_pending_is_created_again(
    h: Harness,
) -> None:
    await h.start()
    h.kube.add(pod("young"))
    await run_for(h.clock, 0.5)
    assert h.sim is not None
    h.sim._records.clear()
    await run_for(h.clock, 11)  # noticed at the 5 s reconcile, running by the 10 s one
    p = h.kube.pod("young")
    assert p is not None and p["status"]["phase"] == "Running"
    assert h.sim.calls["create"] == 2


async def test_create_failure_never_is_failed_always_is_pending(h: Harness) -> None:
    await h.start()
    h.kube.add(
        pod("n", restartPolicy="Never", annotations={"vkgate.io/sim-fail-create": "quota exceeded"})
    )
    h.kube.add(pod("a", annotations={"vkgate.io/sim-fail-create": "quota exceeded"}))
    await run_for(h.clock, 2)
    n, a = h.kube.pod("n"), h.kube.pod("a")
    assert n is not None and a is not None
    assert n["status"]["phase"] == "Failed" and n["status"]["reason"] == "ProviderFailed"
    assert "quota exceeded" in n["status"]["message"]
    assert a["status"]["phase"] == "Pending" and a["status"]["reason"] == "ProviderFailed"
    evs = h.kube.events("ProviderCreateFailed")
    assert {e["involvedObject"]["name"] for e in evs} == {"n", "a"}


async def test_unsupported_feature_and_volume(h: Harness) -> None:
    await h.start()
    h.kube.add(pod("hn", hostNetwork=True))
    h.kube.add(pod("hp", volumes=[{"name": "etc", "hostPath": {"path": "/etc"}}]))
    await run_for(h.clock, 1)
    hn, hp = h.kube.pod("hn"), h.kube.pod("hp")
    assert hn is not None and hp is not None
    assert hn["status"]["phase"] == "Failed" and hn["status"]["reason"] == "UnsupportedPodFeature"
    assert "spec.hostNetwork" in hn["status"]["message"]
    assert (
        hp["status"]["reason"] == "UnsupportedVolume" and 'volume "etc"' in hp["status"]["message"]
    )
    assert h.sim is not None and h.sim.calls["create"] == 0


async def test_force_deleted_pod_removes_workload(h: Harness) -> None:
    await h.start()
    h.kube.add(pod("f"))
    await run_for(h.clock, 3)
    h.kube.user_delete("f", grace=0)
    await run_for(h.clock, 1)
    assert h.workloads() == {}


async def test_notifier_drives_status_without_waiting_for_the_reconcile(tmp_path: Path) -> None:
    h = Harness(tmp_path, notify=True, reconcile_interval=3600.0)
    try:
        await h.start()
        h.kube.add(pod("fast"))
        await run_for(h.clock, 0.5)
        assert h.sim is not None
        # the simulated notifier polls on the fake clock too
        for _ in range(20):
            await h.clock.advance(0.25)
            await settle()
            p = h.kube.pod("fast")
            if p is not None and p["status"]["phase"] == "Running":
                break
        p = h.kube.pod("fast")
        assert p is not None and p["status"]["phase"] == "Running"
    finally:
        await h.stop()


class Scripted(Polled):
    """Polled simulated backend whose create/update/delete can be scripted per test."""

    def __init__(self, inner: SimulatedTranslator) -> None:
        super().__init__(inner)
        self.create_errors: list[Exception] = []
        self.delete_errors: list[Exception] = []
        self.list_errors: list[Exception] = []
        self.create_attempts = 0
        self.update_result = True
        self.updates: list[Any] = []

    async def create(self, pod: Any) -> Any:
        self.create_attempts += 1
        if self.create_errors:
            raise self.create_errors.pop(0)
        return await super().create(pod)

    async def list(self) -> Any:
        if self.list_errors:
            raise self.list_errors.pop(0)
        return await super().list()

    async def update(self, pod: Any, current: Any) -> bool:
        self.updates.append(pod)
        return self.update_result

    async def delete(self, ref: Any, *, grace_seconds: int) -> None:
        if self.delete_errors:
            raise self.delete_errors.pop(0)
        await super().delete(ref, grace_seconds=grace_seconds)


class ScriptedHarness(Harness):
    scripted: Scripted

    def translator(self) -> Any:
        self.scripted = Scripted(super().translator().inner)
        return self.scripted


@pytest.fixture
async def sh(tmp_path: Path) -> AsyncIterator[ScriptedHarness]:
    harness = ScriptedHarness(tmp_path, max_retries=3)
    yield harness
    await harness.stop()


async def test_spec_change_is_applied_in_place_or_reported(sh: ScriptedHarness) -> None:
    await sh.start()
    sh.kube.add(pod("u"))
    await run_for(sh.clock, 6)
    p = sh.kube.pod("u")
    assert p is not None
    p["metadata"]["labels"] = {"version": "2"}
    sh.kube._bump(p)
    sh.kube._emit("MODIFIED", p)
    await run_for(sh.clock, 1)
    assert len(sh.scripted.updates) == 1
    assert sh.scripted.updates[0].pod["metadata"]["labels"] == {"version": "2"}
    assert sh.kube.events("UpdateRequiresRecreate") == []
    sh.scripted.update_result = False
    p["spec"]["activeDeadlineSeconds"] = 3600
    sh.kube._bump(p)
    sh.kube._emit("MODIFIED", p)
    await run_for(sh.clock, 1)
    [ev] = sh.kube.events("UpdateRequiresRecreate")
    assert "spec.activeDeadlineSeconds" in ev["message"] and ev["type"] == "Warning"
    assert sh.sim is not None and sh.sim.calls["create"] == 1


async def test_changed_configmap_reaches_a_running_pod(sh: ScriptedHarness) -> None:
    await sh.start()
    sh.kube.add(
        {"kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}, "data": {"k": "1"}}
    )
    sh.kube.add(
        pod(
            "cm",
            containers=[{"name": "app", "volumeMounts": [{"name": "v", "mountPath": "/etc/c"}]}],
            volumes=[{"name": "v", "configMap": {"name": "c"}}],
        )
    )
    await run_for(sh.clock, 6)
    assert sh.scripted.updates == []
    cm = sh.kube.objects["/api/v1/namespaces/default/configmaps/c"]
    cm["data"] = {"k": "2"}
    sh.kube._bump(cm)
    await run_for(sh.clock, 11)  # one refresh interval
    [upd] = sh.scripted.updates
    [vol] = upd.volumes
    assert vol.files[0].content == b"2"


async def test_backend_down_at_startup_creates_nothing_until_it_answers(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    flag = tmp_path / "down"
    flag.touch()
    orig = h.translator

    def translator() -> Any:
        t = orig()
        assert h.sim is not None
        h.sim.unreachable_file = flag
        return t

    h.translator = translator  # type: ignore[method-assign]
    h.kube.add(pod("early"))
    ctl = PodController(
        h.kube,  # type: ignore[arg-type]
        h.translator(),
        EventRecorder(h.kube, host=NODE, clock=h.clock),  # type: ignore[arg-type]
        settings(),
        clock=h.clock,
    )
    h.ctl = ctl
    await ctl.start()
    await run_for(h.clock, 10)
    assert not ctl.ready.is_set()
    assert h.sim is not None and h.sim.calls["create"] == 0
    flag.unlink()
    await run_for(h.clock, 40)
    assert ctl.ready.is_set()
    assert h.sim.calls["create"] == 1
    await h.stop()


async def test_retryable_create_errors_end_in_failed_under_never(sh: ScriptedHarness) -> None:
    from translators.base import BackendUnavailable

    await sh.start()
    sh.scripted.create_errors = [BackendUnavailable("connection refused") for _ in range(5)]
    sh.kube.add(pod("r", restartPolicy="Never"))
    await run_for(sh.clock, 1)
    p = sh.kube.pod("r")
    assert p is not None and p["status"]["phase"] == "Pending"
    assert p["status"]["reason"] == "ProviderFailed" and "retrying" in p["status"]["message"]
    await run_for(sh.clock, 10)
    p = sh.kube.pod("r")
    assert p is not None and p["status"]["phase"] == "Failed"
    assert "after 3 attempt(s)" in p["status"]["message"]
    [ev] = sh.kube.events("ProviderCreateFailed")
    assert ev["count"] == 3


async def test_retryable_create_error_recovers(sh: ScriptedHarness) -> None:
    from translators.base import BackendThrottled

    await sh.start()
    sh.scripted.create_errors = [BackendThrottled("slow down", retry_after=2.0)]
    sh.kube.add(pod("t"))
    await run_for(sh.clock, 1)
    assert sh.sim is not None and sh.sim.calls["create"] == 0
    await run_for(sh.clock, 8)
    p = sh.kube.pod("t")
    assert p is not None and p["status"]["phase"] == "Running"
    assert "reason" not in p["status"]


async def test_backend_delete_failure_is_reported_and_retried(sh: ScriptedHarness) -> None:
    from translators.base import BackendUnavailable

    await sh.start()
    sh.kube.add(pod("d"))
    await run_for(sh.clock, 3)
    uid = sh.kube.pod("d")["metadata"]["uid"]  # type: ignore[index]
    sh.scripted.delete_errors = [BackendUnavailable("backend down")]
    sh.kube.user_delete("d", grace=0)
    await run_for(sh.clock, 1)
    [ev] = sh.kube.events("ProviderDeleteFailed")
    assert "backend down" in ev["message"]
    await run_for(sh.clock, 3)
    assert uid not in sh.workloads()


REFUSED = (
    'nomad POST /v1/jobs: 403 Permission denied (needs namespace "default" capability submit-job)'
)


async def test_a_refused_create_names_the_grant_and_is_retried_slowly_never_failed(
    sh: ScriptedHarness,
) -> None:
    """Credentials refused: not transient, not the pod's fault — Pending/ProviderForbidden,
    tried again every pods.backoff_max (not the quick backoff), and never Failed (Never)."""
    from translators.base import BackendAuthError

    await sh.start()
    sh.scripted.create_errors = [BackendAuthError(REFUSED, status=403) for _ in range(3)]
    sh.kube.add(pod("r", restartPolicy="Never"))
    await run_for(sh.clock, 1)
    p = sh.kube.pod("r")
    assert p is not None and p["status"]["phase"] == "Pending"
    assert p["status"]["reason"] == "ProviderForbidden"
    assert (
        p["status"]["message"] == f"the simulated backend refused vkgate's credentials: {REFUSED}"
    )
    [ev] = sh.kube.events("ProviderCreateFailed")
    assert ev["type"] == "Warning" and REFUSED in ev["message"]
    await run_for(sh.clock, 58)
    assert sh.scripted.create_attempts == 1  # no quick retries (max_retries is 3)
    await run_for(sh.clock, 126)  # attempts at 60 s and 120 s are refused, 180 s works
    p = sh.kube.pod("r")
    assert sh.scripted.create_attempts == 4
    assert p is not None and p["status"]["phase"] == "Running" and "reason" not in p["status"]


async def test_a_refused_delete_says_so_on_the_pod_and_is_retried(sh: ScriptedHarness) -> None:
    from translators.base import BackendAuthError

    await sh.start()
    sh.kube.add(pod("d"))
    await run_for(sh.clock, 11)
    assert sh.kube.pod("d")["status"]["phase"] == "Running"  # type: ignore[index]
    uid = sh.kube.pod("d")["metadata"]["uid"]  # type: ignore[index]
    refused = REFUSED.replace("POST /v1/jobs", "DELETE /v1/job/default-d")
    sh.scripted.delete_errors = [BackendAuthError(refused, status=403) for _ in range(2)]
    sh.kube.user_delete("d", grace=30)
    await run_for(sh.clock, 0.5)
    p = sh.kube.pod("d")
    assert p is not None and p["status"]["reason"] == "ProviderDeleteFailed"
    assert p["status"]["message"] == (
        f"deleting the workload in the simulated backend failed, retrying with backoff: {refused}"
    )
    assert p["status"]["phase"] == "Running"  # only reason and message were written
    [ev] = sh.kube.events("ProviderDeleteFailed")
    assert refused in ev["message"]
    await run_for(sh.clock, 10)  # retried with backoff: the third try works
    assert sh.scripted.delete_errors == []
    assert sh.kube.pod("d") is None and uid not in sh.workloads()


async def test_a_refused_first_list_is_an_event_on_each_pod_once_per_error(
    sh: ScriptedHarness,
) -> None:
    """No pod is created or deleted before the first backend list; a pod that stays Pending or
    Terminating meanwhile says why in its Events, not only in the log."""
    from translators.base import BackendAuthError

    refused = REFUSED.replace("POST", "GET").replace("submit-job", "list-jobs")
    sh.kube.add(pod("a"))
    sh.kube.add(pod("b"))
    translator = sh.translator()
    translator.list_errors = [BackendAuthError(refused, status=403) for _ in range(100)]
    sh.ctl = PodController(
        sh.kube,  # type: ignore[arg-type]
        translator,
        EventRecorder(sh.kube, host=NODE, clock=sh.clock),  # type: ignore[arg-type]
        settings(),
        clock=sh.clock,
    )
    await sh.ctl.start()
    await run_for(sh.clock, 5)  # a few refused lists (backoff from 1 s), the same error
    assert not sh.ctl.ready.is_set() and len(translator.list_errors) < 99
    events = sh.kube.events("BackendListFailed")
    assert sorted(e["involvedObject"]["name"] for e in events) == ["a", "b"]
    assert all(e["count"] == 1 and e["type"] == "Warning" for e in events)
    assert events[0]["message"] == (
        "the simulated backend's first list failed, so no pod of this node is created or"
        f" deleted until it succeeds (retried with backoff): {refused}"
    )
    translator.list_errors.clear()  # the policy was fixed
    await run_for(sh.clock, 32)
    assert sh.ctl.ready.is_set()
    p = sh.kube.pod("a")
    assert p is not None and p["status"]["phase"] == "Running"


async def test_active_deadline(h: Harness) -> None:
    await h.start()
    h.kube.add(pod("dl", activeDeadlineSeconds=20))
    await run_for(h.clock, 6)
    assert h.kube.pod("dl")["status"]["phase"] == "Running"  # type: ignore[index]
    await run_for(h.clock, 18)
    p = h.kube.pod("dl")
    assert p is not None and p["status"]["phase"] == "Failed"
    assert p["status"]["reason"] == "DeadlineExceeded"
    deadline = "Pod was active on the node longer than the specified deadline (20s)"
    assert p["status"]["message"] == deadline
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["message"] == deadline and "lost" not in term["message"]
    assert h.workloads() == {} or all(r["deleted_at"] for r in h.workloads().values())


async def test_deleting_a_terminal_pod_purges_and_deletes_at_once(h: Harness) -> None:
    await h.start()
    h.kube.add(pod("done", restartPolicy="Never", annotations={"vkgate.io/sim-exit-code": "0"}))
    await run_for(h.clock, 12)
    assert h.kube.pod("done")["status"]["phase"] == "Succeeded"  # type: ignore[index]
    h.kube.user_delete("done", grace=30)
    await run_for(h.clock, 0.5)
    assert h.kube.pod("done") is None
    assert h.workloads() == {}


async def test_workload_vanished_while_gateway_down_is_lost_not_resubmitted(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    await h.start()
    h.kube.add(pod("r", restartPolicy="Never"))
    h.kube.add(pod("a"))  # restartPolicy Always
    await run_for(h.clock, 6)
    assert h.kube.pod("r")["status"]["phase"] == "Running"  # type: ignore[index]
    h.kube.add(pod("y"))  # submitted, never seen running
    await run_for(h.clock, 0.5)
    assert h.kube.pod("y")["status"]["phase"] == "Pending"  # type: ignore[index]
    await h.stop()
    h.state_file.write_text("{}")  # the backend lost everything meanwhile
    await h.start()
    await run_for(h.clock, 2)
    r = h.kube.pod("r")
    assert (
        r is not None and r["status"]["phase"] == "Failed" and r["status"]["reason"] == "NotFound"
    )
    # "y" (never ran) comes back; "a" (Always) runs again with a restart counted
    assert h.sim is not None and h.sim.calls["create"] == 2
    await run_for(h.clock, 6)
    assert h.kube.pod("y")["status"]["phase"] == "Running"  # type: ignore[index]
    a = h.kube.pod("a")
    assert a is not None and a["status"]["phase"] == "Running"
    assert a["status"]["containerStatuses"][0]["restartCount"] == 1
    await h.stop()


async def test_a_workload_that_starts_at_once_gets_one_status_write(tmp_path: Path) -> None:
    """Pending is not written when the backend reports Running within FIRST_STATUS_DELAY."""
    harness = Harness(tmp_path, reconcile_interval=FIRST_STATUS_DELAY / 2)
    harness.translator = lambda: Polled(_fast(harness))  # type: ignore[method-assign]
    try:
        await harness.start()
        harness.kube.add(pod("quick"))
        await run_for(harness.clock, 2)
        p = harness.kube.pod("quick")
        assert p is not None and p["status"]["phase"] == "Running"
        assert harness.kube.status_writes("quick") == 1
    finally:
        await harness.stop()


def _fast(harness: Harness) -> SimulatedTranslator:
    harness.sim = SimulatedTranslator(
        sim_context(harness.clock, NODE),
        state_file=str(harness.state_file),
        start_delay=FIRST_STATUS_DELAY / 5,
    )
    return harness.sim


@pytest.mark.parametrize("failures", [1, 2])
async def test_a_lost_workload_whose_re_create_fails_counts_one_restart(
    sh: ScriptedHarness, failures: int
) -> None:
    """The backend lost the workload and refuses the first re-creates (a Nomad agent back
    from a crash answers lists before it takes jobs): one loss is one restart, however many
    attempts the re-create takes — a retry is not the workload lost again."""
    from translators.base import BackendUnavailable

    await sh.start()
    sh.kube.add(pod("v"))
    await run_for(sh.clock, 6)
    assert sh.kube.pod("v")["status"]["phase"] == "Running"  # type: ignore[index]
    assert sh.sim is not None
    sh.scripted.create_errors = [BackendUnavailable("no cluster leader")] * failures
    sh.sim._records.clear()  # lost by the backend
    await run_for(sh.clock, 20)
    p = sh.kube.pod("v")
    assert p is not None
    assert sh.scripted.create_attempts == 2 + failures
    assert p["status"]["phase"] == "Running", p["status"]
    assert p["status"]["containerStatuses"][0]["restartCount"] == 1
    (event,) = sh.kube.events("WorkloadLost")
    assert event.get("count", 1) == 1
