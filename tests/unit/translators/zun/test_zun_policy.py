"""The node's policy on the rendered Zun body, and Secrets Zun cannot keep.

A team template may customize a block; it may not make the container privileged, pick its
compute host or runtime, let Zun auto-remove it, or change its hostname or security groups,
unless the node names that key in ``template_keys`` (translators/zun/policy.py).  Secret env
values are refused by default (``secret_env``), and so is a template that carries a Secret
file's content into the body (``secret_files``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from zun_pods import resolved_pod, simple_pod

from gateway import cli
from translators.base import EnvVar, PolicyRefused, ResolvedVolume, UnsupportedError, VolumeFile
from translators.render.engine import Renderer
from translators.zun.client import feature_flags
from translators.zun.config import TEMPLATE_KEYS, ZunConfigError, load_config
from translators.zun.policy import WHY
from translators.zun.spec import SpecBuilder

TEAM = "teams/ml/zun/container.j2"
TEAM_CAPSULE = "teams/ml/zun/capsule.j2"
FLAGS = feature_flags((1, 40))


def builder(overlay: dict[str, str] | None = None, **settings: Any) -> SpecBuilder:
    return SpecBuilder.from_config(
        load_config(settings), renderer=Renderer(overlay=overlay), settings=settings
    )


def team(extra: str) -> dict[str, str]:
    return {TEAM: '{% extends "zun/container.j2" %}{% block extra %}' + extra + "{% endblock %}"}


def ml(pod: dict[str, Any], **kw: Any) -> Any:
    return dataclasses.replace(resolved_pod(pod, **kw), team="ml")


# -- the guarded keys ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ('"privileged": true,', "privileged"),
        ('"host": "compute-7",', "host"),
        ('"runtime": "runc",', "runtime"),
        ('"auto_remove": true,', "auto_remove"),
        ('"hostname": "db-primary",', "hostname"),
    ],
)
async def test_a_team_template_cannot_set_a_guarded_key(extra: str, key: str) -> None:
    with pytest.raises(PolicyRefused) as err:
        await builder(team(extra)).build(ml(simple_pod("web")), FLAGS)
    e = err.value
    assert (e.template, e.field, e.setting) == (TEAM, key, "backend.zun.template_keys")
    assert e.reason == "PolicyRefused"
    assert TEAM in str(e) and key in str(e) and "backend.zun.template_keys" in str(e)
    # the node names the key: allowed
    spec = await builder(team(extra), template_keys=[key]).build(ml(simple_pod("web")), FLAGS)
    assert key in spec.body


async def test_a_template_cannot_change_the_security_groups_the_node_gives() -> None:
    overlay = {
        TEAM: '{% extends "zun/container.j2" %}{% block placement %}'
        '"security_groups": ["open-to-world"],{% endblock %}'
    }
    with pytest.raises(PolicyRefused) as err:
        await builder(overlay, security_groups=["vkgate-pods"]).build(ml(simple_pod("web")), FLAGS)
    assert err.value.field == "security_groups"
    assert "vkgate-pods" in str(err.value) and "open-to-world" in str(err.value)


async def test_vkgates_own_hostname_and_groups_and_harmless_falses_pass() -> None:
    overlay = team('"privileged": false, "auto_remove": null,')
    pod = simple_pod("web")
    pod["spec"]["hostname"] = "web-0"
    spec = await builder(overlay, security_groups=["vkgate-pods"]).build(ml(pod), FLAGS)
    assert spec.body["hostname"] == "web-0"
    assert spec.body["security_groups"] == ["vkgate-pods"]


async def test_a_capsule_container_cannot_carry_a_guarded_key() -> None:
    """Zun builds capsule containers from the keys it is given, without the policy checks of
    POST /containers: a privileged key there would reach the container object."""
    overlay = {
        TEAM_CAPSULE: '{% extends "zun/capsule.j2" %}'
        '{% block extra %}"initContainers": [{"image": "busybox", "privileged": true}],'
        "{% endblock %}"
    }
    pod = simple_pod("pair")
    pod["spec"]["containers"].append({"name": "b", "image": "busybox:1.36"})
    with pytest.raises(PolicyRefused) as err:
        await builder(overlay).build(ml(pod), FLAGS)
    assert err.value.field == "template.spec.initContainers[0].privileged"
    assert err.value.template == TEAM_CAPSULE


async def test_the_packaged_templates_pass_the_policy() -> None:
    pod = simple_pod("pair")
    pod["spec"]["containers"].append({"name": "b", "image": "busybox:1.36"})
    spec = await builder().build(resolved_pod(pod), FLAGS)
    assert spec.kind == "capsule"
    spec = await builder().build(resolved_pod(simple_pod("one")), FLAGS)
    assert spec.kind == "container"


def test_vkgate_render_exits_non_zero_with_the_same_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VKGATE_CONFIG", raising=False)
    monkeypatch.delenv("OS_CLOUD", raising=False)
    (tmp_path / "tpl" / "teams" / "ml" / "zun").mkdir(parents=True)
    (tmp_path / "tpl" / "teams" / "ml" / "zun" / "container.j2").write_text(
        team('"privileged": true,')[TEAM]
    )
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: ml}\nspec:\n"
        "  containers: [{name: app, image: busybox}]\n---\n"
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {vkgate.io/team: ml}}\n"
    )
    argv = ["render", str(pod_file), "--backend", "zun", "--templates-dir", str(tmp_path / "tpl")]
    # the team is the operator's to give (docs/design/teams.md): --team, not the label
    code = cli.main([*argv, "--team", "ml"])
    out, err = capsys.readouterr()
    assert code != 0 and out == ""
    assert "template teams/ml/zun/container.j2: privileged: runs the container privileged" in err
    assert "(node setting backend.zun.template_keys)" in err


# -- Secrets Zun cannot keep ---------------------------------------------------------------


def _secret_env_pod() -> Any:
    pod = simple_pod(
        "web", env=[{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}}]
    )
    return resolved_pod(pod, env={"app": {"PW": "hunter2-secret"}})


async def test_secret_env_is_refused_by_default_naming_the_field_and_setting() -> None:
    with pytest.raises(UnsupportedError) as err:
        await builder().build(_secret_env_pod(), FLAGS)
    assert err.value.reason == "SecretEnvNotAllowed"
    assert err.value.field == "spec.containers[app].env"
    assert "secret_env = 'reject'" in str(err.value) and "[backend.zun]" in str(err.value)
    spec = await builder(secret_env="allow").build(_secret_env_pod(), FLAGS)
    assert spec.body["environment"] == {"PW": "hunter2-secret"}


async def test_a_template_that_carries_a_secret_file_into_the_body_is_refused() -> None:
    pod = dataclasses.replace(
        ml(simple_pod("web")),
        volumes=(
            ResolvedVolume(
                "creds", "secret", files=(VolumeFile("pw", b"hunter2-file", secret=True),)
            ),
        ),
    )
    for expr in ("volumes[0].files[0].content", "volumes[0].files[0].content_b64"):
        overlay = {
            TEAM: '{% extends "zun/container.j2" %}{% block environment %}"environment": '
            "{{ dict(c.env, PW=" + expr + ") | tojson }},{% endblock %}"
        }
        with pytest.raises(PolicyRefused) as err:
            await builder(overlay).build(pod, FLAGS)
        assert (err.value.field, err.value.setting) == (
            "environment.PW",
            "backend.zun.secret_files",
        )
        spec = await builder(overlay, secret_files="allow").build(pod, FLAGS)
        assert spec.body["environment"]["PW"]


async def test_a_configmap_file_in_the_body_is_fine() -> None:
    pod = dataclasses.replace(
        ml(simple_pod("web")),
        volumes=(ResolvedVolume("cfg", "configMap", files=(VolumeFile("a", b"plain-config"),)),),
    )
    overlay = {
        TEAM: '{% extends "zun/container.j2" %}{% block environment %}"environment": '
        "{{ dict(c.env, A=volumes[0].files[0].content) | tojson }},{% endblock %}"
    }
    spec = await builder(overlay).build(pod, FLAGS)
    assert spec.body["environment"]["A"] == "plain-config"


# -- pod strings Zun or docker read again ---------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"env": [{"name": "A=B", "value": "c"}]}, "env[A=B]"),
        (
            {"volumeMounts": [{"name": "d", "mountPath": "/data:/host"}]},
            "volumeMounts[0].mountPath",
        ),
        ({"volumeMounts": [{"name": "d", "mountPath": "data"}]}, "volumeMounts[0].mountPath"),
        ({"name": "a,b"}, "name"),
    ],
)
async def test_pod_strings_zun_parses_again_are_refused_by_field(
    change: dict[str, Any], field: str
) -> None:
    pod = simple_pod("web")
    pod["spec"]["volumes"] = [{"name": "d", "emptyDir": {}}]
    pod["spec"]["containers"][0].update(change)
    name = pod["spec"]["containers"][0]["name"]
    with pytest.raises(UnsupportedError) as err:
        await builder().build(resolved_pod(pod), FLAGS)
    assert err.value.field == f"spec.containers[{name}].{field}"


# -- settings --------------------------------------------------------------------------------


def test_every_guarded_key_has_a_reason() -> None:
    assert set(WHY) == set(TEMPLATE_KEYS)


@pytest.mark.parametrize(
    ("key", "value"),
    [("secret_env", "maybe"), ("secret_files", "yes"), ("template_keys", ["cap_add"])],
)
def test_policy_settings_are_checked(key: str, value: Any) -> None:
    with pytest.raises(ZunConfigError) as err:
        load_config({key: value})
    assert err.value.key == f"backend.zun.{key}"


def test_defaults_deny() -> None:
    cfg = load_config({})
    assert (cfg.secret_env, cfg.secret_files, cfg.template_keys) == ("reject", "reject", ())


def test_env_var_objects_keep_their_secret_flag() -> None:
    """The refusal reads ``EnvVar.secret``, which the resolver sets (a sanity check of the
    test helper the cases above use)."""
    (c,) = _secret_env_pod().containers
    assert c.env == (EnvVar("PW", "hunter2-secret", secret=True),)


def test_templates_check_fails_a_template_the_policy_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A policy refusal is the template's failure, not a pod the backend cannot run: `vkgate
    templates check` (and the ConfigMap source, which runs the same check) fails it."""
    monkeypatch.delenv("VKGATE_CONFIG", raising=False)
    (tmp_path / "teams" / "ml" / "zun").mkdir(parents=True)
    (tmp_path / "teams" / "ml" / "zun" / "container.j2").write_text(
        team('"privileged": true,')[TEAM]
    )
    code = cli.main(["templates", "check", str(tmp_path), "--backend", "zun"])
    out, _ = capsys.readouterr()
    assert code == 1
    assert "FAIL teams/ml/zun/container.j2 [plain]: template teams/ml/zun/container.j2:" in out
