"""The simulated backend: the documented annotations, persistence, placeholders, stop timing."""

from __future__ import annotations

import asyncio
import datetime as _dt
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from translators.base import (
    BackendRejected,
    BackendUnavailable,
    EnvVar,
    Notifier,
    Phase,
    PodRef,
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    TranslatorContext,
    VolumeFile,
    VolumeMount,
)
from translators.simulated import POD_IP_PLACEHOLDER, SimulatedTranslator, fake_ip
from vkgate_core.clock import FakeClock

T = TypeVar("T")


class Clock(FakeClock):
    """Fake time for the backend (``TranslatorContext.clock``): ``t`` is its wall time in epoch
    seconds, and setting it moves the clock (a sleeper due by then wakes on the next
    ``advance``)."""

    def __init__(self) -> None:
        super().__init__(_dt.datetime.fromtimestamp(1_000_000.0, _dt.UTC))

    @property
    def t(self) -> float:
        return self.now().timestamp()

    @t.setter
    def t(self, value: float) -> None:
        self._mono += value - self.t


def sim_on(clock: Clock, **settings: Any) -> SimulatedTranslator:
    """A simulated backend for node ``vk`` on ``clock``."""
    return SimulatedTranslator(TranslatorContext("vk", {}, clock=clock), **settings)


async def ticking(clock: Clock, awaitable: Awaitable[T], step: float = 0.01) -> T:
    """Await ``awaitable`` while the fake clock moves in ``step``s (the notifier's rounds)."""
    task = asyncio.ensure_future(awaitable)
    for _ in range(1000):
        if task.done():
            break
        await clock.advance(step)
    return await asyncio.wait_for(task, 1)


def resolved(uid: str = "u-1", *, policy: str = "Always", **annotations: str) -> ResolvedPod:
    return ResolvedPod(
        namespace="ns",
        name=f"pod-{uid}",
        uid=uid,
        node_name="vk",
        pod={
            "metadata": {
                "annotations": {
                    f"vkgate.io/{k.replace('_', '-')}": v for k, v in annotations.items()
                }
            },
            "spec": {"restartPolicy": policy},
        },
        containers=(
            ResolvedContainer(
                name="app",
                image="busybox",
                command=("serve", f"--ip={POD_IP_PLACEHOLDER}"),
                env=(EnvVar("IP", POD_IP_PLACEHOLDER), EnvVar("PW", "hunter2", secret=True)),
                mounts=(VolumeMount("cfg", "/etc/cfg"),),
            ),
        ),
        volumes=(ResolvedVolume("cfg", "configMap", (VolumeFile("a.conf", b"x=1"),)),),
    )


def make(tmp_path: Path, clock: Clock, **kw: Any) -> SimulatedTranslator:
    return sim_on(clock, state_file=str(tmp_path / "s.json"), start_delay=1, **kw)


async def test_lifecycle_pending_running_and_ip(tmp_path: Path) -> None:
    clock = Clock()
    sim = make(tmp_path, clock)
    st = await sim.create(resolved())
    assert st.phase == Phase.PENDING and st.pod_ip == ""
    clock.t += 1.5
    [st] = await sim.list()
    assert st.phase == Phase.RUNNING and st.pod_ip == fake_ip("u-1")
    assert st.containers[0].state == "running" and st.containers[0].ready
    assert st.node_name == "vk"


async def test_records_what_the_workload_received_with_the_ip_substituted(tmp_path: Path) -> None:
    clock = Clock()
    sim = make(tmp_path, clock)
    await sim.create(resolved())
    got = sim._records["u-1"].extra["containers"]["app"]
    ip = fake_ip("u-1")
    assert got["command"] == ["serve", f"--ip={ip}"]
    assert got["env"][0] == ["IP", ip]
    assert got["env"][1][1].startswith("<secret:") and "hunter2" not in str(got)
    assert got["files"] == {"/etc/cfg/a.conf": "x=1"}
    assert sim.features.pod_ip_placeholder == POD_IP_PLACEHOLDER


