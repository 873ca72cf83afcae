"""Nomad 1.6.3's restart tracker as arithmetic against the kubelet's backoff
(translators/nomad/restarts.py; docs/design/probes.md, "Restart backoff"): what the default
restart block gives a crashing container, and what it cannot give."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from translators.base import PodRef
from translators.nomad.config import NomadConfig
from translators.nomad.restarts import (
    JITTER,
    NomadRestarts,
    interval_for,
    kubelet_waits,
    nomad_waits,
    restart_times,
)
from translators.nomad.status import JobView, backoff_message, pod_words, workload_state
from vkgate_core.backoff import RESTART_BACKOFF

CFG = NomadConfig.from_settings({}, environ={})
STATES = Path(__file__).parents[3] / "golden" / "nomad" / "states-1.6.3"


def _defaults() -> list[float]:
    return restart_times(
        nomad_waits(CFG.restart_attempts, CFG.restart_interval, CFG.restart_delay), runs=12
    )


def test_the_default_block_next_to_the_kubelet() -> None:
    kubelet = restart_times(kubelet_waits(), runs=12)
    nomad = _defaults()
    assert kubelet[:8] == [0.0, 10.0, 30.0, 70.0, 150.0, 310.0, 610.0, 910.0]
    assert nomad[:8] == [10.0, 20.0, 320.0, 330.0, 340.0, 640.0, 650.0, 660.0]
    # first 10 minutes: 5 restarts (the kubelet: 6); then 3 per 320 s (the kubelet: 1 per 300 s)
    assert sum(t <= 600 for t in nomad) == 5 and sum(t <= 600 for t in kubelet) == 6


def test_no_wait_is_longer_than_the_kubelets_longest() -> None:
    for attempts in (1, 2, 3, 5):
        for run_for in (0.0, 1.0, 30.0, 200.0):
            times = restart_times(
                nomad_waits(attempts, interval_for(attempts, 10.0), 10.0),
                runs=20,
                run_for=run_for,
            )
            starts = [0.0, *times]
            waits = [b - a - run_for for a, b in itertools.pairwise(starts)]
            assert max(waits) <= RESTART_BACKOFF.cap + 1e-9, (attempts, run_for, waits)


def test_the_old_block_stalled_longer_than_the_kubelet_ever_waits() -> None:
    """5 per 10 min (the previous defaults): a 550 s stall after the fifth restart."""
    times = restart_times(nomad_waits(5, 600.0, 10.0), runs=6)
    assert times[5] - times[4] == 550.0 > RESTART_BACKOFF.cap


def test_jitter_only_lengthens_a_quick_delay() -> None:
    t = NomadRestarts(attempts=2, interval=320.0, delay=10.0)
    assert t.after_exit(0.0, jitter=0.0) == 10.0
    assert t.after_exit(10.0, jitter=0.999) == pytest.approx(10.0 * (1 + JITTER * 0.999))
    # the third exit of the interval waits for its end, whatever the jitter
    assert t.after_exit(23.0, jitter=0.5) == pytest.approx(320.0 - 23.0)
    # the first exit after the end starts a new interval
    assert t.after_exit(321.0) == 10.0 and t.count == 1 and t.start == 321.0


def test_the_message_names_nomads_real_delay_in_the_kubelets_words() -> None:
    ref = PodRef(namespace="default", name="web", uid="u-1")
    assert pod_words(ref) == "web_default(u-1)"
    event = {"Type": "Restarting", "StartDelay": 11_523_456_789}
    assert backoff_message(event, "app", pod_words(ref)) == (
        "back-off 11s restarting failed container=app pod=web_default(u-1)"
    )
    stall = {"Type": "Restarting", "Details": {"start_delay": "289700000000"}}
    assert backoff_message(stall, "app", "p").startswith("back-off 4m49s ")


def test_a_captured_crash_loop_shows_the_kubelets_message() -> None:
    doc = json.loads((STATES / "crashloop.nomad.json").read_text())
    view = JobView.from_job(doc["job"])
    view.allocs = {a["ID"]: a for a in doc["allocations"]}
    (app,) = workload_state(view).containers
    # two runs, the second restart scheduled: restartCount 1, as the kubelet counts
    assert app.reason == "CrashLoopBackOff" and app.restart_count == 1
    assert app.message == (
        "back-off 2s restarting failed container=app"
        " pod=crashloop_default(crashloop-5e1d-4c1a-9f00-000000000001)"
    )
    assert app.last_terminated is not None and app.last_terminated.exit_code == 1
