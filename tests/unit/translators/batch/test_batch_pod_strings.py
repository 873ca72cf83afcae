"""Arbitrary strings through every pod field that reaches the Batch task: they arrive as data
(one option value, one argv element, one JSON value) or the pod is refused naming that field.

The option string is checked against every splitter at once: its words must be plain (a shell
and a whitespace split agree), pair into vkgate's own options (translators/batch/runoptions.py),
and carry the pod's string whole as one value.
"""

from __future__ import annotations

import dataclasses
import posixpath
import shlex
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from translators.base import (
    EnvVar,
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    UnsupportedError,
    VolumeFile,
    VolumeMount,
)
from translators.batch.runoptions import OPTIONS
from translators.batch.settings import parse_settings
from translators.batch.spec import TaskBuilder, parse_display_name
from translators.podstrings import WORD
from translators.render.engine import Renderer

NASTY = [
    "",
    "/",
    "/:/host",
    "/data:/host:rw",
    "--privileged",
    "-v",
    "/a b",
    "/a\tb",
    "/data\n--volume /:/host",
    "x' --privileged '",
    'x" --privileged "',
    "$(id)",
    "`id`",
    "%PATH%",
    "/a/../etc",
    "a=b",
    "\x00",
    "/ok",
    "ok",
    "busybox",
    "c",
]
TEXT = st.one_of(st.text(max_size=24), st.sampled_from(NASTY), st.from_regex(WORD, fullmatch=True))
EXAMPLES = settings(deadline=None, max_examples=60)

BUILDER = TaskBuilder(
    parse_settings(
        {
            "endpoint": "https://a.westeurope.batch.azure.com",
            "account_name": "a",
            "account_key": "a2V5LWtleS1rZXk=",
            "pool_id": "pool-1",
        },
        node_name="vk",
        environ={},
    ),
    Renderer(),
)


def _pod(c: ResolvedContainer, volumes: tuple[ResolvedVolume, ...] = ()) -> ResolvedPod:
    uid = str(uuid.uuid4())
    return ResolvedPod(
        namespace="ns",
        name="p",
        uid=uid,
        node_name="vk",
        pod={"metadata": {"name": "p", "namespace": "ns", "uid": uid}, "spec": {}},
        containers=(c,),
        volumes=volumes,
    )


APP = ResolvedContainer(name="app", image="busybox")
CFG = ResolvedVolume("cfg", "configMap", files=(VolumeFile("a.conf", b"x"),))


def _words(task: dict[str, Any]) -> list[str]:
    """The option words, after proving every splitter reads them alike and they pair into
    vkgate's own options."""
    text = task["containerSettings"]["containerRunOptions"]
    words = text.split()
    assert shlex.split(text) == words
    assert all(WORD.fullmatch(w) for w in words)
    assert all(opt in OPTIONS for opt in words[::2]) and len(words) % 2 == 0
    return words


def _argv(task: dict[str, Any]) -> list[str]:
    return shlex.split(task["commandLine"])


def _build_or_refused(pod: ResolvedPod, field: str) -> dict[str, Any] | None:
    """The one task, or None when the pod was refused naming ``field``."""
    try:
        (task,) = BUILDER.build(pod)
    except UnsupportedError as exc:
        assert exc.field == field, (exc.field, str(exc))
        return None
    result: dict[str, Any] = task
    return result


WHERE = "spec.containers[app]"


def emptydir_mount(v: str) -> None:
    p = _pod(
        dataclasses.replace(APP, mounts=(VolumeMount("d", v),)), (ResolvedVolume("d", "emptyDir"),)
    )
    task = _build_or_refused(p, f"{WHERE}.volumeMounts[0].mountPath")
    if task is not None:
        assert _words(task) == ["--volume", v] and ":" not in v


def tmpfs_mount(v: str) -> None:
    vol = ResolvedVolume("d", "emptyDir", medium="Memory")
    p = _pod(dataclasses.replace(APP, mounts=(VolumeMount("d", v),)), (vol,))
    task = _build_or_refused(p, f"{WHERE}.volumeMounts[0].mountPath")
    if task is not None:
        assert _words(task) == ["--tmpfs", v]


