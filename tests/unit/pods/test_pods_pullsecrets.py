"""imagePullSecrets → registry credentials and Events (gateway.pods.resolve.pullsecrets), and the
Resolver reading them by name through RefCache."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from pods_fakes import FakeKube

from gateway.pods.resolve import RefCache, Resolver
from gateway.pods.resolve.env import ReadError
from gateway.pods.resolve.pullsecrets import (
    INVALID,
    RETRIEVE_FAILED,
    parse_secret,
    pull_secret_names,
    resolve_pull_secrets,
)
from translators.base import Features, RegistryCredential
from vkgate_core.clock import FakeClock


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def dockerconfigjson(auths: Any, *, raw: str | None = None) -> dict[str, Any]:
    payload = raw if raw is not None else json.dumps({"auths": auths})
    return {
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": b64(payload)},
    }


def dockercfg(entries: Any) -> dict[str, Any]:
    return {
        "kind": "Secret",
        "type": "kubernetes.io/dockercfg",
        "data": {".dockercfg": b64(json.dumps(entries))},
    }


def pod(*images: str, secrets: list[Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "p", "uid": "u-1"},
        "spec": {
            "imagePullSecrets": secrets or [],
            "initContainers": [{"name": "init", "image": images[0]}] if len(images) > 1 else [],
            "containers": [{"name": "app", "image": images[-1]}],
        },
    }


def creds(items: list[RegistryCredential]) -> list[tuple[str, str, str, str]]:
    return [(c.server, c.username, c.password, c.auth_source) for c in items]


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("secret", "expected"),
    [
        (
            dockerconfigjson({"https://index.docker.io/v1/": {"username": "u", "password": "p"}}),
            [("docker.io", "u", "p", "secret/s")],
        ),
        (  # auth wins over username/password (kubelet)
            dockerconfigjson(
                {"ghcr.io": {"username": "x", "password": "y", "auth": b64("bot:t0k:en")}}
            ),
            [("ghcr.io", "bot", "t0k:en", "secret/s")],
        ),
        (
            dockerconfigjson(
                {
                    "https://quay.io/v2/team": {"auth": b64("a:1")},
                    "localhost:5000": {"username": "b", "password": "2", "email": "e@x"},
                }
            ),
            [("quay.io/team", "a", "1", "secret/s"), ("localhost:5000", "b", "2", "secret/s")],
        ),
        (
            dockercfg({"https://registry.example.com": {"auth": b64("c:3")}}),
            [("registry.example.com", "c", "3", "secret/s")],
        ),
    ],
)
def test_parse_good_secrets(secret: dict[str, Any], expected: list[Any]) -> None:
    found, problems = parse_secret("s", secret)
    assert problems == []
    assert creds(found) == expected


@pytest.mark.parametrize(
    ("secret", "problem"),
    [
        (
            {"type": "Opaque", "data": {".dockerconfigjson": b64("{}")}},
            'image pull secret "s" has type Opaque; only kubernetes.io/dockerconfigjson',
        ),
        (
            {"type": "kubernetes.io/dockerconfigjson", "data": {}},
            'image pull secret "s" key ".dockerconfigjson" is missing or empty',
        ),
        (
            {"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "%%%"}},
            'image pull secret "s" key ".dockerconfigjson" is not base64-encoded JSON',
        ),
        (
            dockerconfigjson(None, raw="not json"),
            'image pull secret "s" key ".dockerconfigjson" is not base64-encoded JSON',
        ),
        (
            dockerconfigjson(None, raw='{"credsStore": "desktop"}'),
            'image pull secret "s" key ".dockerconfigjson" has no "auths" object',
        ),
        (
            dockercfg(["a"]),
            'image pull secret "s" key ".dockercfg" is not a JSON object',
        ),
        (
            dockerconfigjson({"ghcr.io": {"auth": "!!not-base64!!"}}),
            "entry for 'ghcr.io': \"auth\" is not base64",
        ),
        (
            dockerconfigjson({"ghcr.io": {"auth": b64("no-colon")}}),
            'entry for \'ghcr.io\': "auth" must be base64("username:password")',
        ),
        (
            dockerconfigjson({"ghcr.io": {"identitytoken": "t"}}),
            "entry for 'ghcr.io' has no username/password",
        ),
        (dockerconfigjson({"ghcr.io": "user:pass"}), "entry for 'ghcr.io' is not an object"),
        (dockerconfigjson({"https://": {"auth": b64("a:b")}}), "server 'https://' has no host"),
    ],
)
def test_parse_malformed_secrets_name_secret_and_key(secret: dict[str, Any], problem: str) -> None:
    found, problems = parse_secret("s", secret)
    assert found == []
    assert len(problems) == 1 and problem in problems[0], problems


def test_a_bad_entry_does_not_spoil_the_good_ones() -> None:
    found, problems = parse_secret(
        "s",
        dockerconfigjson({"ghcr.io": {"auth": "???"}, "quay.io": {"auth": b64("q:1")}}),
    )
    assert creds(found) == [("quay.io", "q", "1", "secret/s")]
    assert len(problems) == 1 and "ghcr.io" in problems[0]


# --------------------------------------------------------------------------- per pod


def test_names_keep_order_and_skip_empty_and_duplicates() -> None:
    p = pod("busybox", secrets=[{"name": "b"}, {}, {"name": "a"}, {"name": "b"}, {"name": ""}])
    assert pull_secret_names(p) == ["b", "a"]


def test_only_credentials_matching_an_image_reach_the_pod() -> None:
    p = pod("ghcr.io/team/init:1", "busybox", secrets=[{"name": "one"}, {"name": "two"}])
    result = resolve_pull_secrets(
        p,
        {
            "one": dockerconfigjson(
                {
                    "https://index.docker.io/v1/": {"auth": b64("hub:1")},
                    "quay.io": {"auth": b64("quay:2")},
                }
            ),
            "two": dockerconfigjson(
                {"ghcr.io": {"auth": b64("gh:3")}, "docker.io": {"auth": b64("hub:1")}}
            ),
        },
    )
    assert result.events == []
    assert creds(list(result.credentials)) == [
        ("docker.io", "hub", "1", "secret/one"),
        ("ghcr.io", "gh", "3", "secret/two"),
    ]  # quay.io matches no image; the second docker.io login is a duplicate


def test_missing_secrets_warn_and_continue_unreadable_ones_hold_the_pod() -> None:
    p = pod("busybox", secrets=[{"name": "gone"}, {"name": "ok"}, {"name": "broken"}])
    result = resolve_pull_secrets(
        p,
        {
            "gone": None,
            "broken": ReadError("forbidden"),
            "ok": dockerconfigjson({"docker.io": {"auth": b64("u:p")}}),
        },
    )
    assert [(e.type, e.reason, e.message) for e in result.events] == [
        (
            "Warning",
            RETRIEVE_FAILED,
            "Unable to read image pull secrets (broken: forbidden); the pod is created once "
            "they can be read.",
        ),
        (
            "Warning",
            RETRIEVE_FAILED,
            "Unable to retrieve some image pull secrets (gone); attempting to pull "
            "the image may not succeed.",
        ),
    ]
    assert result.unreadable == ["broken: forbidden"]
    assert creds(list(result.credentials)) == [("docker.io", "u", "p", "secret/ok")]


def test_malformed_secret_is_a_warning_naming_secret_and_key() -> None:
    p = pod("busybox", secrets=[{"name": "weird"}])
    result = resolve_pull_secrets(p, {"weird": dockerconfigjson(None, raw="[]")})
    assert result.credentials == ()
    (event,) = result.events
    assert (event.type, event.reason) == ("Warning", INVALID)
    assert event.message == (
        'image pull secret "weird" key ".dockerconfigjson" has no "auths" object; '
        "it is ignored, pulling the image may not succeed"
    )


def test_no_pull_secrets_no_events() -> None:
    result = resolve_pull_secrets(pod("busybox"), {})
    assert result.credentials == () and result.events == []


# --------------------------------------------------------------------------- resolver


def resolver(kube: FakeKube, clock: FakeClock) -> tuple[Resolver, RefCache]:
    refs = RefCache(kube, clock=clock)  # type: ignore[arg-type]
    return (
        Resolver(
            refs,
            features=Features(),
            backend="simulated",
            node_name="vk",
            host_ip=lambda: "127.0.0.5",
            allocatable=dict,
        ),
        refs,
    )


async def test_resolver_reads_pull_secrets_by_name_and_hands_credentials_over() -> None:
    clock = FakeClock()
    kube = FakeKube(clock)
    secret = dockerconfigjson({"https://index.docker.io/v1/": {"auth": b64("robot:s3cr3t")}})
    kube.add({**secret, "metadata": {"name": "regcred", "namespace": "ns"}})
    r, refs = resolver(kube, clock)
    p = pod("busybox", secrets=[{"name": "regcred"}, {"name": "missing"}])
    res = await r.resolve(p)
    assert res.pod is not None and not res.blocked
    assert creds(list(res.pod.registry_credentials)) == [
        ("docker.io", "robot", "s3cr3t", "secret/regcred")
    ]
    assert [(e.type, e.reason) for e in res.events] == [("Warning", RETRIEVE_FAILED)]
    assert "(missing)" in res.events[0].message
    assert refs.tracked() == set()  # read by name, not tracked for change detection
    assert "s3cr3t" not in repr(res.pod)


async def test_pull_secret_that_is_also_an_env_source_is_read_once() -> None:
    clock = FakeClock()
    kube = FakeKube(clock)
    secret = dockerconfigjson({"docker.io": {"auth": b64("u:p")}})
    kube.add({**secret, "metadata": {"name": "both", "namespace": "ns"}})
    r, refs = resolver(kube, clock)
    p = pod("busybox", secrets=[{"name": "both"}])
    p["spec"]["containers"][0]["envFrom"] = [{"secretRef": {"name": "both"}}]
    res = await r.resolve(p)
    assert res.pod is not None and len(res.pod.registry_credentials) == 1
    assert refs.reads == 1


async def test_unreadable_pull_secret_holds_the_pod_until_it_can_be_read() -> None:
    """A 403 (the Node authorizer answers so until its graph has the new pod's edge to the
    Secret) must not create the workload without its credentials: they are applied only at
    create.  The pod waits (and is retried); once readable, the credentials reach the backend."""
    clock = FakeClock()
    kube = FakeKube(clock)
    secret = dockerconfigjson({"ghcr.io": {"auth": b64("bot:pw")}})
    kube.add({**secret, "metadata": {"name": "regcred", "namespace": "ns"}})
    kube.forbidden.add("/api/v1/namespaces/ns/secrets/regcred")
    r, _refs = resolver(kube, clock)
    p = pod("ghcr.io/acme/app:1", secrets=[{"name": "regcred"}])
    res = await r.resolve(p)
    assert res.waiting and all(
        reason == "ContainerCreating" and "regcred" in msg for reason, msg in res.waiting.values()
    )
    assert [(e.type, e.reason) for e in res.events] == [("Warning", RETRIEVE_FAILED)]
    kube.forbidden.clear()
    await clock.advance(60)  # past the read cache's retry of failed reads
    res = await r.resolve(p)
    assert not res.waiting and res.pod is not None
    assert creds(list(res.pod.registry_credentials)) == [("ghcr.io", "bot", "pw", "secret/regcred")]
