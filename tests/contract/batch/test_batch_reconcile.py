"""The reconcile side against the fake: one (incremental) list per interval with $select/$filter,
continuation tokens, host IPs from one node list, delete, capacity and ping."""

from __future__ import annotations

import asyncio

import pytest
from batch_pods import container, make_pod
from fake_batch import FILTERABLE_TASK, Behaviour, FakeBatch, iter_calls
from fake_odata import parse_filter

from translators.base import BackendNotFound, BackendRejected, EnvVar, Phase

pytestmark = pytest.mark.contract


async def test_one_list_call_per_reconcile_with_select(fake: FakeBatch, make_translator) -> None:
    t = make_translator()
    await asyncio.gather(*(t.create(make_pod(f"p{i}")) for i in range(5)))
    before = fake.count("GET", "/tasks")
    states = await t.list()
    assert len(states) == 5
    assert fake.count("GET", "/tasks") == before + 1
    (call,) = list(iter_calls(fake, "GET", "/tasks"))[-1:]
    selected = set(call.query["$select"].split(","))
    assert {"id", "displayName", "state", "executionInfo", "nodeInfo"} <= selected
    assert "environmentSettings" not in selected  # env (secrets) never travels on a list
    assert fake.count("GET", "/tasks/") == 0  # no per-task GETs


async def test_list_is_incremental_after_the_first_full_list(
    fake: FakeBatch, make_translator
) -> None:
    t = make_translator()
    await t.create(make_pod("done-early"))
    fake.settle()
    (first,) = await t.list()
    assert first.phase is Phase.SUCCEEDED
    assert "$filter" not in list(iter_calls(fake, "GET", "/tasks"))[-1].query

    fake.step(400, seconds=1)  # minutes pass; then another task changes state
    fake.script("default/runner/", Behaviour(forever=True))
    await t.create(make_pod("runner"))
    fake.step(2)
    assert {s.ref.name for s in await t.list()} == {"done-early", "runner"}
    listed = await t.list()
    flt = list(iter_calls(fake, "GET", "/tasks"))[-1].query["$filter"]
    assert flt.startswith("state ne 'completed' or stateTransitionTime ge datetime'")
    done_task = fake.all_tasks(t.job_id)[0]
    assert not parse_filter(flt, FILTERABLE_TASK)(done_task)  # the old task is not re-listed
    assert {s.ref.name: s.phase for s in listed}["done-early"] is Phase.SUCCEEDED  # cache

    task_id = fake.all_tasks(t.job_id)[-1]["id"]
    del fake.tasks[t.job_id.lower()][task_id.lower()]  # deleted outside vkgate
    assert {s.ref.name for s in await t.list()} == {"done-early"}


async def test_full_relist_runs_periodically(fake: FakeBatch, make_translator) -> None:
    t = make_translator(full_relist_seconds=60)
    await t.create(make_pod("x"))
    await t.list()
    await t.list()
    fake.step(61, seconds=1)
    await t.list()
    filters = [c.query.get("$filter") for c in iter_calls(fake, "GET", "/tasks")]
    assert filters[0] is None and filters[1] is not None and filters[2] is None


async def test_continuation_tokens_are_followed(fake: FakeBatch, make_translator) -> None:
    fake.page_size = 7
    t = make_translator()
    await asyncio.gather(*(t.create(make_pod(f"page{i}")) for i in range(20)))
    states = await t.list()
    assert len(states) == 20
    pages = list(iter_calls(fake, "GET", "/tasks"))
    assert len(pages) == 3
    assert "$skiptoken" not in pages[0].query
    assert all("$skiptoken" in p.query and "id" in p.query["$select"] for p in pages[1:])


async def test_host_ip_costs_one_node_list_per_interval(fake: FakeBatch, make_translator) -> None:
    t = make_translator(node_refresh_seconds=30)
    await asyncio.gather(*(t.create(make_pod(f"n{i}")) for i in range(6)))
    fake.step(2)
    states = await t.list()
    ips = {s.host_ip for s in states}
    assert ips <= {"10.0.0.4", "10.0.0.5"} and "" not in ips
    await t.list()
    await t.list()
    assert fake.count("GET", "/nodes") == 1


async def test_delete_removes_all_tasks_of_a_pod_and_is_idempotent(
    fake: FakeBatch, make_translator
) -> None:
    t = make_translator()
    fake.script("default/del/", Behaviour(forever=True))
    pod = make_pod("del", init=(container("init", role="init"),))
    await t.create(pod)
    fake.step(4)
    await t.list()
    assert len(fake.all_tasks(t.job_id)) == 2
    await t.delete(pod.ref, grace_seconds=30)
    assert fake.all_tasks(t.job_id) == []
    await t.delete(pod.ref, grace_seconds=30)  # already gone: no error
    assert await t.list() == []


