"""Pod → task rules that need more than a golden file: identity, quoting, limits, refusals."""

from __future__ import annotations

import dataclasses
import shlex
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from translators.base import (
    EnvVar,
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    TranslationError,
    UnsupportedError,
    VolumeFile,
    VolumeMount,
)
from translators.batch.capacity import PoolInfo
from translators.batch.settings import parse_settings
from translators.batch.spec import (
    MAX_COMMAND_LINE,
    TaskBuilder,
    TaskName,
    base_task_id,
    command_line,
    parse_display_name,
)
from translators.render.engine import Renderer

KEY = "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleQ=="


def builder(**settings: Any) -> TaskBuilder:
    table = {
        "endpoint": "https://a.westeurope.batch.azure.com",
        "account_name": "a",
        "account_key": KEY,
        "pool_id": "pool-1",
        **settings,
    }
    return TaskBuilder(parse_settings(table, node_name="vk", environ={}), Renderer())


def pod(
    *,
    command: tuple[str, ...] = (),
    args: tuple[str, ...] = (),
    env: tuple[EnvVar, ...] = (),
    mounts: tuple[VolumeMount, ...] = (),
    volumes: tuple[ResolvedVolume, ...] = (),
    containers: int = 1,
    restart: str = "Never",
) -> ResolvedPod:
    cs = tuple(
        ResolvedContainer(
            name=f"c{i}", image="busybox", command=command, args=args, env=env, mounts=mounts
        )
        for i in range(containers)
    )
    uid = str(uuid.uuid4())
    return ResolvedPod(
        namespace="ns",
        name="p",
        uid=uid,
        node_name="vk",
        pod={
            "metadata": {"name": "p", "namespace": "ns", "uid": uid},
            "spec": {"restartPolicy": restart},
        },
        containers=cs,
        volumes=volumes,
    )


def test_task_ids_are_deterministic_valid_and_distinct() -> None:
    a = base_task_id("vk-", "default", "web", "uid-1")
    assert a == base_task_id("vk-", "default", "web", "uid-1")
    assert a != base_task_id("vk-", "default", "web", "uid-2")  # a re-created pod is new
    assert a != base_task_id("vk-", "default-web", "", "uid-1")
    long = base_task_id("x" * 16, "n" * 63, "m" * 253, "u" * 36)
    assert len(long) <= 60 and all(c.isalnum() or c in "-_" for c in long)
    assert a == a.lower()  # the service compares ids case-insensitively


def test_display_name_round_trips() -> None:
    for name in (TaskName("ns", "p", "u", "app"), TaskName("ns", "p", "u", "init-db", "init", 3)):
        assert parse_display_name(name.render()) == name
    assert parse_display_name("someone else's task") is None
    assert parse_display_name("a/b/c/init:x:y") is None


@given(st.lists(st.text(max_size=20), max_size=8))
def test_command_line_quoting_preserves_every_argument(argv: list[str]) -> None:
    assert shlex.split(command_line(argv)) == argv


@pytest.mark.parametrize("evil", ["; rm -rf /", "$(id)", "`id`", "a && b", "x' ; echo 'y", "$HOME"])
def test_shell_metacharacters_stay_one_literal_argument(evil: str) -> None:
    (task,) = builder().build(pod(command=("echo",), args=(evil,)))
    assert shlex.split(task["commandLine"]) == [evil]
    assert shlex.split(task["containerSettings"]["containerRunOptions"]) == ["--entrypoint", "echo"]


def test_command_line_limit_is_a_clear_error() -> None:
    builder().build(pod(args=("x" * (MAX_COMMAND_LINE - 10),)))  # just fits
    with pytest.raises(UnsupportedError) as err:
        builder().build(pod(args=("x" * (MAX_COMMAND_LINE + 1),)))
    assert err.value.reason == "CommandLineTooLong"
    assert "32768" in str(err.value) and "'c0'" in str(err.value)


def test_one_container_only() -> None:
    with pytest.raises(UnsupportedError) as err:
        builder().build(pod(containers=2))
    assert err.value.reason == "Unsupported" and "exactly one container" in str(err.value)


def test_secret_env_can_be_refused() -> None:
    p = pod(env=(EnvVar("T", "v", secret=True),))
    builder().build(p)
    with pytest.raises(UnsupportedError) as err:
        builder(secret_env="reject").build(p)
    assert err.value.reason == "SecretEnvNotAllowed"


def test_file_volumes_refused_when_configured() -> None:
    vol = ResolvedVolume("cfg", "configMap", files=(VolumeFile("a.conf", b"x"),))
    p = pod(command=("app",), mounts=(VolumeMount("cfg", "/etc/a"),), volumes=(vol,))
    (task,) = builder().build(p)
    assert "VKGATE_FILE_0" in task["commandLine"]
    with pytest.raises(UnsupportedError) as err:
        builder(file_volumes="reject").build(p)
    assert err.value.reason == "UnsupportedVolume"


