"""Who is which team is the operator's decision (gateway.inputs.teamrule, docs/design/teams.md):
``templates.teams`` wins; a namespace's ``vkgate.io/team`` label counts only where
``templates.team_label_namespaces`` lets the namespace choose; an ignored label is a Warning
Event on the pod.  The resolver (live and ``vkgate render`` alike) and the renderer's choice of
template and allow-list, with a Lookups adapter that answers the labels."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import pytest

from gateway.config import TemplateSettings
from gateway.inputs import TeamRule
from gateway.pods.resolve import Resolver
from translators.base import Features, ResolvedPod, TranslationError
from translators.render.engine import Renderer
from vkgate_core.kubetypes import Pod, as_pod

LABELS = {"intruder": "ml", "ml-prod": "ml", "web-prod": "ml"}


class Labelled:
    """A ``Lookups`` adapter: namespaces labelled as in ``LABELS``, no objects."""

    async def get(self, kind: Any, namespace: str, name: str) -> Any:
        return None

    async def services(self, namespace: str) -> list[dict[str, Any]]:
        return []

    async def team(self, namespace: str) -> str:
        return LABELS.get(namespace, "")

    async def token(self, pod: Any, key: Any) -> str:
        return "t"

    async def persistent_volume(self, name: str) -> Any:
        return None


def resolver(teams: Mapping[str, str] | None = None, labels: Collection[str] = ()) -> Resolver:
    return Resolver(
        Labelled(),
        features=Features(),
        backend="nomad",
        node_name="vk",
        host_ip=lambda: "127.0.0.5",
        allocatable=dict,
        teams=teams,
        team_label_namespaces=labels,
    )


def pod(ns: str, template: str = "") -> Pod:
    annotations = {"vkgate.io/template": template} if template else {}
    return as_pod(
        {
            "metadata": {"namespace": ns, "name": "p", "uid": "u", "annotations": annotations},
            "spec": {"containers": [{"name": "a", "image": "i"}]},
        }
    )


async def resolved(r: Resolver, ns: str, template: str = "") -> tuple[ResolvedPod, list[str]]:
    res = await r.resolve(pod(ns, template))
    assert res.pod is not None
    return res.pod, [f"{e.type} {e.reason}: {e.message}" for e in res.events]


@pytest.fixture
def renderer() -> Renderer:
    return Renderer(
        overlay={"teams/ml/nomad/job.j2": "{}", "nomad/gpu.j2": "{}"},
        allowed={"ml": ["nomad/gpu*.j2"]},
    )


async def test_a_namespace_labelled_with_another_teams_name_gets_neither_templates_nor_allow_list(
    renderer: Renderer,
) -> None:
    """Issue row 6: by default no label chooses the team."""
    p, events = await resolved(resolver(), "intruder")
    assert (p.team, p.team_source) == ("", "")
    assert events == [
        "Warning TeamLabelIgnored: namespace intruder: label vkgate.io/team='ml' ignored: the "
        "operator decides teams (templates.teams); templates.team_label_namespaces does not let "
        "namespace 'intruder' choose its team by label"
    ]
    choice = renderer.select(p, backend="nomad", default="nomad/job.j2")
    assert choice.name == "nomad/job.j2" and choice.team == ""
    gpu, _ = await resolved(resolver(), "intruder", "nomad/gpu.j2")
    with pytest.raises(TranslationError, match="not allowed for team"):
        renderer.select(gpu, backend="nomad", default="nomad/job.j2")


async def test_the_namespaces_the_operator_lets_choose_do(renderer: Renderer) -> None:
    r = resolver(labels=["ml-*"])
    p, events = await resolved(r, "ml-prod")
    assert (p.team, p.team_source, events) == ("ml", "the namespace label vkgate.io/team", [])
    assert renderer.select(p, backend="nomad", default="nomad/job.j2").name == (
        "teams/ml/nomad/job.j2"
    )
    other, events = await resolved(r, "intruder")  # not ml-*
    assert other.team == "" and "TeamLabelIgnored" in events[0]


async def test_the_operators_map_wins_over_a_label(renderer: Renderer) -> None:
    p, events = await resolved(resolver({"web-prod": "web"}, ["*"]), "web-prod")
    assert (p.team, p.team_source) == ("web", "the team map in config (templates.teams)")
    assert events == [
        "Warning TeamLabelIgnored: namespace web-prod: label vkgate.io/team='ml' ignored: "
        "templates.teams makes it team 'web', and the operator's map wins"
    ]
    assert renderer.select(p, backend="nomad", default="nomad/job.j2").name == "nomad/job.j2"


def test_the_rule() -> None:
    rule = TeamRule.namespaces(
        TemplateSettings(teams={"a": "x"}, team_label_namespaces=["lab-*", "exact"])
    )
    assert rule.decide("a", "").team == "x" and rule.decide("a", "x").ignored == ""
    assert rule.decide("lab-1", "y").team == "y" and rule.decide("exact", "y").team == "y"
    assert rule.decide("exactly", "y").team == "" and rule.decide("exactly", "y").reason
    assert rule.decide("other", "") == rule.decide("lab-1", "")  # no label, no map: no team
    cms = TeamRule.configmaps(TemplateSettings(configmap_teams={"c": "x"}))
    assert cms.decide("c", "y").ignored.startswith("ConfigMap c: label vkgate.io/team='y'")
    assert "templates.configmap_teams" in cms.decide("c", "y").ignored
