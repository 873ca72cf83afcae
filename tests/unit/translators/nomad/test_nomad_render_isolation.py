"""A template rendered in the agent's own process (``templates.render_workers = 0``: a
``Renderer`` without a pool) is handed a deep copy of its context (``jobs.sealed``): what it
changes in place never reaches what vkgate checks after the render — the job ID, the Variable,
the pod's securityContext (issue row 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from translators.base import (
    ResolvedContainer,
    ResolvedPod,
    TranslationError,
    UnsupportedError,
)
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import context, render_job, sealed
from translators.render.engine import Renderer

CFG = NomadConfig.from_settings({}, environ={})


def pod(spec: dict[str, Any]) -> ResolvedPod:
    raw: Any = {"metadata": {"name": "web", "namespace": "ns", "uid": "u-1"}, "spec": spec}
    containers = spec.get("containers") or [{"name": "app"}]
    return ResolvedPod(
        namespace="ns",
        name="web",
        uid="1234abcd-0000",
        node_name="vk",
        pod=raw,
        containers=(
            ResolvedContainer(name="app", image="busybox", command=("true",), spec=containers[0]),
        ),
    )


def render(tmp_path: Path, body: str, p: ResolvedPod) -> dict[str, Any]:
    (tmp_path / "nomad").mkdir(exist_ok=True)
    (tmp_path / "nomad" / "forge.j2").write_text('{% extends "nomad/job.j2" %}\n' + body)
    renderer = Renderer(extra_dirs=[tmp_path])
    assert renderer.pool is None  # in this process
    out: dict[str, Any] = render_job(
        p, renderer=renderer, cfg=CFG, settings={}, factor=1000, template="nomad/forge.j2"
    )
    return out


def test_a_forged_job_id_is_refused(tmp_path: Path) -> None:
    body = '{% set _ = backend_info.update({"job_id": "ns-victim-99999999"}) %}'
    with pytest.raises(TranslationError, match=r"Job\.ID must be 'ns-web-1234abcd'"):
        render(tmp_path, body, pod({}))


def test_emptying_the_pods_security_context_does_not_relax_it(tmp_path: Path) -> None:
    """The check after rendering reads the pod, not the template's copy of it."""
    p = pod({"securityContext": {"runAsUser": 1000}, "containers": [{"name": "app"}]})
    body = '{% set _ = spec.pop("securityContext") %}{% block user %}{% endblock %}'
    with pytest.raises(UnsupportedError) as err:
        render(tmp_path, body, p)
    assert err.value.field == "spec.securityContext.runAsUser"
    assert p.pod["spec"]["securityContext"] == {"runAsUser": 1000}


def test_the_template_gets_a_deep_copy() -> None:
    ctx = context(pod({}), cfg=CFG, settings={}, factor=1000)
    copy = sealed(ctx)
    assert copy == ctx
    copy["backend_info"]["variable"]["items"]["f0"] = "forged"
    copy["pod"]["spec"]["hostNetwork"] = True
    assert "f0" not in ctx["backend_info"]["variable"]["items"]
    assert "hostNetwork" not in ctx["pod"]["spec"]
