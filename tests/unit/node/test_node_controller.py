"""NodeController against the stateful fake API, with a fake clock (no real sleeps)."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from node_fakes import FakeApi, FakeTranslator, advance, settle

from gateway.config import Settings
from gateway.errors import StartupError
from gateway.kube.client import KubeClient
from gateway.kube.events import EventRecorder
from gateway.node.controller import NodeController
from vkgate_core.clock import FakeClock

SEMVER = re.compile(r"^v\d+\.\d+\.\d+(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$")


def settings(**node: Any) -> Settings:
    s = Settings()
    s.node.name = "vk-test"
    s.node.labels = {"team": "ml"}
    s.kubelet.port = 10250
    for k, v in node.items():
        setattr(s.node, k, v)
    return s


@pytest.fixture
def backend() -> FakeTranslator:
    return FakeTranslator()


@pytest.fixture
async def controller(
    api: FakeApi,
    backend: FakeTranslator,
    clock: FakeClock,
    make_client: Callable[[FakeApi], KubeClient],
) -> AsyncIterator[Callable[..., NodeController]]:
    made: list[NodeController] = []

    def make(**node: Any) -> NodeController:
        client = make_client(api)
        nc = NodeController(
            client,
            backend,
            settings(**node),
            clock=clock,
            events=EventRecorder(client, host="vk-test", clock=clock),
        )
        made.append(nc)
        return nc

    yield make
    for nc in made:
        await nc.stop()
        await nc.client.aclose()


def cond(node: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in node["status"]["conditions"] if c["type"] == ctype)


async def test_registers_node_with_labels_taint_capacity_conditions(controller, api: FakeApi):
    nc = controller()
    await nc.start()
    node = api.node()
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == "vk-test"
    assert labels["kubernetes.io/os"] == "linux"
    assert labels["kubernetes.io/arch"] == "amd64"
    assert labels["beta.kubernetes.io/os"] == "linux"
    assert labels["type"] == "virtual-kubelet"
    assert labels["vkgate.io/backend"] == "simulated"
    assert labels["team"] == "ml"
    # load balancers must not send traffic to a virtual node
    assert labels["node.kubernetes.io/exclude-from-external-load-balancers"] == "true"
    assert node["spec"]["taints"] == [
        {"key": "virtual-kubelet.io/provider", "value": "simulated", "effect": "NoSchedule"}
    ]
    status = node["status"]
    assert status["capacity"] == {
        "cpu": "8",
        "memory": "32Gi",
        "pods": "110",
        "nvidia.com/gpu": "2",
    }
    assert status["allocatable"] == status["capacity"]
    assert {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]} == {
        "Ready": ("True", "KubeletReady"),
        "MemoryPressure": ("False", "KubeletHasSufficientMemory"),
        "DiskPressure": ("False", "KubeletHasNoDiskPressure"),
        "PIDPressure": ("False", "KubeletHasSufficientPID"),
        "NetworkUnavailable": ("False", "NetworkProvidedByBackend"),
    }
    assert status["addresses"] == [
        {"type": "InternalIP", "address": "127.0.0.1"},
        {"type": "Hostname", "address": "vk-test"},
    ]
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    info = status["nodeInfo"]
    assert SEMVER.match(info["kubeletVersion"]) and "-vkgate." in info["kubeletVersion"]
    assert info["containerRuntimeVersion"] == "simulated://0.1"
    assert info["kernelVersion"] == "5.15-sim"
    assert re.fullmatch(r"[0-9a-f]{32}", info["machineID"])
    assert info["bootID"] == nc.boot_id
    # no delete anywhere, node created once
    assert not api.writes("DELETE")
    assert len(api.writes("POST", "/api/v1/nodes")) == 1


async def test_exclude_from_load_balancers_label_can_be_turned_off(controller, api: FakeApi):
    nc = controller(exclude_from_load_balancers=False)
    await nc.start()
    labels = api.node()["metadata"]["labels"]
    assert "node.kubernetes.io/exclude-from-external-load-balancers" not in labels
    assert labels["type"] == "virtual-kubelet"


async def test_machine_id_stable_and_boot_id_per_process(controller, api: FakeApi):
    a = controller()
    await a.start()
    first = dict(api.node()["status"]["nodeInfo"])
    await a.stop()
    b = controller()
    await b.start()
    second = api.node()["status"]["nodeInfo"]
    assert second["machineID"] == first["machineID"]
    assert second["systemUUID"] == first["systemUUID"]
    assert second["bootID"] != first["bootID"]


async def test_internal_ip_setting_wins(controller, api: FakeApi):
    nc = controller(internal_ip="127.0.0.7")
    await nc.start()
    assert api.node()["status"]["addresses"][0] == {"type": "InternalIP", "address": "127.0.0.7"}
    assert nc.internal_ip == "127.0.0.7"


async def test_capacity_overrides_and_disabled_taint(controller, api: FakeApi):
    nc = controller(capacity={"pods": "20", "cpu": "500m"}, disable_taint=True)
    await nc.start()
    node = api.node()
    assert node["status"]["capacity"]["pods"] == "20"
    assert node["status"]["capacity"]["cpu"] == "500m"
    assert node["status"]["capacity"]["memory"] == "32Gi"
    assert not node["spec"].get("taints")


async def test_existing_node_is_patched_keeping_foreign_labels_taints_conditions(
    controller, api: FakeApi
):
    api.put_node(
        {
            "metadata": {
                "name": "vk-test",
                "labels": {"kubernetes.io/hostname": "vk-test", "owner": "someone-else"},
            },
            "spec": {
                "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoExecute"}],
            },
            "status": {
                "conditions": [
                    {"type": "FrequentKernelDeadlock", "status": "False", "reason": "NPD"}
                ],
                "capacity": {"example.com/dongle": "4"},
            },
        }
    )
    uid = api.node()["metadata"]["uid"]
    nc = controller()
    await nc.start()
    node = api.node()
    assert node["metadata"]["uid"] == uid  # patched, not recreated
    assert not api.writes("DELETE") and not api.writes("POST", "/api/v1/nodes")
    assert node["metadata"]["labels"]["owner"] == "someone-else"
    assert node["metadata"]["labels"]["type"] == "virtual-kubelet"
    assert {t["key"] for t in node["spec"]["taints"]} == {
        "dedicated",
        "virtual-kubelet.io/provider",
    }
    types = {c["type"] for c in node["status"]["conditions"]}
    assert "FrequentKernelDeadlock" in types and "Ready" in types
    assert node["status"]["capacity"]["example.com/dongle"] == "4"
    assert node["status"]["capacity"]["cpu"] == "8"


async def test_existing_node_with_our_taint_sends_no_taint_patch(controller, api: FakeApi):
    nc = controller()
    await nc.start()
    await nc.stop()
    api.requests.clear()
    nc2 = controller()
    await nc2.start()
    metadata_patches = [r for r in api.writes("PATCH") if not r[1].endswith("/status")]
    assert metadata_patches == []  # labels and taint already right: nothing to write


async def test_taint_patch_retries_on_conflict(controller, api: FakeApi):
    api.put_node({"metadata": {"name": "vk-test"}, "spec": {}, "status": {}})
    api.fail("PATCH", r"^/api/v1/nodes/vk-test$", 409, times=2)
    nc = controller()
    await nc.start()
    assert api.node()["spec"]["taints"][0]["key"] == "virtual-kubelet.io/provider"
    assert len([r for r in api.writes("PATCH") if not r[1].endswith("/status")]) == 3


async def test_transition_time_kept_on_same_status_changed_on_flip(
    controller, api: FakeApi, backend: FakeTranslator, clock: FakeClock
):
    nc = controller(ping_interval=10.0, ping_failures=2, status_interval=60.0)
    await nc.start()
    ready0 = cond(api.node(), "Ready")
    mem0 = cond(api.node(), "MemoryPressure")
    await advance(clock, 61)  # periodic write: heartbeat moves, transition does not
    ready1 = cond(api.node(), "Ready")
    assert ready1["lastHeartbeatTime"] != ready0["lastHeartbeatTime"]
    assert ready1["lastTransitionTime"] == ready0["lastTransitionTime"]
    backend.down = "connection refused"
    await advance(clock, 20)  # two failed pings → Ready flips
    ready2 = cond(api.node(), "Ready")
    assert ready2["status"] == "False"
    assert ready2["lastTransitionTime"] != ready0["lastTransitionTime"]
    assert ready2["lastTransitionTime"] == ready2["lastHeartbeatTime"]
    assert cond(api.node(), "MemoryPressure")["lastTransitionTime"] == mem0["lastTransitionTime"]


async def test_status_written_only_on_change_or_interval(
    controller, api: FakeApi, backend: FakeTranslator, clock: FakeClock
):
    from translators.base import Capacity

    nc = controller(status_interval=60.0, ping_interval=10.0)
    await nc.start()
    writes0 = len(api.writes("PATCH", "/status"))
    await advance(clock, 50)
    assert len(api.writes("PATCH", "/status")) == writes0  # 5 checks, nothing changed
    backend.cap = Capacity(cpu_millis=4000, memory_bytes=2**30, pods=10)
    await advance(clock, 10)
    assert len(api.writes("PATCH", "/status")) == writes0 + 1
    node = api.node()
    assert node["status"]["capacity"]["cpu"] == "4"
    assert "nvidia.com/gpu" not in node["status"]["capacity"]  # ours, withdrawn
    await advance(clock, 59)
    assert len(api.writes("PATCH", "/status")) == writes0 + 1
    await advance(clock, 2)
    assert len(api.writes("PATCH", "/status")) == writes0 + 2  # forced by status_interval


@pytest.mark.parametrize(
    "capacity",
    [{}, {"cpu": "4000m", "memory": "2048Mi"}],
    ids=["backend capacity", "non-canonical overrides"],
)
async def test_status_written_once_per_interval_over_five_minutes(
    controller, api: FakeApi, clock: FakeClock, capacity: dict[str, str]
):
    """Nothing changes for five minutes: one write per ``status_interval``, not per check
    (every 10 s); the server's canonical quantities (``2Gi`` for ``2048Mi``) are no change."""
    nc = controller(status_interval=60.0, ping_interval=10.0, capacity=capacity)
    await nc.start()
    writes0 = len(api.writes("PATCH", "/status"))
    gets0 = len([r for r in api.requests if r[0] == "GET" and r[1] == "/api/v1/nodes/vk-test"])
    await advance(clock, 301, step=1.0)
    gets = len([r for r in api.requests if r[0] == "GET" and r[1] == "/api/v1/nodes/vk-test"])
    assert gets - gets0 >= 29  # the status was checked every 10 s …
    assert len(api.writes("PATCH", "/status")) - writes0 == 5  # … and written every 60 s
    if capacity:
        assert api.node()["status"]["capacity"]["memory"] == "2Gi"


