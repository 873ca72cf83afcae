"""Projected service-account tokens are rotated as the kubelet rotates them: kept until 80 % of
their lifetime, then requested again, and the pod is re-queued so the new token reaches its
workload (gateway/pods/resolve/resolver.py ``RefCache.token``).  Fake time throughout."""

from __future__ import annotations

import datetime as _dt
import itertools
from typing import Any

from gateway.pods.resolve import RefCache
from gateway.pods.resolve.resolver import fingerprint, token_lifetime
from translators.base import ResolvedPod, ResolvedVolume, VolumeFile
from vkgate_core.clock import FakeClock

POD = {"metadata": {"name": "app", "namespace": "ns", "uid": "u-1"}}
KEY = ("", 3600, "default")


class TokenKube:
    """TokenRequests (each answers a new token valid ``lifetime`` seconds from now); nothing else exists."""

    def __init__(self, clock: FakeClock, *, lifetime: float | None = None) -> None:
        self.clock = clock
        self.lifetime = lifetime
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._n = itertools.count(1)

    async def get(self, path: str, **_: Any) -> dict[str, Any]:
        from gateway.kube.errors import NotFound

        raise NotFound(path, status=404, reason="NotFound")

    async def list(self, path: str, **_: Any) -> dict[str, Any]:
        return {"items": []}

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append((path, body))
        seconds = self.lifetime or body["spec"]["expirationSeconds"]
        expires = self.clock.now() + _dt.timedelta(seconds=seconds)
        stamp = expires.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"status": {"token": f"token-{next(self._n)}", "expirationTimestamp": stamp}}


async def test_a_token_is_kept_until_80_percent_of_its_lifetime_then_requested_again() -> None:
    clock = FakeClock()
    kube = TokenKube(clock)
    refs = RefCache(kube, clock=clock)  # type: ignore[arg-type]
    assert await refs.token(POD, KEY) == "token-1"
    path, body = kube.requests[0]
    assert path == "/api/v1/namespaces/ns/serviceaccounts/default/token"
    assert body["spec"]["boundObjectRef"]["uid"] == "u-1"
    await clock.advance(2879)  # 79.97 %
    assert await refs.token(POD, KEY) == "token-1"
    assert refs.tokens_due() == set()
    assert await refs.refresh() == set()
    await clock.advance(1)  # 80 %: the refresh loop re-queues the pod
    assert refs.tokens_due() == {"ns/app"}
    assert await refs.refresh() == {"ns/app"}
    assert await refs.token(POD, KEY) == "token-2"  # its next resolution gets a new one
    assert len(kube.requests) == 2
    assert refs.tokens_due() == set()


async def test_the_lifetime_is_the_issued_tokens_not_the_requested_one() -> None:
    """The API server may cap ``expirationSeconds`` (--service-account-max-token-expiration):
    the refresh follows the ``expirationTimestamp`` it answered."""
    clock = FakeClock()
    refs = RefCache(TokenKube(clock, lifetime=600), clock=clock)  # type: ignore[arg-type]
    await refs.token(POD, KEY)
    await clock.advance(479)
    assert refs.tokens_due() == set()
    await clock.advance(1)
    assert refs.tokens_due() == {"ns/app"}


async def test_a_deleted_pods_tokens_are_forgotten() -> None:
    clock = FakeClock()
    refs = RefCache(TokenKube(clock), clock=clock)  # type: ignore[arg-type]
    await refs.token(POD, KEY)
    refs.untrack("ns/app")
    await clock.advance(3600)
    assert refs.tokens_due() == set()


def test_token_lifetime_without_a_timestamp_is_the_requested_one() -> None:
    now = _dt.datetime(2026, 3, 1, 10, 0, tzinfo=_dt.UTC)
    assert token_lifetime({}, now=now, requested=3600) == 3600.0
    assert (
        token_lifetime({"expirationTimestamp": "2026-03-01T10:10:00Z"}, now=now, requested=1) == 600
    )


def test_a_rotated_token_changes_the_fingerprint_so_the_update_carries_it() -> None:
    def pod(token: bytes) -> ResolvedPod:
        vol = ResolvedVolume("api", "projected", files=(VolumeFile("token", token, secret=True),))
        return ResolvedPod(
            namespace="ns", name="app", uid="u-1", node_name="vk", pod=POD, volumes=(vol,)
        )

    assert fingerprint(pod(b"token-1")) == fingerprint(pod(b"token-1"))
    assert fingerprint(pod(b"token-1")) != fingerprint(pod(b"token-2"))


async def test_a_rotation_is_an_update_only_where_the_backend_updates_files_in_place() -> None:
    from gateway.pods.resolve import Resolver
    from translators.base import Features

    spec = {
        "metadata": {"name": "app", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "serviceAccountName": "default",
            "containers": [
                {"name": "c", "image": "x", "volumeMounts": [{"name": "t", "mountPath": "/t"}]}
            ],
            "volumes": [
                {
                    "name": "t",
                    "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
                }
            ],
        },
    }

    async def fingerprints(in_place: bool) -> tuple[str, str]:
        clock = FakeClock()
        refs = RefCache(TokenKube(clock), clock=clock)  # type: ignore[arg-type]
        resolver = Resolver(
            refs,
            features=Features(updates_files_in_place=in_place),
            backend="x",
            node_name="vk",
            host_ip=lambda: "127.0.0.5",
            allocatable=dict,
        )
        first = await resolver.resolve(spec)
        assert first.pod is not None, first
        await clock.advance(2880)
        second = await resolver.resolve(spec)
        return first.fingerprint, second.fingerprint

    before, after = await fingerprints(True)
    assert before != after  # the rotated token is applied to the running workload
    before, after = await fingerprints(False)
    assert before == after  # the backend keeps the token issued at create
