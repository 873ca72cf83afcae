"""The Zun body's ``registry`` for imagePullSecrets: the uuid given at create, the
deterministic registry name offline, nothing for capsules or old servers; never the password."""

from __future__ import annotations

import dataclasses
import json

from zun_pods import resolved_pod, simple_pod

from translators.base import RegistryCredential, ResolvedPod
from translators.render.engine import Renderer, mask_secrets
from translators.zun.client import feature_flags
from translators.zun.config import load_config
from translators.zun.registries import registry_name
from translators.zun.spec import SpecBuilder

CRED = RegistryCredential("ghcr.io", "gh-bot", "ghp-unit-token", auth_source="secret/r")


def builder() -> SpecBuilder:
    return SpecBuilder.from_config(load_config({}), renderer=Renderer(), settings={})


def pod(image: str = "ghcr.io/example/app:1", *, extra: bool = False) -> ResolvedPod:
    raw = simple_pod("web", image)
    if extra:
        raw["spec"]["containers"].append({"name": "side", "image": "ghcr.io/example/side:1"})
    return dataclasses.replace(resolved_pod(raw), registry_credentials=(CRED,))


async def test_create_sends_the_registry_uuid() -> None:
    spec = await builder().build(pod(), feature_flags((1, 40)), registry="r-uuid-1")
    assert spec.body["registry"] == "r-uuid-1"
    assert "ghp-unit-token" not in json.dumps(spec.body)


def test_offline_render_shows_the_registry_name() -> None:
    spec = builder().render(pod(), feature_flags((1, 40)))
    assert spec.body["registry"] == registry_name("vkgate", "ghcr.io", "gh-bot")
    assert spec.body["registry"].startswith("vkgate-registry-")
    assert mask_secrets(spec.body, pod()) == spec.body  # nothing secret to mask in the body


def test_no_registry_for_unmatched_images_old_servers_and_capsules() -> None:
    b = builder()
    assert "registry" not in b.render(pod("quay.io/x/y:1"), feature_flags((1, 40))).body
    assert "registry" not in b.render(pod(), feature_flags((1, 30))).body
    capsule = b.render(pod(extra=True), feature_flags((1, 40))).body
    assert "registry" not in json.dumps(capsule)


def test_registry_names_are_per_host_and_user() -> None:
    a = registry_name("vkgate", "ghcr.io", "gh-bot")
    assert a == registry_name("vkgate", "ghcr.io", "gh-bot")
    assert a != registry_name("vkgate", "ghcr.io", "other")
    assert a != registry_name("vkgate", "docker.io", "gh-bot")
    assert registry_name("team-a", "ghcr.io", "gh-bot").startswith("team-a-registry-")
