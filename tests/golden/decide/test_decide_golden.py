"""Scenario files for the ONE lifecycle decision: pod + workload + memory + now → plan.

KWOK-style (``stage/pod/*.yaml``): ``scenarios/<name>.yaml`` is the input, ``plans/<name>.yaml``
the plan ``gateway.pods.decide`` returns (``plan.describe``), compared verbatim;
``pytest --update-golden`` rewrites the plans — review the diff.  What a scenario holds, and how
it becomes decide's inputs: ``decide_scenarios.py`` (next to this file).  Its ``row`` is the row
of decide's table (gateway/pods/decide_table.toml) it shows: every row has at least one scenario
(``test_every_row_of_the_decision_table_has_a_scenario``), and its plans are a case of that row
(tests/unit/pods/test_pods_decide_table.py).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.pods.plan import (
    ApplyUpdate,
    Create,
    Defer,
    ResolveUpdate,
    Retry,
    Stop,
    Submit,
    describe,
)
from tests.golden.decide.decide_scenarios import HERE, SCENARIOS, Scenario

TABLE = HERE.parents[2] / "gateway" / "pods" / "decide_table.toml"

#: The rows of the decision table of ``gateway.pods.decide`` (gateway/pods/decide_table.toml).
ROWS = (
    "pod terminal (Succeeded/Failed)",
    "``deletionTimestamp``, never submitted",
    "``deletionTimestamp``, pod terminal",
    "``deletionTimestamp``, workload running",
    "``deletionTimestamp``, workload ended or gone",
    "deadline passed, backend never confirmed",
    "workload vanished",
    "unsupported feature / volume kind",
    "no workload yet",
    "``activeDeadlineSeconds`` passed",
    "workload exists",
    "backend delete failed",
    "pod gone from the API (``GoneKey``)",
)

#: Steps that end a plan: they ask outside (the outcome decides the rest), or end the sync.
LAST_ONLY = (Create, Submit, ResolveUpdate, ApplyUpdate, Stop, Retry, Defer)


def rendered(scenario: Scenario) -> str:
    head = f"# {scenario.data['row']}: {scenario.data['why']}\n"
    body = {name: describe(plan) for name, plan in scenario.plans().items()}
    return head + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100)


@pytest.mark.golden_files("scenarios", "*.yaml")
def test_decide(golden_case: Path, golden: Any) -> None:
    scenario = Scenario(golden_case)
    assert scenario.data["row"] in ROWS, f"{golden_case.name}: unknown row {scenario.data['row']!r}"
    golden.check(rendered(scenario), HERE / "plans" / golden_case.name)


@pytest.mark.golden_files("scenarios", "*.yaml")
def test_steps_that_ask_outside_or_end_the_sync_come_last(golden_case: Path) -> None:
    """``act`` runs a plan in order and hands the last step's outcome back to ``decide``: a
    step with an outcome, or ``Retry``/``Defer``, anywhere else would cut the plan short."""
    for name, plan in Scenario(golden_case).plans().items():
        early = [s for s in plan[:-1] if isinstance(s, LAST_ONLY)]
        assert not early, f"{golden_case.name}, {name}: {early} before the end"


def test_every_row_of_the_decision_table_has_a_scenario() -> None:
    covered = {yaml.safe_load(p.read_text())["row"] for p in SCENARIOS}
    assert [row for row in ROWS if row not in covered] == []


def test_the_rows_are_the_decision_table_of_decide() -> None:
    """``ROWS`` are the rows of ``gateway.pods.decide``'s table, in its order."""
    table = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    rows = tuple(row["name"] for row in table["row"])
    assert rows == ROWS
