"""imagePullSecrets on Zun against the stateful fake: a vkgate-owned registry object per
(host, username), referenced by the container; reuse, password rotation, and the cases that
go on without credentials (old microversion, capsules, a refusing registry API)."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from fake_zun import FakeOpenStack
from zun_pods import resolved_pod, simple_pod

from translators.base import Phase, RegistryCredential, ResolvedPod
from translators.zun import ZunTranslator
from translators.zun.registries import registry_name
from vkgate_core.clock import FakeClock

pytestmark = pytest.mark.contract

GHCR = RegistryCredential("ghcr.io", "gh-bot", "ghp-zun-token", auth_source="secret/regcred")
HUB = RegistryCredential("docker.io", "hubuser", "hub-zun-pass", auth_source="secret/hub")


def with_creds(pod: ResolvedPod, *creds: RegistryCredential) -> ResolvedPod:
    return dataclasses.replace(pod, registry_credentials=creds)


def private_pod(name: str, image: str = "ghcr.io/example/app:1") -> ResolvedPod:
    return with_creds(resolved_pod(simple_pod(name, image)), GHCR, HUB)


async def test_private_image_pulls_with_a_registry_object(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    fake.require_login("ghcr.io", "gh-bot", "ghp-zun-token")
    await zun.create(private_pod("private"))
    (reg,) = fake.registries.values()
    assert (reg["name"], reg["domain"], reg["username"], reg["password"]) == (
        registry_name("vkgate", "ghcr.io", "gh-bot"),
        "ghcr.io",
        "gh-bot",
        "ghp-zun-token",
    )
    (c,) = fake.containers.values()
    assert fake.registry_of(c["uuid"]) is reg
    assert "ghp-zun-token" not in str(c["labels"])
    await clock.advance(3)
    (st,) = await zun.list()
    assert st.phase is Phase.RUNNING  # the pull needed the login and had it
    assert st.events == ()


async def test_without_the_login_the_pull_fails(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    """The fake's check is real: the same image without credentials cannot be pulled."""
    fake.require_login("ghcr.io", "gh-bot", "ghp-zun-token")
    await zun.create(resolved_pod(simple_pod("anon", "ghcr.io/example/app:1")))
    await clock.advance(3)
    (st,) = await zun.list()
    assert st.containers[0].reason == "ErrImagePull"
    assert fake.registries == {}


async def test_registry_objects_are_reused_and_rotated_passwords_updated(
    make_translator, fake: FakeOpenStack
) -> None:
    zun = await make_translator()
    await zun.create(private_pod("a"))
    await zun.create(private_pod("b"))
    assert len(fake.registries) == 1
    assert fake.count("POST", "/container/v1/registries") == 1
    patches = fake.count("PATCH", f"/container/v1/registries/{next(iter(fake.registries))}")
    assert patches == 0  # this process wrote that password already

    rotated = RegistryCredential("ghcr.io", "gh-bot", "ghp-rotated", auth_source="secret/regcred")
    await zun.create(with_creds(resolved_pod(simple_pod("c", "ghcr.io/example/app:1")), rotated))
    (reg,) = fake.registries.values()
    assert reg["password"] == "ghp-rotated"

    # a restarted gateway cannot read the password back (***): it updates once, creates nothing
    again = await make_translator()
    await again.create(private_pod("d"))
    assert len(fake.registries) == 1 and reg["password"] == "ghp-zun-token"
    assert fake.count("POST", "/container/v1/registries") == 1


async def test_docker_hub_login_and_public_images(zun: ZunTranslator, fake: FakeOpenStack) -> None:
    await zun.create(private_pod("hub", "busybox:1.36"))
    await zun.create(private_pod("public", "quay.io/public/tool:1"))
    (reg,) = fake.registries.values()
    assert (reg["domain"], reg["username"]) == ("docker.io", "hubuser")
    by_name = {c["labels"]["k8s.name"]: c for c in fake.containers.values()}
    assert fake.registry_of(by_name["hub"]["uuid"]) is reg
    assert by_name["public"]["registry_id"] is None


async def test_old_microversion_goes_on_without_credentials_and_logs_once(
    make_translator, fake: FakeOpenStack, caplog: pytest.LogCaptureFixture
) -> None:
    fake.set_versions("1.1", "1.30")
    zun = await make_translator()
    with caplog.at_level(logging.WARNING, logger="translators.zun.translator"):
        await zun.create(private_pod("old1"))
        await zun.create(private_pod("old2"))
    assert fake.registries == {}
    assert all(c["registry_id"] is None for c in fake.containers.values())
    lines = [r.getMessage() for r in caplog.records if "imagePullSecrets" in r.getMessage()]
    assert lines == [
        "zun: imagePullSecrets need microversion 1.31 (the server gives 1.30); containers "
        "are created without registry logins"
    ]


async def test_capsule_pods_get_a_warning_event(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    raw = simple_pod("multi", "ghcr.io/example/app:1")
    raw["spec"]["containers"].append({"name": "side", "image": "busybox:1.36"})
    state = await zun.create(with_creds(resolved_pod(raw), GHCR))
    assert fake.registries == {}
    (event,) = state.events
    assert event[:2] == ("Warning", "ImagePullSecretNotApplied")
    assert "capsules" in event[2]
    await clock.advance(3)
    (listed,) = await zun.list()
    assert event in listed.events  # kept on every state until the pod is deleted


async def test_a_refusing_registry_api_is_a_warning_not_a_failure(
    zun: ZunTranslator, fake: FakeOpenStack
) -> None:
    fake.fail_next.append(("POST", "/container/v1/registries", 403))
    state = await zun.create(private_pod("denied"))
    (c,) = fake.containers.values()
    assert c["registry_id"] is None
    (event,) = state.events
    assert event[1] == "ImagePullSecretNotApplied" and "ghcr.io" in event[2]
    assert "ghp-zun-token" not in event[2]
