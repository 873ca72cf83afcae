"""Pod strings never become docker options, and the node's policy holds on the rendered task.

An emptyDir ``mountPath: "/:/host"`` used to render as ``containerRunOptions:
"--volume /:/host --entrypoint sh"`` — the pool node's root filesystem inside the container.
Now every pod string that reaches ``containerRunOptions`` is checked (translators/podstrings.py)
and a template is held to vkgate's own options, identity and sources
(translators/batch/policy.py).
"""

from __future__ import annotations

import dataclasses
import shlex
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway import cli
from translators.base import (
    EnvVar,
    PolicyRefused,
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    TranslationError,
    UnsupportedError,
    VolumeFile,
    VolumeMount,
)
from translators.batch.policy import WHY
from translators.batch.settings import TEMPLATE_KEYS, BatchSettingsError, parse_settings
from translators.batch.spec import TaskBuilder
from translators.render.engine import Renderer

KEY = "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleQ=="
TEAM = "teams/ml/batch/task.j2"


def builder(overlay: dict[str, str] | None = None, **settings: Any) -> TaskBuilder:
    table = {
        "endpoint": "https://a.westeurope.batch.azure.com",
        "account_name": "a",
        "account_key": KEY,
        "pool_id": "pool-1",
        **settings,
    }
    return TaskBuilder(parse_settings(table, node_name="vk", environ={}), Renderer(overlay=overlay))


def team(block: str, name: str = "extra") -> dict[str, str]:
    """A team template overriding one block of the packaged task."""
    return {
        TEAM: '{% extends "batch/task.j2" %}{% block ' + name + " %}" + block + "{% endblock %}"
    }


def pod(*containers: ResolvedContainer, volumes: tuple[ResolvedVolume, ...] = ()) -> ResolvedPod:
    uid = str(uuid.uuid4())
    return ResolvedPod(
        namespace="ns",
        name="p",
        uid=uid,
        node_name="vk",
        pod={
            "metadata": {"name": "p", "namespace": "ns", "uid": uid},
            "spec": {"restartPolicy": "Never"},
        },
        containers=containers or (ResolvedContainer(name="app", image="busybox"),),
        volumes=volumes,
    )


def app(**fields: Any) -> ResolvedContainer:
    return dataclasses.replace(ResolvedContainer(name="app", image="busybox"), **fields)


def options(task: dict[str, Any]) -> list[str]:
    return shlex.split(task["containerSettings"]["containerRunOptions"])


# -- row 1: pod strings never become options ---------------------------------------------


def test_row1_an_emptydir_mount_path_cannot_bind_the_nodes_root() -> None:
    p = pod(
        app(command=("sh",), mounts=(VolumeMount("scratch", "/:/host"),)),
        volumes=(ResolvedVolume("scratch", "emptyDir"),),
    )
    with pytest.raises(UnsupportedError) as err:
        builder().build(p)
    assert err.value.field == "spec.containers[app].volumeMounts[0].mountPath"
    assert "':'" in str(err.value)


def test_row1_through_vkgate_render_exits_non_zero_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VKGATE_CONFIG", raising=False)
    for var in ("AZURE_BATCH_ENDPOINT", "AZURE_BATCH_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: esc, namespace: default}\nspec:\n"
        "  volumes: [{name: scratch, emptyDir: {}}]\n"
        "  containers:\n"
        "    - name: app\n      image: busybox\n      command: [sh]\n"
        '      volumeMounts: [{name: scratch, mountPath: "/:/host"}]\n'
    )
    code = cli.main(["render", str(pod_file), "--backend", "batch"])
    out, err = capsys.readouterr()
    assert code != 0 and out == ""
    assert "spec.containers[app].volumeMounts[0].mountPath '/:/host'" in err
    assert "--volume" not in err


@pytest.mark.parametrize(
    ("mount", "medium", "why"),
    [
        ("relative/dir", "", "absolute"),
        ("/a/../etc", "", "clean"),
        ("/a//b", "", "clean"),
        ("/data --privileged", "", "plain words"),
        ("/data\n--privileged", "", "control"),
        ("/x:/y:rw", "Memory", "':'"),
        ("/tmp/it's", "", "plain words"),
        ("/tmp/$(id)", "", "plain words"),
    ],
)
def test_mount_paths_that_docker_would_read_otherwise_are_refused(
    mount: str, medium: str, why: str
) -> None:
    p = pod(
        app(mounts=(VolumeMount("scratch", mount),)),
        volumes=(ResolvedVolume("scratch", "emptyDir", medium=medium),),
    )
    with pytest.raises(UnsupportedError) as err:
        builder().build(p)
    assert err.value.field == "spec.containers[app].volumeMounts[0].mountPath"
    assert why in str(err.value)