def test_file_volume_size_is_bounded() -> None:
    vol = ResolvedVolume("cfg", "configMap", files=(VolumeFile("big", b"x" * 100),))
    p = pod(command=("app",), mounts=(VolumeMount("cfg", "/etc/a"),), volumes=(vol,))
    with pytest.raises(UnsupportedError, match="max_file_volume_bytes"):
        builder(max_file_volume_bytes=50).build(p)


def test_sub_path_mount_writes_one_file_at_the_mount_path() -> None:
    vol = ResolvedVolume("cfg", "configMap", files=(VolumeFile("a", b"1"), VolumeFile("b", b"2")))
    p = pod(
        command=("app",), mounts=(VolumeMount("cfg", "/etc/b.conf", sub_path="b"),), volumes=(vol,)
    )
    (task,) = builder().build(p)
    script = shlex.split(task["commandLine"])[1]
    assert "> /etc/b.conf" in script and script.count("base64 -d") == 1
    assert task["environmentSettings"] == [{"name": "VKGATE_FILE_0", "value": "Mg=="}]


def test_unknown_volume_kind_is_unsupported_volume() -> None:
    p = pod(volumes=(ResolvedVolume("data", "persistentVolumeClaim"),))
    with pytest.raises(UnsupportedError) as err:
        builder().build(p)
    assert err.value.reason == "UnsupportedVolume"


def test_docker_limits_skipped_on_cri_pools() -> None:
    c = ResolvedContainer(
        name="c", image="busybox", spec={"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}
    )
    p = dataclasses.replace(pod(), containers=(c,))
    cri = PoolInfo(
        id="pool-1", vm_size="standard_d4s_v3", slots_per_node=4, container_type="criCompatible"
    )
    (task,) = builder().build(p, pool=cri)
    assert "--cpus" not in task["containerSettings"]["containerRunOptions"]
    (task,) = builder(resource_limits="always").build(p, pool=cri)
    assert "--cpus 1" in task["containerSettings"]["containerRunOptions"]


def test_template_that_leaks_a_secret_into_display_name_is_refused(tmp_path) -> None:
    (tmp_path / "leaky").mkdir()
    (tmp_path / "leaky" / "task.j2").write_text(
        '{% extends "batch/task.j2" %}{% block identity %}"id": {{ task.id | tojson }},'
        '"displayName": {{ (task.display_name ~ container.env.TOKEN) | tojson }},{% endblock %}'
    )
    settings = parse_settings(
        {
            "endpoint": "https://a.westeurope.batch.azure.com",
            "account_name": "a",
            "account_key": KEY,
            "pool_id": "pool-1",
        },
        node_name="vk",
        environ={},
    )
    b = TaskBuilder(settings, Renderer(extra_dirs=[tmp_path]))
    with pytest.raises(TranslationError) as err:
        b.build(pod(env=(EnvVar("TOKEN", "hunter22", secret=True),)), template="leaky/task.j2")
    assert err.value.field == "displayName"


def test_extra_block_adds_fields() -> None:
    b = builder()
    renderer = Renderer(
        overlay={
            "team/task.j2": '{% extends "batch/task.j2" %}{% block extra %}"outputFiles": [],{% endblock %}'
        }
    )
    b.renderer = renderer
    (task,) = b.build(pod(), template="team/task.j2")
    assert task["outputFiles"] == [] and task["requiredSlots"] == 1


def test_working_dir_becomes_docker_workdir() -> None:
    c = ResolvedContainer(name="c", image="busybox", working_dir="/srv/app")
    (task,) = builder().build(dataclasses.replace(pod(), containers=(c,)))
    opts = shlex.split(task["containerSettings"]["containerRunOptions"])
    assert opts == ["--workdir", "/srv/app"]
    assert task["containerSettings"]["workingDirectory"] == "containerImageDefault"


def test_a_working_dir_that_is_not_one_plain_word_is_refused_naming_the_field() -> None:
    """Batch does not say how it splits containerRunOptions: "/srv/my app" quoted for a shell
    is two words to a whitespace split, so it is refused rather than quoted."""
    c = ResolvedContainer(name="c", image="busybox", working_dir="/srv/my app")
    with pytest.raises(UnsupportedError) as err:
        builder().build(dataclasses.replace(pod(), containers=(c,)))
    assert err.value.field == "spec.containers[c].workingDir"
    assert "plain words" in str(err.value)


@pytest.mark.parametrize(
    ("block", "field"),
    [
        (
            '{% block identity %}"id": "mine", "displayName": {{ task.display_name | tojson }},{% endblock %}',
            "id",
        ),
        (
            '{% block identity %}"id": {{ task.id | tojson }}, "displayName": "my task",{% endblock %}',
            "displayName",
        ),
    ],
)
def test_template_may_not_change_identity(block: str, field: str) -> None:
    b = builder()
    b.renderer = Renderer(overlay={"team/task.j2": '{% extends "batch/task.j2" %}' + block})
    with pytest.raises(TranslationError) as err:
        b.build(pod(), template="team/task.j2")
    assert err.value.field == field
