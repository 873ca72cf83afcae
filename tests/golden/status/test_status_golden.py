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

from gateway.pods import status as st
from translators.base import ContainerState, Phase, PodRef, WorkloadState

HERE = Path(__file__).parent


def _time(value: str | None) -> _dt.datetime | None:
    return _dt.datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def container(d: dict[str, Any]) -> ContainerState:
    last = d.get("last_terminated")
    return ContainerState(
        name=d["name"],
        state=d.get("state", "waiting"),
        reason=d.get("reason", ""),
        message=d.get("message", ""),
        exit_code=d.get("exit_code"),
        signal=d.get("signal"),
        started_at=_time(d.get("started_at")),
        finished_at=_time(d.get("finished_at")),
        restart_count=d.get("restart_count", 0),
        ready=d.get("ready", False),
        image=d.get("image", ""),
        image_id=d.get("image_id", ""),
        container_id=d.get("container_id", ""),
        last_terminated=container(last) if last else None,
    )


def workload(d: dict[str, Any], pod: dict[str, Any]) -> WorkloadState:
    meta = pod["metadata"]
    return WorkloadState(
        ref=PodRef(meta["namespace"], meta["name"], meta["uid"]),
        backend_id=d["backend_id"],
        phase=Phase(d.get("phase", "Pending")),
        reason=d.get("reason", ""),
        message=d.get("message", ""),
        placed=d.get("placed", False),
        pod_ip=d.get("pod_ip", ""),
        host_ip=d.get("host_ip", ""),
        containers=tuple(container(c) for c in d.get("containers", [])),
        init_containers=tuple(container(c) for c in d.get("init_containers", [])),
    )


@pytest.mark.golden_files("cases", "*.json")
def test_status_mapping(golden_case: Path, golden: Any) -> None:
    case = json.loads(golden_case.read_text())
    now = _time(case["now"])
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
