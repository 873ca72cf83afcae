"""PodStatus mapping, condition transition times, diffing (no write when unchanged), patches."""

from __future__ import annotations

import datetime as _dt
from dataclasses import replace
from typing import Any

import pytest
from status_merge import apply_patch

from gateway.pods.status import rules as st
from translators.base import ContainerState, Phase, PodRef, WorkloadState

T0 = _dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=_dt.UTC)


def at(seconds: float) -> _dt.datetime:
    return T0 + _dt.timedelta(seconds=seconds)


def make_pod(**spec: Any) -> dict[str, Any]:
    spec.setdefault("containers", [{"name": "app", "image": "nginx:1.27"}])
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"nodeName": "vk", "restartPolicy": "Always", **spec},
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


def state(*containers: ContainerState, **kw: Any) -> WorkloadState:
    kw.setdefault("phase", Phase.RUNNING)
    kw.setdefault("placed", True)
    kw.setdefault("pod_ip", "10.88.0.5")
    return WorkloadState(ref=PodRef("ns", "p", "u1"), backend_id="w1", containers=containers, **kw)


def running(name: str = "app", *, ready: bool = True, **kw: Any) -> ContainerState:
    return ContainerState(
        name=name, state="running", started_at=at(1), ready=ready, container_id=f"id-{name}", **kw
    )


