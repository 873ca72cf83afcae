"""Delete (stop + delete, escalation after grace), idempotency, adoption after a restart,
list filtering and pagination — against the stateful fake."""

from __future__ import annotations

import pytest
from fake_zun import FakeOpenStack
from zun_pods import resolved_pod, simple_pod

from translators.base import Phase, PodRef
from translators.zun import ZunTranslator
from vkgate_core.clock import FakeClock

pytestmark = pytest.mark.contract


async def running_pod(zun: ZunTranslator, clock: FakeClock, name: str = "web", **kw) -> PodRef:
    pod = resolved_pod(simple_pod(name, "nginx:1.27", restart="Always", **kw))
    await zun.create(pod)
    await clock.advance(2.5)
    (st,) = [s for s in await zun.list() if s.ref.uid == pod.uid]
    assert st.phase is Phase.RUNNING
    return pod.ref


async def settle(clock: FakeClock, seconds: float, step: float = 0.5) -> None:
    for _ in range(int(seconds / step)):
        await clock.advance(step)


async def test_delete_stops_with_the_grace_then_deletes(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    ref = await running_pod(zun, clock)
    (uuid,) = fake.containers
    await zun.delete(ref, grace_seconds=30)
    stops = [q for m, p, q in fake.requests if p.endswith(f"/{uuid}/stop")]
    assert stops == [{"timeout": ["30"]}]
    assert fake.containers[uuid]["task_state"] == "container_stopping"

    await settle(clock, 6)
    fake.sync()
    assert uuid not in fake.containers  # stopped (exit 143) → DELETE → Deleting → gone
    deletes = [q for m, p, q in fake.requests if m == "DELETE"]
    assert deletes == [{}]  # a plain delete once stopped: no force needed
    assert await zun.list() == []
    await zun.delete(ref, grace_seconds=30)  # idempotent: gone is done
    assert len([1 for m, _, _ in fake.requests if m == "DELETE"]) == 1


async def test_stopped_state_reports_sigterm_exit_before_the_delete_finishes(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    fake.delete_seconds = 5
    ref = await running_pod(zun, clock)
    await zun.delete(ref, grace_seconds=10)
    await clock.advance(0.6)
    (st,) = await zun.list()
    assert st.containers[0].state == "terminated"
    assert st.containers[0].exit_code == 143


async def test_a_wedged_stop_is_forced_after_grace_plus_slack(
    make_translator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    fake.admin = True
    zun = await make_translator(force_delete=True, stop_slack=2, delete_poll_interval=1)
    fake.script("nginx:1.27", stuck_stop=True)
    ref = await running_pod(zun, clock)
    (uuid,) = fake.containers
    await zun.delete(ref, grace_seconds=5)
    await settle(clock, 6)
    assert not [q for m, _, q in fake.requests if m == "DELETE"]  # still within grace + slack
    await settle(clock, 3)
    forced = [q for m, _, q in fake.requests if m == "DELETE"]
    assert forced == [{"force": ["True"]}]
    await settle(clock, 2)
    fake.sync()
    assert uuid not in fake.containers


async def test_without_admin_the_escalation_is_delete_with_stop(
    make_translator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    zun = await make_translator(stop_slack=1, delete_poll_interval=1)
    fake.script("nginx:1.27", ignores_sigterm=True)
    ref = await running_pod(zun, clock)
    await zun.delete(ref, grace_seconds=0)  # kubectl delete --grace-period=0
    assert [q for m, _, q in fake.requests if m == "DELETE"] == [{"stop": ["True"]}]


async def test_delete_of_a_pod_zun_never_had_is_a_no_op(
    zun: ZunTranslator, fake: FakeOpenStack
) -> None:
    await zun.delete(PodRef("default", "ghost", "uid-ghost"), grace_seconds=30)
    assert not [1 for m, _, _ in fake.requests if m == "DELETE"]


async def test_delete_during_creating_waits_then_deletes(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    pod = resolved_pod(simple_pod("early", restart="Always"))
    await zun.create(pod)
    (uuid,) = fake.containers
    await zun.delete(pod.ref, grace_seconds=10)  # Creating: Zun refuses stop and delete
    await settle(clock, 20)
    fake.sync()
    assert uuid not in fake.containers


async def test_a_restarted_gateway_adopts_instead_of_creating_twice(
    make_translator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    first = await make_translator()
    pod = resolved_pod(simple_pod("adopt", restart="Always"))
    await first.create(pod)
    await clock.advance(3)
    await first.close()

    second = await make_translator()  # fresh process: empty index
    state = await second.create(pod)
    assert len(fake.containers) == 1
    assert fake.count("POST", "/container/v1/containers") == 1
    assert state.phase is Phase.RUNNING
    assert state.backend_id == f"container/{next(iter(fake.containers))}"


async def test_a_new_pod_with_the_name_of_a_dying_one_waits_for_it(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    from translators.base import BackendConflict

    ref = await running_pod(zun, clock, name="sts-0")
    await zun.delete(ref, grace_seconds=30)
    reborn = resolved_pod(
        {
            **simple_pod("sts-0"),
            "metadata": {"name": "sts-0", "namespace": "default", "uid": "uid-new"},
        }
    )
    with pytest.raises(BackendConflict, match="still used"):
        await zun.create(reborn)
    await settle(clock, 6)
    state = await zun.create(reborn)
    assert state.ref.uid == "uid-new"


async def test_list_returns_only_this_nodes_workloads(
    make_translator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    mine = await make_translator(node="vk-a")
    other = await make_translator(node="vk-b")
    await mine.create(resolved_pod(simple_pod("a1"), node="vk-a"))
    await other.create(resolved_pod(simple_pod("b1"), node="vk-b"))
    fake.add_foreign_container(labels={"k8s.namespace": "default", "k8s.name": "x", "k8s.uid": "x"})
    fake.add_foreign_container(name="plain")
    names = [s.ref.name for s in await mine.list()]
    assert names == ["a1"]
    assert [s.ref.name for s in await other.list()] == ["b1"]


async def test_list_follows_pagination_in_one_reconcile(
    make_translator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    zun = await make_translator(page_size=2)
    for i in range(5):
        await zun.create(resolved_pod(simple_pod(f"p{i}")))
    fake.add_foreign_container()
    before = fake.count("GET", "/container/v1/containers")
    states = await zun.list()
    assert sorted(s.ref.name for s in states) == [f"p{i}" for i in range(5)]
    pages = [q for m, p, q in fake.requests[-10:] if m == "GET" and p == "/container/v1/containers"]
    # 6 items, 2 per page: Zun sets "next" whenever a page is full, so a 4th (empty) page ends it
    assert fake.count("GET", "/container/v1/containers") - before == 4
    assert pages[0] == {"limit": ["2"]}
    assert pages[1]["marker"] and pages[1]["limit"] == ["2"]
