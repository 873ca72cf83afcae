"""Golden files: Zun container / capsule JSON (as GET returns it) → the WorkloadState the
translator reports (the gateway turns it into PodStatus)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from translators.zun.status import capsule_workload, container_workload


def state_of(case: dict[str, Any]) -> Any:
    if "container" in case:
        state = container_workload(
            case["container"], restart_count=int(case.get("restart_count", 0))
        )
    else:
        state = capsule_workload(case["capsule"], restart_counts=case.get("restart_counts") or {})
    return None if state is None else dataclasses.asdict(state)


@pytest.mark.golden_files("states", "*.yaml")
def test_zun_state_to_workload_state(golden_case: Path, golden) -> None:
    case = yaml.safe_load(golden_case.read_text())
    golden.check(state_of(case), golden_case.with_suffix(".json"))
