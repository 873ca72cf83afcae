"""The benchmarks must not rot: they import, the render benchmark runs on a tiny count and
reports every packaged template and golden status case, the docs writer keeps other sections,
and the burst harness's pure parts (argument bounds, API server metric parsing, report) work.

No servers and no timing assertions here: speed lives in ``bench/`` (run by hand), not in tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    # bench/ is not an installed package; appended, so gateway/translators still come from
    # wherever the test run installed them
    sys.path.append(str(REPO))

from bench import ideal_kubelet, pods_burst, render, report  # noqa: E402


def test_render_bench_covers_every_template_and_status_case(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        report.DOC_HEADER
        + "\n<!-- bench:pods_burst:start -->\nkept\n<!-- bench:pods_burst:end -->\n"
    )
    assert render.main(["--number", "1", "--repeat", "1", "--write-docs", "--doc", str(doc)]) == 0
    text = doc.read_text()
    for template in (
        "nomad/job.j2",
        "nomad/raw_exec.j2",
        "zun/container.j2",
        "zun/capsule.j2",
        "batch/task.j2",
    ):
        assert f"| `{template}` |" in text
    for case in sorted(p.stem for p in render.STATUS_CASES.glob("*.json")):
        assert f"| {case} |" in text
    assert "kept" in text, "writing one section must keep the others"
    assert text.count("<!-- bench:render:start -->") == 1
    # a second run replaces its section instead of appending another
    render.main(["--number", "1", "--repeat", "1", "--write-docs", "--doc", str(doc)])
    assert doc.read_text().count("<!-- bench:render:start -->") == 1


def test_render_rows_have_a_baseline_ratio() -> None:
    rows = render.bench_templates(number=1, repeat=1, budget=1, templates=["nomad/job.j2"])
    assert {r.sample for r in rows} >= {"plain", "multi-container"}
    assert all(r.ratio is not None and r.ratio > 0 for r in rows if r.spec_s is not None)


def test_burst_arguments_are_bounded() -> None:
    with pytest.raises(SystemExit):
        pods_burst.parse_args(["--pods", str(pods_burst.MAX_PODS + 1)])
    with pytest.raises(SystemExit):
        pods_burst.parse_args(["--agents", "kubelet-from-mars"])
    args = pods_burst.parse_args(
        ["--pods", "5", "--set", "kube.qps=120", "--set", "pods.workers=4"]
    )
    settings = pods_burst.vkgate_settings(args)
    assert settings["kube"]["qps"] == 120 and settings["pods"]["workers"] == 4
    assert settings["backend"]["simulated"]["state_file"] == ""


def test_burst_report_shows_ratios_to_the_baseline() -> None:
    args = pods_burst.parse_args(["--pods", "2"])

    def result(agent: str, scale: float) -> pods_burst.RunResult:
        r = pods_burst.RunResult(agent, 1, 2, running_wall=1.0 * scale, gone_wall=0.5 * scale)
        r.to_running = [0.1 * scale, 0.2 * scale]
        r.to_gone = [0.1 * scale, 0.1 * scale]
        writes = 2 if agent == "ideal-kubelet" else 4
        r.agent_writes = Counter({("patch", "pods/status"): writes, ("update", "leases"): 3})
        return r

    text = pods_burst.markdown(
        [result("ideal-kubelet", 1), result("vkgate", 3)], args=args, machine=["- machine"]
    )
    assert "| create→all 2 Running (wall) | 1.00 s | 3.00 s | 3.00x |" in text
    # node/lease writes are background, not charged to the pods
    assert "| API writes per pod (agent's own counters) | 1.00 | 2.00 | 2.00x |" in text


def test_apiserver_write_counter_parsing() -> None:
    metrics = "\n".join(
        [
            "# TYPE apiserver_request_total counter",
            'apiserver_request_total{code="201",component="apiserver",dry_run="",group="",'
            'resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 7',
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="",'
            'resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 5',
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="",'
            'resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 9',
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="",'
            'resource="pods",scope="resource",subresource="",verb="DELETE",version="v1"} 2',
            'apiserver_request_total{code="404",component="apiserver",dry_run="",group="",'
            'resource="pods",scope="resource",subresource="",verb="DELETE",version="v1"} 1',
        ]
    )
    requests = pods_burst.parse_apiserver_requests(metrics)
    assert pods_burst.by_resource(requests) == Counter(
        {("create", "pods"): 7, ("patch", "pods/status"): 5, ("delete", "pods"): 3}
    )
    assert pods_burst.by_resource(requests, refused=True) == Counter({("delete", "pods"): 1})


def test_ideal_kubelet_metrics_are_what_the_harness_scrapes() -> None:
    """The writes on a /metrics page (the baseline's, built as vkgate builds its own) parse with
    the harness's reader, so the per-pod write counts in docs/benchmarks.md are not empty."""
    from bench.agents import parse_writes

    class Client:
        stats = Counter({("patch", "pods/status"): 3, ("delete", "pods"): 2})

    text = ideal_kubelet.own_metrics(Client()).render().decode()
    assert parse_writes(text) == {("patch", "pods/status"): 3, ("delete", "pods"): 2}


def test_dropped_events_are_read_from_the_agents_page() -> None:
    from bench.agents import parse_event_outcomes
    from gateway.kubelet.service import add_component_collectors
    from gateway.metrics import Metrics

    class Events:
        counts = Counter({"posted": 7, "aggregated": 1, "dropped": 2})

    m = Metrics(process=False)
    add_component_collectors(m, events=Events())
    assert parse_event_outcomes(m.render().decode()) == {
        "posted": 7,
        "aggregated": 1,
        "failed": 0,
        "dropped": 2,
    }


def test_multinode_rss_report_and_argument_bounds() -> None:
    from bench import multinode_rss

    args = multinode_rss.parse_args(["--nodes", "1,2,4", "--settle", "10"])
    assert args.counts == [1, 2, 4]
    mib = 2**20
    results = [
        multinode_rss.Result(nodes=1, rss_bytes=60 * mib, hwm_bytes=61 * mib,
                             idle_cpu_seconds=0.5, sockets=6),
        multinode_rss.Result(nodes=4, rss_bytes=75 * mib, hwm_bytes=76 * mib,
                             idle_cpu_seconds=1.0, sockets=12),
    ]  # fmt: skip
    text = multinode_rss.markdown(results, args=args, machine=["- machine: test"])
    # 4 nodes: (75 - 60) / 3 = 5 MiB per extra node; 4 separate processes: 240 MiB
    assert "| 4 | 75.0 | 5.0 | 240.0 | 0.31 | 76.0 | 10.0 % | 12 |" in text
    for bad in (["--nodes", "2,4"], ["--nodes", "1,99"], ["--nodes", "a"], ["--samples", "0"]):
        with pytest.raises(SystemExit):
            multinode_rss.parse_args(bad)


def test_burst_report_counts_trailing_work_pairs_rounds_and_feeds_the_plots(tmp_path: Path) -> None:
    args = pods_burst.parse_args(["--pods", "10", "--rounds", "2", "--idle", "5"])

    def result(agent: str, rnd: int, scale: float) -> pods_burst.RunResult:
        r = pods_burst.RunResult(agent, rnd, 10, running_wall=scale, gone_wall=2 * scale)
        r.cpu_create, r.cpu_delete, r.cpu_trailing = 0.1 * scale, 0.1 * scale, 0.05 * scale
        r.events_trailing = 20 if agent == "vkgate" else 0
        r.idle_core_share = 0.01 * scale
        r.load = (1.0, 1.5)
        r.rss_running = 100 * 2**20
        return r

    results = [
        result("go-floor", 1, 1.0),
        result("vkgate", 1, 1.5),
        result("go-floor", 2, 2.0),
        result("vkgate", 2, 2.0),
    ]
    text = pods_burst.markdown(results, args=args, machine=["- machine"])
    # CPU includes the trailing Events; the floor is the baseline when it ran
    assert (
        "| agent CPU per pod (whole burst, Events included) | 37.50 ms | 43.75 ms | 1.17x |" in text
    )
    assert "| Event writes per pod after all were gone (trailing) | 0.00 | 2.00 | n/a |" in text
    assert "| 1 | vkgate | 1.50x | 1.50x | 1.50x | 1.0 → 1.5 |" in text  # paired, round 1
    assert "| 2 | vkgate | 1.00x | 1.00x | 1.00x | 1.0 → 1.5 |" in text
    assert "at rest with 10 pods Running (% of a core) | 1.50 % | 1.75 % |" in text

    args.label = "lifted"
    out = tmp_path / "r.json"
    pods_burst.write_json(out, results, args)
    from bench import plots

    rows = json.loads(out.read_text())
    assert plots.series(rows, "running_wall", 1.0) == {
        "go-floor (lifted)": [(10, 1.5)],
        "vkgate (lifted)": [(10, 1.75)],
    }
    written = plots.draw(rows, tmp_path / "png")
    assert sorted(p.name for p in written) == sorted(plots.PLOTS)
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)


