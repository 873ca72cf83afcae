"""persistentVolumeClaim volumes: the claim and its bound PV read by name (gateway/pods/resolve/claims.py)."""

from __future__ import annotations

from typing import Any

from pods_fakes import FakeKube

from gateway.pods.resolve import RefCache, Resolver, references
from gateway.pods.resolve.claims import bound_volume, claim_names, resolve_claims
from gateway.pods.resolve.env import Lookup, ReadError
from translators.base import Features, ResolvedVolume
from vkgate_core.clock import FakeClock


def pod(read_only: bool = False) -> dict[str, Any]:
    claim: dict[str, Any] = {"claimName": "data-db-0", **({"readOnly": True} if read_only else {})}
    return {
        "metadata": {"namespace": "ns", "name": "db-0", "uid": "u"},
        "spec": {
            "containers": [
                {"name": "a", "image": "i", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": claim}],
        },
    }


def pvc(phase: str = "Bound", volume: str = "pv-0") -> dict[str, Any]:
    return {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-db-0", "namespace": "ns"},
        "spec": {"volumeName": volume} if volume else {},
        "status": {"phase": phase},
    }


PV = {
    "kind": "PersistentVolume",
    "metadata": {"name": "pv-0", "annotations": {"nomad.vkgate.io/host-volume": "hv0"}},
    "spec": {"accessModes": ["ReadWriteOnce"]},
}


def test_claims_are_referenced_by_name_in_the_pods_namespace() -> None:
    assert claim_names(pod()) == {"data": "data-db-0"}
    assert ("persistentvolumeclaims", "ns", "data-db-0") in references(pod())


def test_only_a_bound_claim_names_its_volume() -> None:
    assert bound_volume(pvc()) == "pv-0"
    assert bound_volume(pvc(phase="Pending", volume="")) == ""
    assert bound_volume(None) == ""
    assert bound_volume(ReadError("x")) == ""


def test_a_bound_claim_carries_its_pv_and_readonly() -> None:
    vols = (ResolvedVolume(name="data", kind="persistentVolumeClaim"),)
    got = resolve_claims(pod(read_only=True), vols, {"data-db-0": pvc()}, {"pv-0": PV})
    assert got.error == "" and got.events == []
    (vol,) = got.volumes
    assert (vol.claim, vol.claim_read_only, vol.persistent_volume) == ("data-db-0", True, PV)


def test_a_missing_unbound_or_unreadable_claim_is_a_failed_mount() -> None:
    vols = (ResolvedVolume(name="data", kind="persistentVolumeClaim"),)
    cases: dict[str, tuple[dict[str, Lookup], dict[str, Lookup]]] = {
        'persistentvolumeclaim "data-db-0" not found': ({"data-db-0": None}, {}),
        'persistentvolumeclaim "data-db-0" is not bound (phase Pending)': (
            {"data-db-0": pvc(phase="Pending", volume="")},
            {},
        ),
        'failed to read persistentvolumeclaim "data-db-0": boom': (
            {"data-db-0": ReadError("boom")},
            {},
        ),
        'persistentvolume "pv-0" of claim "data-db-0" not found': (
            {"data-db-0": pvc()},
            {"pv-0": None},
        ),
    }
    for text, (claims, pvs) in cases.items():
        got = resolve_claims(pod(), vols, claims, pvs)
        assert got.volumes == ()
        assert got.error == f'MountVolume.SetUp failed for volume "data" : {text}'
        assert [(e.type, e.reason) for e in got.events] == [("Warning", "FailedMount")]


async def test_the_resolver_reads_the_claim_and_the_pv_it_is_bound_to() -> None:
    clock = FakeClock()
    kube = FakeKube(clock)
    refs = RefCache(kube, clock=clock)  # type: ignore[arg-type]
    resolver = Resolver(
        refs,
        features=Features(volume_kinds=frozenset({"persistentVolumeClaim"})),
        backend="x",
        node_name="vk",
        host_ip=lambda: "127.0.0.5",
        allocatable=dict,
    )
    waiting = await resolver.resolve(pod())  # type: ignore[arg-type]
    assert waiting.mount_error.endswith('persistentvolumeclaim "data-db-0" not found')
    kube.objects["/api/v1/namespaces/ns/persistentvolumeclaims/data-db-0"] = pvc()
    kube.objects["/api/v1/persistentvolumes/pv-0"] = dict(PV)
    await clock.advance(6)  # the miss is read again
    got = await resolver.resolve(pod())  # type: ignore[arg-type]
    assert got.mount_error == "" and got.pod is not None
    (vol,) = got.pod.volumes
    assert vol.persistent_volume == PV and vol.claim == "data-db-0"


async def test_a_claim_volume_is_refused_where_the_backend_has_none() -> None:
    resolver = Resolver(
        RefCache(FakeKube(FakeClock()), clock=FakeClock()),  # type: ignore[arg-type]
        features=Features(),
        backend="x",
        node_name="vk",
        host_ip=lambda: "127.0.0.5",
        allocatable=dict,
    )
    got = await resolver.resolve(pod())  # type: ignore[arg-type]
    assert [(u.field, u.reason) for u in got.unsupported] == [
        ("spec.volumes[data]", "UnsupportedVolume")
    ]
