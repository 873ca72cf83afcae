"""/metrics/resource text (names, types, labels, timestamps, Go float format, omitted
unknowns), /stats/summary JSON shape, and the path classes of the gateway's own metrics."""

from __future__ import annotations

import datetime as _dt

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.kubelet.api import metrics, path_class, stats
from translators.base import ContainerUsage, NodeUsage, PodRef, PodUsage

T = _dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=_dt.UTC)
STARTED = _dt.datetime(2026, 3, 1, 9, 0, 0, tzinfo=_dt.UTC)


def usage(**node: object) -> NodeUsage:
    return NodeUsage(
        time=T,
        pods=(
            PodUsage(
                PodRef("ns", "web", "u1"),
                (
                    ContainerUsage(
                        "app",
                        cpu_core_seconds=12.5,
                        cpu_nano_cores=2_000_000,
                        memory_working_set_bytes=12_000_000,
                        memory_rss_bytes=9_000_000,
                        started_at=STARTED,
                    ),
                    ContainerUsage(
                        "log", cpu_core_seconds=0.25, memory_working_set_bytes=1_000_000
                    ),
                ),
                started_at=STARTED,
            ),
            PodUsage(PodRef("ns", "batch", "u2"), (ContainerUsage("job"),)),
        ),
        **node,  # type: ignore[arg-type]
    )


def test_resource_metrics_exact_text() -> None:
    text = metrics.render(usage(cpu_core_seconds=100.0, memory_working_set_bytes=2_000_000_000))
    ts = "1772359200000"
    samples = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert samples == [
        f'container_cpu_usage_seconds_total{{namespace="ns",pod="web",container="app"}} 12.5 {ts}',
        f'container_cpu_usage_seconds_total{{namespace="ns",pod="web",container="log"}} 0.25 {ts}',
        f'container_memory_working_set_bytes{{namespace="ns",pod="web",container="app"}} 1.2e+07 {ts}',
        f'container_memory_working_set_bytes{{namespace="ns",pod="web",container="log"}} 1e+06 {ts}',
        'container_start_time_seconds{namespace="ns",pod="web",container="app"} 1.7723556e+09',
        f"node_cpu_usage_seconds_total 100 {ts}",
        f"node_memory_working_set_bytes 2e+09 {ts}",
        f'pod_cpu_usage_seconds_total{{namespace="ns",pod="web"}} 12.75 {ts}',
        f'pod_memory_working_set_bytes{{namespace="ns",pod="web"}} 1.3e+07 {ts}',
        "resource_scrape_error 0",
        "scrape_error 0",
    ]
    assert "# TYPE container_cpu_usage_seconds_total counter" in text
    assert "# TYPE node_memory_working_set_bytes gauge" in text
    assert "# HELP resource_scrape_error [STABLE] 1 if there was an error" in text


def test_resource_metrics_parse_with_prometheus_parser() -> None:
    fams = {f.name: f for f in text_string_to_metric_families(metrics.render(usage()))}
    assert fams["container_cpu_usage_seconds"].type == "counter"
    assert {s.labels["pod"] for s in fams["container_cpu_usage_seconds"].samples} == {"web"}
    # the job pod reported nothing: no samples at all, not zeros
    assert all(s.labels.get("pod") != "batch" for f in fams.values() for s in f.samples)
    # node values fall back to the sum of fully known pods only when every pod is known
    assert fams["node_cpu_usage_seconds"].samples == []


def test_node_falls_back_to_sum_of_pods_when_all_known() -> None:
    u = NodeUsage(
        time=T,
        pods=(
            PodUsage(
                PodRef("a", "b", "c"),
                (ContainerUsage("x", cpu_core_seconds=2.0, memory_working_set_bytes=10),),
            ),
        ),
    )
    fams = {f.name: f for f in text_string_to_metric_families(metrics.render(u))}
    assert fams["node_cpu_usage_seconds"].samples[0].value == 2.0
    assert fams["node_memory_working_set_bytes"].samples[0].value == 10.0


def test_scrape_error_when_backend_failed() -> None:
    text = metrics.render(None)
    assert [ln for ln in text.splitlines() if not ln.startswith("#")] == [
        "resource_scrape_error 1",
        "scrape_error 1",
    ]


def test_label_values_are_escaped() -> None:
    u = NodeUsage(
        time=T,
        pods=(
            PodUsage(PodRef("n", 'we"ird\\', "u"), (ContainerUsage("c", cpu_core_seconds=1.0),)),
        ),
    )
    assert 'pod="we\\"ird\\\\"' in metrics.render(u)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (1, "1"),
        (0.5, "0.5"),
        (100.0, "100"),
        (123456.0, "123456"),
        (1234567.0, "1.234567e+06"),
        (1e-5, "1e-05"),
        (0.0001, "0.0001"),
        (-2.5, "-2.5"),
        (float("inf"), "+Inf"),
    ],
)
def test_go_float_format(value: float, text: str) -> None:
    assert metrics.go_float(value) == text


def test_summary_shape_and_omissions() -> None:
    s = stats.summary(usage(), node_name="vk-1", node_start=STARTED)
    assert s["node"] == {
        "nodeName": "vk-1",
        "startTime": "2026-03-01T09:00:00Z",
        "cpu": {"time": "2026-03-01T10:00:00Z"},
        "memory": {"time": "2026-03-01T10:00:00Z"},
    }
    batch, web = s["pods"]
    assert batch["podRef"] == {"name": "batch", "namespace": "ns", "uid": "u2"}
    assert batch["containers"] == [
        {
            "name": "job",
            "startTime": "2026-03-01T09:00:00Z",
            "cpu": {"time": "2026-03-01T10:00:00Z"},
            "memory": {"time": "2026-03-01T10:00:00Z"},
        }
    ]
    app = web["containers"][0]
    assert app["cpu"] == {
        "time": "2026-03-01T10:00:00Z",
        "usageNanoCores": 2_000_000,
        "usageCoreNanoSeconds": 12_500_000_000,
    }
    assert app["memory"] == {
        "time": "2026-03-01T10:00:00Z",
        "workingSetBytes": 12_000_000,
        "rssBytes": 9_000_000,
    }
    assert web["cpu"]["usageCoreNanoSeconds"] == 12_750_000_000
    assert "usageNanoCores" not in web["cpu"]  # one container did not report it
    assert web["memory"]["workingSetBytes"] == 13_000_000


def test_path_class_never_leaks_pod_names() -> None:
    assert path_class("/containerLogs/ns/secret-pod/app") == "containerLogs"
    assert path_class("/metrics/resource") == "metrics/resource"
    assert path_class("/whatever/secret") == "other"
