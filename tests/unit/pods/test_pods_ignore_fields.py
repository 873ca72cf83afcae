"""``node.ignore_pod_fields``: a probe or hook the backend cannot honour is refused
(UnsupportedPodFeature) unless the node lists it; then the pod runs without it, the prober
runs no worker for it and a Warning Event ``PodFieldIgnored`` names the field
(gateway/pods/resolve/features.py, docs/design/probes.md, "Ignored fields").  The harness's simulated
backend has no exec and no routable pod address: every probe and hook is one it cannot honour."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from controller_harness import ControllerHarness
from pods_fakes import run_for

from gateway import config as cfg
from gateway.pods.resolve import features as featmod
from translators.base import Features

NODE = "vk-test"


def pod(name: str, container: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"nodeName": NODE, "containers": [{"name": "app", **container}]},
    }


PROBED = {
    "readinessProbe": {"exec": {"command": ["ready"]}, "periodSeconds": 5},
    "livenessProbe": {"httpGet": {"port": 8080}},
    "lifecycle": {"preStop": {"exec": {"command": ["drain"]}}},
}


async def test_without_the_setting_the_pod_is_refused(tmp_path: Path) -> None:
    h = ControllerHarness(tmp_path, node=NODE)
    await h.start()
    try:
        h.kube.add(pod("web", PROBED))
        await run_for(h.clock, 5)
        p = h.kube.pod("web")
        assert p is not None and p["status"]["phase"] == "Failed"
        assert p["status"]["reason"] == "UnsupportedPodFeature"
        assert p["status"]["message"].startswith("spec.containers[app].readinessProbe.exec")
        assert h.kube.events("PodFieldIgnored") == []
        assert h.sim is not None and h.sim.calls.get("create", 0) == 0
    finally:
        await h.stop()


async def test_ignored_fields_run_without_them_with_a_warning_each(tmp_path: Path) -> None:
    ignore = ["readinessProbe", "livenessProbe.httpGet", "lifecycle.preStop"]
    h = ControllerHarness(tmp_path, node=NODE, ignore_pod_fields=ignore)
    ctl = await h.start()
    try:
        h.kube.add(pod("web", PROBED))
        await run_for(h.clock, 10)
        p = h.kube.pod("web")
        assert p is not None and p["status"]["phase"] == "Running", p["status"]
        # the ignored readiness probe does not hold Ready: the pod is as if it had none
        (cs,) = p["status"]["containerStatuses"]
        assert cs["ready"] is True
        assert ctl.prober.workers == 0
        await run_for(h.clock, 3)  # Events trail the status write
        messages = sorted(e["message"] for e in h.kube.events("PodFieldIgnored"))
        assert len(messages) == 3, messages
        assert all(e["type"] == "Warning" for e in h.kube.events("PodFieldIgnored"))
        assert messages[0].startswith("spec.containers[app].lifecycle.preStop: ignored")
        assert "'lifecycle.preStop'" in messages[0]
        assert messages[1].startswith("spec.containers[app].livenessProbe.httpGet: ignored")
        assert "no address vkgate can probe" in messages[1]
        assert messages[2].startswith("spec.containers[app].readinessProbe.exec: ignored")
        assert "node.ignore_pod_fields lists 'readinessProbe'" in messages[2]
    finally:
        await h.stop()


async def test_an_entry_covers_only_its_own_handler(tmp_path: Path) -> None:
    h = ControllerHarness(tmp_path, node=NODE, ignore_pod_fields=["livenessProbe.exec"])
    await h.start()
    try:
        h.kube.add(pod("web", {"livenessProbe": {"httpGet": {"port": 8080}}}))
        await run_for(h.clock, 5)
        p = h.kube.pod("web")
        assert p is not None and p["status"]["phase"] == "Failed"
        assert p["status"]["message"].startswith("spec.containers[app].livenessProbe.httpGet")
    finally:
        await h.stop()


def test_a_field_the_backend_honours_is_not_ignored() -> None:
    """The setting only turns refusals into Warnings: where vkgate can run the probe it does."""
    nomad_like = Features(routable_pod_ip=True)
    p = pod("web", {"readinessProbe": {"httpGet": {"port": 80}}})
    found = featmod.check_probes(p, nomad_like, can_exec=True, backend="nomad")
    assert featmod.partition_ignored(found, ["readinessProbe"]) == ([], [])


@pytest.mark.parametrize(
    "name", ["readinessProbe.exec", "startupProbe", "lifecycle.postStart.sleep", "livenessProbe"]
)
def test_the_setting_accepts_probe_and_hook_names(name: str) -> None:
    s = cfg.Settings()
    s.node.ignore_pod_fields = [name]
    cfg.validate(s)


@pytest.mark.parametrize("name", ["hostNetwork", "readinessProbe.sleep", "lifecycle", "exec"])
def test_the_setting_names_a_bad_entry(name: str) -> None:
    s = cfg.Settings()
    s.node.ignore_pod_fields = ["readinessProbe", name]
    with pytest.raises(cfg.ConfigError) as err:
        cfg.validate(s)
    assert err.value.key == "node.ignore_pod_fields[1]"


def test_a_per_node_setting_in_nodes_entries(tmp_path: Path) -> None:
    path = tmp_path / "vkgate.toml"
    path.write_text(
        """
[backend]
kind = "simulated"

[[nodes]]
name = "vk-a"
ignore_pod_fields = ["readinessProbe.exec"]

[[nodes]]
name = "vk-b"
kubelet = { port = 10251 }
"""
    )
    units = {u.node.name: u for u in cfg.load(str(path)).units()}
    assert units["vk-a"].node.ignore_pod_fields == ["readinessProbe.exec"]
    assert units["vk-b"].node.ignore_pod_fields == []