def test_plots_keep_the_creates_of_a_round_whose_deletes_timed_out() -> None:
    from bench import plots

    rows = [
        {
            "agent": "slow",
            "label": "",
            "pods": 10,
            "running_wall": 5.0,
            "cpu_per_pod_ms": 1.0,
            "error": "not all gone after 300s",
        },
        {
            "agent": "stuck",
            "label": "",
            "pods": 10,
            "running_wall": 300.0,
            "error": "not all Running after 300s",
        },
    ]
    assert plots.series(rows, "running_wall", 1.0) == {"slow": [(10, 5.0)]}
    assert plots.series(rows, "cpu_per_pod_ms", 1.0) == {}


def test_render_isolation_bench_runs_every_mode(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import render_isolation

    assert render_isolation.main(["--pods", "4", "--rounds", "1", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    for label in ("in the agent (`render_workers = 0`)", "1 worker", "2 workers"):
        assert label in out


def test_the_probed_pods_bench_reports_cost_and_latency_against_its_targets() -> None:
    from bench import probes_status

    pod = probes_status.pod_manifest("p0001", "ns", "node", 18765, 10)
    probe = pod["spec"]["containers"][0]["readinessProbe"]
    assert probe["tcpSocket"] == {"host": "127.0.0.1", "port": 18765}
    assert (
        "readinessProbe"
        not in probes_status.pod_manifest("p", "ns", "n", None, 10)["spec"]["containers"][0]
    )
    assert probes_status._pct([float(i) for i in range(100)], 0.99) == 99.0
    args = probes_status.parse_args(["--pods", "10", "--period", "5"])
    lat = {"p50": 2.0, "p99": 6.5, "max": 6.9}
    text = probes_status.markdown(
        {
            "baseline": {"cores_at_rest": 0.01, "to_all_ready": 1.0},
            "probed": {
                "cores_at_rest": 0.03,
                "to_all_ready": 2.0,
                "flip_to_unready": lat,
                "flip_to_ready": {**lat, "p99": 4.0},
            },
        },
        args=args,
        machine=["- machine: test"],
    )
    assert "**0.020** (target ≤ 0.05)" in text
    assert "| closed → Ready=False | 2.00 s | 6.50 s | 6.90 s | ≤ 6 s: **not met** |" in text
    assert "| reopened → Ready=True | 2.00 s | 4.00 s | 6.90 s | ≤ 6 s: met |" in text


def test_event_queue_bench_runs_on_a_tiny_count() -> None:
    """In a process of its own: ``tracemalloc`` counts what every thread allocates, and in the
    unit tier's process threads other tests left (render pools, servers) allocated megabytes
    during the measurement (39 KB per Event once, a reference is < 2 KB)."""
    script = (
        "import asyncio, json\n"
        "from bench import event_queue\n"
        "print(json.dumps(asyncio.run(event_queue.measure(25))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r["queued"] == 100 and r["dropped"] == 0
    assert 0 < r["bytes_per_event"] < 2000  # a reference, not a pod (about 3 KB each)
