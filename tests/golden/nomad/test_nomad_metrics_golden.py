"""Golden files for Nomad allocation stats → ``NodeUsage`` (``translators/nomad/metrics.py``).

``metrics/*.nomad.json``: owned job stubs plus a series of samples, each the allocation stubs
and the ``/v1/client/allocation/<id>/stats`` replies at one wall-clock time (captured from a
real ``nomad agent -dev`` or derived from Nomad's source where the dev agent cannot produce the
situation; ``note`` says which) → ``metrics/*.usage.json``: the ``NodeUsage`` reported after
each sample, i.e. the stats mapping *and* the CPU integration across samples (a fake clock
moves to each sample's time).

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


@pytest.mark.golden_files("metrics", "*.nomad.json")
async def test_allocation_stats_map_to_expected_usage(golden_case: Path, golden: Any) -> None:
    doc = json.loads(golden_case.read_text())
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
        usage = node_usage(found, [sample["stats"].get(t.alloc_id) for t in found], cpu)
        out.append(dataclasses.asdict(usage))
    golden.check(
        {"note": doc["note"], "usage": out},
        golden_case.with_name(golden_case.name.replace(".nomad.json", ".usage.json")),
    )