@pytest.mark.parametrize(
    ("policy", "code", "phase", "restarts"),
    [
        ("Never", "0", Phase.SUCCEEDED, 0),
        ("Never", "3", Phase.FAILED, 0),
        ("Always", "0", Phase.RUNNING, 2),
        ("OnFailure", "1", Phase.RUNNING, 2),
        ("OnFailure", "0", Phase.SUCCEEDED, 0),
    ],
)
async def test_exit_codes_and_restart_policy(
    tmp_path: Path, policy: str, code: str, phase: Phase, restarts: int
) -> None:
    clock = Clock()
    sim = make(tmp_path, clock)
    await sim.create(resolved(policy=policy, sim_exit_code=code, sim_run_seconds="2"))
    clock.t += 1 + 5
    [st] = await sim.list()
    assert st.phase == phase
    assert st.containers[0].restart_count == restarts
    if phase in (Phase.SUCCEEDED, Phase.FAILED):
        assert st.containers[0].exit_code == int(code)


async def test_state_file_survives_a_restart_and_counts_duplicate_creates(tmp_path: Path) -> None:
    clock = Clock()
    await make(tmp_path, clock).create(resolved())
    again = make(tmp_path, clock)
    [st] = await again.list()
    assert st.ref == PodRef("ns", "pod-u-1", "u-1")
    await again.create(resolved())  # idempotent by uid
    assert len(await again.list()) == 1
    assert make(tmp_path, clock)._records["u-1"].extra["duplicate_creates"] == 1


async def test_delete_keeps_running_for_stop_seconds_then_disappears(tmp_path: Path) -> None:
    clock = Clock()
    sim = make(tmp_path, clock)
    await sim.create(resolved(sim_stop_seconds="3"))
    clock.t += 2
    await sim.delete(PodRef("ns", "pod-u-1", "u-1"), grace_seconds=30)
    clock.t += 2
    [st] = await sim.list()
    assert st.containers[0].state == "running"
    clock.t += 1.1
    assert await sim.list() == []
    assert make(tmp_path, clock)._records == {}


async def test_stop_is_capped_by_grace_and_never_stop_never_stops(tmp_path: Path) -> None:
    clock = Clock()
    sim = make(tmp_path, clock)
    await sim.create(resolved("a", sim_stop_seconds="60"))
    await sim.create(resolved("b", sim_never_stop="true"))
    await sim.delete(PodRef("ns", "pod-a", "a"), grace_seconds=2)
    await sim.delete(PodRef("ns", "pod-b", "b"), grace_seconds=2)
    clock.t += 3
    [st] = await sim.list()
    assert st.ref.uid == "b"
    await sim.delete(PodRef("ns", "x", "missing"), grace_seconds=0)  # not found = done


async def test_fail_create_and_unreachable(tmp_path: Path) -> None:
    clock = Clock()
    flag = tmp_path / "down"
    sim = make(tmp_path, clock, unreachable_file=str(flag))
    with pytest.raises(BackendRejected, match="no quota"):
        await sim.create(resolved(sim_fail_create="no quota"))
    flag.touch()
    with pytest.raises(BackendUnavailable):
        await sim.list()
    with pytest.raises(BackendUnavailable):
        await sim.ping()


async def test_notifier_yields_changes(tmp_path: Path) -> None:
    clock = Clock()
    sim = make(tmp_path, clock, notify_interval=0.01)
    assert isinstance(sim, Notifier)
    await sim.create(resolved())
    stream = sim.changes()
    first = await ticking(clock, anext(stream))
    assert first.phase == Phase.PENDING
    clock.t += 2
    second = await ticking(clock, anext(stream))
    assert second.phase == Phase.RUNNING
    await sim.close()
    await stream.aclose()


class Stream:
    """Drains ``sim.changes()`` in a task; ``rounds()`` lets a few notify rounds run."""

    def __init__(self, sim: SimulatedTranslator) -> None:
        self.sim = sim
        self.seen: list[Any] = []
        self.task = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        async for st in self.sim.changes():
            self.seen.append(st)

    async def rounds(self) -> list[Any]:
        """States yielded over several rounds (notify_interval is 5 ms; 100 ms of fake time)."""
        start = len(self.seen)
        clock = self.sim.clock
        assert isinstance(clock, FakeClock)
        for _ in range(20):
            await clock.advance(0.005)
        return self.seen[start:]

    async def close(self) -> None:
        await self.sim.close()
        await asyncio.wait_for(self.task, 1)


