"""``gateway.pods.decide`` does what its table says: gateway/pods/decide_table.toml, row by row.

The table is data (KWOK keeps its pod lifecycle stages as data the same way): each row is a
situation, each of its cases a state and an observation with the actions that follow.  Here
every case is built into decide's inputs — through the scenario loader of
``tests/golden/decide`` — and the plans decide returns, seen as actions, must be the case's; and
every scenario file of ``tests/golden/decide`` must be a case of the row it names (its plans are
compared verbatim there; here they are held to the table).  The vocabulary of states,
observations and actions is the table's header.
"""

from __future__ import annotations

import datetime as _dt
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gateway.pods import plan as p
from tests.golden.decide.decide_scenarios import SCENARIOS, Scenario

TABLE_PATH = Path(__file__).resolve().parents[3] / "gateway" / "pods" / "decide_table.toml"
TABLE: list[dict[str, Any]] = tomllib.loads(TABLE_PATH.read_text(encoding="utf-8"))["row"]
CASES = [(row["name"], case) for row in TABLE for case in row.get("case") or []]

NOW = _dt.datetime(2026, 3, 1, 10, 1, tzinfo=_dt.UTC)
#: A started pod started a minute before ``NOW``.
START = NOW - _dt.timedelta(seconds=60)
#: ``active_deadline``: activeDeadlineSeconds that ``START`` has passed, or not.
ACTIVE_DEADLINE = {"passed": 30, "ahead": 3600}
APP = "app"
#: The words of the table (its header); memory and node facts are PodMemory's and Node's fields.
POD_FACTS = {
    "phase",
    "started",
    "ran",
    "exited",
    "restart_policy",
    "deleting",
    "grace",
    "remaining",
    "termination_grace",
    "pre_stop_hook",
    "active_deadline",
    "gone",
}
CASE_KEYS = {"case", "state", "observation", "actions"}


# --------------------------------------------------------------------------- actions


def action(step: p.Step) -> str:
    """One step as the table writes it (its header says what tells steps apart)."""
    name = type(step).__name__
    if isinstance(step, p.Event):
        return f"Event {step.type} {step.reason}"
    if isinstance(step, p.Log):
        return f"Log {step.level}"
    if isinstance(step, p.Count):
        return f"Count {step.name}"
    if isinstance(step, p.WriteStatus):
        reason = getattr(step.source, "reason", "")
        flags = [f for f in ("first", "latest") if getattr(step, f)]
        return " ".join([name, type(step.source).__name__, *([reason] if reason else []), *flags])
    if isinstance(step, p.Retry):
        if step.after is not None:
            return "Retry after"
        return "Retry retry_after" if step.retry_after is not None else "Retry"
    return name


def actions(plans: dict[str, p.Plan]) -> dict[str, list[str]]:
    """Each stage's plan as actions; a run of equal steps is one action."""
    out: dict[str, list[str]] = {}
    for stage, plan in plans.items():
        seen: list[str] = []
        for step in plan:
            if not seen or seen[-1] != action(step):
                seen.append(action(step))
        out[stage] = seen
    return out


# --------------------------------------------------------------------------- state → inputs


