"""Node admission by policy (gateway.pods.resolve.admission): DaemonSet pods per ``node.daemonsets``.

Pure rules first, then the pod controller on a fake API server and the simulated backend with
a fake clock: a refused DaemonSet pod is Failed at once (the DaemonSet controller's signal to
back off), named in a Warning Event, never submitted, and its deletion finishes at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from controller_harness import ControllerHarness
from pods_fakes import run_for

from gateway.config import ConfigError, Settings, load
from gateway.pods.resolve import Resolver, admission
from translators.base import Features

NODE = "vk-test"


def owner(kind: str = "DaemonSet", *, controller: bool = True, api: str = "apps/v1") -> Any:
    return {
        "apiVersion": api,
        "kind": kind,
        "name": "fluent-bit",
        "uid": "u1",
        "controller": controller,
    }


def pod(name: str = "fluent-bit-x7k2p", *, owners: list[Any] | None = None, **spec: Any) -> Any:
    spec.setdefault("containers", [{"name": "app", "image": "fluent/fluent-bit:3.1"}])
    meta: dict[str, Any] = {"name": name, "namespace": "logging"}
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"kind": "Pod", "metadata": meta, "spec": {"nodeName": NODE, **spec}}


@pytest.mark.parametrize(
    ("owners", "expected"),
    [
        ([owner()], "fluent-bit"),
        ([owner("ReplicaSet")], None),
        ([owner(controller=False)], None),  # an owner that does not control the pod
        ([owner(api="example.com/v1")], None),  # someone else's kind named DaemonSet
        ([owner("ReplicaSet"), owner()], "fluent-bit"),
        (None, None),
    ],
)
def test_daemonset_owner(owners: list[Any] | None, expected: str | None) -> None:
    assert admission.daemonset_owner(pod(owners=owners)) == expected


def test_refuse_names_the_field_the_setting_and_the_common_practice() -> None:
    (u,) = admission.node_policy(pod(owners=[owner()]), daemonsets="refuse")
    assert u.reason == "DaemonSetRefused"
    assert u.field == "metadata.ownerReferences[DaemonSet/fluent-bit]"
    assert u.message.startswith("metadata.ownerReferences[DaemonSet/fluent-bit]: ")
    assert 'node.daemonsets = "refuse"' in u.message
    assert "logging/fluent-bit" in u.message and "type=virtual-kubelet" in u.message


def test_run_and_other_owners_pass() -> None:
    assert admission.node_policy(pod(owners=[owner()]), daemonsets="run") == []
    assert admission.node_policy(pod(owners=[owner("ReplicaSet")]), daemonsets="refuse") == []


def test_resolver_puts_the_node_policy_before_the_backend_features() -> None:
    resolver = Resolver(
        None,  # type: ignore[arg-type]  # admission does no I/O
        features=Features(),
        backend="simulated",
        node_name=NODE,
        host_ip=lambda: "127.0.0.9",
        allocatable=dict,
    )
    found = resolver.admission(pod(owners=[owner()], hostNetwork=True))
    assert [u.reason for u in found] == ["DaemonSetRefused", "UnsupportedPodFeature"]
    resolver.daemonsets = "run"
    assert [u.reason for u in resolver.admission(pod(owners=[owner()]))] == []


def test_setting_defaults_to_refuse_and_names_its_key_when_wrong(tmp_path: Path) -> None:
    assert Settings().node.daemonsets == "refuse"
    cfg = tmp_path / "vkgate.toml"
    cfg.write_text('[node]\ndaemonsets = "ignore"\n')
    with pytest.raises(ConfigError) as err:
        load(cfg, environ={})
    assert err.value.key == "node.daemonsets"
    cfg.write_text('[node]\ndaemonsets = "run"\n')
    assert load(cfg, environ={}).node.daemonsets == "run"


# -- the pod controller ----------------------------------------------------------------------


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Any]:
    made: list[ControllerHarness] = []

    async def make(daemonsets: str) -> ControllerHarness:
        h = ControllerHarness(tmp_path, node=NODE, daemonsets=daemonsets)
        made.append(h)
        await h.start()
        return h

    yield make
    for h in made:
        await h.stop()


async def test_refused_daemonset_pod_is_failed_with_an_event_and_never_submitted(
    harness: Any,
) -> None:
    h = await harness("refuse")
    h.kube.add(pod(owners=[owner()]))
    await run_for(h.clock, 2)
    p = h.kube.pod("fluent-bit-x7k2p", "logging")
    assert p is not None
    assert p["status"]["phase"] == "Failed"
    assert p["status"]["reason"] == "DaemonSetRefused"
    assert "metadata.ownerReferences[DaemonSet/fluent-bit]" in p["status"]["message"]
    (ev,) = h.kube.events("DaemonSetRefused")
    assert ev["type"] == "Warning" and "node.daemonsets" in ev["message"]
    assert h.sim is not None and h.sim.calls["create"] == 0
    assert h.kube.status_writes("fluent-bit-x7k2p") == 1
    # the DaemonSet controller deletes the failed pod (graceful): it goes at once, and the
    # refusal is not written or announced again
    h.kube.user_delete("fluent-bit-x7k2p", grace=30, namespace="logging")
    await run_for(h.clock, 1)
    assert h.kube.pod("fluent-bit-x7k2p", "logging") is None
    assert len(h.kube.events("DaemonSetRefused")) == 1


async def test_run_policy_runs_the_daemonset_pod(harness: Any) -> None:
    h = await harness("run")
    h.kube.add(pod(owners=[owner()]))
    await run_for(h.clock, 8)
    p = h.kube.pod("fluent-bit-x7k2p", "logging")
    assert p is not None and p["status"]["phase"] == "Running"
    assert h.kube.events("DaemonSetRefused") == []
