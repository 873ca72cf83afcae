"""Image → registry host, server-key normalization and credential matching (vkgate_core.imageregistry)."""

from __future__ import annotations

import pytest

from translators.base import RegistryCredential
from vkgate_core.imageregistry import (
    credential_for,
    credentials_for,
    image_location,
    normalize_server,
    server_matches,
)


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("busybox", ("docker.io", "library/busybox")),
        ("busybox:1.36", ("docker.io", "library/busybox")),
        ("library/busybox@sha256:abc", ("docker.io", "library/busybox")),
        ("bitnami/redis:7", ("docker.io", "bitnami/redis")),
        ("docker.io/busybox", ("docker.io", "library/busybox")),
        ("index.docker.io/team/app:1", ("docker.io", "team/app")),
        ("registry-1.docker.io/team/app", ("docker.io", "team/app")),
        ("ghcr.io/Org/App:2.1", ("ghcr.io", "Org/App")),
        ("GHCR.io/org/app", ("ghcr.io", "org/app")),
        ("localhost/app", ("localhost", "app")),
        ("localhost:5000/app:dev", ("localhost:5000", "app")),
        ("registry.example.com:5000/a/b/c:tag@sha256:x", ("registry.example.com:5000", "a/b/c")),
        ("myhost:5000", ("docker.io", "library/myhost")),  # a Hub image with tag 5000
    ],
)
def test_image_location(image: str, expected: tuple[str, str]) -> None:
    assert image_location(image) == expected


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("https://index.docker.io/v1/", "docker.io"),
        ("index.docker.io", "docker.io"),
        ("docker.io", "docker.io"),
        ("https://registry-1.docker.io/v2/", "docker.io"),
        ("http://Registry.Example.com:5000", "registry.example.com:5000"),
        ("registry.example.com/v2/", "registry.example.com"),
        ("quay.io/team/", "quay.io/team"),
        ("https://quay.io/v1/team", "quay.io/team"),
        ("*.azurecr.io", "*.azurecr.io"),
        ("  ghcr.io  ", "ghcr.io"),
        ("https://", ""),
        ("", ""),
    ],
)
def test_normalize_server(key: str, expected: str) -> None:
    assert normalize_server(key) == expected


@pytest.mark.parametrize(
    ("server", "image", "match"),
    [
        ("docker.io", "busybox", True),
        ("docker.io", "team/app:1", True),
        ("docker.io", "ghcr.io/team/app", False),
        ("ghcr.io", "ghcr.io/team/app:1", True),
        ("ghcr.io", "ghcr.io.evil.com/team/app", False),
        ("registry.example.com:5000", "registry.example.com:5000/app", True),
        ("registry.example.com:5000", "registry.example.com/app", False),  # port must match
        ("registry.example.com", "registry.example.com:5000/app", False),
        ("*.azurecr.io", "team.azurecr.io/app", True),
        ("*.azurecr.io", "azurecr.io/app", False),  # one label per *
        ("*.azurecr.io", "a.b.azurecr.io/app", False),
        ("quay.io/team", "quay.io/team/app", True),
        ("quay.io/team", "quay.io/team", True),
        ("quay.io/team", "quay.io/teamx/app", False),  # whole path segments only
        ("quay.io/team", "quay.io/other/app", False),
        ("docker.io/library", "busybox", True),
        ("", "busybox", False),
    ],
)
def test_server_matches(server: str, image: str, match: bool) -> None:
    assert server_matches(server, image) is match


def cred(server: str, user: str = "u") -> RegistryCredential:
    return RegistryCredential(server, user, "pw-" + user, auth_source="secret/s")


def test_most_specific_credential_wins_then_pod_order() -> None:
    creds = [
        cred("*.example.com", "wild"),
        cred("reg.example.com", "host"),
        cred("reg.example.com/team", "team"),
        cred("reg.example.com/team/app", "app"),
        cred("reg.example.com", "host2"),
    ]
    image = "reg.example.com/team/app:1"
    assert [c.username for c in credentials_for(image, creds)] == [
        "app",
        "team",
        "host",
        "host2",
        "wild",
    ]
    assert credential_for("reg.example.com/other", creds) == creds[1]
    assert credential_for("x.example.com/other", creds) == creds[0]
    assert credential_for("busybox", creds) is None


def test_password_is_not_in_repr() -> None:
    c = RegistryCredential("ghcr.io", "bot", "hunter2-secret", auth_source="secret/pull")
    assert "hunter2" not in repr(c) and "bot" in repr(c)
