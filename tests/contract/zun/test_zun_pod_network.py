"""podIP:containerPort on Zun, against Zun's own API code (tests/contract/zun/zun_upstream.py):
a Zun container has its own Neutron address, which is the pod's, and Zun opens the container's
``exposed_ports`` on it (a security group of its own, zun/container/docker/driver.py
``_process_exposed_ports``); the container view lists them again as ``ports``.  So the pod's
address and container ports are exactly where the workload answers."""

from __future__ import annotations

import pytest
from fake_zun import FakeOpenStack
from zun_pods import resolved_pod, simple_pod

from translators.base import Phase, UnsupportedError
from translators.zun import ZunTranslator
from vkgate_core.clock import FakeClock

pytestmark = pytest.mark.contract

PORTS = [
    {"name": "http", "containerPort": 8080},
    {"name": "dns", "containerPort": 5353, "protocol": "UDP"},
]


def upstream_or_skip(fake: FakeOpenStack) -> None:
    if fake.upstream is None:
        pytest.skip("the zun package (test extra zun-server) is not installed")


def view_of(fake: FakeOpenStack, uuid: str) -> dict:
    """The container as Zun's API shows it to vkgate (``format_container``)."""
    return fake._view(fake.containers[uuid], (1, 40))


async def test_a_containers_address_and_exposed_ports_are_the_pods(
    make_translator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    upstream_or_skip(fake)
    zun: ZunTranslator = await make_translator()
    pod = simple_pod("web", restart="Always", command=["httpd", "-f"], ports=PORTS)
    await zun.create(resolved_pod(pod))
    ((uuid, sent),) = fake.containers.items()
    # Zun's API accepted the ports in its own form (tcp/udp keys)
    assert sent["exposed_ports"] == {"8080/tcp": {}, "5353/udp": {}}
    assert ("POST", "/container/v1/containers", 202) in fake.upstream_answers
    await clock.advance(5)
    (state,) = await zun.list()
    assert state.phase is Phase.RUNNING
    shown = view_of(fake, uuid)
    (entries,) = shown["addresses"].values()
    assert state.pod_ip == entries[0]["addr"]  # the container's own Neutron address
    assert sorted(shown["ports"]) == [5353, 8080]  # what Zun exposed on that address


async def test_an_ipv4_address_is_the_pod_ip_on_a_dual_stack_port(
    make_translator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    upstream_or_skip(fake)
    zun: ZunTranslator = await make_translator()
    await zun.create(resolved_pod(simple_pod("dual", restart="Always", ports=PORTS[:1])))
    ((uuid, c),) = fake.containers.items()
    await clock.advance(5)
    await zun.list()  # the fake moves the container on as it is read
    v4 = c["addresses"]["net-1"][0]
    c["addresses"]["net-1"].insert(0, {**v4, "addr": "2001:db8::7", "version": 6})
    (state,) = await zun.list()
    assert view_of(fake, uuid)["addresses"]["net-1"][0]["addr"] == "2001:db8::7"
    assert state.pod_ip == v4["addr"]


async def test_a_capsules_ports_reach_zun_and_its_address_is_the_pods(
    make_translator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    upstream_or_skip(fake)
    fake.set_versions("1.1", "1.40")
    zun: ZunTranslator = await make_translator()
    pod = simple_pod("two", "nginx:1.27", restart="Always", ports=PORTS[:1])
    pod["spec"]["containers"].append(
        {"name": "poller", "image": "busybox:side", "command": ["sleep", "1d"]}
    )
    state = await zun.create(resolved_pod(pod))
    assert state.backend_id.startswith("capsule/")
    ((cap_uuid, cap),) = fake.capsules.items()
    assert ("POST", "/container/v1/capsules", 202) in fake.upstream_answers
    # Zun stored the port on the capsule's container as its own exposed port
    up = fake.upstream
    assert up is not None
    ctx = up.context(project_id=fake.shadow[fake.project_id], user_id=fake.user_id, admin=True)
    with up.lock:
        stored = up.objects.Capsule.get_by_uuid(ctx, fake.shadow[cap_uuid])
        exposed = [c.exposed_ports for c in stored.containers]
    assert [e or {} for e in exposed] == [{"8080/tcp": {}}, {}], exposed
    for _ in range(12):
        await clock.advance(0.5)
    (st,) = await zun.list()
    assert st.phase is Phase.RUNNING
    (entries,) = cap["addresses"].values()
    assert st.pod_ip == entries[0]["addr"]  # one address for the capsule's containers


async def test_a_protocol_zun_cannot_expose_is_refused_naming_the_field(
    make_translator, fake: FakeOpenStack
) -> None:
    zun: ZunTranslator = await make_translator()
    pod = simple_pod(
        "sctp", ports=[{"containerPort": 80}, {"containerPort": 9899, "protocol": "SCTP"}]
    )
    with pytest.raises(UnsupportedError) as err:
        await zun.create(resolved_pod(pod))
    assert err.value.field == "spec.containers[app].ports[1].protocol"
    assert fake.containers == {}