def conds(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def write(pod: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """What the API server holds after our patch (applied locally)."""
    patch = st.status_patch(pod.get("status"), new, "u1")
    assert patch is not None and patch["metadata"] == {"uid": "u1"}
    return {**pod, "status": apply_patch(pod.get("status") or {}, patch["status"])}


def test_running_pod_has_every_condition_and_field() -> None:
    pod = make_pod()
    s = st.from_workload(pod, state(running()), now=at(2), host_ip="127.0.0.2", backend="sim")
    assert s["phase"] == "Running"
    assert [c["type"] for c in s["conditions"]] == list(st.OUR_CONDITIONS)
    assert all(c["status"] == "True" for c in s["conditions"])
    [cs] = s["containerStatuses"]
    assert cs["state"] == {"running": {"startedAt": "2026-03-01T10:00:01Z"}}
    assert cs["containerID"] == "sim://id-app"
    assert cs["ready"] is True and cs["started"] is True and cs["restartCount"] == 0
    assert cs["image"] == "nginx:1.27"
    assert s["podIP"] == "10.88.0.5" and s["podIPs"] == [{"ip": "10.88.0.5"}]
    assert s["hostIP"] == "127.0.0.2" and s["hostIPs"] == [{"ip": "127.0.0.2"}]
    assert s["startTime"] == "2026-03-01T10:00:02Z"
    assert s["qosClass"] == "BestEffort"


def test_pending_pod_waits_in_container_creating() -> None:
    pod = make_pod()
    s = st.pending(pod, now=at(0), host_ip="127.0.0.2")
    assert s["phase"] == "Pending"
    c = conds(s)
    assert c["PodScheduled"]["status"] == "True"
    assert c["PodReadyToStartContainers"]["status"] == "False"
    assert c["Initialized"]["status"] == "True"
    assert c["ContainersReady"] == {
        "type": "ContainersReady",
        "status": "False",
        "reason": "ContainersNotReady",
        "message": "containers with unready status: [app]",
        "lastTransitionTime": "2026-03-01T10:00:00Z",
    }
    assert c["Ready"]["reason"] == "ContainersNotReady"
    assert s["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert "podIP" not in s


def test_transition_times_change_only_on_flips_and_unchanged_status_is_not_written() -> None:
    pod = make_pod()
    pod = write(pod, st.pending(pod, now=at(0), host_ip="h"))
    # same situation later: nothing to write
    assert st.status_patch(pod["status"], st.pending(pod, now=at(5), host_ip="h"), "u1") is None
    pod = write(pod, st.from_workload(pod, state(running()), now=at(10), host_ip="h", backend="b"))
    c = conds(pod["status"])
    assert c["PodScheduled"]["lastTransitionTime"] == "2026-03-01T10:00:00Z"
    assert c["Initialized"]["lastTransitionTime"] == "2026-03-01T10:00:00Z"
    assert c["Ready"]["lastTransitionTime"] == "2026-03-01T10:00:10Z"
    assert c["PodReadyToStartContainers"]["lastTransitionTime"] == "2026-03-01T10:00:10Z"
    assert pod["status"]["startTime"] == "2026-03-01T10:00:00Z"  # first seen, kept
    # the same backend state a minute later: no write
    again = st.from_workload(pod, state(running()), now=at(70), host_ip="h", backend="b")
    assert st.status_patch(pod["status"], again, "u1") is None
    # container becomes unready: Ready flips, PodScheduled keeps its time
    pod = write(
        pod,
        st.from_workload(pod, state(running(ready=False)), now=at(80), host_ip="h", backend="b"),
    )
    c = conds(pod["status"])
    assert (
        c["Ready"]["status"] == "False"
        and c["Ready"]["lastTransitionTime"] == "2026-03-01T10:01:20Z"
    )
    assert c["PodScheduled"]["lastTransitionTime"] == "2026-03-01T10:00:00Z"


def test_patch_is_strategic_merge_with_uid_precondition() -> None:
    pod = make_pod()
    pod = write(pod, st.pending(pod, now=at(0), host_ip="h"))
    new = st.from_workload(pod, state(running()), now=at(3), host_ip="h", backend="b")
    patch = st.status_patch(pod["status"], new, "u1")
    assert patch is not None
    body = patch["status"]
    assert body["phase"] == "Running"
    # conditions merge on type: only the flipped ones, with a deleted reason as null
    changed = {c["type"]: c for c in body["conditions"]}
    assert "PodScheduled" not in changed and "Initialized" not in changed
    assert changed["Ready"]["status"] == "True"
    assert changed["Ready"]["reason"] is None and changed["Ready"]["message"] is None
    assert body["$setElementOrder/conditions"] == [{"type": t} for t in st.OUR_CONDITIONS]
    # container statuses are atomic: the whole list
    assert body["containerStatuses"][0]["state"] == {
        "running": {"startedAt": "2026-03-01T10:00:01Z"}
    }
    assert body["podIPs"] == [{"ip": "10.88.0.5"}]


def test_others_fields_and_conditions_are_kept() -> None:
    pod = make_pod(readinessGates=[{"conditionType": "example.com/lb"}])
    pod["status"].update(
        nominatedNodeName="other",
        qosClass="Burstable",
        conditions=[
            {
                "type": "example.com/lb",
                "status": "False",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            },
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
        ],
    )
    s = st.from_workload(pod, state(running()), now=at(1), host_ip="h", backend="b")
    c = conds(s)
    assert c["example.com/lb"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert c["DisruptionTarget"]["reason"] == "EvictionByEvictionAPI"
    assert s["nominatedNodeName"] == "other" and s["qosClass"] == "Burstable"
    assert c["ContainersReady"]["status"] == "True"
    assert c["Ready"]["status"] == "False" and c["Ready"]["reason"] == "ReadinessGatesNotReady"
    assert 'readiness gate "example.com/lb" is not "True"' in c["Ready"]["message"]
    # our patch never mentions their conditions
    patch = st.status_patch(pod["status"], s, "u1")
    assert patch is not None
    assert {c["type"] for c in patch["status"]["conditions"]}.isdisjoint(
        {"example.com/lb", "DisruptionTarget"}
    )
    pod["status"]["conditions"][0]["status"] = "True"
    assert (
        conds(st.from_workload(pod, state(running()), now=at(1), host_ip="h", backend="b"))[
            "Ready"
        ]["status"]
        == "True"
    )


def test_missing_readiness_gate_condition() -> None:
    pod = make_pod(readinessGates=[{"conditionType": "x"}])
    s = st.from_workload(pod, state(running()), now=at(1), host_ip="h", backend="b")
    assert (
        conds(s)["Ready"]["message"]
        == 'corresponding condition of pod readiness gate "x" does not exist.'
    )


def exited(code: int, name: str = "app") -> ContainerState:
    return ContainerState(
        name=name,
        state="terminated",
        exit_code=code,
        reason="Completed" if code == 0 else "Error",
        started_at=at(1),
        finished_at=at(2),
        container_id=f"id-{name}",
    )


@pytest.mark.parametrize(
    ("policy", "codes", "phase"),
    [
        ("Never", [0], "Succeeded"),
        ("Never", [3], "Failed"),
        ("Never", [0, 3], "Failed"),
        ("OnFailure", [0], "Succeeded"),
        ("OnFailure", [1], "Running"),  # will be restarted
        ("Always", [0], "Running"),
    ],
)
def test_phase_from_exits(policy: str, codes: list[int], phase: str) -> None:
    names = [f"c{i}" for i in range(len(codes))]
    pod = make_pod(restartPolicy=policy, containers=[{"name": n, "image": "i"} for n in names])
    s = st.from_workload(
        pod,
        state(*[exited(c, n) for c, n in zip(codes, names, strict=True)]),
        now=at(3),
        host_ip="h",
        backend="b",
    )
    assert s["phase"] == phase
    if phase in st.TERMINAL:
        c = conds(s)
        assert c["Ready"]["status"] == "False"
        assert c["ContainersReady"]["reason"] == (
            "PodCompleted" if phase == "Succeeded" else "PodFailed"
        )
        assert c["PodReadyToStartContainers"]["status"] == "False"


def test_exit_code_three_under_never() -> None:
    pod = make_pod(restartPolicy="Never")
    s = st.from_workload(pod, state(exited(3)), now=at(3), host_ip="h", backend="b")
    term = s["containerStatuses"][0]["state"]["terminated"]
    assert s["phase"] == "Failed"
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    assert term["containerID"] == "b://id-app"


def test_terminal_pod_status_is_frozen() -> None:
    pod = make_pod(restartPolicy="Never")
    pod = write(pod, st.from_workload(pod, state(exited(0)), now=at(3), host_ip="h", backend="b"))
    assert pod["status"]["phase"] == "Succeeded"
    for build in (
        lambda: st.from_workload(pod, state(running()), now=at(9), host_ip="h", backend="b"),
        lambda: st.pending(pod, now=at(9), host_ip="h"),
        lambda: st.lost(pod, now=at(9), host_ip="h", backend="b"),
        lambda: st.rejected(pod, now=at(9), host_ip="h", reason="X", message="y"),
    ):
        assert st.status_patch(pod["status"], build(), "u1") is None


def test_terminated_container_never_runs_again_under_never() -> None:
    pod = make_pod(
        restartPolicy="Never", containers=[{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]
    )
    pod = write(
        pod,
        st.from_workload(
            pod, state(exited(0, "a"), running("b")), now=at(3), host_ip="h", backend="x"
        ),
    )
    s = st.from_workload(
        pod, state(running("a"), running("b")), now=at(4), host_ip="h", backend="x"
    )
    a = next(c for c in s["containerStatuses"] if c["name"] == "a")
    assert "terminated" in a["state"]


def test_backend_reported_failure_wins_and_closes_containers() -> None:
    pod = make_pod()
    s = st.from_workload(
        pod,
        state(running(), phase=Phase.FAILED, reason="DeadlineExceeded", message="too slow"),
        now=at(5),
        host_ip="h",
        backend="b",
    )
    assert (
        s["phase"] == "Failed" and s["reason"] == "DeadlineExceeded" and s["message"] == "too slow"
    )
    term = s["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 137 and term["startedAt"] == "2026-03-01T10:00:01Z"


def test_lost_workload() -> None:
    pod = make_pod()
    pod = write(pod, st.from_workload(pod, state(running()), now=at(2), host_ip="h", backend="b"))
    s = st.lost(pod, now=at(60), host_ip="h", backend="nomad")
    assert s["phase"] == "Failed" and s["reason"] == "NotFound"
    assert "nomad backend" in s["message"]
    term = s["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 137
    assert term["reason"] == "ContainerStatusUnknown"
    assert "nomad backend" in term["message"]
    assert (
        term["startedAt"] == "2026-03-01T10:00:01Z" and term["finishedAt"] == "2026-03-01T10:01:00Z"
    )
    assert s["podIP"] == "10.88.0.5"  # kept


def test_deleted_status() -> None:
    pod = make_pod()
    pod = write(pod, st.from_workload(pod, state(running()), now=at(2), host_ip="h", backend="b"))
    gone = st.deleted(pod, None, now=at(9), host_ip="h", backend="b")
    assert gone["phase"] == "Failed"
    assert gone["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    done = st.deleted(pod, state(exited(0)), now=at(9), host_ip="h", backend="b")
    assert done["phase"] == "Succeeded"


def test_rejected_pod() -> None:
    pod = make_pod()
    s = st.rejected(
        pod, now=at(0), host_ip="h", reason="UnsupportedVolume", message='volume "v": hostPath'
    )
    assert s["phase"] == "Failed" and s["reason"] == "UnsupportedVolume"
    assert s["containerStatuses"][0]["state"]["waiting"]["reason"] == "UnsupportedVolume"


def test_pending_with_config_error() -> None:
    pod = make_pod(containers=[{"name": "a", "image": "i"}, {"name": "b", "image": "i"}])
    s = st.pending(
        pod,
        now=at(0),
        host_ip="h",
        waiting={"a": ("CreateContainerConfigError", 'configmap "x" not found')},
    )
    a, b = s["containerStatuses"]
    assert a["state"]["waiting"] == {
        "reason": "CreateContainerConfigError",
        "message": 'configmap "x" not found',
    }
    assert b["state"]["waiting"] == {"reason": "ContainerCreating"}


def test_init_containers_and_sidecars() -> None:
    pod = make_pod(
        initContainers=[
            {"name": "setup", "image": "i"},
            {"name": "proxy", "image": "i", "restartPolicy": "Always"},
        ]
    )
    s = st.pending(pod, now=at(0), host_ip="h")
    assert s["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    c = conds(s)
    assert c["Initialized"]["message"] == "containers with incomplete status: [setup proxy]"
    init_running = state(exited(0, "setup"), running("proxy"), running("app"), phase=Phase.RUNNING)
    init_running = WorkloadState(
        ref=init_running.ref,
        backend_id="w",
        phase=Phase.RUNNING,
        placed=True,
        init_containers=(exited(0, "setup"), running("proxy")),
        containers=(running("app"),),
    )
    s = st.from_workload(pod, init_running, now=at(3), host_ip="h", backend="b")
    assert s["phase"] == "Running"
    assert [x["name"] for x in s["initContainerStatuses"]] == ["setup", "proxy"]
    assert all(c["status"] == "True" for c in s["conditions"])
    # init failure under Never
    pod_never = make_pod(restartPolicy="Never", initContainers=[{"name": "setup", "image": "i"}])
    failing = WorkloadState(
        ref=init_running.ref,
        backend_id="w",
        phase=Phase.PENDING,
        placed=True,
        init_containers=(exited(1, "setup"),),
    )
    s = st.from_workload(pod_never, failing, now=at(3), host_ip="h", backend="b")
    assert s["phase"] == "Failed"
    assert conds(s)["Initialized"]["status"] == "False"


def test_restarts_and_last_state() -> None:
    pod = make_pod()
    crash = running(restart_count=2, last_terminated=exited(1))
    s = st.from_workload(pod, state(crash), now=at(3), host_ip="h", backend="b")
    cs = s["containerStatuses"][0]
    assert cs["restartCount"] == 2
    assert cs["lastState"]["terminated"]["exitCode"] == 1


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        ([{}], "BestEffort"),
        ([{"requests": {"cpu": "100m"}}], "Burstable"),
        ([{"limits": {"cpu": "1", "memory": "1Gi"}}], "Guaranteed"),
        (
            [{"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}],
            "Guaranteed",
        ),
        ([{"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}], "Burstable"),
        ([{"limits": {"cpu": "1", "memory": "1Gi"}}, {}], "Burstable"),
        ([{"limits": {"cpu": "1"}}], "Burstable"),
    ],
)
def test_qos_class(resources: list[dict[str, Any]], qos: str) -> None:
    pod = make_pod(containers=[{"name": f"c{i}", "resources": r} for i, r in enumerate(resources)])
    assert st.qos_class(pod) == qos


def test_qos_computed_when_absent() -> None:
    pod = make_pod(
        containers=[{"name": "app", "image": "i", "resources": {"requests": {"cpu": "1"}}}]
    )
    del pod["status"]["qosClass"]
    assert st.pending(pod, now=at(0), host_ip="h")["qosClass"] == "Burstable"


def test_transition_events() -> None:
    pod = make_pod()
    pending = st.pending(pod, now=at(0), host_ip="h")
    run = st.from_workload(pod, state(running()), now=at(1), host_ip="h", backend="b")
    assert [e[1] for e in st.transition_events(pending, run)] == ["Started"]
    assert st.transition_events(run, run) == []
    restarted = st.from_workload(
        pod,
        state(running(restart_count=1, last_terminated=exited(2))),
        now=at(2),
        host_ip="h",
        backend="b",
    )
    assert [e[1] for e in st.transition_events(run, restarted)] == ["Started", "BackOff"]
    failed = st.from_workload(
        make_pod(restartPolicy="Never"), state(exited(3)), now=at(3), host_ip="h", backend="b"
    )
    [ev] = st.transition_events(run, failed)
    assert ev[:2] == ("Warning", "Failed") and "code 3" in ev[2] and ev[3] == "spec.containers{app}"


def test_backoff_once_per_crashloop_wait_and_no_failed_event() -> None:
    """The kubelet's Warning BackOff for each back-off period (docs/design/probes.md, "Restart
    backoff"), whatever the exit code; no "Failed: Error: back-off …" (the kubelet has none)."""
    pod = make_pod()
    run = st.from_workload(pod, state(running()), now=at(1), host_ip="h", backend="b")

    def waiting(restarts: int, code: int, delay: str) -> dict[str, Any]:
        c = ContainerState(
            name="app",
            reason="CrashLoopBackOff",
            message=f"back-off {delay} restarting failed container=app pod=p_ns(u)",
            restart_count=restarts,
            last_terminated=exited(code),
        )
        return st.from_workload(pod, state(c), now=at(2), host_ip="h", backend="b")

    first = waiting(0, 1, "10s")
    [ev] = st.transition_events(run, first)
    assert ev[:2] == ("Warning", "BackOff") and "(exit code 1)" in ev[2]
    assert st.transition_events(first, waiting(0, 1, "10s")) == []  # the same wait
    again = st.from_workload(
        pod,
        state(running(restart_count=1, last_terminated=exited(1))),
        now=at(3),
        host_ip="h",
        backend="b",
    )
    # the restart ends a wait already reported: Started only
    assert [e[1] for e in st.transition_events(first, again)] == ["Started"]
    assert [e[1] for e in st.transition_events(again, waiting(1, 0, "10s"))] == ["BackOff"]
    # a new wait seen straight after the last one (the run between them not seen)
    assert [e[1] for e in st.transition_events(first, waiting(1, 1, "4m55s"))] == ["BackOff"]


def test_a_container_that_never_started_gets_the_backends_words_not_an_exit_code() -> None:
    pod = make_pod(restartPolicy="Never")
    pending = st.pending(pod, now=at(0), host_ip="h")
    words = "Driver Failure: binary not found"
    never = replace(exited(128), reason="StartError", message=words)
    failed = st.from_workload(
        pod, state(never, phase=Phase.FAILED), now=at(3), host_ip="h", backend="b"
    )
    [ev] = st.transition_events(pending, failed)
    assert ev[:3] == ("Warning", "Failed", f"Error: {words}")
    retrying = ContainerState(name="app", reason="RunContainerError", message=words)
    waiting = st.from_workload(
        pod, state(retrying, phase=Phase.PENDING), now=at(3), host_ip="h", backend="b"
    )
    [ev] = st.transition_events(pending, waiting)
    assert ev[:3] == ("Warning", "Failed", f"Error: {words}")


def test_normalize_ignores_what_the_api_server_omits() -> None:
    a = {
        "phase": "Running",
        "reason": "",
        "message": None,
        "podIPs": [],
        "containerStatuses": [{"name": "a", "lastState": {}}],
    }
    b = {"phase": "Running", "containerStatuses": [{"name": "a"}]}
    assert st.normalize(a) == st.normalize(b)
    assert st.status_patch(a, b, "u") is None


def test_removed_condition_and_ip_list_patch() -> None:
    old = {
        "conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}],
        "podIPs": [{"ip": "1"}],
    }
    new = {
        "conditions": [{"type": "A", "status": "True"}],
        "podIPs": [{"ip": "1"}, {"ip": "fd::1"}],
    }
    patch = st.status_patch(old, new, "u")
    assert patch is not None
    body = patch["status"]
    assert {"type": "B", "$patch": "delete"} in body["conditions"]
    assert body["podIPs"] == [{"ip": "fd::1"}]
    assert apply_patch(old, body) == new