async def test_backend_unreachable_turns_ready_false_then_back(
    controller, api: FakeApi, backend: FakeTranslator, clock: FakeClock
):
    nc = controller(ping_interval=10.0, ping_failures=3)
    await nc.start()
    backend.down = "dial tcp 127.0.0.1:4646: connection refused"
    await advance(clock, 20)
    assert cond(api.node(), "Ready")["status"] == "True"  # 2 failures < 3
    await advance(clock, 10)
    ready = cond(api.node(), "Ready")
    assert ready["status"] == "False"
    assert ready["reason"] == "BackendUnreachable"
    assert "connection refused" in ready["message"] and "simulated" in ready["message"]
    renewals = nc.lease.renewals
    await advance(clock, 20)
    assert nc.lease.renewals > renewals  # lease still renewed while the backend is down
    backend.down = ""
    await advance(clock, 10)
    ready = cond(api.node(), "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
    reasons = [r[2]["reason"] for r in api.writes("POST", "/events")]
    assert "NodeNotReady" in reasons and "NodeReady" in reasons


async def test_a_refused_token_turns_ready_false_at_once_and_names_what_is_missing(
    controller, api: FakeApi, backend: FakeTranslator, clock: FakeClock
):
    """An ACL refusal is not transient: no waiting for ping_failures, and the reason says it is
    the credentials, not the network."""
    nc = controller(ping_interval=10.0, ping_failures=3)
    await nc.start()
    refusal = (
        'nomad GET /v1/jobs: 403 Permission denied (needs namespace "default" capability list-jobs)'
    )
    backend.refused = refusal
    await advance(clock, 10)  # one ping
    ready = cond(api.node(), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "BackendForbidden")
    assert ready["message"] == f"simulated backend refuses vkgate's credentials: {refusal}"
    backend.refused = refusal.replace("list-jobs", "submit-job").replace("GET /v1/jobs", "POST")
    await advance(clock, 10)  # still NotReady, the condition now names the other grant
    assert "submit-job" in cond(api.node(), "Ready")["message"]
    backend.refused = ""
    await advance(clock, 10)
    ready = cond(api.node(), "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")


async def test_ping_timeout_counts_as_failure(
    controller, api: FakeApi, backend: FakeTranslator, clock: FakeClock
):
    nc = controller(ping_interval=10.0, ping_timeout=5.0, ping_failures=1)
    await nc.start()
    backend.hang = True
    await advance(clock, 16)
    ready = cond(api.node(), "Ready")
    assert ready["status"] == "False"
    assert "timed out after 5s" in ready["message"]


async def test_backend_down_at_startup_registers_not_ready(
    controller, api: FakeApi, backend: FakeTranslator
):
    backend.down = "no route to backend"
    nc = controller()
    await nc.start()  # does not raise
    ready = cond(api.node(), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "BackendUnreachable")
    assert "no route to backend" in ready["message"]
    assert api.node()["metadata"]["labels"]["type"] == "virtual-kubelet"


async def test_node_deleted_while_running_is_recreated(controller, api: FakeApi, clock: FakeClock):
    nc = controller()
    await nc.start()
    old_uid = api.node()["metadata"]["uid"]
    del api.objects["/api/v1/nodes/vk-test"]
    await advance(clock, 11)
    node = api.node()
    assert node["metadata"]["uid"] != old_uid
    assert node["metadata"]["labels"]["type"] == "virtual-kubelet"
    await advance(clock, 10)
    assert api.lease()["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]


async def test_missing_lease_api_fails_startup(controller, api: FakeApi):
    api.lease_api = False
    nc = controller()
    with pytest.raises(StartupError, match=r"coordination\.k8s\.io/v1"):
        await nc.start()


async def test_unauthorized_fails_startup_with_clear_error(controller, api: FakeApi):
    api.fail("GET", "coordination", 401, reason="Unauthorized")
    nc = controller()
    with pytest.raises(StartupError, match="refused our credentials"):
        await nc.start()


async def test_unreachable_api_server_retries_with_backoff_and_one_line_per_attempt(
    controller, api: FakeApi, clock: FakeClock, caplog: pytest.LogCaptureFixture
):
    import asyncio

    api.fail("*", ".", None, times=6)  # six connection errors, then the server is back
    nc = controller()
    caplog.set_level(logging.WARNING, logger="gateway.node")
    task = asyncio.create_task(nc.start())
    await settle()
    waited = 0.0
    while not task.done() and waited < 300:
        await advance(clock, 1.0)
        waited += 1.0
    await task
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.node"]
    assert len(lines) == 6
    assert all("unreachable" in line and "https://kube.test" in line for line in lines)
    assert "attempt 6" in lines[-1]
    # capped exponential backoff: 1+2+4+8+16+30 s at most (jitter only shortens)
    assert 0.8 * (1 + 2 + 4 + 8 + 16) <= waited <= 1 + 2 + 4 + 8 + 16 + 30 + 1
    assert api.node()["metadata"]["name"] == "vk-test"


async def test_delete_on_shutdown(controller, api: FakeApi):
    nc = controller(delete_on_shutdown=True)
    await nc.start()
    await nc.stop()
    assert "/api/v1/nodes/vk-test" not in api.objects


async def test_shutdown_leaves_node_by_default(controller, api: FakeApi):
    nc = controller()
    await nc.start()
    await nc.stop()
    assert "/api/v1/nodes/vk-test" in api.objects
    assert not api.writes("DELETE")
