"""Volume resolution to file contents, and pod feature admission."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from gateway.pods.resolve.env import EnvSources, ReadError
from gateway.pods.resolve.features import check_pod, unsupported_volume
from gateway.pods.resolve.volumes import (
    referenced_objects,
    resolve_volumes,
    token_requests,
)
from translators.base import Features

#: The kinds gateway.pods.resolve.volumes resolves to files (a translator must still declare them).
RESOLVED_KINDS = frozenset({"configMap", "secret", "emptyDir", "projected", "downwardAPI"})


def b64(s: bytes) -> str:
    return base64.b64encode(s).decode()


SOURCES = EnvSources(
    configmaps={
        "cfg": {
            "data": {"app.conf": "x=1", "other": "o"},
            "binaryData": {"blob": b64(b"\x00\x01")},
        },
        "gone": None,
    },
    secrets={
        "sec": {"data": {"tls.key": b64(b"KEY"), "tls.crt": b64(b"CRT")}},
        "broken": ReadError("timeout"),
    },
    pod_ips=("10.0.0.5",),
    host_ips=("127.0.0.2",),
    allocatable={"cpu": "4", "memory": "8Gi"},
)


def pod(volumes: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "1"}},
        "spec": {
            "serviceAccountName": "builder",
            "containers": [{"name": "app", "resources": {"limits": {"memory": "64Mi"}}}],
            "volumes": volumes,
            **spec,
        },
    }


def files(result: Any, name: str) -> dict[str, tuple[bytes, int, bool]]:
    vol = next(v for v in result.volumes if v.name == name)
    return {f.path: (f.content, f.mode, f.secret) for f in vol.files}


def test_configmap_all_keys_with_binary_data_and_default_mode() -> None:
    r = resolve_volumes(
        pod([{"name": "c", "configMap": {"name": "cfg", "defaultMode": 0o600}}]),
        SOURCES,
        supported_kinds=RESOLVED_KINDS,
    )
    assert r.error == "" and not r.unsupported
    assert files(r, "c") == {
        "app.conf": (b"x=1", 0o600, False),
        "blob": (b"\x00\x01", 0o600, False),
        "other": (b"o", 0o600, False),
    }


def test_secret_items_with_modes() -> None:
    vol = {
        "name": "s",
        "secret": {
            "secretName": "sec",
            "items": [
                {"key": "tls.key", "path": "keys/server.key", "mode": 0o400},
                {"key": "tls.crt", "path": "server.crt"},
            ],
        },
    }
    r = resolve_volumes(pod([vol]), SOURCES, supported_kinds=RESOLVED_KINDS)
    assert files(r, "s") == {
        "keys/server.key": (b"KEY", 0o400, True),
        "server.crt": (b"CRT", 0o644, True),
    }


@pytest.mark.parametrize(
    ("vol", "error"),
    [
        ({"name": "v", "configMap": {"name": "gone"}}, 'configmap "gone" not found'),
        (
            {"name": "v", "secret": {"secretName": "broken"}},
            'failed to read secret "broken": timeout',
        ),
        (
            {"name": "v", "configMap": {"name": "cfg", "items": [{"key": "nope", "path": "x"}]}},
            'configmap "cfg" references non-existent config key: nope',
        ),
    ],
)
def test_mandatory_miss_is_a_mount_failure(vol: dict[str, Any], error: str) -> None:
    r = resolve_volumes(pod([vol]), SOURCES, supported_kinds=RESOLVED_KINDS)
    assert error in r.error
    assert r.error.startswith('MountVolume.SetUp failed for volume "v"')
    assert [e.reason for e in r.events] == ["FailedMount"]


def test_optional_miss_gives_partial_volume() -> None:
    vols = [
        {"name": "a", "configMap": {"name": "gone", "optional": True}},
        {
            "name": "b",
            "configMap": {
                "name": "cfg",
                "optional": True,
                "items": [{"key": "nope", "path": "x"}, {"key": "other", "path": "o"}],
            },
        },
    ]
    r = resolve_volumes(pod(vols), SOURCES, supported_kinds=RESOLVED_KINDS)
    assert r.error == ""
    assert files(r, "a") == {}
    assert set(files(r, "b")) == {"o"}


def test_empty_dir_and_downward_api() -> None:
    vols = [
        {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
        {
            "name": "info",
            "downwardAPI": {
                "items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                    {
                        "path": "mem",
                        "resourceFieldRef": {
                            "containerName": "app",
                            "resource": "limits.memory",
                            "divisor": "1Mi",
                        },
                    },
                    {
                        "path": "cpu",
                        "resourceFieldRef": {"containerName": "app", "resource": "limits.cpu"},
                        "mode": 0o444,
                    },
                ]
            },
        },
    ]
    r = resolve_volumes(pod(vols), SOURCES, supported_kinds=RESOLVED_KINDS)
    scratch = next(v for v in r.volumes if v.name == "scratch")
    assert (scratch.kind, scratch.medium, scratch.size_limit) == ("emptyDir", "Memory", "64Mi")
    assert files(r, "info") == {
        "labels": (b'a="1"', 0o644, False),
        "name": (b"p", 0o644, False),
        "mem": (b"64", 0o644, False),
        "cpu": (b"4", 0o444, False),
    }


def test_projected_with_token() -> None:
    vol = {
        "name": "kube-api-access",
        "projected": {
            "defaultMode": 0o420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "cfg", "items": [{"key": "other", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
                {"secret": {"name": "sec", "items": [{"key": "tls.crt", "path": "crt"}]}},
            ],
        },
    }
    p = pod([vol])
    assert token_requests(p) == [("", 3607, "builder")]
    r = resolve_volumes(
        p, SOURCES, supported_kinds=RESOLVED_KINDS, tokens={("", 3607, "builder"): "jwt"}
    )
    assert files(r, "kube-api-access") == {
        "token": (b"jwt", 0o420, True),
        "ca.crt": (b"o", 0o420, False),
        "namespace": (b"ns", 0o420, False),
        "crt": (b"CRT", 0o420, True),
    }
    failed = resolve_volumes(
        p,
        SOURCES,
        supported_kinds=RESOLVED_KINDS,
        tokens={("", 3607, "builder"): ReadError('serviceaccounts "builder" not found')},
    )
    assert 'failed to fetch token for service account "builder"' in failed.error


def test_unsupported_kinds_unless_declared() -> None:
    vols = [
        {"name": "host", "hostPath": {"path": "/etc"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
        {
            "name": "bundle",
            "projected": {"sources": [{"clusterTrustBundle": {"name": "x", "path": "b"}}]},
        },
    ]
    r = resolve_volumes(pod(vols), SOURCES, supported_kinds=RESOLVED_KINDS)
    assert r.unsupported == [
        ("host", "hostPath"),
        ("data", "persistentVolumeClaim"),
        ("bundle", "projected clusterTrustBundle"),
    ]
    declared = resolve_volumes(
        pod(vols[:2]),
        SOURCES,
        supported_kinds=RESOLVED_KINDS | {"hostPath", "persistentVolumeClaim"},
    )
    assert declared.unsupported == []
    assert [(v.name, v.kind, v.files) for v in declared.volumes] == [
        ("host", "hostPath", ()),
        ("data", "persistentVolumeClaim", ()),
    ]
    u = unsupported_volume("host", "hostPath", backend="nomad")
    assert (
        u.reason == "UnsupportedVolume" and 'volume "host"' in u.message and "hostPath" in u.message
    )


def test_referenced_objects() -> None:
    p = pod(
        [
            {"name": "a", "configMap": {"name": "c1"}},
            {"name": "b", "secret": {"secretName": "s1"}},
            {
                "name": "c",
                "projected": {
                    "sources": [{"configMap": {"name": "c2"}}, {"secret": {"name": "s2"}}]
                },
            },
        ]
    )
    assert referenced_objects(p) == ({"c1", "c2"}, {"s1", "s2"})


@pytest.mark.parametrize(
    ("spec", "feature", "field"),
    [
        ({"hostNetwork": True}, "hostNetwork", "spec.hostNetwork"),
        ({"hostPID": True}, "hostPID", "spec.hostPID"),
        ({"hostIPC": True}, "hostIPC", "spec.hostIPC"),
        ({"shareProcessNamespace": True}, "shareProcessNamespace", "spec.shareProcessNamespace"),
        (
            {"containers": [{"name": "app", "securityContext": {"privileged": True}}]},
            "privileged",
            "spec.containers[app].securityContext.privileged",
        ),
        (
            {"containers": [{"name": "app", "ports": [{"containerPort": 80, "hostPort": 8080}]}]},
            "hostPort",
            "spec.containers[app].ports.hostPort",
        ),
        ({"initContainers": [{"name": "i"}]}, "initContainers", "spec.initContainers[i]"),
        (
            {"initContainers": [{"name": "s", "restartPolicy": "Always"}]},
            "sidecars",
            "spec.initContainers[s]",
        ),
        (
            {"ephemeralContainers": [{"name": "debug"}]},
            "ephemeralContainers",
            "spec.ephemeralContainers",
        ),
    ],
)
def test_unsupported_features_name_the_field(
    spec: dict[str, Any], feature: str, field: str
) -> None:
    p = {"spec": {"containers": [{"name": "app"}], **spec}}
    [u] = check_pod(p, Features(pod_features=frozenset()), backend="zun")
    assert (u.feature, u.field, u.reason) == (feature, field, "UnsupportedPodFeature")
    assert field in u.message and "zun backend" in u.message
    assert check_pod(p, Features(pod_features=frozenset({feature})), backend="zun") == []


def test_plain_pod_needs_no_features_and_max_containers() -> None:
    p = {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}
    assert check_pod(p, Features(), backend="x") == []
    [u] = check_pod(p, Features(max_containers=1), backend="batch")
    assert "at most 1" in u.message