def test_clean_mount_paths_still_become_anonymous_volumes() -> None:
    p = pod(
        app(mounts=(VolumeMount("a", "/data/"), VolumeMount("b", "/run/fast"))),
        volumes=(ResolvedVolume("a", "emptyDir"), ResolvedVolume("b", "emptyDir", medium="Memory")),
    )
    (task,) = builder().build(p)
    assert options(task) == ["--volume", "/data/", "--tmpfs", "/run/fast"]


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ("--privileged", "command[0]"),
        ("sh -c", "command[0]"),
        ("x' --privileged '", "command[0]"),
    ],
)
def test_an_entrypoint_that_is_not_one_plain_word_is_refused(entry: str, field: str) -> None:
    with pytest.raises(UnsupportedError) as err:
        builder().build(pod(app(command=(entry, "x"))))
    assert err.value.field == f"spec.containers[app].{field}"


def test_an_unusual_entrypoint_is_data_when_the_file_wrapper_runs_it() -> None:
    vol = ResolvedVolume("cfg", "configMap", files=(VolumeFile("a.conf", b"x"),))
    p = pod(app(command=("my app", "--x"), mounts=(VolumeMount("cfg", "/etc/a"),)), volumes=(vol,))
    (task,) = builder().build(p)
    assert options(task) == ["--entrypoint", "/bin/sh"]
    assert shlex.split(task["commandLine"])[3:] == ["my app", "--x"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"image": "busybox --privileged"}, "image"),
        ({"image": "-v"}, "image"),
        ({"name": "app/x"}, "name"),
        ({"env": (EnvVar("A=B", "c"),)}, "env[A=B]"),
        ({"env": (EnvVar("A\nB", "c"),)}, "env[A\nB]"),
        ({"mounts": (VolumeMount("v", "/ok", sub_path="../../etc"),)}, "volumeMounts[0].subPath"),
        ({"mounts": (VolumeMount("v", "/ok", sub_path="/etc"),)}, "volumeMounts[0].subPath"),
    ],
)
def test_other_pod_strings_batch_parses_again_are_refused_by_field(
    change: dict[str, Any], field: str
) -> None:
    c = app(**change)
    with pytest.raises(UnsupportedError) as err:
        builder().build(pod(c))
    assert err.value.field == f"spec.containers[{c.name}].{field}"


# -- the template is held to vkgate's options -------------------------------------------


def _with_options(value: str) -> dict[str, str]:
    return team(
        '"containerSettings": {{ dict(task.container_settings, containerRunOptions='
        + value
        + ") | tojson }},",
        "container_settings",
    )


@pytest.mark.parametrize(
    ("expr", "setting", "says"),
    [
        (
            'task.container_settings.containerRunOptions ~ " --privileged"',
            "template_run_options",
            "--privileged",
        ),
        ('"--volume /:/host"', "container_run_options", "':'"),
        ('"--volume=/:/host"', "container_run_options", "':'"),
        ('"-v /:/host"', "template_run_options", "-v"),
        ('"--network host"', "template_run_options", "--network"),
        ('"--entrypoint sh alpine"', "template_run_options", "image"),
        ('"--gpus 8"', "template_run_options", "only from the pod's limits"),
        ("\"--entrypoint 'sh'\"", "container_run_options", "plain word"),
        ('"--entrypoint"', "template_run_options", "without a value"),
    ],
)
def test_a_template_cannot_add_options_outside_the_allow_list(
    expr: str, setting: str, says: str
) -> None:
    with pytest.raises(PolicyRefused) as err:
        builder(_with_options(expr)).build(pod(), template=TEAM)
    e = err.value
    assert (e.template, e.field, e.setting) == (
        TEAM,
        "containerSettings.containerRunOptions",
        f"backend.batch.{setting}",
    )
    assert says in str(e) and TEAM in str(e) and e.setting in str(e)
    assert e.reason == "PolicyRefused"


def test_options_the_node_names_may_be_added_and_vkgates_own_may_be_repeated() -> None:
    expr = '"--shm-size=1g --init --volume /cache --workdir /w --entrypoint python"'
    b = builder(_with_options(expr), template_run_options=["--shm-size", "--init"])
    (task,) = b.build(pod(), template=TEAM)
    assert options(task)[:2] == ["--shm-size=1g", "--init"]
    with pytest.raises(PolicyRefused):  # --init alone is not --shm-size
        builder(_with_options(expr), template_run_options=["--init"]).build(pod(), template=TEAM)