def _at(seconds: float) -> str:
    return (NOW + _dt.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _pod(facts: dict[str, Any], memory: dict[str, Any]) -> dict[str, Any]:
    """The ``pod`` of a scenario (merged over its default pod) from the table's pod facts."""
    metadata: dict[str, Any] = {}
    spec: dict[str, Any] = {"restartPolicy": facts.get("restart_policy", "Always")}
    status: dict[str, Any] = {"phase": facts.get("phase", "Pending")}
    if facts.get("started"):
        status["startTime"] = START.isoformat().replace("+00:00", "Z")
    if facts.get("ran") or "exited" in facts:
        state = (
            {"terminated": {"exitCode": facts["exited"]}}
            if "exited" in facts
            else {"running": {"startedAt": status.get("startTime", _at(-60))}}
        )
        status["containerStatuses"] = [
            {"name": APP, "restartCount": 0, "containerID": f"nomad://web-alloc/{APP}"}
            | {"state": state}
        ]
    if facts.get("deleting"):
        grace = int(facts.get("grace", 30))
        metadata["deletionTimestamp"] = _at(float(facts.get("remaining", grace)))
        metadata["deletionGracePeriodSeconds"] = grace
    if "termination_grace" in facts:
        spec["terminationGracePeriodSeconds"] = facts["termination_grace"]
    if facts.get("pre_stop_hook"):
        hook = {"preStop": {"exec": {"command": ["nginx", "-s", "quit"]}}}
        spec["containers"] = [{"name": APP, "image": "nginx:1.27", "lifecycle": hook}]
    if "active_deadline" in facts:
        spec["activeDeadlineSeconds"] = ACTIVE_DEADLINE[facts["active_deadline"]]
    if memory.get("applied") == "an older spec":
        metadata["labels"] = {"version": "2"}
    return {"metadata": metadata, "spec": spec, "status": status}


def _workload(kind: str, events: list[str] | None = None) -> dict[str, Any] | None:
    if kind == "none":
        return None
    if kind == "ended":
        container = {"name": APP, "state": "terminated", "exit_code": 0}
        return {"backend_id": "web-alloc", "phase": "Succeeded", "containers": [container]}
    assert kind == "running", kind
    return {
        "backend_id": "web-alloc",
        "phase": "Running",
        "placed": True,
        "containers": [{"name": APP, "state": "running", "ready": True}],
        "events": [[*e.split(" ", 1), f"{e} (backend)", APP] for e in events or []],
    }


def _memory(facts: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in facts.items() if k != "applied"}
    if facts.get("applied") == "this spec":
        out["applied"] = {"fingerprint": "fp-1"}
    elif facts.get("applied") == "an older spec":
        out["applied"] = {"fingerprint": "fp-1", "pod": {"metadata": {"labels": {"version": "1"}}}}
    else:
        assert "applied" not in facts, facts["applied"]
    return out


def _answer(kind: str, facts: dict[str, Any]) -> dict[str, Any]:
    """One answer from outside in the scenario files' words (``outcomes``)."""
    if kind == "resolution":
        return {
            "fingerprint": "fp-2" if facts.get("changed") else "fp-1",
            "events": [
                {"type": t, "reason": r, "message": r, "field_path": f"spec.containers{{{APP}}}"}
                for t, r in (e.split(" ", 1) for e in facts.get("events") or [])
            ],
            "waiting": {APP: [w, f"{w} (resolution)"]} if (w := facts.get("waiting")) else {},
            "unsupported": [
                {"field": f"spec.{r}", "feature": r, "reason": r, "message": f"{r} (resolution)"}
                for r in facts.get("unsupported") or []
            ],
        }
    if kind == "created":
        return {"workload": {"backend_id": "web-alloc", "phase": "Pending"}} | facts
    if kind == "template_error":
        return {"message": "job.json.j2, line 1: undefined", "delay": 30.0}
    if kind == "stopped":
        return {"workload": _workload(facts.get("workload", "none"))}
    if kind == "update":
        return dict(facts)
    assert kind in ("create_error", "unsupported_error", "update_error", "delete_error"), kind
    return {"message": f"{kind} (backend)"} | facts


def scenario(row: str, case: dict[str, Any]) -> Scenario:
    """The case's state and observation as a scenario of ``tests/golden/decide``."""
    state, seen = case.get("state") or {}, case.get("observation") or {}
    pod_facts, memory = state.get("pod") or {}, state.get("memory") or {}
    # a word the table does not know would be left out silently, and the case test nothing
    assert set(case) <= CASE_KEYS and set(state) <= {"pod", "memory", "node"}, case
    assert set(pod_facts) <= POD_FACTS and set(seen) <= {"workload", "events", "answers"}, case
    data: dict[str, Any] = {
        "row": row,
        "why": case["case"],
        "now": NOW.isoformat(),
        "node": state.get("node") or {},
        "pod": _pod(pod_facts, memory),
        "memory": _memory(memory),
        "outcomes": [
            {kind: _answer(kind, facts)}
            for answer in seen.get("answers") or []
            for kind, facts in answer.items()
        ],
    }
    workload = _workload(seen.get("workload", "none"), seen.get("events"))
    if pod_facts.get("gone"):
        data["gone"] = {"known": workload is not None}
    elif workload is not None:
        data["workload"] = workload
    return Scenario(Path(f"{row}: {case['case']}"), data)


# --------------------------------------------------------------------------- the tests


def test_every_row_has_a_case() -> None:
    assert [row["name"] for row in TABLE if not row.get("case")] == []


@pytest.mark.parametrize(
    ("row", "case"), CASES, ids=[f"{row}: {case['case']}" for row, case in CASES]
)
def test_decide_does_what_the_case_says(row: str, case: dict[str, Any]) -> None:
    assert actions(scenario(row, case).plans()) == case["actions"]


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_each_scenario_is_a_case_of_its_row(path: Path) -> None:
    """The scenario's plans are a case's actions (the case may go on to further answers)."""
    sc = Scenario(path)
    seen = list(actions(sc.plans()).items())
    cases = [case for row, case in CASES if row == sc.data["row"]]
    assert any(list(case["actions"].items())[: len(seen)] == seen for case in cases), (
        f"{path.name}: {dict(seen)} is no case of {sc.data['row']!r}"
    )
