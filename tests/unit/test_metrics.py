"""gateway.metrics: the prometheus_client registry, scrape-time collectors, and the backend
proxy that counts and times every call (docs/design/metrics.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.kubelet.service import add_component_collectors
from gateway.metrics import InstrumentedTranslator, Metrics
from translators.base import BackendUnavailable, TranslationError, UnsupportedError


def families(m: Metrics) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(m.render().decode())}


def value(m: Metrics, name: str, **labels: str) -> float:
    for fam in text_string_to_metric_families(m.render().decode()):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise AssertionError(f"no sample {name}{labels}")


class Backend:
    def __init__(self) -> None:
        self.fail: BaseException | None = None
        self.flag = False

    async def create(self, pod: Any) -> str:
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        return "created"

    async def ping(self) -> None:
        if self.fail is not None:
            raise self.fail

    def logs(self) -> str:  # not a backend call: passed through untouched
        return "stream"


def test_process_and_build_info_are_exposed() -> None:
    fams = families(Metrics(backend="nomad"))
    assert "process_cpu_seconds" in fams and "process_resident_memory_bytes" in fams
    info = fams["vkgate_build_info"].samples[0]
    assert info.labels["backend"] == "nomad" and info.labels["version"]


async def test_backend_calls_are_counted_by_operation_and_outcome_and_timed() -> None:
    m = Metrics(backend="nomad", process=False)
    inner = Backend()
    t = InstrumentedTranslator(inner, m)
    assert await t.create(None) == "created"
    inner.fail = BackendUnavailable("nomad at http://127.0.0.1:1 unreachable")
    with pytest.raises(BackendUnavailable):
        await t.ping()
    inner.fail = TranslationError("bad", template="nomad/job.j2", field="Job.Priority")
    with pytest.raises(TranslationError):
        await t.create(None)
    inner.fail = UnsupportedError("no", reason="UnsupportedVolume")
    with pytest.raises(UnsupportedError):
        await t.create(None)
    assert value(m, "vkgate_backend_calls_total", operation="create", outcome="ok") == 1
    assert (
        value(m, "vkgate_backend_calls_total", operation="ping", outcome="BackendUnavailable") == 1
    )
    assert value(m, "vkgate_backend_call_duration_seconds_count", operation="create") == 3
    assert value(m, "vkgate_translation_failures_total", reason="schema") == 1
    assert value(m, "vkgate_translation_failures_total", reason="UnsupportedVolume") == 1
    # capabilities and attributes pass through; writes reach the real object
    assert t.logs() == "stream" and not hasattr(t, "exec")
    t.flag = True
    assert inner.flag is True


class _Queue:
    def __len__(self) -> int:
        return 7


class _Pods:
    stats = {"creates": 3}
    queue = _Queue()

    class reflector:
        counts = {"gone": 2, "errors": 1, "inactivity": 0, "watches": 9}


class _Lease:
    renew_failures = 4


class LeaderElector:
    renew_failures = 1


class _Kube:
    stats = {("patch", "pods/status"): 5}


def test_component_counters_are_read_at_scrape_time() -> None:
    m = Metrics(process=False)
    add_component_collectors(
        m, kube=_Kube(), pods=_Pods(), leases=(("heartbeat", _Lease()), ("leader", LeaderElector()))
    )
    assert value(m, "vkgate_pod_queue_depth") == 7
    assert value(m, "vkgate_watch_restarts_total", reason="expired") == 2
    assert value(m, "vkgate_watch_restarts_total", reason="error") == 1
    assert value(m, "vkgate_lease_renew_failures_total", lease="heartbeat") == 4
    assert value(m, "vkgate_lease_renew_failures_total", lease="leader") == 1
    assert value(m, "vkgate_api_writes_total", verb="patch", resource="pods/status") == 5
    assert value(m, "vkgate_pod_sync_operations_total", operation="creates") == 3
    _Pods.queue = _Queue()
    _Pods.stats = {"creates": 4}
    assert value(m, "vkgate_pod_sync_operations_total", operation="creates") == 4


def test_two_instances_do_not_share_counters() -> None:
    a, b = Metrics(process=False), Metrics(process=False)
    a.log_bytes.inc(10)
    assert value(a, "vkgate_kubelet_log_bytes_total") == 10
    assert value(b, "vkgate_kubelet_log_bytes_total") == 0


def test_the_grafana_dashboard_only_queries_metrics_vkgate_exports() -> None:
    import json
    import re
    from pathlib import Path

    from gateway.kubelet.service import add_component_collectors as add

    dashboard = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "vkgate-dashboard.json"
    exprs = [t["expr"] for p in json.loads(dashboard.read_text())["panels"] for t in p["targets"]]
    m = Metrics(process=True)
    add(m, kube=_Kube(), pods=_Pods(), leases=(("heartbeat", _Lease()),))
    exported = set(re.findall(r"^(\w+?)(?:\{| )", m.render().decode(), re.M))
    used = {name for e in exprs for name in re.findall(r"\b((?:vkgate|process)_\w+)", e)}
    assert len(used) >= 10
    # histograms appear as _bucket only once observed: the families are declared regardless
    declared = set(re.findall(r"^# TYPE (\w+) ", m.render().decode(), re.M))
    missing = {u for u in used if u not in exported and u.removesuffix("_bucket") not in declared}
    assert not missing, missing
