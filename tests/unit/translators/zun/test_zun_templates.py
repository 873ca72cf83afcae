"""Team templates: override one block of the packaged Zun templates; the container/capsule
pair follows the pod's shape."""

from __future__ import annotations

import dataclasses

from zun_pods import resolved_pod, simple_pod

from translators.render.engine import Renderer
from translators.zun.client import feature_flags
from translators.zun.config import load_config
from translators.zun.spec import SpecBuilder

TEAM_CONTAINER = """{% extends "zun/container.j2" %}
{% block placement %}
  "availability_zone": "gpu-az",
  "hints": {"team": {{ team | tojson }}},
{% endblock %}"""


def builder(renderer: Renderer) -> SpecBuilder:
    return SpecBuilder.from_config(load_config({}), renderer=renderer, settings={})


async def test_a_team_overrides_one_block_and_keeps_the_rest() -> None:
    renderer = Renderer(overlay={"teams/ml/zun/container.j2": TEAM_CONTAINER})
    pod = dataclasses.replace(resolved_pod(simple_pod("train", "pytorch:2")), team="ml")
    spec = await builder(renderer).build(pod, feature_flags((1, 40)))
    assert spec.template == "teams/ml/zun/container.j2"
    assert spec.body["availability_zone"] == "gpu-az"
    assert spec.body["hints"] == {"team": "ml"}
    assert spec.body["image"] == "pytorch:2" and spec.body["labels"]["k8s.name"] == "train"


async def test_a_multi_container_pod_of_that_team_still_gets_a_capsule() -> None:
    renderer = Renderer(overlay={"teams/ml/zun/container.j2": TEAM_CONTAINER})
    pod = simple_pod("pair")
    pod["spec"]["containers"].append({"name": "b", "image": "busybox:1.36"})
    resolved = dataclasses.replace(resolved_pod(pod), team="ml")
    spec = await builder(renderer).build(resolved, feature_flags((1, 40)))
    assert (spec.kind, spec.template) == ("capsule", "zun/capsule.j2")


def test_asking_for_container_j2_on_a_multi_container_pod_renders_its_capsule_twin() -> None:
    pod = simple_pod("pair")
    pod["spec"]["containers"].append({"name": "b", "image": "busybox:1.36"})
    resolved = resolved_pod(pod, template="zun/container.j2")
    spec = builder(Renderer()).render(resolved, feature_flags((1, 40)))
    assert (spec.kind, spec.template) == ("capsule", "zun/capsule.j2")
    assert [c["image"] for c in spec.body["template"]["spec"]["containers"]] == [
        "busybox:1.36",
        "busybox:1.36",
    ]


def test_a_team_template_chosen_by_render_with_no_capsule_twin_falls_back_to_the_packaged_one() -> (
    None
):
    """`vkgate render`/`templates check` set pod.template to the team's container.j2; a
    multi-container pod of that team needs a capsule, which the team did not customise."""
    renderer = Renderer(overlay={"teams/ml/zun/container.j2": TEAM_CONTAINER})
    pod = simple_pod("pair")
    pod["spec"]["containers"].append({"name": "b", "image": "busybox:1.36"})
    resolved = dataclasses.replace(
        resolved_pod(pod, template="teams/ml/zun/container.j2"), team="ml"
    )
    spec = builder(renderer).render(resolved, feature_flags((1, 40)))
    assert (spec.kind, spec.template) == ("capsule", "zun/capsule.j2")
    assert len(spec.body["template"]["spec"]["containers"]) == 2
