"""The Nomad translator on its own against a real ``nomad agent -dev`` (raw_exec template).

No Kubernetes here: the translator is driven directly, the way the pods controller drives it,
and every observation goes through its public surface (create/list/changes/delete, capacity,
logs, exec).  The full path through the API server is tests/e2e/test_nomad_gateway.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from nomadfree import free_for

from devstack.components import NOMAD_VERSION
from devstack.nomad_cluster import NomadCluster as NomadAgent
from translators.base import (
    EnvVar,
    LogOptions,
    Phase,
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    TranslatorContext,
    VolumeFile,
    VolumeMount,
    WorkloadState,
)
from translators.nomad import NomadTranslator

pytestmark = pytest.mark.e2e


def make_pod(
    node: str,
    script: str,
    *,
    policy: str = "Never",
    cpu: str | None = None,
    name: str | None = None,
) -> ResolvedPod:
    name = name or f"p-{uuid.uuid4().hex[:6]}"
    uid = str(uuid.uuid4())
    container = {"name": "app", "image": "busybox:1.36"}
    if cpu:
        container["resources"] = {"requests": {"cpu": cpu}}  # type: ignore[assignment]
    raw = {
        "metadata": {"name": name, "namespace": "e2e", "uid": uid},
        "spec": {
            "restartPolicy": policy,
            "terminationGracePeriodSeconds": 2,
            "containers": [container],
        },
    }
    return ResolvedPod(
        namespace="e2e",
        name=name,
        uid=uid,
        node_name=node,
        pod=raw,
        containers=(
            ResolvedContainer(
                name="app",
                image="busybox:1.36",
                command=("/bin/sh", "-c"),
                args=(script,),
                spec=container,
            ),
        ),
    )


@pytest.fixture
async def translator(nomad_agent: NomadAgent) -> AsyncIterator[NomadTranslator]:
    node = f"vk-{uuid.uuid4().hex[:6]}"
    t = NomadTranslator(
        TranslatorContext(
            node,
            {
                **nomad_agent.backend_settings(),
                "template": "nomad/raw_exec.j2",
                "restart_delay": "1s",
                "restart_attempts": 5,
                "restart_interval": "1m",
                "backstop_interval": 5,
            },
        ),
        environ={},
    )
    await t.start()
    yield t
    for st in await t.list():
        await t.delete(st.ref, grace_seconds=0)
    await t.close()


class Watch:
    """Collects ``changes()`` with the local receive time of each state."""

    def __init__(self, t: NomadTranslator) -> None:
        self.seen: list[tuple[float, WorkloadState]] = []
        self._new = asyncio.Event()
        self._task = asyncio.create_task(self._run(t))

    async def _run(self, t: NomadTranslator) -> None:
        async for state in t.changes():
            self.seen.append((time.time(), state))
            self._new.set()

    async def until(
        self, uid: str, pred: Callable[[WorkloadState], bool], timeout: float = 45
    ) -> tuple[float, WorkloadState]:
        deadline = time.monotonic() + timeout
        while True:
            for at, st in self.seen:
                if st.ref.uid == uid and pred(st):
                    return at, st
            left = deadline - time.monotonic()
            if left <= 0:
                mine = [s for _, s in self.seen if s.ref.uid == uid]
                raise AssertionError(f"no matching state in {timeout}s; saw {mine[-3:]}")
            self._new.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), left)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@pytest.fixture
async def watch(translator: NomadTranslator) -> AsyncIterator[Watch]:
    w = Watch(translator)
    yield w
    await w.stop()


def nomad_get(agent: NomadAgent, path: str, **params: Any) -> Any:
    with agent.http_client() as c:
        resp = c.get("/v1" + path, params=params)
        return resp.json() if resp.status_code == 200 else None


async def test_ping_and_node_info(translator: NomadTranslator) -> None:
    await translator.ping()
    info = await translator.node_info()
    assert info.runtime_version == f"nomad://{NOMAD_VERSION}"
    assert info.os == "linux" and info.arch


async def test_capacity_equals_what_nomad_reports(
    translator: NomadTranslator, nomad_agent: NomadAgent
) -> None:
    """The default pool's clients minus reserved minus what other jobs hold there (client 2
    is in pool-b: a node without node_pools cannot place there)."""
    for _ in range(20):  # other tests' allocations may still be stopping: until both agree
        free = free_for(nomad_agent, translator.node_name)
        cap = await translator.capacity()
        mhz_per_core = free.total_shares / free.cores
        if cap.cpu_millis == int(free.shares * 1000 // mhz_per_core):
            break
        await asyncio.sleep(0.5)
    print(f"\nNomad: {free} → {cap}")
    assert await translator.mhz_per_core() == pytest.approx(mhz_per_core)
    assert cap.cpu_millis == int(free.shares * 1000 // mhz_per_core)
    assert cap.memory_bytes == free.memory_mb * 2**20
    assert cap.pods == 110


async def test_pod_that_prints_and_exits_0_succeeds_and_its_logs_read_back(
    translator: NomadTranslator, watch: Watch, nomad_agent: NomadAgent
) -> None:
    pod = make_pod(translator.node_name, "echo hello from nomad; echo to-stderr >&2")
    created = await translator.create(pod)
    assert created.phase == Phase.PENDING
    assert (await translator.create(pod)).backend_id == created.backend_id  # idempotent
    _, st = await watch.until(pod.uid, lambda s: s.phase == Phase.SUCCEEDED)
    app = st.containers[0]
    assert (app.state, app.exit_code, app.reason) == ("terminated", 0, "Completed")
    assert app.container_id.startswith("nomad://")
    # host mode: the pod's address is that of the Nomad client its allocation runs on
    allocs = nomad_get(nomad_agent, f"/job/{created.backend_id}/allocations")
    client = nomad_get(nomad_agent, f"/node/{allocs[0]['NodeID']}")
    assert st.host_ip == st.pod_ip == client["Attributes"]["unique.network.ip-address"]
    assert st.host_ip in {c.ip for c in nomad_agent.clients}
    logs = b"".join([c async for c in translator.logs(pod.ref, "app", LogOptions())])
    assert logs == b"hello from nomad\nto-stderr\n"
    tail = b"".join(
        [
            c
            async for c in translator.logs(
                pod.ref, "app", LogOptions(tail_lines=1, stream="Stdout")
            )
        ]
    )
    assert tail == b"hello from nomad\n"


async def test_exit_3_with_never_fails_with_exit_code_3(
    translator: NomadTranslator, watch: Watch
) -> None:
    pod = make_pod(translator.node_name, "echo bye; exit 3")
    await translator.create(pod)
    _, st = await watch.until(pod.uid, lambda s: s.phase == Phase.FAILED)
    app = st.containers[0]
    assert (app.state, app.exit_code, app.reason, app.restart_count) == (
        "terminated",
        3,
        "Error",
        0,
    )


async def test_always_restarts_with_a_growing_restart_count(
    translator: NomadTranslator, watch: Watch
) -> None:
    pod = make_pod(translator.node_name, "echo run; sleep 0.3; exit 1", policy="Always")
    await translator.create(pod)
    _, st = await watch.until(pod.uid, lambda s: s.containers[0].restart_count >= 2, timeout=60)
    assert st.phase == Phase.RUNNING  # a crash-looping pod stays Running, as in Kubernetes
    counts = [s.containers[0].restart_count for _, s in watch.seen if s.ref.uid == pod.uid]
    assert counts == sorted(counts)
    seen = {s.containers[0].reason for _, s in watch.seen if s.ref.uid == pod.uid}
    assert "CrashLoopBackOff" in seen
    last = st.containers[0].last_terminated
    assert last is not None and last.exit_code == 1


async def test_more_cpu_than_the_cluster_has_is_pending_with_nomads_reason(
    translator: NomadTranslator, watch: Watch
) -> None:
    pod = make_pod(translator.node_name, "echo never", cpu="512")
    await translator.create(pod)
    _, st = await watch.until(pod.uid, lambda s: s.reason == "Unschedulable")
    assert st.phase == Phase.PENDING and not st.placed
    assert 'Dimension "cpu" exhausted' in st.message
    listed = {s.ref.uid: s for s in await translator.list()}
    assert listed[pod.uid].reason == "Unschedulable"


async def test_a_pod_string_with_unicode_line_breaks_keeps_the_event_stream_connected(
    translator: NomadTranslator, watch: Watch, nomad_agent: NomadAgent
) -> None:
    """Nomad's JSON carries U+0085 (NEL) raw inside strings: a pod whose command holds one
    (with U+2028/U+2029) is followed to its end on one stream connection (httpx's line
    splitting broke the job's events there and reconnected at the same index forever)."""
    text = "a\u0085b\u2028c\u2029d"
    pod = make_pod(translator.node_name, f"echo '{text}' >/dev/null; exit 0")
    created = await translator.create(pod)
    with nomad_agent.http_client() as c:
        raw = c.get(f"/v1/job/{created.backend_id}").content
    assert "\u0085".encode() in raw  # Nomad writes it raw: the case is real, not vacuous
    await watch.until(pod.uid, lambda s: s.phase == Phase.SUCCEEDED)
    [events] = list(translator._feeds[0].streams.values())
    assert events.connections == 1  # never reconnected


async def test_delete_purges_the_job_and_waits_for_its_allocation(
    translator: NomadTranslator, watch: Watch, nomad_agent: NomadAgent
) -> None:
    pod = make_pod(translator.node_name, "exec sleep 300", policy="Always")
    created = await translator.create(pod)
    await watch.until(pod.uid, lambda s: s.phase == Phase.RUNNING)
    await translator.delete(pod.ref, grace_seconds=2)
    _, st = await watch.until(pod.uid, lambda s: s.containers[0].state == "terminated")
    assert st.containers[0].signal == 15 or st.containers[0].exit_code in (137, 143)
    # one purging deregister: the job is gone at once, its allocation stopped as for a stop
    assert nomad_get(nomad_agent, f"/job/{created.backend_id}") is None
    deadline = time.monotonic() + 30
    while pod.uid in {s.ref.uid for s in await translator.list()}:
        # listed until the translator saw the allocation end (the event just reported)
        assert time.monotonic() < deadline, "a purged job whose allocation ended still listed"
        await asyncio.sleep(0.2)
    await translator.delete(pod.ref, grace_seconds=2)  # again: not found = done


async def test_follow_logs_stream_and_end_with_the_task(
    translator: NomadTranslator, watch: Watch
) -> None:
    pod = make_pod(translator.node_name, "sleep 1; for i in 1 2 3; do echo line $i; sleep 1; done")
    await translator.create(pod)
    await watch.until(pod.uid, lambda s: s.containers[0].state in ("running", "terminated"))
    got: list[tuple[float, bytes]] = []
    start = time.monotonic()
    async for chunk in translator.logs(pod.ref, "app", LogOptions(follow=True, timestamps=True)):
        got.append((time.monotonic() - start, chunk))
    text = b"".join(c for _, c in got).decode()
    assert [line.split(" ", 1)[1] for line in text.splitlines()] == ["line 1", "line 2", "line 3"]
    assert len(got) == 3 and got[-1][0] - got[0][0] > 1.5  # arrived as written, not at the end


async def test_exec_returns_output_and_exit_code(translator: NomadTranslator, watch: Watch) -> None:
    pod = make_pod(translator.node_name, "exec sleep 300", policy="Always")
    await translator.create(pod)
    await watch.until(pod.uid, lambda s: s.phase == Phase.RUNNING)
    session = await translator.exec(
        pod.ref,
        "app",
        ["/bin/sh", "-c", "read x; echo got $x; echo err >&2; exit 7"],
        tty=False,
        stdin=True,
    )
    await session.write_stdin(b"ping\n")
    await session.close_stdin()
    out = [item async for item in session.output()]
    assert await session.wait() == 7
    assert (1, b"got ping\n") in out and (2, b"err\n") in out


async def test_status_changes_arrive_via_the_event_stream_fast(
    translator: NomadTranslator, watch: Watch, nomad_agent: NomadAgent
) -> None:
    """Latency from Nomad's change (the task's Terminated event, stamped by the Nomad client,
    and the allocation's ModifyTime on the server) to the translator's pushed state."""
    samples = []
    for _ in range(3):
        pod = make_pod(translator.node_name, "sleep 0.5; exit 0")
        created = await translator.create(pod)
        at, _ = await watch.until(pod.uid, lambda s: s.phase == Phase.SUCCEEDED)
        allocs = nomad_get(nomad_agent, f"/job/{created.backend_id}/allocations")
        alloc = allocs[0]
        events = alloc["TaskStates"]["app"]["Events"]
        terminated = next(e["Time"] for e in events if e["Type"] == "Terminated") / 1e9
        modified = alloc["ModifyTime"] / 1e9
        samples.append((at - terminated, at - modified))
    for end_to_end, from_server in samples:
        print(
            f"\nlatency: task exit → pushed state {end_to_end * 1000:.0f} ms; "
            f"server commit → pushed state {from_server * 1000:.0f} ms"
        )
    assert max(e for e, _ in samples) < 2.0
    # the backstop list runs every 5 s here: sub-second arrivals can only come from the stream
    assert min(s for _, s in samples) < 1.0


async def test_a_new_translator_adopts_its_own_jobs_and_ignores_others(
    translator: NomadTranslator, watch: Watch, nomad_agent: NomadAgent
) -> None:
    pod = make_pod(translator.node_name, "exec sleep 300", policy="Always")
    await translator.create(pod)
    await watch.until(pod.uid, lambda s: s.phase == Phase.RUNNING)
    same = NomadTranslator(
        TranslatorContext(translator.node_name, dict(translator.settings)), environ={}
    )
    other = NomadTranslator(
        TranslatorContext("someone-else", dict(translator.settings)), environ={}
    )
    try:
        adopted = {s.ref.uid: s for s in await same.list()}
        assert adopted[pod.uid].phase == Phase.RUNNING
        assert pod.uid not in {s.ref.uid for s in await other.list()}
        await other.delete(pod.ref, grace_seconds=0)  # not its job: untouched
        assert nomad_get(nomad_agent, f"/job/{adopted[pod.uid].backend_id}")["Stop"] is False
    finally:
        await same.close()
        await other.close()


async def test_update_rewrites_file_contents_in_the_variable_and_refuses_env_changes(
    translator: NomadTranslator, nomad_agent: NomadAgent
) -> None:
    base = make_pod(
        translator.node_name, "cat local/vkgate/cfg/app.conf; exec sleep 300", policy="Always"
    )
    app = dataclasses.replace(
        base.containers[0], mounts=(VolumeMount("cfg", "/etc/app"),), env=(EnvVar("A", "1"),)
    )
    pod = dataclasses.replace(
        base,
        containers=(app,),
        volumes=(ResolvedVolume("cfg", "configMap", files=(VolumeFile("app.conf", b"v=1\n"),)),),
    )
    created = await translator.create(pod)

    def version() -> int:
        return int(nomad_get(nomad_agent, f"/job/{created.backend_id}")["Version"])

    assert await translator.update(pod, created) is True  # nothing changed: nothing sent
    assert version() == 0
    newer = dataclasses.replace(
        pod,
        volumes=(ResolvedVolume("cfg", "configMap", files=(VolumeFile("app.conf", b"v=2\n"),)),),
    )
    assert await translator.update(newer, created) is True
    # the file is an item of the job's Variable: rewritten there, the job is not re-registered
    # (docs/backends/nomad.md, "Secrets and Nomad Variables")
    assert version() == 0
    variable = nomad_get(nomad_agent, f"/var/nomad/jobs/{created.backend_id}")
    assert variable["Items"] == {"f0": "v=2\n"}
    other_env = dataclasses.replace(
        newer, containers=(dataclasses.replace(app, env=(EnvVar("A", "2"),)),)
    )
    assert await translator.update(other_env, created) is False  # needs a re-create
    assert version() == 0


async def test_requests_per_pod_on_a_real_nomad(
    translator: NomadTranslator, watch: Watch, nomad_agent: NomadAgent
) -> None:
    """The pod's own calls (the job's endpoints, its Variable, its allocations' client calls)
    for one create and one delete with the event stream up; the scope-wide lists (backstop,
    resync) are shared by every pod and not counted here (docs/design/nomad.md, "Requests per
    pod")."""
    from collections import Counter

    def own(c: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
        return Counter({k: n for k, n in c.items() if k[1] not in ("/jobs", "/allocations")
                        or k[0] == "POST"})  # fmt: skip

    warm = make_pod(translator.node_name, "exec sleep 300", policy="Always")
    await translator.create(warm)  # the first create reads the nodes' CPU speed
    await watch.until(warm.uid, lambda s: s.phase == Phase.RUNNING)
    deadline = time.monotonic() + 10
    while not translator.change_stream_live():
        assert time.monotonic() < deadline, "the event stream never connected"
        await asyncio.sleep(0.1)
    pod = make_pod(translator.node_name, "exec sleep 300", policy="Always")
    before = Counter(translator.client.requests)
    created = await translator.create(pod)
    create = own(Counter(translator.client.requests) - before)
    await watch.until(pod.uid, lambda s: s.phase == Phase.RUNNING)
    # created again (as by a restarted agent): Nomad refuses the register (EnforceIndex), one
    # read adopts the pod's own job, which is not registered again
    version = nomad_get(nomad_agent, f"/job/{created.backend_id}")["JobModifyIndex"]
    before = Counter(translator.client.requests)
    again = await translator.create(pod)
    adopt = own(Counter(translator.client.requests) - before)
    assert again.backend_id == created.backend_id
    assert adopt == Counter({("POST", "/jobs"): 1, ("GET", "/job/:job_id"): 1}), adopt
    assert nomad_get(nomad_agent, f"/job/{created.backend_id}")["JobModifyIndex"] == version
    await asyncio.sleep(1)  # the allocation's client calls of its start (node address) settle
    before = Counter(translator.client.requests)
    await translator.delete(pod.ref, grace_seconds=2)
    await watch.until(pod.uid, lambda s: s.containers[0].state == "terminated")
    deadline = time.monotonic() + 30
    while nomad_get(nomad_agent, f"/job/{created.backend_id}") is not None:
        assert time.monotonic() < deadline, "job not purged"
        await asyncio.sleep(0.2)
    delete = own(Counter(translator.client.requests) - before)
    print(f"\ncreate: {dict(create)}\ndelete: {dict(delete)}")
    assert create == Counter({("POST", "/jobs"): 1}), create  # registered only if new
    assert sum(delete.values()) <= 3, delete
    await translator.delete(warm.ref, grace_seconds=0)
