"""Golden files for the ONE status mapping: backend-neutral ``WorkloadState`` (+ the pod as the API
server has it) → the PodStatus vkgate writes.

``cases/<name>.json`` holds ``{"pod", "state", "now", "host_ip", "backend"}`` (``state`` is a
``WorkloadState`` as JSON: times RFC 3339, containers as objects); ``expected/<name>.json`` is
the status.  ``pytest --update-golden`` rewrites the expected files; review the diff.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.pods.status import rules as st
from translators.base import PodRef, WorkloadState

HERE = Path(__file__).parent


def workload(d: dict[str, Any], pod: dict[str, Any]) -> WorkloadState:
    meta = pod["metadata"]
    return WorkloadState.from_json(d, PodRef(meta["namespace"], meta["name"], meta["uid"]))


@pytest.mark.golden_files("cases", "*.json")
def test_status_mapping(golden_case: Path, golden: Any) -> None:
    case = json.loads(golden_case.read_text())
    now = _dt.datetime.fromisoformat(case["now"].replace("Z", "+00:00"))
    assert now is not None
    status = st.from_workload(
        case["pod"],
        workload(case["state"], case["pod"]),
        now=now,
        host_ip=case["host_ip"],
        backend=case["backend"],
    )
    golden.check(status, HERE / "expected" / golden_case.name)
    # writing it and mapping the same state again must not produce another write
    again = st.from_workload(
        {**case["pod"], "status": status},
        workload(case["state"], case["pod"]),
        now=now + _dt.timedelta(minutes=5),
        host_ip=case["host_ip"],
        backend=case["backend"],
    )
    assert st.status_patch(status, again, case["pod"]["metadata"]["uid"]) is None