def file_mount(v: str) -> None:
    c = dataclasses.replace(APP, command=("app",), mounts=(VolumeMount("cfg", v),))
    task = _build_or_refused(_pod(c, (CFG,)), f"{WHERE}.volumeMounts[0].mountPath")
    if task is not None:
        assert _words(task) == ["--entrypoint", "/bin/sh"]
        argv = _argv(task)
        assert argv[0] == "-c" and argv[2:] == ["vkgate-files", "app"]
        assert posixpath.join(v, "a.conf") in shlex.split(argv[1])  # one word of the script


def sub_path(v: str) -> None:
    vol = ResolvedVolume("cfg", "configMap", files=(VolumeFile(v, b"x"),))
    c = dataclasses.replace(
        APP, command=("app",), mounts=(VolumeMount("cfg", "/etc/x", sub_path=v),)
    )
    try:
        (task,) = BUILDER.build(_pod(c, (vol,)))
    except UnsupportedError as exc:
        assert exc.field in (f"{WHERE}.volumeMounts[0].subPath", "spec.volumes[cfg]"), exc.field
        return
    if v:
        assert "/etc/x" in shlex.split(_argv(task)[1])


def volume_name(v: str) -> None:
    c = dataclasses.replace(APP, mounts=(VolumeMount(v, "/data"),))
    (task,) = BUILDER.build(_pod(c, (ResolvedVolume(v, "emptyDir"),)))
    assert _words(task) == ["--volume", "/data"]


def working_dir(v: str) -> None:
    task = _build_or_refused(_pod(dataclasses.replace(APP, working_dir=v)), f"{WHERE}.workingDir")
    if task is not None:
        assert _words(task) == (["--workdir", v] if v else [])


def entrypoint(v: str) -> None:
    c = dataclasses.replace(APP, command=(v, "x"))
    task = _build_or_refused(_pod(c), f"{WHERE}.command[0]")
    if task is not None:
        assert _words(task) == (["--entrypoint", v] if v else [])
        assert _argv(task) == ["x"]


def args(v: str) -> None:
    (task,) = BUILDER.build(_pod(dataclasses.replace(APP, args=(v, "--privileged", v))))
    assert _words(task) == []
    assert _argv(task) == [v, "--privileged", v]


def env_name(v: str) -> None:
    c = dataclasses.replace(APP, env=(EnvVar(v, "value"),))
    task = _build_or_refused(_pod(c), f"{WHERE}.env[{v}]")
    if task is not None:  # NAME=value is how a container runtime takes it: no "=" in a name
        assert task["environmentSettings"] == [{"name": v, "value": "value"}] and "=" not in v


def env_value(v: str) -> None:
    (task,) = BUILDER.build(_pod(dataclasses.replace(APP, env=(EnvVar("A", v),))))
    assert task["environmentSettings"] == [{"name": "A", "value": v}]
    assert _words(task) == []


def image(v: str) -> None:
    task = _build_or_refused(_pod(dataclasses.replace(APP, image=v)), f"{WHERE}.image")
    if task is not None:
        assert task["containerSettings"]["imageName"] == v and " " not in v


def container_name(v: str) -> None:
    task = _build_or_refused(_pod(dataclasses.replace(APP, name=v)), f"spec.containers[{v}].name")
    if task is not None:
        name = parse_display_name(task["displayName"])
        assert name is not None and name.container == v


FIELDS: dict[str, Callable[[str], None]] = {
    f.__name__: f
    for f in (
        emptydir_mount,
        tmpfs_mount,
        file_mount,
        sub_path,
        volume_name,
        working_dir,
        entrypoint,
        args,
        env_name,
        env_value,
        image,
        container_name,
    )
}


@pytest.mark.parametrize("field", sorted(FIELDS))
@EXAMPLES
@given(value=TEXT)
def test_a_pod_string_is_data_or_the_pod_is_refused_naming_its_field(
    field: str, value: str
) -> None:
    FIELDS[field](value)