def test_a_template_cannot_drop_the_pods_limits() -> None:
    limited = app(spec={"resources": {"limits": {"cpu": "2", "memory": "1Gi"}}})
    (task,) = builder().build(pod(limited))
    assert options(task) == ["--cpus", "2", "--memory", str(2**30)]
    with pytest.raises(PolicyRefused) as err:
        builder(_with_options('"--cpus 2"')).build(pod(limited), template=TEAM)
    assert f"drops the pod's limits (--memory {2**30})" in str(err.value)
    builder(_with_options('"--memory=1073741824 --cpus 2"')).build(pod(limited), template=TEAM)


def test_the_nodes_own_options_must_stay_at_the_end() -> None:
    node = "--read-only --security-opt no-new-privileges"
    (task,) = builder(container_run_options=node).build(pod(app(command=("sh",))))
    assert task["containerSettings"]["containerRunOptions"] == f"--entrypoint sh {node}"
    with pytest.raises(PolicyRefused) as err:
        builder(_with_options('"--entrypoint sh"'), container_run_options=node).build(
            pod(), template=TEAM
        )
    assert err.value.setting == "backend.batch.container_run_options"


# -- identity, sources, tokens -----------------------------------------------------------


@pytest.mark.parametrize(
    "identity",
    [
        '{"autoUser": {"scope": "pool", "elevationLevel": "admin"}}',
        '{"autoUser": {"scope": "task", "elevationLevel": "admin"}}',
        '{"autoUser": {"elevationLevel": "nonadmin"}}',  # scope defaults to pool
        '{"userName": "batch-admin"}',
    ],
)
def test_a_template_cannot_elevate_the_task_identity(identity: str) -> None:
    overlay = team('"userIdentity": ' + identity + ",", "user_identity")
    with pytest.raises(PolicyRefused) as err:
        builder(overlay).build(pod(), template=TEAM)
    assert (err.value.field, err.value.setting) == ("userIdentity", "backend.batch.template_keys")
    (task,) = builder(overlay, template_keys=["userIdentity"]).build(pod(), template=TEAM)
    assert task["userIdentity"]


def test_a_modest_identity_or_the_nodes_own_elevation_is_fine() -> None:
    modest = team(
        '"userIdentity": {"autoUser": {"scope": "task", "elevationLevel": "nonAdmin"}},',
        "user_identity",
    )
    (task,) = builder(modest).build(pod(), template=TEAM)
    assert task["userIdentity"]["autoUser"]["scope"] == "task"
    (task,) = builder(elevation="admin").build(pod())  # the node's own choice
    assert task["userIdentity"] == {"autoUser": {"scope": "task", "elevationLevel": "admin"}}


@pytest.mark.parametrize(
    ("extra", "field", "key"),
    [
        (
            '"resourceFiles": [{"httpUrl": "https://x.example/a", "filePath": "a"}],',
            "resourceFiles",
            "resourceFiles",
        ),
        (
            '"authenticationTokenSettings": {"access": ["job"]},',
            "authenticationTokenSettings",
            "authenticationTokenSettings",
        ),
        (
            '"outputFiles": [{"filePattern": "*", "destination": {"container": {"containerUrl":'
            ' "https://a.blob/c", "identityReference": {"resourceId": "/id"}}},'
            ' "uploadOptions": {"uploadCondition": "taskCompletion"}}],',
            "outputFiles[0].destination.container.identityReference",
            "identityReference",
        ),
        (
            '"multiInstanceSettings": {"coordinationCommandLine": "x", "commonResourceFiles":'
            ' [{"httpUrl": "https://x.example/a"}]},',
            "multiInstanceSettings.commonResourceFiles",
            "resourceFiles",
        ),
    ],
)
def test_what_vkgate_never_builds_needs_the_node_to_name_it(
    extra: str, field: str, key: str
) -> None:
    with pytest.raises(PolicyRefused) as err:
        builder(team(extra)).build(pod(), template=TEAM)
    assert (err.value.field, err.value.setting) == (field, "backend.batch.template_keys")
    builder(team(extra), template_keys=[key]).build(pod(), template=TEAM)


