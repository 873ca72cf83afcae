"""A ``lost`` or ``failed`` allocation ends the pod only when the job is over (docs/design/
backend-faults.md): while the job lives Nomad places a replacement, and a pod reported Failed
would make a controller start a second copy next to it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from translators.base import Phase
from translators.nomad.status import JobView, workload_state

CASE = Path(__file__).resolve().parents[3] / "golden" / "nomad" / "states" / "lost.nomad.json"


def state(job_status: str, client_status: str, *, stop: bool = False) -> Any:
    doc = json.loads(CASE.read_text())
    job = copy.deepcopy(doc["job"]) | {"Status": job_status, "Stop": stop}
    view = JobView.from_job(job)
    for alloc in doc["allocations"]:
        view.allocs[alloc["ID"]] = alloc | {"ClientStatus": client_status}
    return workload_state(view, node_ips=doc["node_ips"])


@pytest.mark.parametrize("client_status", ["lost", "failed"])
@pytest.mark.parametrize("job_status", ["running", "pending"])
def test_a_lost_or_failed_allocation_of_a_live_job_keeps_the_pod_running(
    job_status: str, client_status: str
) -> None:
    s = state(job_status, client_status)
    assert s.phase is Phase.RUNNING
    assert s.reason == ""
    assert "Nomad is placing a replacement" in s.message
    assert not any(c.ready for c in s.containers)


def test_a_lost_allocation_of_a_dead_job_ends_the_pod() -> None:
    s = state("dead", "lost")
    assert (s.phase, s.reason) == (Phase.FAILED, "NodeLost")


def test_a_failed_allocation_of_a_stopped_job_ends_the_pod() -> None:
    assert state("running", "failed", stop=True).phase is Phase.FAILED
