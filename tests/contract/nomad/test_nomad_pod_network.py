"""Pod networking against the Nomad API: a bridge job's pod gets its allocation's own address
even when only allocation stubs were listed (one ``GET /v1/allocation/:id``, not repeated for
the same allocation version), and what ``create`` registers in each mode."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import httpx
import pytest
import respx
from nomad_fixtures import ADDRESS, MakeTranslator, captured, pod

from translators.base import ResolvedContainer

pytestmark = pytest.mark.contract

NODE_ID = "c1000000-0000-0000-0000-000000000001"


def ok(data: Any, index: int = 10) -> httpx.Response:
    return httpx.Response(200, json=data, headers={"X-Nomad-Index": str(index)})


def bridge_pod() -> tuple[dict[str, Any], dict[str, Any]]:
    """(job stub, running allocation stub) of a bridge-mode pod: the stub as
    ``GET /v1/allocations`` lists it, without ``NetworkStatus``."""
    doc = copy.deepcopy(captured("running"))
    job, alloc = doc["job"], doc["allocations"][0]
    job["Meta"]["vkgate.network"] = "bridge"
    alloc.update(NodeID=NODE_ID, ClientStatus="running")
    alloc.pop("NetworkStatus", None)
    return job, alloc


async def test_a_bridge_pods_address_is_fetched_once_per_allocation_version(
    make_translator: MakeTranslator,
) -> None:
    job, stub = bridge_pod()
    full = {
        **stub,
        "NetworkStatus": {"InterfaceName": "eth0", "Address": "203.0.113.7", "DNS": None},
        "Job": job,
    }
    node = {"ID": NODE_ID, "Address": "198.51.100.21", "Status": "ready", "Name": "c1"}
    t = await make_translator()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        nomad.get("/v1/nodes").mock(return_value=ok([node]))
        nomad.get("/v1/jobs").mock(return_value=ok([job]))
        nomad.get("/v1/allocations").mock(return_value=ok([stub]))
        one = nomad.get(f"/v1/allocation/{stub['ID']}").mock(return_value=ok(full))
        (state,) = await t.list()
        assert (state.pod_ip, state.host_ip) == ("203.0.113.7", "198.51.100.21")
        (state,) = await t.list()  # the stub again: the address is kept, not fetched again
        assert state.pod_ip == "203.0.113.7" and one.call_count == 1


async def test_a_bridge_pod_without_a_known_address_has_none_not_its_clients(
    make_translator: MakeTranslator,
) -> None:
    job, stub = bridge_pod()
    node = {"ID": NODE_ID, "Address": "198.51.100.21", "Status": "ready", "Name": "c1"}
    t = await make_translator()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        nomad.get("/v1/nodes").mock(return_value=ok([node]))
        nomad.get("/v1/jobs").mock(return_value=ok([job]))
        nomad.get("/v1/allocations").mock(return_value=ok([stub]))
        one = nomad.get(f"/v1/allocation/{stub['ID']}").mock(return_value=ok(stub))
        (state,) = await t.list()
        assert (state.pod_ip, state.host_ip) == ("", "198.51.100.21")
        await t.list()
        assert one.call_count == 1  # same ModifyIndex: not asked again until it changes


@pytest.mark.parametrize(
    ("mode", "networks", "meta"),
    [
        (
            "host",
            [{"Mode": "host", "ReservedPorts": [{"Label": "http", "Value": 8080, "To": 8080}]}],
            None,
        ),
        ("bridge", [{"Mode": "bridge"}], "bridge"),
        ("cni/vknet", [{"Mode": "cni/vknet"}], "cni/vknet"),
    ],
)
async def test_create_registers_the_group_network_of_the_mode(
    make_translator: MakeTranslator, mode: str, networks: list[dict[str, Any]], meta: str | None
) -> None:
    base = pod()
    spec = {"name": "app", "image": "busybox", "ports": [{"name": "http", "containerPort": 8080}]}
    p = dataclasses.replace(
        base,
        containers=(ResolvedContainer(name="app", image="busybox", command=("true",), spec=spec),),
    )
    t = await make_translator(network_mode=mode)
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        nomad.get(url__regex=r"/v1/job/[^/]+$").mock(return_value=httpx.Response(404))
        register = nomad.post("/v1/jobs").mock(
            return_value=ok({"EvalID": "e", "JobModifyIndex": 11})
        )
        await t.create(p)
    job = json.loads(register.calls.last.request.content)["Job"]
    assert job["TaskGroups"][0]["Networks"] == networks
    assert job["Meta"].get("vkgate.network") == meta