def count_calls(monkeypatch: pytest.MonkeyPatch, sim: SimulatedTranslator, name: str) -> list[str]:
    """The UIDs ``sim.<name>(rec, now)`` is called for from now on (it still runs)."""
    calls: list[str] = []
    real = getattr(sim, name)

    def counting(rec: Any, now: float) -> Any:
        calls.append(rec.ref.uid)
        return real(rec, now)

    monkeypatch.setattr(sim, name, counting)
    return calls


async def test_changes_does_no_per_pod_work_for_unchanged_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Idle cost: a round over N steady pods builds no state; one change yields one state."""
    clock = Clock()
    sim = sim_on(clock, start_delay=1, notify_interval=0.005)
    n = 300
    for i in range(n):
        await sim.create(resolved(f"u-{i}"))
    await sim.create(resolved("restarts", sim_exit_code="1", sim_run_seconds="30"))
    stream = Stream(sim)
    assert {st.phase for st in await stream.rounds()} == {Phase.PENDING}
    clock.t += 2
    running = await stream.rounds()
    assert len(running) == n + 1 and {st.phase for st in running} == {Phase.RUNNING}

    builds = count_calls(monkeypatch, sim, "_state")
    clock.t += 10
    assert await stream.rounds() == []
    assert builds == []  # several rounds, 301 pods, not one state built

    clock.t += 20  # the restarting pod's run ends: only it is looked at, and yielded
    [restarted] = await stream.rounds()
    assert restarted.ref.uid == "restarts" and restarted.containers[0].restart_count == 1
    assert builds == ["restarts"]

    await sim.create(resolved("new"))
    builds.clear()  # create() returned the new state itself
    [new] = await stream.rounds()
    assert new.ref.uid == "new" and new.phase == Phase.PENDING
    assert builds == ["new"]
    await stream.close()


async def test_changes_ends_where_a_full_list_is(tmp_path: Path) -> None:
    """Incremental tracking loses nothing: after every step, the last state yielded per pod
    is what ``list()`` says, through starts, exits, restarts and deletes."""
    clock = Clock()
    sim = make(tmp_path, clock, notify_interval=0.005)
    await sim.create(resolved("forever"))
    await sim.create(resolved("once", policy="Never", sim_exit_code="0", sim_run_seconds="2"))
    await sim.create(resolved("again", sim_exit_code="3", sim_run_seconds="1.5"))
    await sim.create(resolved("slow-stop", sim_stop_seconds="3"))
    stream = Stream(sim)
    for step in range(12):
        if step == 4:
            await sim.delete(PodRef("ns", "pod-slow-stop", "slow-stop"), grace_seconds=30)
        clock.t += 0.7
        await stream.rounds()
        latest = {st.ref.uid: st for st in stream.seen}
        listed = await sim.list()
        assert listed, "nothing to compare"
        for st in listed:
            assert latest[st.ref.uid] == st, (step, st.ref.uid)
            # the cached state is the state built from scratch at this time
            assert st == sim._build_state(sim._records[st.ref.uid], clock.t), (step, st.ref.uid)
    assert {st.ref.uid for st in await sim.list()} == {"forever", "once", "again"}
    await stream.close()


async def test_list_reuses_states_between_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reconcile's list of N steady pods builds no state; a delete or a boundary rebuilds
    only the pod it concerns."""
    clock = Clock()
    sim = sim_on(clock, start_delay=1)
    for i in range(200):
        await sim.create(resolved(f"u-{i}", sim_stop_seconds="10"))
    clock.t += 2
    first = await sim.list()
    assert {st.phase for st in first} == {Phase.RUNNING}

    builds = count_calls(monkeypatch, sim, "_build_state")
    clock.t += 30
    again = await sim.list()
    assert builds == [] and all(a is b for a, b in zip(first, again, strict=True))
    await sim.delete(PodRef("ns", "pod-u-7", "u-7"), grace_seconds=30)
    await sim.list()
    assert builds == ["u-7"]  # touched by the delete: built again, the other 199 reused
    clock.t += 11  # its stop time ends: it is gone, nothing else is rebuilt
    assert len(await sim.list()) == 199 and builds == ["u-7"]
