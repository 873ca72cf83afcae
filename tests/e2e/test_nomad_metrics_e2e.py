"""Resource usage of a Nomad pod end to end: real kube-apiserver + real Nomad + ``vkgate run``.

A pod whose container burns a core (``while :; do :; done``, raw_exec template) runs on the
Nomad dev agent; ``/stats/summary`` and ``/metrics/resource`` on :10250 — scraped with the API
server's own kubelet client certificate, as metrics-server would be let in — must show it with
measured, non-zero CPU and memory, under the names and labels metrics-server reads.  The pod is
deleted at the end and the burning task must be gone from Nomad.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from kubeletapi import kubelet_client
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

pytestmark = pytest.mark.e2e


#: This file's waits: polling every 0.5 s (waiting.wait_until: 60 s, every 0.3 s).
POLL = 0.5


def burner(name: str, node: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "app",
                        "image": "busybox:1.36",
                        "command": ["/bin/sh", "-c", "while :; do :; done"],
                    }
                ],
            },
        }
    )


def nomad_jobs(agent: Any) -> list[dict[str, Any]]:
    with agent.http_client() as c:
        found: list[dict[str, Any]] = c.get("/v1/jobs", params={"meta": "true"}).json()
        return found


@pytest.fixture
def gateway(start_gateway: Any, nomad_agent: Any) -> Any:
    return start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_agent.backend_settings(), "template": "nomad/raw_exec.j2"},
            }
        }
    )


def test_busy_nomad_pod_shows_cpu_and_memory_in_summary_and_resource_metrics(
    control_plane: Any, kubectl: Any, nomad_agent: Any, gateway: Any
) -> None:
    name = f"burn-{uuid.uuid4().hex[:5]}"
    labels = {"container": "app", "namespace": "default", "pod": name}
    kubectl("apply", "-f", "-", input=burner(name, gateway.node_name))
    try:
        wait_until(
            f"{name} Running",
            lambda: (
                kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}").stdout == "Running"
            ),
            every=POLL,
        )
        with kubelet_client(gateway, control_plane) as c:
            scrapes: list[float] = []

            def measured() -> dict[str, Any] | None:
                t0 = time.monotonic()
                summary = c.get("/stats/summary").json()
                scrapes.append(time.monotonic() - t0)
                for p in summary["pods"]:
                    if p["podRef"]["name"] == name:
                        app = p["containers"][0]
                        if app["cpu"].get("usageNanoCores", 0) > 0:
                            found: dict[str, Any] = p
                            return found
                return None

            # Nomad reports 0 % for ~10 s after a task starts (its CPU tracker is priming):
            # vkgate leaves CPU out meanwhile, so wait for the first real reading
            pod = wait_until(f"{name} CPU in /stats/summary", measured, timeout=60, every=1.0)
            app = pod["containers"][0]
            assert app["name"] == "app"
            assert pod["podRef"]["namespace"] == "default" and pod["podRef"]["uid"]
            # a busy loop uses a good part of a core (the test machine is shared)
            assert 50_000_000 < app["cpu"]["usageNanoCores"] < 1_500_000_000
            assert app["cpu"]["usageCoreNanoSeconds"] > 0
            assert app["memory"]["workingSetBytes"] > 0
            assert app["memory"]["rssBytes"] > 0
            assert pod["cpu"]["usageNanoCores"] == app["cpu"]["usageNanoCores"]
            assert pod["memory"]["workingSetBytes"] == app["memory"]["workingSetBytes"]

            def cpu_counter(text: str) -> float | None:
                """The app's ``container_cpu_usage_seconds_total`` in a /metrics/resource."""
                fams = {f.name: f for f in text_string_to_metric_families(text)}
                fam = fams.get("container_cpu_usage_seconds")
                samples = fam.samples if fam else []
                return next((s.value for s in samples if s.labels == labels), None)

            text = c.get("/metrics/resource").text
            first, read_at = cpu_counter(text), time.monotonic()
            # the integrated counter only grows: a later scrape shows more (without a first
            # reading there is nothing to wait for: the checks below say what is missing)
            later = wait_until(
                f"{name}'s CPU counter above {first}",
                lambda: (
                    (t := c.get("/metrics/resource").text)
                    and (first is None or ((v := cpu_counter(t)) is not None and v > first))
                    and t
                ),
                timeout=30,
                every=POLL,
            )
            grew = time.monotonic() - read_at
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        assert fams["resource_scrape_error"].samples[0].value == 0
        (cpu,) = [s for s in fams["container_cpu_usage_seconds"].samples if s.labels == labels]
        assert cpu.name == "container_cpu_usage_seconds_total"
        assert cpu.value > 0 and cpu.timestamp is not None
        (mem,) = [
            s for s in fams["container_memory_working_set_bytes"].samples if s.labels == labels
        ]
        assert mem.value > 0
        (pod_cpu,) = [
            s
            for s in fams["pod_cpu_usage_seconds"].samples
            if s.labels == {"namespace": "default", "pod": name}
        ]
        assert pod_cpu.value == cpu.value
        # the node's counter covers every pod vkgate measured on this node, this one included
        (node_cpu,) = fams["node_cpu_usage_seconds"].samples
        assert node_cpu.value >= cpu.value
        # the integrated counter only grows
        fams2 = {f.name: f for f in text_string_to_metric_families(later)}
        (cpu2,) = [s for s in fams2["container_cpu_usage_seconds"].samples if s.labels == labels]
        assert cpu2.value > cpu.value
        print(
            f"\n{name}: {app['cpu']['usageNanoCores'] / 1e9:.2f} cores, "
            f"{app['memory']['workingSetBytes']} B working set, counter {cpu.value:.2f} -> "
            f"{cpu2.value:.2f} core-s over {grew:.1f} s; /stats/summary took "
            f"{min(scrapes) * 1000:.1f}..{max(scrapes) * 1000:.1f} ms ({len(scrapes)} scrapes)"
        )
    finally:
        kubectl("delete", "pod", name, "--wait=false", check=False)
        # the burning task must not outlive the test
        wait_until(
            f"nomad job of {name} purged",
            lambda: (
                not [
                    j
                    for j in nomad_jobs(nomad_agent)
                    if (j.get("Meta") or {}).get("k8s.name") == name
                ]
            ),
            timeout=60,
            every=POLL,
        )
