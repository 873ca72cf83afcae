"""The agent's own metrics and probes on a real gateway process: prometheus_client families
from the backend proxy, the pod workers and the scrape-time collectors, plus /readyz and
/healthz on the metrics port (docs/design/metrics.md)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until


def scrape(port: int) -> dict[str, Any]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5, trust_env=False).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams: dict[str, Any], family: str, name: str, **labels: str) -> float:
    for s in fams[family].samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    return 0.0


def test_own_metrics_and_probes_of_a_running_gateway(start_gateway: Any, kubectl: Any) -> None:
    gw = start_gateway()
    port = int(gw.settings["kubelet"]["metrics_address"].rsplit(":", 1)[1])
    base = f"http://127.0.0.1:{port}"
    wait_until("ready", lambda: httpx.get(base + "/readyz", trust_env=False).status_code == 200)
    assert httpx.get(base + "/healthz", trust_env=False).text == "ok"
    ns = f"m-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", ns)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "nodeName": gw.node_name,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "60"]}],
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(pod))
    wait_until(
        "Running",
        lambda: (
            kubectl("get", "pod", "-n", ns, "web", "-o", "jsonpath={.status.phase}").stdout
            == "Running"
        ),
    )
    fams = wait_until(
        "a create counted",
        lambda: (
            (f := scrape(port))
            and sample(f, "vkgate_backend_calls", "vkgate_backend_calls_total", operation="create")
            and f
        ),
    )
    backend = {"backend": "simulated"}
    assert sample(fams, "vkgate_backend_calls", "vkgate_backend_calls_total",
                  operation="create", outcome="ok", **backend) >= 1  # fmt: skip
    assert sample(fams, "vkgate_backend_calls", "vkgate_backend_calls_total",
                  operation="ping", outcome="ok", **backend) >= 1  # fmt: skip
    assert sample(fams, "vkgate_backend_call_duration_seconds",
                  "vkgate_backend_call_duration_seconds_count", operation="create") >= 1  # fmt: skip
    assert sample(fams, "vkgate_pod_sync_duration_seconds",
                  "vkgate_pod_sync_duration_seconds_count", result="ok") >= 1  # fmt: skip
    assert "process_cpu_seconds" in fams and "process_resident_memory_bytes" in fams
    assert fams["vkgate_build_info"].samples[0].labels["backend"] == "simulated"
    for family in ("vkgate_pod_queue_depth", "vkgate_watch_restarts", "vkgate_lease_renew_failures",
                   "vkgate_api_writes", "vkgate_translation_failures"):  # fmt: skip
        assert family in fams, family
    leases = {s.labels["lease"] for s in fams["vkgate_lease_renew_failures"].samples}
    assert leases == {"heartbeat", "leader"}
