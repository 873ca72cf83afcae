"""imagePullSecrets through the fake Batch service: the matching credential reaches
``containerSettings.registry``, the service accepts it and never returns the password."""

from __future__ import annotations

import dataclasses

import pytest
from batch_pods import container, make_pod
from fake_batch import FakeBatch

from translators.base import BackendRejected, RegistryCredential

pytestmark = pytest.mark.contract

CREDS = (
    RegistryCredential("ghcr.io", "gh-bot", "ghp-contract-token", auth_source="secret/regcred"),
    RegistryCredential("docker.io", "hubuser", "hub-contract-pass", auth_source="secret/hub"),
)


async def test_pull_secret_credential_reaches_the_task(fake: FakeBatch, make_translator) -> None:
    t = make_translator(
        registry={"server": "ghcr.io", "username": "config-user", "password": "config-pass"}
    )
    pod = dataclasses.replace(
        make_pod("private", image="ghcr.io/example/app:1"), registry_credentials=CREDS
    )
    state = await t.create(pod)
    (task,) = fake.all_tasks(t.job_id)
    # what the service received: the pull secret's login wins over the configured one
    assert task["containerSettings"]["registry"] == {
        "registryServer": "ghcr.io",
        "username": "gh-bot",
        "password": "ghp-contract-token",
    }
    assert "ghp-contract" not in task["displayName"] and "metadata" not in task
    # what anyone reading the whole task gets back (SDK GET without $select): no password
    echoed = await t.api.sdk.get_task(t.job_id, task["id"])
    registry = echoed.container_settings.registry
    assert (registry.registry_server, registry.username) == ("ghcr.io", "gh-bot")
    assert not registry.password
    assert "ghp-contract-token" not in str(echoed.as_dict())
    listed = await t.list()
    assert [s.ref for s in listed] == [state.ref]


async def test_docker_hub_and_init_tasks_get_their_own_login(
    fake: FakeBatch, make_translator
) -> None:
    t = make_translator()
    pod = dataclasses.replace(
        make_pod(
            "mixed",
            containers=(container("app", "quay.io/public/app:3"),),
            init=(container("init", "busybox:1.36", role="init"),),
        ),
        registry_credentials=CREDS,
    )
    await t.create(pod)
    by_image = {
        task["containerSettings"]["imageName"]: task["containerSettings"].get("registry")
        for task in fake.all_tasks(t.job_id)
    }
    assert by_image == {
        "busybox:1.36": {
            "registryServer": "docker.io",
            "username": "hubuser",
            "password": "hub-contract-pass",
        },
        "quay.io/public/app:3": None,  # no credential for quay.io: a public pull
    }


async def test_the_fake_refuses_a_registry_without_password(
    fake: FakeBatch, make_translator
) -> None:
    t = make_translator()
    pod = dataclasses.replace(
        make_pod("half", image="ghcr.io/example/app:1"),
        registry_credentials=(RegistryCredential("ghcr.io", "gh-bot", ""),),
    )
    with pytest.raises(BackendRejected, match="registry needs username and password"):
        await t.create(pod)
