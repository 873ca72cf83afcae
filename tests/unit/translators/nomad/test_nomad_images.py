"""imageID on Nomad (translators/nomad/images.py): docker tasks pinned by digest carry it from
the submitted job's Meta to the container status once they have run; tags and raw_exec do not."""

from __future__ import annotations

from typing import Any

import pytest

from translators.base import ResolvedContainer, ResolvedPod
from translators.nomad import images
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import render_job
from translators.nomad.status import JobView, workload_state
from translators.render.engine import Renderer

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        (f"busybox@{DIGEST}", f"docker.io/library/busybox@{DIGEST}"),
        (f"busybox:1.36@{DIGEST}", f"docker.io/library/busybox@{DIGEST}"),
        (f"quay.io/team/app@{DIGEST}", f"quay.io/team/app@{DIGEST}"),
        (f"localhost:5000/app:v1@{DIGEST}", f"localhost:5000/app@{DIGEST}"),
        ("busybox:1.36", ""),  # a tag: the digest it resolved to is not known
        ("busybox@sha256:abc", ""),  # not a digest
    ],
)
def test_image_id_of_a_digest_pinned_image(image: str, expected: str) -> None:
    assert images.image_id(image) == expected


def job(*tasks: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "TaskGroups": [
            {"Tasks": [{"Name": n, "Driver": d, "Config": {"image": i}} for n, d, i in tasks]}
        ]
    }


def test_meta_lists_only_docker_tasks_pinned_by_digest() -> None:
    out = images.meta(
        job(
            ("app", "docker", f"busybox@{DIGEST}"),
            ("side", "docker", "busybox:1.36"),
            ("raw", "raw_exec", f"busybox@{DIGEST}"),  # raw_exec runs no image
        )
    )
    assert out == {"vkgate.image_ids": f"app=docker.io/library/busybox@{DIGEST}"}
    assert images.parse(out["vkgate.image_ids"]) == {"app": f"docker.io/library/busybox@{DIGEST}"}
    assert images.meta(job(("app", "docker", "busybox:1.36"))) == {}
    assert images.parse("") == {} and images.parse("junk,=x,y=") == {}


def resolved(image: str) -> ResolvedPod:
    return ResolvedPod(
        namespace="ns",
        name="web",
        uid="1234abcd-0000",
        node_name="vk",
        pod={"metadata": {"name": "web", "namespace": "ns", "uid": "u-1"}, "spec": {}},
        containers=(ResolvedContainer(name="app", image=image, command=("true",)),),
    )


@pytest.mark.parametrize(
    ("template", "recorded"), [("nomad/job.j2", True), ("nomad/raw_exec.j2", False)]
)
def test_the_submitted_job_records_it_for_docker_only(template: str, recorded: bool) -> None:
    cfg = NomadConfig.from_settings({"template": template}, environ={})
    out = render_job(
        resolved(f"busybox@{DIGEST}"), renderer=Renderer(), cfg=cfg, settings={}, factor=1000.0
    )
    meta = out["Job"]["Meta"]
    assert (meta.get("vkgate.image_ids") == f"app=docker.io/library/busybox@{DIGEST}") is recorded


def test_the_container_status_carries_it_once_the_task_has_run() -> None:
    meta = {
        "vkgate.io/owner": "vkgate",
        "vkgate.node": "vk",
        "k8s.namespace": "ns",
        "k8s.name": "web",
        "k8s.uid": "u-1",
        "vkgate.containers": "app",
        "vkgate.image_ids": f"app=docker.io/library/busybox@{DIGEST}",
    }
    view = JobView.from_job({"ID": "ns-web", "Meta": meta, "Status": "running"})
    view.allocs["a1"] = {
        "ID": "a1",
        "CreateIndex": 1,
        "ClientStatus": "pending",
        "TaskStates": {"app": {"State": "pending", "Events": []}},
    }
    (waiting,) = workload_state(view).containers
    assert waiting.image_id == ""  # not started yet: the kubelet reports no imageID either
    view.allocs["a1"] = {
        "ID": "a1",
        "CreateIndex": 1,
        "ClientStatus": "running",
        "TaskStates": {
            "app": {
                "State": "running",
                "StartedAt": "2026-11-22T09:00:00Z",
                "Events": [{"Type": "Started", "Time": 1}],
            }
        },
    }
    (running,) = workload_state(view).containers
    assert running.state == "running"
    assert running.image_id == f"docker.io/library/busybox@{DIGEST}"
