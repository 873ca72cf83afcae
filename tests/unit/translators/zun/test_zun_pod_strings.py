"""Arbitrary strings through every pod field that reaches the Zun body: each arrives as one JSON
value, equal to what the pod said (Zun and docker get it as data), or the pod is refused naming
that field — where Zun or docker would read the string again (docker's ``NAME=value`` and
``source:destination``, vkgate's own comma-joined container labels)."""

from __future__ import annotations

import copy
import shlex
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zun_pods import resolved_pod, simple_pod

from translators.base import UnsupportedError
from translators.render.engine import Renderer
from translators.zun.client import feature_flags
from translators.zun.config import load_config
from translators.zun.spec import LABEL_CONTAINERS, SpecBuilder

NASTY = [
    "",
    "/",
    "/:/host",
    "--privileged",
    "a=b",
    "a,b",
    '"}, "privileged": true, "x": {"',
    "{{ 7 * 7 }}",
    "x' --privileged '",
    "$(id)",
    "/data\n--volume /:/host",
    "\x00",
    "\u2028",
    "ok",
]
TEXT = st.one_of(st.text(max_size=24), st.sampled_from(NASTY))
EXAMPLES = settings(deadline=None, max_examples=60)
BUILDER = SpecBuilder.from_config(load_config({}), renderer=Renderer(), settings={})
NEW, OLD = feature_flags((1, 40)), feature_flags((1, 12))
WHERE = "spec.containers[app]"


def _body(pod: dict[str, Any], field: str, flags: Any = NEW) -> dict[str, Any] | None:
    """The rendered body, or None when the pod was refused naming ``field``."""
    try:
        spec = BUILDER.render(resolved_pod(pod), flags)
    except UnsupportedError as exc:
        assert exc.field == field, (exc.field, str(exc))
        return None
    assert "privileged" not in spec.body  # no pod string ever becomes a key of its own
    body: dict[str, Any] = spec.body
    return body


def _app(**container: Any) -> dict[str, Any]:
    pod = simple_pod("web")
    pod["spec"]["containers"][0].update(container)
    return pod


def env_name(v: str) -> None:
    body = _body(_app(env=[{"name": v, "value": "x"}]), f"{WHERE}.env[{v}]")
    if body is not None:  # docker-py joins NAME=value: an "=" in the name would move the split
        assert body["environment"] == {v: "x"} and "=" not in v


def env_value(v: str) -> None:
    body = _body(_app(env=[{"name": "A", "value": v}]), "")
    assert body is not None and body["environment"] == {"A": v}


def working_dir(v: str) -> None:
    body = _body(_app(workingDir=v), "")
    assert body is not None and body.get("workdir", "") == v


def command(v: str) -> None:
    body = _body(_app(command=[v, "--privileged"], args=[v]), "")
    assert body is not None
    assert (body["entrypoint"], body["command"]) == ([v, "--privileged"], [v])


def command_string(v: str) -> None:
    """Before 1.40 (and 1.10's list command) command and args travel as one string: Zun splits
    it with shlex, so every element comes back whole."""
    body = _body(_app(command=[v], args=["--privileged", v]), "", OLD)
    assert body is not None and shlex.split(body["command"]) == [v, "--privileged", v]


def mount_path(v: str) -> None:
    pod = _app(volumeMounts=[{"name": "d", "mountPath": v}])
    pod["spec"]["volumes"] = [{"name": "d", "emptyDir": {}}]
    body = _body(pod, f"{WHERE}.volumeMounts[0].mountPath")
    if body is not None:
        assert body["mounts"] == [{"destination": v, "size": 1}] and ":" not in v


def capsule_volume_name(v: str) -> None:
    pod = _app(volumeMounts=[{"name": v, "mountPath": "/data"}])
    pod["spec"]["volumes"] = [{"name": v, "emptyDir": {}}]
    pod["spec"]["containers"].append({"name": "b", "image": "busybox"})
    body = _body(pod, "")
    assert body is not None
    spec = body["template"]["spec"]
    assert [x["name"] for x in spec["volumes"]] == [v]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": v, "mountPath": "/data", "readOnly": False}
    ]


def container_name(v: str) -> None:
    body = _body(_app(name=v), f"spec.containers[{v}].name")
    if body is not None:
        assert body["labels"][LABEL_CONTAINERS] == v and "," not in v


def image(v: str) -> None:
    body = _body(_app(image=v), "")
    if body is not None:  # an empty image fails the body check (a TranslationError) instead
        assert body["image"] == v


def hostname(v: str) -> None:
    pod = copy.deepcopy(simple_pod("web"))
    pod["spec"]["hostname"] = v
    body = _body(pod, "")
    assert body is not None
    expected = (v or "web")[:63].rstrip("-.")
    assert body.get("hostname", "") == (expected if len(expected) >= 2 else "")


FIELDS: dict[str, Callable[[str], None]] = {
    f.__name__: f
    for f in (
        env_name,
        env_value,
        working_dir,
        command,
        command_string,
        mount_path,
        capsule_volume_name,
        container_name,
        image,
        hostname,
    )
}


@pytest.mark.parametrize("field", sorted(FIELDS))
@EXAMPLES
@given(value=TEXT)
def test_a_pod_string_is_data_or_the_pod_is_refused_naming_its_field(
    field: str, value: str
) -> None:
    if field == "image" and not value:
        return  # Zun needs an image: validate_body refuses the empty one (a TranslationError)
    FIELDS[field](value)