async def test_delete_after_restart_finds_init_tasks(fake: FakeBatch, make_translator) -> None:
    pod = make_pod("orphan", init=(container("a", role="init"), container("b", role="init")))
    await make_translator().create(pod)
    fresh = make_translator()  # no cache
    await fresh.delete(pod.ref, grace_seconds=0)
    assert fake.all_tasks(fresh.job_id) == []


async def test_secrets_stay_out_of_display_name(fake: FakeBatch, make_translator) -> None:
    t = make_translator()
    await t.create(make_pod("sec", env=(EnvVar("TOKEN", "s3cr3t-value", secret=True),)))
    (task,) = fake.all_tasks(t.job_id)
    assert {"name": "TOKEN", "value": "s3cr3t-value"} in task["environmentSettings"]
    assert "s3cr3t" not in task["displayName"]
    assert "metadata" not in task


async def test_registry_credentials_from_settings(fake: FakeBatch, make_translator) -> None:
    t = make_translator(
        registry={"server": "myreg.azurecr.io", "username": "puller", "password": "pw-123"}
    )
    await t.create(make_pod("private", image="myreg.azurecr.io/team/app:1"))
    await t.create(make_pod("public", image="busybox:1.36"))
    private, public = fake.all_tasks(t.job_id)
    assert private["containerSettings"]["registry"] == {
        "registryServer": "myreg.azurecr.io",
        "username": "puller",
        "password": "pw-123",
    }
    assert "registry" not in public["containerSettings"]
    listed = await t.api.get_task(t.job_id, private["id"])
    assert "pw-123" not in str(listed)


async def test_capacity_counts_usable_nodes(fake: FakeBatch, make_translator) -> None:
    fake.add_pool(
        "pool-2",
        vm_size="Standard_D8s_v3",
        slots=8,
        nodes=3,
        node_states=["idle", "running", "unusable"],
    )
    cap = await make_translator(pool_id="pool-2").capacity()
    assert (cap.cpu_millis, cap.memory_bytes, cap.pods) == (16_000, 64 * 1024**3, 16)


async def test_capacity_overrides_and_vm_size_table(fake: FakeBatch, make_translator) -> None:
    fake.add_pool("gpu", vm_size="Standard_NC6s_v3", slots=1, nodes=2)
    cap = await make_translator(pool_id="gpu").capacity()
    assert cap.extended == {"nvidia.com/gpu": 2} and cap.pods == 2
    over = await make_translator(pool_id="gpu", capacity={"pods": "50", "cpu": "100"}).capacity()
    assert (over.pods, over.cpu_millis) == (50, 100_000)

    fake.add_pool("odd", vm_size="Standard_Weird_v9", slots=2, nodes=1)
    with pytest.raises(BackendRejected) as err:
        await make_translator(pool_id="odd").capacity()
    assert err.value.reason == "UnknownVmSize" and "vm_sizes" in str(err.value)
    known = make_translator(
        pool_id="odd", vm_sizes={"Standard_Weird_v9": {"cpu": "3", "memory": "5Gi"}}
    )
    cap = await known.capacity()
    assert (cap.cpu_millis, cap.memory_bytes, cap.pods) == (3000, 5 * 1024**3, 2)


async def test_required_slots_follow_cpu_requests(fake: FakeBatch, make_translator) -> None:
    t = make_translator()  # pool-1: 4 cores, 4 slots → 1 core per slot
    await t.create(make_pod("small", resources={"requests": {"cpu": "500m"}}))
    await t.create(
        make_pod(
            "big", resources={"requests": {"cpu": "2500m"}, "limits": {"cpu": "3", "memory": "1Gi"}}
        )
    )
    await t.create(make_pod("huge", resources={"requests": {"cpu": "64"}}))
    small, big, huge = fake.all_tasks(t.job_id)
    assert (small["requiredSlots"], big["requiredSlots"], huge["requiredSlots"]) == (1, 3, 4)
    assert "--cpus 3 --memory 1073741824" in big["containerSettings"]["containerRunOptions"]


async def test_ping_reports_a_missing_pool(make_translator) -> None:
    await make_translator().ping()
    with pytest.raises(BackendNotFound):
        await make_translator(pool_id="nope").ping()
