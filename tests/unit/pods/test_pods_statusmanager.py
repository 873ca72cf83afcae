"""The status manager: the one writer of PodStatus, its inputs, its echo memory (fake API server,
fake clock)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pods_fakes import FakeKube

from gateway.kube.events import EventRecorder
from gateway.pods.plan import DeleteFailed, FromWorkload, NotCreated
from gateway.pods.status.manager import StatusManager, Write
from translators.base import ContainerState, Phase, PodRef, WorkloadState
from vkgate_core.clock import FakeClock
from vkgate_core.kubetypes import Pod


class World:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.kube = FakeKube(self.clock)
        events = EventRecorder(self.kube, host="vk-1", clock=self.clock)  # type: ignore[arg-type]
        self.status = StatusManager(
            self.kube,  # type: ignore[arg-type]
            events,
            clock=self.clock,
            backend="nomad",
            host_ip=lambda: "127.0.0.9",
        )
        self.uid = self.kube.add(
            {
                "kind": "Pod",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"nodeName": "vk-1", "containers": [{"name": "app"}]},
            }
        )["metadata"]["uid"]

    def pod(self) -> Pod:
        p = self.kube.pod("web")
        assert p is not None
        return copy.deepcopy(p)  # type: ignore[return-value]

    def state(self, phase: Phase, *containers: ContainerState) -> WorkloadState:
        return WorkloadState(
            ref=PodRef("default", "web", self.uid),
            backend_id="web-alloc",
            phase=phase,
            placed=True,
            containers=containers,
        )


@pytest.fixture
def w() -> World:
    return World()


RUNNING = ContainerState(name="app", state="running", ready=True, container_id="web-alloc/app")


def conditions(pod: Pod) -> dict[str, str]:
    return {c["type"]: c["status"] for c in pod["status"]["conditions"]}


async def test_the_first_status_of_a_workload_not_started_yet_is_held(w: World) -> None:
    """Latest status wins: Pending is not written right after the create, Running is."""
    created = FromWorkload(w.state(Phase.PENDING))
    assert await w.status.set_status(w.pod(), created, first=True) is Write.HELD
    assert w.kube.status_writes("web") == 0
    started = FromWorkload(w.state(Phase.RUNNING, RUNNING))
    assert await w.status.set_status(w.pod(), started, first=True) is Write.WRITTEN
    assert w.pod()["status"]["phase"] == "Running"
    assert w.status.writes["default/web"] == 1 and w.status.stats["status_writes"] == 1


async def test_our_own_write_is_the_base_until_its_echo_arrives(w: World) -> None:
    stale = w.pod()  # the cache has not seen our write yet
    running = FromWorkload(w.state(Phase.RUNNING, RUNNING))
    assert await w.status.set_status(stale, running) is Write.WRITTEN
    assert await w.status.set_status(stale, running) is Write.UNCHANGED
    assert w.kube.status_writes("web") == 1
    echo = w.pod()
    assert w.status.is_own_echo(echo)
    assert not w.status.is_own_echo(echo)  # an echo is seen once


async def test_a_probe_calling_a_container_unready_makes_the_pod_unready(w: World) -> None:
    running = FromWorkload(w.state(Phase.RUNNING, RUNNING))
    await w.status.set_status(w.pod(), running)
    assert conditions(w.pod())["Ready"] == "True"
    assert w.status.set_container_readiness(w.uid, "app", False)
    assert not w.status.set_container_readiness(w.uid, "app", False)  # no change
    assert await w.status.set_status(w.pod(), running) is Write.WRITTEN
    pod = w.pod()
    assert conditions(pod)["Ready"] == "False" and conditions(pod)["ContainersReady"] == "False"
    assert pod["status"]["containerStatuses"][0]["ready"] is False


async def test_restart_counts_go_on_over_a_re_created_workload(w: World) -> None:
    restarted = ContainerState(
        name="app", state="running", ready=True, container_id="web-alloc/app", restart_count=2
    )
    await w.status.set_status(w.pod(), FromWorkload(w.state(Phase.RUNNING, restarted)))
    w.status.workload_recreated(w.pod())
    await w.status.set_status(w.pod(), FromWorkload(w.state(Phase.RUNNING, RUNNING)))
    assert w.pod()["status"]["containerStatuses"][0]["restartCount"] == 3


async def test_a_final_status_stays_final_when_a_delete_fails(w: World) -> None:
    await w.status.set_status(w.pod(), NotCreated("Blocked", "config"))
    pod: Any = w.pod()
    assert await w.status.set_status(pod, DeleteFailed("backend down")) is Write.WRITTEN
    assert w.pod()["status"]["reason"] == "ProviderDeleteFailed"
    assert w.pod()["status"]["phase"] == "Pending"  # only reason and message change
    pod = w.pod()
    pod["status"]["phase"] = "Failed"
    assert await w.status.set_status(pod, DeleteFailed("backend down")) is Write.UNCHANGED


async def test_a_status_for_a_replaced_or_deleted_pod_is_dropped(w: World) -> None:
    pod = w.pod()
    running = FromWorkload(w.state(Phase.RUNNING, RUNNING))
    path = "/api/v1/namespaces/default/pods/web"
    w.kube.objects[path]["metadata"]["uid"] = "a-new-pod-of-that-name"
    assert await w.status.set_status(pod, running) is Write.GONE  # the uid precondition failed
    assert w.kube.objects[path]["status"].get("phase") == "Pending"
    del w.kube.objects[path]
    assert await w.status.set_status(pod, running) is Write.GONE
