"""Golden files for Nomad allocation stats → ``NodeUsage`` (``translators/nomad/metrics.py``).

``metrics/*.nomad.json``: owned job stubs plus a series of samples, each the allocation stubs
and the ``/v1/client/allocation/<id>/stats`` replies at one wall-clock time (captured from a
real ``nomad agent -dev`` or derived from Nomad's source where the dev agent cannot produce the
situation; ``note`` says which) → ``metrics/*.usage.json``: the ``NodeUsage`` reported after
each sample, i.e. the stats mapping *and* the CPU integration across samples (a fake clock
moves to each sample's time).

``metrics-1.6.3/``: the same from Nomad 1.6.3 (``nomad_capture.py``), with the clients'
versions (``node_versions``) and the per-pid maps kept: a 1.6 client counts its raw_exec
executor in the task's process stats, which the mapping takes out (``metrics.without_executor``).

``pytest --update-golden tests/golden/nomad`` rewrites the expected files; review the diff.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from pathlib import Path
from typing import Any

import pytest

from translators.nomad.metrics import CpuIntegrator, node_usage, targets
from translators.nomad.status import JobView
from vkgate_core.clock import FakeClock


def _at(text: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


async def _usage(doc: dict[str, Any]) -> list[dict[str, Any]]:
    clock = FakeClock(_at(doc["samples"][0]["wall"]))
    cpu = CpuIntegrator(clock)
    out: list[dict[str, Any]] = []
    for sample in doc["samples"]:
        await clock.advance((_at(sample["wall"]) - clock.now()).total_seconds())
        views = [JobView.from_job(job) for job in doc["jobs"]]
        by_id = {v.job_id: v for v in views}
        for alloc in sample["allocations"]:
            by_id[alloc["JobID"]].allocs[alloc["ID"]] = alloc
        found = targets(views)
        replies = [sample["stats"].get(t.alloc_id) for t in found]
        usage = node_usage(found, replies, cpu, node_versions=doc.get("node_versions"))
        out.append(dataclasses.asdict(usage))
    return out


def _usage_path(case: Path) -> Path:
    return case.with_name(case.name.replace(".nomad.json", ".usage.json"))


@pytest.mark.golden_files("metrics", "*.nomad.json")
async def test_allocation_stats_map_to_expected_usage(golden_case: Path, golden: Any) -> None:
    doc = json.loads(golden_case.read_text())
    golden.check({"note": doc["note"], "usage": await _usage(doc)}, _usage_path(golden_case))


@pytest.mark.golden_files("metrics-1.6.3", "*.nomad.json")
async def test_1_6_3_allocation_stats_map_to_expected_usage(golden_case: Path, golden: Any) -> None:
    doc = json.loads(golden_case.read_text())
    assert "nomad agent -dev 1.6.3" in doc["note"]
    golden.check({"note": doc["note"], "usage": await _usage(doc)}, _usage_path(golden_case))


RAW_EXEC_1_6_3 = Path(__file__).parent / "metrics-1.6.3" / "raw-exec-burn.nomad.json"


async def test_a_1_6_client_s_executor_is_not_the_container_s_memory() -> None:
    """Nomad 1.6.3 puts raw_exec's executor (~85 MB RSS) in the task's pids: the container's
    memory is the task's own process, not Nomad's; a 1.7+ client's figures are taken as
    they are."""
    doc = json.loads(RAW_EXEC_1_6_3.read_text())
    last = doc["samples"][-1]
    (stats,) = last["stats"].values()
    app = stats["Tasks"]["app"]
    pids = {int(p): u for p, u in app["Pids"].items()}
    executor, own = pids[min(pids)], pids[max(pids)]
    assert executor["MemoryStats"]["RSS"] > 50 * 2**20 > own["MemoryStats"]["RSS"]
    assert app["ResourceUsage"]["MemoryStats"]["RSS"] == sum(
        u["MemoryStats"]["RSS"] for u in pids.values()
    )

    def app_memory(usage: list[dict[str, Any]]) -> int:
        containers = usage[-1]["pods"][0]["containers"]
        value: int = next(c for c in containers if c["name"] == "app")["memory_rss_bytes"]
        return value

    assert app_memory(await _usage(doc)) == own["MemoryStats"]["RSS"]
    newer = {**doc, "node_versions": dict.fromkeys(doc["node_versions"], "1.11.3")}
    assert app_memory(await _usage(newer)) == app["ResourceUsage"]["MemoryStats"]["RSS"]
