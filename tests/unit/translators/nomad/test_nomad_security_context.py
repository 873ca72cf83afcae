"""securityContext on Nomad (translators/securitycontext.py, jobs.finish_job): each restriction
reaches the docker task as rendered, or the pod is refused naming the field — whatever the
template (raw_exec, or a team template that drops an option) — unless the node relaxes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from translators.base import ResolvedContainer, ResolvedPod, UnsupportedError
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import render_job
from translators.nomad.status import failure_reason
from translators.render.engine import Renderer
from vkgate_core.settings import SettingsError

CFG = NomadConfig.from_settings({}, environ={})
#: A node whose template is raw_exec (a team template cannot pick raw_exec on a docker node).
RAW = NomadConfig.from_settings({"template": "nomad/raw_exec.j2"}, environ={})


def pod(pod_sc: Any = None, **container_sc: Any) -> ResolvedPod:
    c: dict[str, Any] = {"name": "app", "image": "busybox:1.36", "command": ["sleep", "1"]}
    if container_sc:
        c["securityContext"] = container_sc
    spec: dict[str, Any] = {"containers": [c]}
    if pod_sc is not None:
        spec["securityContext"] = pod_sc
    return ResolvedPod(
        namespace="ns",
        name="web",
        uid="1234abcd-0000",
        node_name="vk",
        pod={"metadata": {"name": "web", "namespace": "ns", "uid": "u-1"}, "spec": spec},  # type: ignore[typeddict-item]
        containers=(
            ResolvedContainer(name="app", image="busybox:1.36", command=("sleep", "1"), spec=c),
        ),
    )


def task(
    p: ResolvedPod, *, cfg: NomadConfig = CFG, renderer: Renderer | None = None, template: str = ""
) -> Any:
    job = render_job(
        p, renderer=renderer or Renderer(), cfg=cfg, settings={}, factor=1000.0, template=template
    )
    return job["Job"]["TaskGroups"][0]["Tasks"][0]


def task_job(p: ResolvedPod) -> Any:
    return render_job(p, renderer=Renderer(), cfg=CFG, settings={}, factor=1000.0)["Job"]


def refused(p: ResolvedPod, **kw: Any) -> UnsupportedError:
    with pytest.raises(UnsupportedError) as err:
        task(p, **kw)
    assert err.value.reason == "UnsupportedPodFeature"
    return err.value


def test_restricted_maps_to_user_readonly_rootfs_caps_and_no_new_privileges() -> None:
    t = task(
        pod(
            {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 3000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            allowPrivilegeEscalation=False,
            readOnlyRootFilesystem=True,
            capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
        )
    )
    assert t["User"] == "1000:3000"
    config = t["Config"]
    assert config["readonly_rootfs"] is True
    assert config["cap_drop"] == ["all"] and config["cap_add"] == ["net_bind_service"]
    assert config["security_opt"] == ["no-new-privileges"]


def test_a_pod_without_securitycontext_renders_no_security_options() -> None:
    t = task(pod())
    assert "User" not in t
    assert not {"readonly_rootfs", "cap_add", "cap_drop", "security_opt"} & set(t["Config"])


def test_unconfined_seccomp_is_a_security_opt() -> None:
    assert task(pod({"seccompProfile": {"type": "Unconfined"}}))["Config"]["security_opt"] == [
        "seccomp=unconfined"
    ]


@pytest.mark.parametrize(
    ("p", "field", "words"),
    [
        (
            pod(runAsNonRoot=True),
            "spec.containers[app].securityContext.runAsNonRoot",
            "cannot read the image's user",
        ),
        (
            pod({"runAsNonRoot": True, "runAsUser": 0}),
            "spec.securityContext.runAsNonRoot",
            "runAsUser is 0",
        ),
        (pod({"runAsGroup": 5}), "spec.securityContext.runAsGroup", "set runAsUser too"),
        (
            pod(seccompProfile={"type": "Localhost", "localhostProfile": "x.json"}),
            "spec.containers[app].securityContext.seccompProfile",
            "Localhost profiles",
        ),
    ],
)
def test_what_docker_cannot_enforce_is_refused_naming_the_field(
    p: ResolvedPod, field: str, words: str
) -> None:
    err = refused(p)
    assert err.field == field and words in str(err)


def test_raw_exec_refuses_every_restriction_unless_the_node_relaxes_it() -> None:
    p = pod({"runAsUser": 1000}, readOnlyRootFilesystem=True)
    err = refused(p, cfg=RAW)
    assert err.field == "spec.securityContext.runAsUser" and "raw_exec driver" in str(err)
    some = NomadConfig.from_settings(
        {"template": RAW.template, "relax_security_context": ["runAsUser"]}, environ={}
    )
    err = refused(p, cfg=some)
    assert err.field == "spec.containers[app].securityContext.readOnlyRootFilesystem"
    both = NomadConfig.from_settings(
        {
            "template": RAW.template,
            "relax_security_context": ["runAsUser", "readOnlyRootFilesystem"],
        },
        environ={},
    )
    job = render_job(p, renderer=Renderer(), cfg=both, settings={}, factor=1000.0)["Job"]
    t = job["TaskGroups"][0]["Tasks"][0]
    assert t["Driver"] == "raw_exec" and "User" not in t  # raw_exec runs as the client's user
    assert job["Meta"]["vkgate.security-relaxed"] == (
        "spec.securityContext.runAsUser (the raw_exec driver cannot enforce it); "
        "spec.containers[app].securityContext.readOnlyRootFilesystem "
        "(the raw_exec driver cannot enforce it)"
    )
    assert "vkgate.security-relaxed" not in task_job(pod({"runAsUser": 1000}))["Meta"]


def test_the_refusal_names_the_first_field_and_lists_every_one() -> None:
    err = refused(pod({"runAsUser": 1000}, readOnlyRootFilesystem=True), cfg=RAW)
    assert err.field == "spec.securityContext.runAsUser"
    assert str(err).endswith(
        "Not enforced: spec.securityContext.runAsUser: the raw_exec driver cannot enforce it; "
        "spec.containers[app].securityContext.readOnlyRootFilesystem: the raw_exec driver "
        "cannot enforce it"
    )


def test_a_team_template_that_drops_an_option_is_refused(tmp_path: Path) -> None:
    (tmp_path / "nomad").mkdir()
    (tmp_path / "nomad" / "lax.j2").write_text(
        '{%- extends "nomad/job.j2" -%}{%- block config -%}{"image": {{ c.image | tojson }}}{%- endblock -%}'
    )
    renderer = Renderer(extra_dirs=[tmp_path])
    err = refused(pod(capabilities={"drop": ["ALL"]}), renderer=renderer, template="nomad/lax.j2")
    assert err.field == "spec.containers[app].securityContext.capabilities" and "cap_drop" in str(
        err
    )
    assert task(pod(), renderer=renderer, template="nomad/lax.j2")["Config"] == {
        "image": "busybox:1.36"
    }


def test_relax_names_known_fields_only() -> None:
    with pytest.raises(SettingsError) as err:
        NomadConfig.from_settings({"relax_security_context": ["runAsUsr"]}, environ={})
    assert "backend.nomad.relax_security_context" in str(err.value) and "runAsUsr" in str(err.value)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (
            'Failed to create container configuration for image "busybox:1.36" ("sha256:cd4a"): '
            "driver does not allow the following capabilities: net_admin",
            "CreateContainerConfigError",
        ),
        ("Failed to pull `busybox:1.36`: not found", "ErrImagePull"),
    ],
)
def test_a_capability_outside_allow_caps_is_a_config_error_not_an_image_pull(
    message: str, reason: str
) -> None:
    event = {"Type": "Driver Failure", "Details": {"driver_error": message}}
    assert failure_reason(event, waiting=False) == reason


def test_the_guide_rows_are_what_the_translator_enforces() -> None:
    """docs/backends/nomad.md: the "What is supported" row and the "securityContext" table name
    exactly the fields the docker driver enforces; every other field is listed as refused."""
    import re

    from translators import securitycontext
    from translators.nomad import NomadTranslator

    guide = (Path(__file__).parents[4] / "docs" / "backends" / "nomad.md").read_text()
    (row,) = [line for line in guide.splitlines() if line.startswith("| securityContext | ")]
    docker_part = row.split("; raw_exec", 1)[0]
    assert set(re.findall(r"`(\w+)`", docker_part)) == set(securitycontext.DOCKER)
    assert NomadTranslator.features.security_context == securitycontext.DOCKER
    table = guide.split("### securityContext", 1)[1].split("\n### ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    for field in securitycontext.FIELDS:
        assert any(re.match(rf"\| [^|]*`{field}\b", line) for line in rows), field
