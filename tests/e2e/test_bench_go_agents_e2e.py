"""The burst benchmark's Go agents (bench/go_agents.py) on the real API server, through the
benchmark's own ``run_burst`` with a few pods: every pod Running and gone, the writes each agent
counts itself equal the writes the API server saw from it, and the virtual-kubelets register a
Ready Node and a Lease like a kubelet (the floor, like the ideal kubelet, does neither).

The two virtual-kubelets hold the final DELETE for the pods' 30 s grace period
(docs/design/control-plane.md, "Go virtual-kubelet"), so each of them takes over 30 s here.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import unavailable

from devstack import build, netns
from devstack.controlplane import ControlPlane
from gateway.kube.client import KubeClient

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # bench/ is not an installed package

from bench import go_agents, pods_burst  # noqa: E402
from bench.agents import Agent  # noqa: E402

PODS = 4


@pytest.fixture(scope="module")
def go_binaries() -> None:
    try:
        build.ensure("vkbench")
        build.ensure("virtual-kubelet")
    except build.BuildError as exc:
        unavailable(str(exc).splitlines()[0])


def _burst(cp: ControlPlane, agent: Agent) -> pods_burst.RunResult:
    async def run() -> pods_burst.RunResult:
        async with KubeClient.from_kubeconfig(cp.kubeconfig, qps=1000, burst=1000) as client:
            return await pods_burst.run_burst(
                cp,
                client,
                agent,
                n=PODS,
                round_no=1,
                concurrency=PODS,
                phase_timeout=120,
                settle=0.5,
            )

    return asyncio.run(run())


def _pod_writes(counts: Counter[tuple[str, str]] | None) -> Counter[tuple[str, str]]:
    return Counter(
        {k: v for k, v in (counts or Counter()).items() if k[1] in pods_burst.POD_RESOURCES}
    )


def _node_of(cp: ControlPlane, prefix: str) -> dict[str, Any]:
    nodes = (cp.get("/api/v1/nodes") or {}).get("items", [])
    mine = [n for n in nodes if n["metadata"]["name"].startswith(prefix)]
    assert len(mine) == 1, [n["metadata"]["name"] for n in nodes]
    return dict(mine[0])


def _assert_registered_like_a_kubelet(cp: ControlPlane, agent_name: str) -> None:
    node = _node_of(cp, f"bench-{agent_name}-")
    name = node["metadata"]["name"]
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True", node["status"]["conditions"]
    lease = cp.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")
    assert lease is not None and lease["spec"]["holderIdentity"] == name


def _assert_all_ran(r: pods_burst.RunResult) -> None:
    assert not r.error, r.error
    assert r.not_running == 0 and r.not_gone == 0
    assert len(r.to_running) == PODS and len(r.to_gone) == PODS


def test_go_floor_writes_one_patch_and_one_delete_per_pod(
    control_plane: ControlPlane, go_binaries: None, tmp_path: Path
) -> None:
    agent = go_agents.GoFloorAgent(
        control_plane, tmp_path, qps=go_agents.GO_QPS, burst=go_agents.GO_BURST, workers=4
    )
    r = _burst(control_plane, agent)
    _assert_all_ran(r)
    expected = Counter({("patch", "pods/status"): PODS, ("delete", "pods"): PODS})
    assert r.agent_writes == expected
    assert _pod_writes(r.server_writes) == expected  # the API server agrees with its counters
    assert not any(
        n["metadata"]["name"].startswith("bench-go-floor-")
        for n in (control_plane.get("/api/v1/nodes") or {}).get("items", [])
    ), "the floor registers no Node (like bench/ideal_kubelet.py)"


@pytest.mark.budget(120, "a burst of pods through the Go virtual-kubelet library (~34 s alone)")
def test_go_vk_library_runs_every_pod_and_counts_what_the_api_server_saw(
    control_plane: ControlPlane, go_binaries: None, tmp_path: Path
) -> None:
    agent = go_agents.GoVkLibAgent(control_plane, tmp_path, workers=4)
    r = _burst(control_plane, agent)
    _assert_all_ran(r)
    own = _pod_writes(r.agent_writes)
    # two status writes (Running, terminated), the final DELETE, two Events per pod
    assert own[("update", "pods/status")] == 2 * PODS
    assert own[("create", "events")] == 2 * PODS
    assert own[("delete", "pods")] >= PODS
    assert own == _pod_writes(r.server_writes)
    assert r.event_reasons == Counter(
        {"ProviderCreateSuccess": PODS, "ProviderDeleteSuccess": PODS}
    )
    _assert_registered_like_a_kubelet(control_plane, "go-vk-lib")


@pytest.mark.budget(120, "a burst of pods through the Go virtual-kubelet command (~34 s alone)")
def test_go_vk_command_with_its_mock_provider_runs_every_pod(
    control_plane: ControlPlane, go_binaries: None, tmp_path: Path
) -> None:
    if not netns.isolated():
        unavailable("the upstream virtual-kubelet command runs only inside the e2e namespace")
    agent = go_agents.GoVkBinaryAgent(control_plane, tmp_path)
    r = _burst(control_plane, agent)
    _assert_all_ran(r)
    assert r.agent_writes is None  # it cannot count; the API server's counters remain
    server = _pod_writes(r.server_writes)
    assert server[("update", "pods/status")] == 2 * PODS
    assert server[("delete", "pods")] >= PODS
    _assert_registered_like_a_kubelet(control_plane, "go-vk-binary")
