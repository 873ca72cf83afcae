"""translators.nomad.runs: which bytes are the current run and which the previous one."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from translators.nomad.runs import Runs

T0 = 1_795_339_000_000_000_000  # unix ns
S = 1_000_000_000


def ev(kind: str, at: int) -> dict[str, Any]:
    return {"Type": kind, "Time": T0 + at * S}


def ts(state: str, restarts: int, *events: dict[str, Any]) -> dict[str, Any]:
    started = [e for e in events if e["Type"] == "Started"]
    at = _dt.datetime.fromtimestamp(started[-1]["Time"] / 1e9, _dt.UTC) if started else None
    return {
        "State": state,
        "Restarts": restarts,
        "StartedAt": at.isoformat().replace("+00:00", "Z") if at else None,
        "Events": list(events),
    }


def at(seconds: int) -> _dt.datetime:
    return _dt.datetime.fromtimestamp((T0 + seconds * S) / 1e9, _dt.UTC)


def test_a_first_run_is_everything_and_has_no_previous() -> None:
    runs = Runs()
    state = ts("running", 0, ev("Started", 1))
    w = runs.window("a", "app", state, previous=False)
    assert w is not None and w.whole and w.started_at == at(1)
    assert runs.window("a", "app", state, previous=True) is None
    assert runs.needs({"ID": "a", "TaskStates": {"app": state}}) == []


def test_restarts_split_the_log_at_the_recorded_ends() -> None:
    runs = Runs()
    run1 = (ev("Started", 1), ev("Terminated", 2))
    between = ts("pending", 1, *run1, ev("Restarting", 2))
    assert runs.needs({"ID": "a", "TaskStates": {"app": between}}) == ["app"]
    runs.record("a", "app", T0 + 2 * S, (10, 3))
    # while Nomad waits to restart, the dead run is the current container (as the kubelet)
    w = runs.window("a", "app", between, previous=False)
    assert w is not None and (w.start, w.end) == (
        {"stdout": 0, "stderr": 0},
        {"stdout": 10, "stderr": 3},
    )
    run2 = (ev("Restarting", 2), ev("Started", 5))
    running = ts("running", 1, *run1, *run2)
    cur = runs.window("a", "app", running, previous=False)
    prev = runs.window("a", "app", running, previous=True)
    assert cur is not None and prev is not None
    assert (cur.start, cur.end) == ({"stdout": 10, "stderr": 3}, {"stdout": None, "stderr": None})
    assert cur.started_at == at(5) and prev.started_at == at(1)
    assert prev.end == {"stdout": 10, "stderr": 3}


def test_a_finished_task_reads_its_last_run_and_the_one_before() -> None:
    runs = Runs()
    events = (ev("Started", 1), ev("Terminated", 2), ev("Restarting", 2))
    events += (ev("Started", 4), ev("Terminated", 6))
    runs.record("a", "app", T0 + 2 * S, (10, 0))
    runs.record("a", "app", T0 + 6 * S, (25, 0))
    dead = ts("dead", 1, *events)
    cur = runs.window("a", "app", dead, previous=False)
    prev = runs.window("a", "app", dead, previous=True)
    assert cur is not None and prev is not None
    assert (cur.start["stdout"], cur.end["stdout"], cur.started_at) == (10, 25, at(4))
    assert (prev.start["stdout"], prev.end["stdout"], prev.started_at) == (0, 10, at(1))


def test_a_missed_boundary_gives_no_start_time_so_since_cannot_trust_it() -> None:
    runs = Runs()  # vkgate saw no end: the window spans two runs, its start is unknown
    events = (ev("Started", 1), ev("Terminated", 2), ev("Restarting", 2), ev("Started", 4))
    w = runs.window("a", "app", ts("running", 1, *events), previous=False)
    assert w is not None and w.whole and w.started_at is None


def test_forget_drops_an_allocations_boundaries() -> None:
    runs = Runs()
    runs.record("a", "app", T0, (1, 1))
    runs.forget(["a"])
    assert runs.ends == {}


def test_a_run_end_nomad_would_not_size_is_not_asked_again() -> None:
    runs = Runs()
    dead = ts("dead", 0, ev("Started", 1), ev("Terminated", 2))
    alloc = {"ID": "a", "TaskStates": {"app": dead}}
    assert runs.needs(alloc) == ["app"]
    runs.unknown.add(("a", "app", T0 + 2 * S))
    assert runs.needs(alloc) == []
