"""Several Nomad clients behind one virtual node: each pod names the client its allocation runs
on, capacity is what the eligible clients have left after other jobs' allocations (two requests
per refresh), and the "*" event stream's other namespaces are never fetched."""

from __future__ import annotations

import copy
import logging
from typing import Any

import httpx
import pytest
import respx
from nomad_fixtures import ADDRESS, MakeTranslator, captured

from translators.nomad.capacity import HELD_FILTER
from translators.nomad.nodes import HELD_MAX_AGE
from translators.nomad.status import JobView

pytestmark = pytest.mark.contract

C1, C2, C3 = "c1000000-0000-0000-0000-000000000001", "c2000000-0000", "c3000000-0000"


def client(node_id: str, *, address: str, ip: str = "", eligible: bool = True) -> dict[str, Any]:
    """A ``/v1/nodes?resources=true`` stub of Nomad 1.6 (the fields vkgate reads)."""
    networks = [{"Mode": "host", "Device": "veth0", "IP": ip, "CIDR": f"{ip}/32"}] if ip else []
    return {
        "ID": node_id,
        "Address": address,
        "Datacenter": "dc1",
        "Name": f"client-{node_id[:2]}",
        "NodeClass": "",
        "NodePool": "default",
        "Drain": False,
        "SchedulingEligibility": "eligible" if eligible else "ineligible",
        "Status": "ready",
        "Version": "1.6.3",
        "NodeResources": {
            "Cpu": {"CpuShares": 4000, "TotalCpuCores": 2, "ReservableCpuCores": [0, 1]},
            "Memory": {"MemoryMB": 4096},
            "Disk": {"DiskMB": 10000},
            "Networks": networks,
            "Devices": None,
        },
        "ReservedResources": {
            "Cpu": {"CpuShares": 0},
            "Memory": {"MemoryMB": 0},
            "Disk": {"DiskMB": 0},
        },
    }


