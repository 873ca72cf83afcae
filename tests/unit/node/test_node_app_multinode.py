"""One App, several virtual nodes (docs/design/multinode.md): one shared client, a Node, Lease and
leader Lease per node, readiness over every node, one node's backend failure isolated, metrics
with a ``node`` label."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from node_fakes import Component, FakeApi, FakeTranslator, advance, settle

from gateway import config as cfg
from gateway.app import App
from gateway.kube.client import KubeClient
from gateway.kube.errors import NotLeader
from gateway.logging_setup import NODE, setup_logging
from gateway.node.leader import LEASES
from vkgate_core.clock import FakeClock

NODES = """
[kubelet]
metrics_address = ""
[[nodes]]
name = "vk-a"
labels = { pool = "a" }
kubelet = { port = 20001 }
[[nodes]]
name = "vk-b"
labels = { pool = "b" }
kubelet = { port = 20002 }
"""


@pytest.fixture
def two_nodes(
    tmp_path: Path, api: FakeApi, clock: FakeClock, make_client: Callable[[FakeApi], KubeClient]
) -> tuple[App, dict[str, FakeTranslator], list[str]]:
    path = tmp_path / "vkgate.toml"
    path.write_text(NODES)
    settings = cfg.load(path, environ={})
    backends = {"vk-a": FakeTranslator(), "vk-b": FakeTranslator()}
    app = App(settings, kube=make_client(api), translators=backends, clock=clock)
    log: list[str] = []
    for unit in app.units:  # the pod controller and kubelet server have their own tests
        unit.pods = Component(f"{unit.name}.pods", log)
        unit.kubelet = Component(f"{unit.name}.kubelet", log)
    return app, backends, log


async def test_one_process_registers_every_node_on_one_client(
    api: FakeApi, clock: FakeClock, two_nodes: tuple[App, dict[str, FakeTranslator], list[str]]
) -> None:
    app, _, log = two_nodes
    assert [u.name for u in app.units] == ["vk-a", "vk-b"]
    assert all(u.kube is app.kube for u in app.units)
    task = asyncio.create_task(app.run())
    await settle()
    assert api.node("vk-a")["metadata"]["labels"]["pool"] == "a"
    assert api.node("vk-b")["metadata"]["labels"]["pool"] == "b"
    for name in ("vk-a", "vk-b"):
        assert api.lease(name)["spec"]["holderIdentity"] == name
    # one candidate per process: the same identity holds every node's leader Lease
    leaders = {api.lease(f"vkgate-leader-{n}")["spec"]["holderIdentity"] for n in ("vk-a", "vk-b")}
    assert len(leaders) == 1 and all(leaders)
    assert all(unit.node.node is not None for unit in app.units)
    assert log == ["vk-a.pods.start", "vk-a.kubelet.start", "vk-b.pods.start", "vk-b.kubelet.start"]
    assert app.readiness() is None
    app.request_stop()
    await asyncio.wait_for(task, 5)
    assert log[4:] == ["vk-b.kubelet.stop", "vk-b.pods.stop", "vk-a.kubelet.stop", "vk-a.pods.stop"]
    # a clean stop hands both leader Leases over
    for name in ("vk-a", "vk-b"):
        assert api.lease(f"vkgate-leader-{name}")["spec"]["holderIdentity"] == ""


async def test_one_backend_down_marks_only_its_node_and_readiness_names_it(
    api: FakeApi, clock: FakeClock, two_nodes: tuple[App, dict[str, FakeTranslator], list[str]]
) -> None:
    app, backends, _ = two_nodes
    backends["vk-b"].down = "nomad at http://b: connection refused"
    task = asyncio.create_task(app.run())
    await settle()

    def ready(name: str) -> str:
        conds = api.node(name)["status"]["conditions"]
        return next(c["status"] for c in conds if c["type"] == "Ready")

    assert (ready("vk-a"), ready("vk-b")) == ("True", "False")
    reason = app.readiness() or ""
    assert "node vk-b" in reason and "connection refused" in reason
    assert "vk-a" not in reason
    renewed = api.lease("vk-a")["spec"]["renewTime"]
    await advance(clock, 30)
    assert not task.done()  # the process runs on
    assert api.lease("vk-a")["spec"]["renewTime"] != renewed  # the healthy node heartbeats
    assert backends["vk-b"].pings > 1  # the failing backend is retried
    backends["vk-b"].down = ""
    await advance(clock, 30)
    assert ready("vk-b") == "True"
    assert app.readiness() is None
    app.request_stop()
    await asyncio.wait_for(task, 5)


async def test_writes_are_fenced_unless_the_process_leads_every_node(
    api: FakeApi, clock: FakeClock, two_nodes: tuple[App, dict[str, FakeTranslator], list[str]]
) -> None:
    app, _, _ = two_nodes
    task = asyncio.create_task(app.run())
    await settle()
    assert app.kube.fence is not None
    assert app.kube.fence("PATCH", "/api/v1/nodes/vk-a/status") is None
    app.units[1].leader.renewed_at = None  # vk-b's leadership lapsed
    refused = app.kube.fence("PATCH", "/api/v1/nodes/vk-a/status")
    assert refused is not None and "vk-b" in refused
    # the leader Leases themselves stay writable, so they can be re-acquired
    assert app.kube.fence("PUT", app.units[0].leader.path) is None
    assert app.kube.fence("PUT", app.units[1].leader.path) is None
    assert app.kube.fence("POST", LEASES) is None
    with pytest.raises(NotLeader):
        await app.kube.patch("/api/v1/nodes/vk-a", {"metadata": {"labels": {"x": "y"}}})
    app.request_stop()
    await asyncio.wait_for(task, 5)


async def test_losing_one_nodes_leader_lease_stops_the_process(
    api: FakeApi, clock: FakeClock, two_nodes: tuple[App, dict[str, FakeTranslator], list[str]]
) -> None:
    app, _, _ = two_nodes
    task = asyncio.create_task(app.run())
    await settle()
    lease = api.lease("vkgate-leader-vk-b")
    lease["spec"]["holderIdentity"] = "someone-else"
    await advance(clock, 5)
    await asyncio.wait_for(task, 5)
    assert app.exit_code == 1


def test_metrics_carry_a_node_label_and_the_shared_client_is_counted_once(
    two_nodes: tuple[App, dict[str, FakeTranslator], list[str]],
) -> None:
    app, _, _ = two_nodes
    app.units[0].metrics.observe_backend("ping", "ok", 0.01)
    app.units[1].metrics.observe_backend("ping", "BackendUnavailable", 0.01)
    app.kube.stats[("update", "leases")] += 3
    text = app.metrics.render().decode()
    assert (
        'vkgate_backend_calls_total{backend="simulated",node="vk-a",operation="ping",outcome="ok"} 1.0'
        in text
    )
    assert (
        'vkgate_backend_calls_total{backend="simulated",node="vk-b",operation="ping",'
        'outcome="BackendUnavailable"} 1.0' in text
    )
    assert text.count("# TYPE vkgate_backend_calls_total counter") == 1
    assert 'vkgate_api_writes_total{resource="leases",verb="update"} 3.0' in text
    assert "vkgate_api_clients 1.0" in text
    rss = [line for line in text.splitlines() if line.startswith("process_resident_memory")]
    assert len(rss) == 1 and "node=" not in rss[0]  # process-wide: once, without a node
    assert 'vkgate_build_info{backend="simulated",node="vk-b"' in text


async def test_every_log_line_of_a_node_names_it(
    api: FakeApi, clock: FakeClock, two_nodes: tuple[App, dict[str, FakeTranslator], list[str]]
) -> None:
    app, backends, _ = two_nodes
    backends["vk-b"].down = "refused"
    buf = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("httpx").level)
    setup_logging("info", "json", stream=buf)
    try:
        task = asyncio.create_task(app.run())
        await settle()
        await advance(clock, 30)  # the loops started by each node log in its context too
        app.request_stop()
        await asyncio.wait_for(task, 5)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("httpx").setLevel(saved[2])
    records = [json.loads(line) for line in buf.getvalue().splitlines()]
    pings = [r for r in records if "refused" in r["message"]]
    assert pings, records  # node b's backend failures were logged ...
    assert {r.get("node") for r in pings} == {"vk-b"}  # ... each naming node b
    tagged = {r.get("node") for r in records if r["logger"].startswith("gateway.node")}
    assert tagged == {"vk-a", "vk-b"}


def test_text_logs_carry_the_node_in_brackets() -> None:
    buf = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("httpx").level)
    setup_logging("info", "text", stream=buf)
    try:
        token = NODE.set("vk-a")
        logging.getLogger("gateway.node").info("registered")
        NODE.reset(token)
        logging.getLogger("gateway.app").info("process-wide")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("httpx").setLevel(saved[2])
    first, second = buf.getvalue().splitlines()
    assert first.endswith("gateway.node [vk-a]: registered")
    assert second.endswith("gateway.app: process-wide")
