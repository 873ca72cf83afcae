"""RefCache (referenced ConfigMaps/Secrets by name, change detection) and Resolver details."""

from __future__ import annotations

from typing import Any

from pods_fakes import FakeKube

from gateway.pods.resolve import RefCache, Resolver, references
from gateway.pods.resolve.env import ReadError
from gateway.pods.resolve.resolver import TEAM_FROM_CONFIG, TEAM_FROM_LABEL
from translators.base import Features
from vkgate_core.clock import FakeClock


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


class NoLabels:
    """A ``Lookups`` adapter whose namespaces carry no team label and no objects."""

    async def get(self, kind: Any, namespace: str, name: str) -> Any:
        return None

    async def services(self, namespace: str) -> list[dict[str, Any]]:
        return []

    async def team(self, namespace: str) -> str:
        return "labelled" if namespace == "lab" else ""

    async def token(self, pod: Any, key: Any) -> str:
        return "t"

    async def persistent_volume(self, name: str) -> Any:
        return None


async def test_the_team_comes_from_templates_teams_else_from_an_allowed_label() -> None:
    """Live, a namespace without the team label gets its team from templates.teams, so
    ``{{ team }}`` is what ``vkgate render`` shows; a label counts where the operator lets the
    namespace choose (tests/unit/pods/test_pods_team_rule.py: and the map wins over it)."""
    resolver = Resolver(
        NoLabels(),
        features=Features(),
        backend="x",
        node_name="vk",
        host_ip=lambda: "127.0.0.5",
        allocatable=dict,
        teams={"ml": "ml-team"},
        team_label_namespaces=["lab"],
    )

    def pod(ns: str) -> dict[str, Any]:
        return {
            "metadata": {"namespace": ns, "name": "p", "uid": "u"},
            "spec": {"containers": [{"name": "a", "image": "i"}]},
        }

    by_config = (await resolver.resolve(pod("ml"))).pod
    assert by_config is not None
    assert (by_config.team, by_config.team_source) == ("ml-team", TEAM_FROM_CONFIG)
    by_label = (await resolver.resolve(pod("lab"))).pod
    assert by_label is not None
    assert (by_label.team, by_label.team_source) == ("labelled", TEAM_FROM_LABEL)
    none = (await resolver.resolve(pod("other"))).pod
    assert none is not None and (none.team, none.team_source) == ("", "")
