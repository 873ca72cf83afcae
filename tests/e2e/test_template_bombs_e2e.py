"""Template bombs through the live ConfigMap hot-reload path (real kube-apiserver + Nomad):
a team template that renders normally for the sample pods (so it is accepted) but emits a YAML
"billion laughs" or 200000 ``[`` for pods labelled ``bomb``.  Each such pod ends Pending /
TranslationFailed with a message and an Event; the gateway stays responsive (``/healthz``
latency sampled every 50 ms throughout) and small (peak RSS).  The numbers are printed and
recorded in docs/design/template-safety.md."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.template_bombs import laughs

pytestmark = pytest.mark.e2e

SYSTEM_NS = "vkgate-template-bombs"


TEMPLATE = (
    '{%- if meta.labels.get("bomb") == "laughs" -%}\n'
    + laughs()
    + '{%- elif meta.labels.get("bomb") == "deep" -%}\n'
    + '{{ "[" * 200000 }}\n'
    + "{%- else -%}\n"
    + '{% include "nomad/job.j2" %}\n'
    + "{%- endif -%}\n"
)


def wait_until(what: str, fn: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def vm(pid: int, key: str) -> int:
    """VmRSS / VmHWM of ``pid`` in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"{key} not in /proc/{pid}/status")


class HealthProbe(threading.Thread):
    """GET /healthz every 50 ms; the slowest answer (a timeout counts as its full wait)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.worst, self.samples = url, 0.0, 0
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=30) as c:
            while not self.stop.is_set():
                t0 = time.monotonic()
                with contextlib.suppress(httpx.HTTPError):
                    c.get(self.url)
                self.worst = max(self.worst, time.monotonic() - t0)
                self.samples += 1
                time.sleep(0.05)


def test_bombs_through_the_configmap_path(
    kubectl: Any, nomad_agent: Any, start_gateway: Any
) -> None:
    suffix = uuid.uuid4().hex[:6]
    team, ns = f"b{suffix}", f"bombs-{suffix}"
    name = f"teams/{team}/nomad/bomb.yaml.j2"
    kubectl("create", "namespace", SYSTEM_NS, check=False)
    kubectl("create", "namespace", ns)
    kubectl("label", "namespace", ns, f"vkgate.io/team={team}")
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": f"{team}-templates",
                    "namespace": SYSTEM_NS,
                    "labels": {"vkgate.io/templates": "true", "vkgate.io/team": team},
                },
                "data": {"nomad__bomb.yaml.j2": TEMPLATE},
            }
        ),
    )
    gw = start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_agent.backend_settings(), "template": "nomad/raw_exec.j2"},
            },
            "templates": {"configmap_namespace": SYSTEM_NS},
        }
    )
    wait_until(
        "the bomb template accepted",
        lambda: any(
            "templates loaded" in line and name in line for line in gw.log_text().splitlines()
        ),
    )
    pid = gw.pid
    assert pid is not None
    rss_before = vm(pid, "VmRSS")
    probe = HealthProbe(f"http://{gw.settings['kubelet']['metrics_address']}/healthz")
    probe.start()

    def bomb_pod(pod_name: str, label: str) -> str:
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": ns,
                    "labels": {"bomb": label} if label else {},
                    # the harmless pod keeps the default template: the agent still works
                    "annotations": {"vkgate.io/template": name} if label else {},
                },
                "spec": {
                    "nodeName": gw.node_name,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {"name": "app", "image": "busybox:1.36", "command": ["sleep", "60"]}
                    ],
                },
            }
        )

    t0 = time.monotonic()
    try:
        for pod_name, label in (("laughs", "laughs"), ("deep", "deep"), ("fine", "")):
            kubectl("apply", "-f", "-", input=bomb_pod(pod_name, label))

        def status(pod_name: str) -> dict[str, Any]:
            out = kubectl("get", "pod", "-n", ns, pod_name, "-o", "json").stdout
            result: dict[str, Any] = json.loads(out).get("status") or {}
            return result

        for pod_name, message in (
            ("laughs", "output expands to more than"),
            ("deep", "output nests deeper than 64 levels"),
        ):
            st = wait_until(
                f"{pod_name} TranslationFailed",
                lambda p=pod_name: (s := status(p)).get("reason") == "TranslationFailed" and s,
            )
            assert st["phase"] == "Pending" and message in st["message"], st
        wait_until("the harmless pod Running", lambda: status("fine").get("phase") == "Running")
        events = json.loads(kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
        failed = {e["involvedObject"]["name"] for e in events if e["reason"] == "TranslationFailed"}
        assert failed == {"laughs", "deep"}
        time.sleep(2)  # a few more probes after the bombs
    finally:
        probe.stop.set()
        probe.join(35)
    took = time.monotonic() - t0
    peak = vm(pid, "VmHWM")
    assert "RecursionError" not in gw.log_text() and "sync failed unexpectedly" not in gw.log_text()
    assert probe.samples > 20
    print(
        f"\ntemplate bombs via ConfigMap: verdicts in {took:.1f}s; /healthz worst "
        f"{probe.worst * 1000:.0f} ms over {probe.samples} probes; RSS {rss_before / 2**20:.0f} MB "
        f"before, peak {peak / 2**20:.0f} MB"
    )
    assert probe.worst < 2.0
    assert peak < rss_before + 100 * 2**20
