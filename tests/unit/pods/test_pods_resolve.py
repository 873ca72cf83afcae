"""RefCache (referenced ConfigMaps/Secrets by name, change detection) and Resolver details."""

from __future__ import annotations

from typing import Any

from pods_fakes import FakeKube

from gateway.clock import FakeClock
from gateway.pods.env import ReadError
from gateway.pods.resolve import RefCache, Resolver, references
from translators.base import Features


def cm(name: str, **data: str) -> dict[str, Any]:
    return {"kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"}, "data": data}


async def test_reads_by_name_caches_and_notices_changes() -> None:
    clock = FakeClock()
    kube = FakeKube(clock)
    kube.add(cm("a", k="1"))
    refs = RefCache(kube, clock=clock, refresh_interval=30)  # type: ignore[arg-type]
    refs.track("ns/p1", {("configmaps", "ns", "a"), ("configmaps", "ns", "later")})
    refs.track("ns/p2", {("configmaps", "ns", "a")})
    got = await refs.get("configmaps", "ns", "a")
    assert isinstance(got, dict) and got["data"] == {"k": "1"}
    assert await refs.get("configmaps", "ns", "later") is None
    reads = refs.reads
    await refs.get("configmaps", "ns", "a")
    assert refs.reads == reads  # cached
    assert await refs.refresh() == set()  # nothing changed
    kube.objects["/api/v1/namespaces/ns/configmaps/a"]["data"] = {"k": "2"}
    kube._bump(kube.objects["/api/v1/namespaces/ns/configmaps/a"])
    assert await refs.refresh() == {"ns/p1", "ns/p2"}
    kube.add(cm("later", x="y"))
    assert await refs.refresh() == {"ns/p1"}
    refs.untrack("ns/p1")
    refs.untrack("ns/p2")
    await refs.refresh()
    assert refs._cache == {}  # nothing referenced: nothing kept


async def test_a_miss_is_read_again_after_a_few_seconds() -> None:
    clock = FakeClock()
    kube = FakeKube(clock)
    refs = RefCache(kube, clock=clock)  # type: ignore[arg-type]
    assert await refs.get("secrets", "ns", "s") is None
    kube.add({"kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}, "data": {}})
    assert await refs.get("secrets", "ns", "s") is None  # cached miss
    await clock.advance(6)
    assert await refs.get("secrets", "ns", "s") is not None


async def test_read_errors_are_not_cached() -> None:
    clock = FakeClock()
    kube = FakeKube(clock)
    refs = RefCache(kube, clock=clock)  # type: ignore[arg-type]

    async def broken(path: str, **_: Any) -> dict[str, Any]:
        from gateway.kube.errors import Forbidden

        raise Forbidden("no", status=403, reason="Forbidden")

    kube.get = broken  # type: ignore[method-assign]
    assert isinstance(await refs.get("secrets", "ns", "s"), ReadError)
    assert refs._cache == {}


async def test_status_pod_ip_before_the_backend_knows_it() -> None:
    clock = FakeClock()
    refs = RefCache(FakeKube(clock), clock=clock)  # type: ignore[arg-type]

    def resolver(placeholder: str) -> Resolver:
        return Resolver(
            refs,
            features=Features(pod_ip_placeholder=placeholder),
            backend="x",
            node_name="vk",
            host_ip=lambda: "127.0.0.5",
            allocatable=dict,
        )

    fresh: dict[str, Any] = {"status": {}}
    assert resolver("@IP@").pod_ips(fresh) == ("@IP@",)
    assert resolver("").pod_ips(fresh) == ("127.0.0.5",)  # host-network backends
    known = {"status": {"podIP": "10.1.2.3", "podIPs": [{"ip": "10.1.2.3"}, {"ip": "fd::3"}]}}
    assert resolver("@IP@").pod_ips(known) == ("10.1.2.3", "fd::3")


def test_references_cover_env_and_volumes() -> None:
    pod = {
        "metadata": {"namespace": "ns"},
        "spec": {
            "containers": [{"name": "a", "envFrom": [{"secretRef": {"name": "s1"}}]}],
            "volumes": [{"name": "v", "configMap": {"name": "c1"}}],
        },
    }
    assert references(pod) == {("secrets", "ns", "s1"), ("configmaps", "ns", "c1")}
