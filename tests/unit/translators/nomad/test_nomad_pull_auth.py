"""imagePullSecrets on Nomad (translators/nomad/pullauth.py): refused unless the node says how
to pull (``registry_auth``); with ``"job"`` the docker ``auth`` per task image, nothing for
raw_exec, never in Meta, masked by ``vkgate render``; with ``"client"`` no auth block at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway import cli
from translators.base import (
    RegistryCredential,
    ResolvedContainer,
    ResolvedPod,
    TranslationError,
    UnsupportedError,
)
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import finish_job, render_job
from translators.render.engine import Renderer, mask_secrets

CREDS = (
    RegistryCredential("ghcr.io", "gh-bot", "ghp-t0ken-value", auth_source="secret/a"),
    RegistryCredential("docker.io", "hubuser", "hub-pass-value", auth_source="secret/b"),
    RegistryCredential("*.example.com", "wild", "wild-pass-value", auth_source="secret/c"),
)


def pod(
    *images: str, creds: tuple[RegistryCredential, ...] = CREDS, listed: bool = False
) -> ResolvedPod:
    spec: Any = {"imagePullSecrets": [{"name": "regcred"}]} if listed else {}
    return ResolvedPod(
        namespace="ns",
        name="web",
        uid="1234abcd-0000",
        node_name="vk",
        pod={"metadata": {"name": "web", "namespace": "ns", "uid": "u-1"}, "spec": spec},
        containers=tuple(
            ResolvedContainer(name=f"c{i}", image=image, command=("run",))
            for i, image in enumerate(images)
        ),
        registry_credentials=creds,
    )


def tasks(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["Name"]: t for t in job["Job"]["TaskGroups"][0]["Tasks"]}


def render(
    p: ResolvedPod, template: str = "nomad/job.j2", registry_auth: str = "job"
) -> dict[str, Any]:
    cfg = NomadConfig.from_settings(
        {"template": template, "registry_auth": registry_auth}, environ={}
    )
    return render_job(p, renderer=Renderer(), cfg=cfg, settings={}, factor=1000)


@pytest.mark.parametrize("template", ["nomad/job.j2", "nomad/raw_exec.j2"])
@pytest.mark.parametrize(
    "p", [pod("ghcr.io/team/app:1", creds=(), listed=True), pod("ghcr.io/team/app:1")]
)
def test_refused_by_default_naming_the_field_and_the_setting(p: ResolvedPod, template: str) -> None:
    with pytest.raises(UnsupportedError) as err:
        render(p, template, registry_auth="reject")
    assert err.value.reason == "UnsupportedPodFeature"
    assert err.value.field == "spec.imagePullSecrets"
    assert 'backend.nomad.registry_auth = "client"' in str(err.value)
    assert NomadConfig.from_settings({}, environ={}).registry_auth == "reject"


def test_client_mode_sends_no_login_anywhere() -> None:
    p = pod("ghcr.io/team/app:1", "busybox", listed=True)
    job = render(p, registry_auth="client")
    assert all("auth" not in t["Config"] for t in tasks(job).values())
    text = json.dumps(job)
    assert "pass-value" not in text and "t0ken" not in text and "gh-bot" not in text


def test_each_task_gets_the_login_for_its_own_image() -> None:
    job = render(pod("ghcr.io/team/app:1", "busybox", "quay.io/x/y", "reg.example.com/z"))
    t = tasks(job)
    assert t["c0"]["Config"]["auth"] == [
        {"username": "gh-bot", "password": "ghp-t0ken-value", "server_address": "ghcr.io"}
    ]
    assert t["c1"]["Config"]["auth"] == [
        {"username": "hubuser", "password": "hub-pass-value", "server_address": "docker.io"}
    ]
    assert "auth" not in t["c2"]["Config"]  # no credential for quay.io
    # a wildcard key: the concrete host of the image is the server address
    assert t["c3"]["Config"]["auth"][0]["server_address"] == "reg.example.com"
    meta = json.dumps(job["Job"]["Meta"])
    assert "pass-value" not in meta and "t0ken" not in meta


def test_no_pull_secrets_no_auth_block() -> None:
    job = render(pod("ghcr.io/team/app:1", creds=()))
    assert "auth" not in tasks(job)["c0"]["Config"]


def test_raw_exec_ignores_registry_credentials() -> None:
    job = render(pod("ghcr.io/team/app:1"), template="nomad/raw_exec.j2")
    config = tasks(job)["c0"]["Config"]
    assert config == {"command": "run"}
    assert "ghp-t0ken" not in json.dumps(job)


def test_a_template_copying_the_password_into_meta_is_refused() -> None:
    info = {"job_id": "j", "meta": {}, "namespace": "ns"}
    with pytest.raises(TranslationError, match="Secret value"):
        finish_job(
            {"ID": "j", "TaskGroups": [], "Meta": {"login": "gh-bot:ghp-t0ken-value"}},
            pod("ghcr.io/team/app:1"),
            info=info,
            template="t.j2",
            cfg=NomadConfig.from_settings({"registry_auth": "job"}, environ={}),
        )


def test_render_masks_the_password() -> None:
    p = pod("ghcr.io/team/app:1")
    masked = mask_secrets(render(p), p)
    assert tasks(masked)["c0"]["Config"]["auth"][0] == {
        "username": "gh-bot",
        "password": "*****",
        "server_address": "ghcr.io",
    }


GOLDEN = Path(__file__).parents[3] / "golden" / "nomad" / "pods" / "pull-secrets.yaml"


def test_vkgate_render_masks_auth_unless_show_secrets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    conf = tmp_path / "vkgate.toml"
    conf.write_text('[backend.nomad]\nregistry_auth = "job"\n')
    monkeypatch.setenv("VKGATE_CONFIG", str(conf))
    assert cli.main(["render", str(GOLDEN), "--backend", "nomad"]) == 0
    out = capsys.readouterr().out
    app = tasks(json.loads(out))["app"]["Config"]["auth"][0]
    assert app["password"] == "*****" and app["username"] == "gh-bot"
    assert "ghp_goldenToken" not in out and "hub-golden-pass" not in out
    assert cli.main(["render", str(GOLDEN), "--backend", "nomad", "--show-secrets"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert tasks(shown)["app"]["Config"]["auth"][0]["password"] == "ghp_goldenToken"


def test_vkgate_render_refuses_by_default_with_the_same_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VKGATE_CONFIG", raising=False)
    assert cli.main(["render", str(GOLDEN), "--backend", "nomad"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "spec.imagePullSecrets" in captured.err
    assert "backend.nomad.registry_auth" in captured.err
    assert "ghp_goldenToken" not in captured.err
