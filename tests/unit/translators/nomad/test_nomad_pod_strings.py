"""Pod strings reach a Nomad job only as data (docs/design/threat-model.md, row 1 for Nomad):
arbitrary strings in a container's command, args, env values, working dir and image, rendered by
the packaged templates (docker and raw_exec), either refuse the pod naming the field or leave
the job with the shape of a job rendered from plain strings — no key added, renamed or dropped,
but for the env file vkgate writes for a value Nomad's ``Env`` would interpolate, which takes
the value out of ``Env`` (translators/nomad/literal.py) — and each string is a whole value of the job, byte for byte once
Nomad has read its HCL escapes (``$${`` → ``${``, ``%%{`` → ``%{``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from translators.base import EnvVar, ResolvedContainer, ResolvedPod, TranslatorError
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import render_job
from translators.render.engine import Renderer

TEMPLATES = ("nomad/job.j2", "nomad/raw_exec.j2")
RENDERER = Renderer()

#: Any text a pod author can write: control characters, quotes, braces, Nomad's ``${…}``
#: interpolation and Jinja's own delimiters included.
text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40
) | st.sampled_from(['"}', "${attr.unique.hostname}", "{{ 7*7 }}", "{% raw %}", "\\u0000", "a\nb"])


def pod(command: str, arg: str, env: str, workdir: str, image: str) -> ResolvedPod:
    container = ResolvedContainer(
        name="app",
        image=image,
        command=("/bin/sh", command),
        args=(arg,),
        env=(EnvVar("GREETING", env),),
        working_dir=workdir,
    )
    raw: Any = {"metadata": {"name": "web", "namespace": "ns", "uid": "u-1"}, "spec": {}}
    return ResolvedPod(
        namespace="ns", name="web", uid="1234abcd-0000", node_name="vk", pod=raw,
        containers=(container,),
    )  # fmt: skip


def render(template: str, p: ResolvedPod) -> dict[str, Any]:
    settings_ = {"template": template, "drivers": ["docker", "raw_exec"]}
    cfg = NomadConfig.from_settings(settings_, environ={})
    out: dict[str, Any] = render_job(p, renderer=RENDERER, cfg=cfg, settings=settings_, factor=1000)
    return out


def shape(value: Any, path: str = "") -> Iterator[str]:
    """Every key path of ``value`` (list items by index)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield f"{path}/{k}"
            yield from shape(v, f"{path}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from shape(v, f"{path}[{i}]")


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)
    elif isinstance(value, str):
        yield value


PLAIN = pod("echo", "arg", "hello", "/srv", "busybox:1.36")


@pytest.mark.parametrize("template", TEMPLATES)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(command=text, arg=text, env=text, workdir=text, image=text)
def test_pod_strings_are_data_in_the_job(
    template: str, command: str, arg: str, env: str, workdir: str, image: str
) -> None:
    baseline = set(shape(render(template, PLAIN)))
    try:
        job = render(template, pod(command, arg, env, workdir, image))
    except TranslatorError as exc:  # refused: the reason names a field of the pod
        assert exc.field.startswith("spec.") or "spec." in str(exc), str(exc)
        event("refused")
        return
    event("rendered")
    added = set(shape(job)) - baseline
    assert all("/Templates[" in k for k in added), added
    # the value moved from the task's Env into that env file
    missing = baseline - set(shape(job))
    assert all(k.endswith("/Env/GREETING") for k in missing) and (not missing or added), missing
    # what Nomad reads: its HCL escapes undone (translators/nomad/literal.py, config_literal)
    values = {v.replace("$${", "${").replace("%%{", "%{") for v in strings(job)}
    assert command in values and arg in values
    if template == "nomad/job.j2":
        assert image in values