def test_host_bind_mounts_in_container_settings_are_refused() -> None:
    overlay = team(
        '"containerSettings": {{ dict(task.container_settings, containerHostBatchBindMounts='
        '[{"source": "Shared", "isReadOnly": false}]) | tojson }},',
        "container_settings",
    )
    with pytest.raises(PolicyRefused) as err:
        builder(overlay).build(pod(), template=TEAM)
    assert err.value.field == "containerSettings.containerHostBatchBindMounts"


def test_the_documented_output_files_example_still_renders() -> None:
    extra = (
        '"outputFiles": [{"filePattern": "../std*.txt", "destination": {"container": '
        '{"containerUrl": "https://a.blob.core.windows.net/logs?sas"}}, '
        '"uploadOptions": {"uploadCondition": "taskCompletion"}}],'
    )
    (task,) = builder(team(extra)).build(pod(), template=TEAM)
    assert task["outputFiles"][0]["filePattern"] == "../std*.txt"


def test_a_template_image_name_must_stay_an_image_reference() -> None:
    overlay = team(
        '"containerSettings": {{ dict(task.container_settings, imageName="x --privileged") '
        "| tojson }},",
        "container_settings",
    )
    with pytest.raises(TranslationError) as err:
        builder(overlay).build(pod(), template=TEAM)
    assert err.value.field == "containerSettings.imageName"


# -- secret_env = "reject" covers files too --------------------------


def _mounted(kind: str, *, secret: bool, name: str = "v") -> ResolvedPod:
    vol = ResolvedVolume(
        name, kind, files=(VolumeFile("token", b"eyJhbGciOi-token", secret=secret),)
    )
    return pod(app(command=("app",), mounts=(VolumeMount(name, "/var/run/x"),)), volumes=(vol,))


@pytest.mark.parametrize(
    ("kind", "name"),
    [("secret", "creds"), ("projected", "mixed"), ("projected", "kube-api-access-abcde")],
)
def test_secret_env_reject_refuses_secret_projected_and_token_files(kind: str, name: str) -> None:
    p = _mounted(kind, secret=True, name=name)
    (task,) = builder().build(p)  # allow: the files ride in environmentSettings (base64)
    assert any(e["name"] == "VKGATE_FILE_0" for e in task["environmentSettings"])
    with pytest.raises(UnsupportedError) as err:
        builder(secret_env="reject").build(p)
    assert err.value.reason == "SecretFileNotAllowed"
    assert err.value.field == "spec.containers[app].volumeMounts[0]"
    assert "secret_env = 'reject'" in str(err.value)


def test_secret_env_reject_keeps_configmap_files() -> None:
    (task,) = builder(secret_env="reject").build(_mounted("configMap", secret=False))
    assert task["environmentSettings"][0]["name"] == "VKGATE_FILE_0"


def test_secret_env_reject_refuses_a_template_that_copies_a_secret_into_the_task() -> None:
    vol = ResolvedVolume(
        "creds", "secret", files=(VolumeFile("pw", b"hunter2-secret", secret=True),)
    )
    p = pod(volumes=(vol,))  # not mounted: only a template can put it anywhere
    overlay = team(
        '"environmentSettings": {{ (task.environment + [{"name": "PW", "value": '
        "volumes[0].files[0].content_b64}]) | tojson }},",
        "environment",
    )
    (task,) = builder(overlay).build(p, template=TEAM)  # allow: as the operator chose
    assert task["environmentSettings"][-1]["name"] == "PW"
    with pytest.raises(PolicyRefused) as err:
        builder(overlay, secret_env="reject").build(p, template=TEAM)
    assert err.value.field == "environmentSettings[0].value"
    assert err.value.setting == "backend.batch.secret_env"


def test_a_pod_that_writes_its_own_text_is_not_refused_for_a_secret_with_the_same_text() -> None:
    vol = ResolvedVolume("creds", "secret", files=(VolumeFile("pw", b"hunter2", secret=True),))
    p = pod(app(args=("--user=hunter2",)), volumes=(vol,))
    builder(secret_env="reject").build(p)


# -- settings -----------------------------------------------------------------------------


def test_every_guarded_key_has_a_reason() -> None:
    assert set(WHY) == set(TEMPLATE_KEYS)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("template_run_options", ["-v"]),
        ("template_run_options", ["--shm-size=1g"]),
        ("template_keys", ["privileged"]),
        ("template_keys", "userIdentity,nope"),
    ],
)
def test_policy_settings_are_checked_at_start(key: str, value: Any) -> None:
    with pytest.raises(BatchSettingsError) as err:
        builder(**{key: value})
    assert err.value.key == f"backend.batch.{key}"
