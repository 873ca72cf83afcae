"""Ephemeral containers on a backend that cannot run them (gateway.pods.status.ephemeral): the status
says why, terminated and final, with a Warning Event — never silence."""

from __future__ import annotations

import datetime as _dt
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from controller_harness import ControllerHarness
from pods_fakes import run_for

from gateway.pods.status import ephemeral

NODE = "vk-test"
NOW = _dt.datetime(2026, 3, 1, 10, 0, tzinfo=_dt.UTC)


def running_pod(*debuggers: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "containers": [{"name": "app", "image": "nginx"}],
            "ephemeralContainers": [
                {"name": d, "image": "busybox", "targetContainerName": "app"} for d in debuggers
            ],
        },
        "status": {"phase": "Running"},
    }


def test_every_ephemeral_container_is_terminated_with_the_reason() -> None:
    desired = {"phase": "Running", "containerStatuses": [{"name": "app"}]}
    out = ephemeral.with_statuses(
        desired, running_pod("dbg", "dbg2"), supported=False, backend="nomad", now=NOW
    )
    assert out["containerStatuses"] == [{"name": "app"}]
    dbg, dbg2 = out["ephemeralContainerStatuses"]
    assert (dbg["name"], dbg2["name"]) == ("dbg", "dbg2")
    done = dbg["state"]["terminated"]
    assert done["exitCode"] == 128 and done["reason"] == "UnsupportedPodFeature"
    assert done["message"].startswith("spec.ephemeralContainers[dbg]: ")
    assert "not supported by the nomad backend" in done["message"]
    assert "kubectl exec" in done["message"]
    assert done["finishedAt"] == "2026-03-01T10:00:00Z"
    assert dbg["image"] == "busybox" and dbg["ready"] is False


def test_reported_entries_stay_and_nothing_changes_where_it_cannot_apply() -> None:
    pod = running_pod("dbg")
    first = ephemeral.with_statuses(
        {"phase": "Running"}, pod, supported=False, backend="x", now=NOW
    )
    pod["status"]["ephemeralContainerStatuses"] = first["ephemeralContainerStatuses"]
    later = NOW + _dt.timedelta(minutes=5)
    again = ephemeral.with_statuses(
        {"phase": "Running"}, pod, supported=False, backend="x", now=later
    )
    assert again["ephemeralContainerStatuses"] == first["ephemeralContainerStatuses"]  # final
    desired = {"phase": "Running"}
    assert ephemeral.with_statuses(desired, pod, supported=True, backend="x", now=NOW) is desired
    failed = {"phase": "Failed"}
    assert ephemeral.with_statuses(failed, pod, supported=False, backend="x", now=NOW) is failed
    none = running_pod()
    assert ephemeral.with_statuses(desired, none, supported=False, backend="x", now=NOW) is desired


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[ControllerHarness]:
    harness = ControllerHarness(tmp_path, node=NODE)
    await harness.start()
    yield harness
    await harness.stop()


async def test_kubectl_debug_on_a_running_pod_gets_a_status_and_one_event(
    h: ControllerHarness,
) -> None:
    h.kube.add(
        {
            "kind": "Pod",
            "metadata": {"name": "web"},
            "spec": {"nodeName": NODE, "containers": [{"name": "app"}]},
        }
    )
    await run_for(h.clock, 8)
    p = h.kube.pod("web")
    assert p is not None and p["status"]["phase"] == "Running"
    writes = h.kube.status_writes("web")
    # kubectl debug: the pods/ephemeralcontainers subresource adds to the spec
    p["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox"}]
    h.kube._bump(p)
    h.kube._emit("MODIFIED", p)
    await run_for(h.clock, 2)
    p = h.kube.pod("web")
    assert p is not None
    (dbg,) = p["status"]["ephemeralContainerStatuses"]
    assert dbg["name"] == "debugger"
    assert dbg["state"]["terminated"]["reason"] == "UnsupportedPodFeature"
    assert "simulated backend" in dbg["state"]["terminated"]["message"]
    (ev,) = h.kube.events("UnsupportedPodFeature")
    assert ev["type"] == "Warning"
    assert ev["message"] == dbg["state"]["terminated"]["message"]
    # the pod itself runs on, its workload untouched; the entry is written once
    assert p["status"]["phase"] == "Running"
    assert p["status"]["containerStatuses"][0]["state"].get("running")
    assert h.sim is not None and h.sim.calls["create"] == 1 and h.sim.calls.get("update", 0) == 0
    assert h.kube.status_writes("web") == writes + 1
    await run_for(h.clock, 20)
    assert h.kube.status_writes("web") == writes + 1
    assert len(h.kube.events("UnsupportedPodFeature")) == 1