def pod_on(node_id: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(job stub, allocation stub) of one of this node's pods, running on ``node_id``."""
    doc = copy.deepcopy(captured("running"))
    job, alloc = doc["job"], doc["allocations"][0]
    jid = f"default-{name}-00000000"
    job.update(ID=jid, Name=f"default/{name}")
    job["Meta"].update({"k8s.name": name, "k8s.uid": f"{name}-uid"})
    alloc.update(ID=f"{name}-alloc", JobID=jid, NodeID=node_id)
    alloc["AllocatedResources"] = {
        "Tasks": {"app": {"Cpu": {"CpuShares": 500}, "Memory": {"MemoryMB": 256}}},
        "TaskLifecycles": {"app": None},
        "Shared": {"DiskMB": 300},
    }
    return job, alloc


def foreign(node_id: str, *, mhz: int, mem: int, ns: str = "other-team") -> dict[str, Any]:
    return {
        "ID": f"f-{node_id}-{mhz}",
        "Namespace": ns,
        "NodeID": node_id,
        "JobID": "etl",
        "DesiredStatus": "run",
        "ClientStatus": "running",
        "AllocatedResources": {
            "Tasks": {"etl": {"Cpu": {"CpuShares": mhz}, "Memory": {"MemoryMB": mem}}},
            "TaskLifecycles": {"etl": None},
            "Shared": {"DiskMB": 1000},
        },
    }


class _Ticking:
    """The translator's monotonic clock, moved by the test."""

    t = 1000.0

    def monotonic(self) -> float:
        return self.t


def ok(data: Any, index: int = 10) -> httpx.Response:
    return httpx.Response(200, json=data, headers={"X-Nomad-Index": str(index)})


async def test_each_pod_names_the_client_its_allocation_runs_on(
    make_translator: MakeTranslator,
) -> None:
    job1, alloc1 = pod_on(C1, "web-1")
    job2, alloc2 = pod_on(C2, "web-2")
    nodes = [
        client(C1, address="198.51.100.21", ip="198.51.100.21"),
        client(C2, address="198.51.100.22"),
    ]
    t = await make_translator()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        nodes_route = nomad.get("/v1/nodes").mock(return_value=ok(nodes))
        nomad.get("/v1/jobs").mock(return_value=ok([job1, job2]))
        nomad.get("/v1/allocations").mock(return_value=ok([alloc1, alloc2]))
        states = {s.ref.name: s for s in await t.list()}
        assert (states["web-1"].host_ip, states["web-1"].pod_ip) == ("198.51.100.21",) * 2
        assert (states["web-2"].host_ip, states["web-2"].pod_ip) == ("198.51.100.22",) * 2
        assert nodes_route.call_count == 1  # node addresses are cached
        await t.list()
        assert nodes_route.call_count == 1
        # a client whose address changed is seen at the next node refresh (capacity's)
        nodes_route.mock(return_value=ok([nodes[0], client(C2, address="198.51.100.99")]))
        await t.capacity()
        moved = {s.ref.name: s for s in await t.list()}
        assert moved["web-2"].host_ip == "198.51.100.99"


async def test_capacity_is_what_other_jobs_leave_on_the_eligible_clients(
    make_translator: MakeTranslator,
) -> None:
    job1, own = pod_on(C1, "web-1")
    nodes = [
        client(C1, address="198.51.100.21"),
        client(C2, address="198.51.100.22"),
        client(C3, address="198.51.100.23", eligible=False),
    ]
    held = [own, foreign(C1, mhz=1000, mem=1024), foreign(C3, mhz=4000, mem=4096)]
    table = {"index": 10}  # the allocation table's index (X-Nomad-Index of every list)
    t = await make_translator()
    clock = _Ticking()
    t._nodes.clock = clock  # the clock of the other jobs' allocation list
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get("/v1/nodes").mock(return_value=ok(nodes))
        jobs = nomad.get("/v1/jobs").mock(return_value=ok([job1]))

        def allocations(request: httpx.Request) -> httpx.Response:
            if request.url.params.get("namespace") == "*":
                n = int(request.url.params.get("per_page") or len(held))
                return ok(held[:n], index=table["index"])
            return ok([own], index=table["index"])  # the scope's backstop list

        allocs = nomad.get("/v1/allocations").mock(side_effect=allocations)
        cap = await t.capacity()
        # 2 clients x 4000 MHz at 2000 MHz/core, minus the other team's 1000 MHz on c1; this
        # node's own pod (500 MHz) is Kubernetes' to count, the ineligible c3 is not offered
        assert cap.cpu_millis == (8000 - 1000) * 1000 // 2000
        assert cap.memory_bytes == (8192 - 1024) * 2**20
        assert cap.ephemeral_storage_bytes == (20000 - 1000) * 2**20
        assert jobs.call_count == 1  # the job book was empty: one listing first
        request = allocs.calls.last.request
        params = request.url.params
        assert (params["namespace"], params["resources"], params["task_states"]) == (
            "*",
            "true",
            "false",
        )
        assert params["filter"] == f'{HELD_FILTER} and (NodeID == "{C1}" or NodeID == "{C2}")'
        # at rest: a one-stub probe shows the same allocation index, the last list still holds
        clock.t += 10
        before = len(nomad.calls)
        assert await t.capacity() == cap
        calls = [c.request for c in nomad.calls[before:]]
        assert [c.url.path for c in calls] == ["/v1/nodes", "/v1/allocations"]
        assert calls[1].url.params["per_page"] == "1" and "filter" not in calls[1].url.params
        # another team's allocation grows: the index moves, so the probe is followed by the list
        held[1] = foreign(C1, mhz=2000, mem=1024)
        table["index"] = 11
        clock.t += 10
        before = len(nomad.calls)
        moved = await t.capacity()
        assert moved.cpu_millis == (8000 - 2000) * 1000 // 2000
        calls = [c.request for c in nomad.calls[before:]]
        assert [c.url.path for c in calls] == ["/v1/nodes", "/v1/allocations", "/v1/allocations"]
        assert calls[2].url.params["filter"] == params["filter"]
        # a burst of this node's own pods: each of its allocations moves the index, so while
        # its own jobs change a list younger than HELD_MAX_AGE holds and nothing is asked
        own2 = JobView.from_job({**job1, "ID": "default-web-2-00000000"})
        t.book.views[("", "default", own2.job_id)] = own2
        held[1] = foreign(C1, mhz=3000, mem=1024)
        table["index"] = 12
        clock.t += 10
        before = len(nomad.calls)
        assert await t.capacity() == moved
        assert [c.request.url.path for c in nomad.calls[before:]] == ["/v1/nodes"]
        # ... and an older one is probed and listed again
        clock.t += HELD_MAX_AGE
        before = len(nomad.calls)
        assert (await t.capacity()).cpu_millis == (8000 - 3000) * 1000 // 2000
        calls = [c.request for c in nomad.calls[before:]]
        assert [c.url.path for c in calls] == ["/v1/nodes", "/v1/allocations", "/v1/allocations"]
        # ... and so does one while its own allocations change (their events move the index)
        started = {**own, "ModifyIndex": int(own.get("ModifyIndex") or 0) + 1}
        changed, _ = await t._apply_events(
            [{"Topic": "Allocation", "Payload": {"Allocation": started}}], ""
        )
        assert changed
        table["index"] = 13
        clock.t += 10
        before = len(nomad.calls)
        await t.capacity()
        assert "/v1/allocations" not in [c.request.url.path for c in nomad.calls[before:]]
        # own jobs are left out when the list is used: a job listed as another's that is this
        # node's now (registered while the list was answered) holds nothing here
        t.book.views[("", "other-team", "etl")] = JobView.from_job(
            {**job1, "ID": "etl", "Namespace": "other-team"}
        )
        clock.t += 10
        before = len(nomad.calls)
        assert (await t.capacity()).cpu_millis == 8000 * 1000 // 2000
        assert [c.request.url.path for c in nomad.calls[before:]] == ["/v1/nodes"]


async def test_unreadable_allocations_leave_the_clients_whole(
    make_translator: MakeTranslator, caplog: pytest.LogCaptureFixture
) -> None:
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get("/v1/nodes").mock(return_value=ok([client(C1, address="198.51.100.21")]))
        nomad.get("/v1/jobs").mock(return_value=ok([]))

        def allocations(request: httpx.Request) -> httpx.Response:
            if request.url.params.get("namespace") == "*":
                return httpx.Response(403, text="Permission denied")
            return ok([])

        nomad.get("/v1/allocations").mock(side_effect=allocations)
        with caplog.at_level(logging.WARNING, logger="translators.nomad.nodes"):
            cap = await t.capacity()
    assert cap.cpu_millis == 2000
    assert "other jobs' allocations unreadable" in caplog.text


async def test_events_of_namespaces_outside_the_allow_list_are_never_fetched(
    make_translator: MakeTranslator,
) -> None:
    """The "*" stream carries every namespace; an allocation of another team's job must not
    make vkgate read the job (the token may not, and a 403 would drop the whole batch)."""
    job1, own = pod_on(C1, "web-1")
    t = await make_translator(namespaces=["team-a"])
    other = foreign(C1, mhz=100, mem=100, ns="other-team")
    event = {"Topic": "Allocation", "Namespace": "other-team", "Payload": {"Allocation": other}}
    mine = {"Topic": "Allocation", "Namespace": "default", "Payload": {"Allocation": own}}
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        read = nomad.get("/v1/job/etl").mock(
            return_value=httpx.Response(403, text="Permission denied")
        )
        nomad.get(f"/v1/job/{job1['ID']}").mock(return_value=ok(job1))
        nomad.get("/v1/nodes").mock(return_value=ok([client(C1, address="198.51.100.21")]))
        touched, _ = await t._apply_events([event, mine], "")
    assert read.call_count == 0
    assert [v.ref.name for v in touched] == ["web-1"]
