"""Whose templates a template ConfigMap defines is the operator's decision (docs/design/teams.md).

A ConfigMap defines templates only under its own team's ``teams/<team>/`` — its team from
``templates.configmap_teams``, or its label where ``templates.team_label_configmaps`` lets it
choose; only the ConfigMaps named in ``templates.global_configmaps`` define global templates; two
ConfigMaps that define the same template are a conflict reported on both, and the one that
served it keeps serving it.  Through ``TemplatesSource.handle`` (the watch's events) with the
real renderer; the validator accepts everything (what it checks is test_templates_source's).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from gateway.config import TemplateSettings
from gateway.inputs import TeamRule
from gateway.templating.source import TemplatesSource, owner_of, templates_of
from translators.render.engine import Renderer

NS = "vkgate-system"


class FakeEvents:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str, str]] = []

    async def record(
        self, obj: dict[str, Any], *, type: str, reason: str, message: str, field_path: str = ""
    ) -> None:
        self.recorded.append((obj["metadata"]["name"], type, reason, message))

    def of(self, name: str, reason: str) -> list[str]:
        return [m for n, _, r, m in self.recorded if (n, r) == (name, reason)]


def cm(
    name: str,
    data: dict[str, str],
    *,
    team: str = "",
    prefix: str = "",
    created: str = "",
    rv: str = "1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "resourceVersion": rv,
        "uid": name,
        "labels": {"vkgate.io/templates": "true", **({"vkgate.io/team": team} if team else {})},
    }
    if prefix:
        meta["annotations"] = {"vkgate.io/template-prefix": prefix}
    if created:
        meta["creationTimestamp"] = created
    return {"metadata": meta, "data": data}


def source(settings: TemplateSettings, *, reflector: Any = None) -> TemplatesSource:
    return TemplatesSource(
        None,
        Renderer(),
        namespace=NS,
        events=FakeEvents(),
        validator=lambda *_: [],
        rule=TeamRule.configmaps(settings),
        global_configmaps=settings.global_configmaps,
        reflector=reflector,
    )


def events(src: TemplatesSource) -> FakeEvents:
    assert isinstance(src.events, FakeEvents)
    return src.events


class Listed:
    """A reflector stand-in: ``synced`` is set once the test says the first list is done."""

    def __init__(self) -> None:
        self.synced = asyncio.Event()


# --------------------------------------------------------------------------- one team's prefix


async def test_a_configmap_defining_another_teams_prefix_is_refused() -> None:
    """Team ml's ConfigMap cannot write team web's templates through the prefix annotation."""
    src = source(TemplateSettings(configmap_teams={"ml-templates": "ml"}))
    await src.handle("ADDED", cm("ml-templates", {"nomad__job.j2": "{}"}, prefix="teams/web"), None)
    assert src.renderer.overlay == {}
    (message,) = events(src).of("ml-templates", "TemplateRejected")
    assert "vkgate.io/template-prefix='teams/web' is outside team 'ml'" in message
    assert "templates.configmap_teams" in message and "not loaded" in message
    assert src.refused == {"owner": 1}
    # ... and its own prefix, or a folder of it, is fine
    await src.handle(
        "MODIFIED",
        cm("ml-templates", {"job.j2": "{}"}, prefix="teams/ml/nomad", rv="2"),
        None,
    )
    assert list(src.renderer.overlay) == ["teams/ml/nomad/job.j2"]


async def test_a_team_label_counts_only_where_the_operator_lets_it() -> None:
    """By default no ConfigMap's label chooses its team: a ConfigMap labelled team ml defines
    nothing, with a Warning naming the label and the setting; the operator's map wins over a
    label that says otherwise."""
    src = source(TemplateSettings(configmap_teams={"web-templates": "web"}))
    await src.handle("ADDED", cm("sneaky", {"nomad__job.j2": "{}"}, team="ml"), None)
    await src.handle("ADDED", cm("web-templates", {"nomad__job.j2": "{}"}, team="ml"), None)
    assert list(src.renderer.overlay) == ["teams/web/nomad/job.j2"]  # the map's team, not ml
    (ignored,) = events(src).of("sneaky", "TeamLabelIgnored")
    assert "vkgate.io/team='ml' ignored" in ignored and "templates.team_label_configmaps" in ignored
    (rejected,) = events(src).of("sneaky", "TemplateRejected")
    assert "is no team's" in rejected and "templates.global_configmaps" in rejected
    (overridden,) = events(src).of("web-templates", "TeamLabelIgnored")
    assert "templates.configmap_teams makes it team 'web'" in overridden
    assert src.ignored() == {"not_allowed": 1, "map_differs": 1}

    allowed = source(TemplateSettings(team_label_configmaps=["ml-*"]))
    await allowed.handle("ADDED", cm("ml-templates", {"nomad__job.j2": "{}"}, team="ml"), None)
    assert list(allowed.renderer.overlay) == ["teams/ml/nomad/job.j2"]
    assert events(allowed).of("ml-templates", "TeamLabelIgnored") == []


# --------------------------------------------------------------------------- global templates


async def test_a_configmap_cannot_define_a_global_default_unless_the_operator_names_it() -> None:
    src = source(TemplateSettings(global_configmaps=["platform"]))
    await src.handle("ADDED", cm("anyone", {"nomad__job.j2": "{}"}), None)
    assert src.renderer.overlay == {}  # nomad/job.j2 stays the packaged one
    (message,) = events(src).of("anyone", "TemplateRejected")
    assert "not named in templates.global_configmaps" in message
    await src.handle("ADDED", cm("platform", {"nomad__job.j2": "{}"}), None)
    assert src.renderer.origin("nomad/job.j2") == f"configmap {NS}/platform key nomad__job.j2"


def test_the_owner_of_a_configmap() -> None:
    rule = TeamRule.configmaps(TemplateSettings(configmap_teams={"ml-t": "ml"}))
    owner = owner_of(cm("platform", {}, team="ml"), rule=rule, global_configmaps=["platform"])
    assert (owner.prefix, owner.team, owner.refused) == ("", "", "")
    assert "templates.global_configmaps names it" in owner.ignored
    owner = owner_of(cm("ml-t", {}, prefix="teams/ml"), rule=rule)
    assert (owner.prefix, owner.team, owner.refused) == ("teams/ml", "ml", "")
    # teams/ml2 is not under teams/ml/
    assert owner_of(cm("ml-t", {}, prefix="teams/ml2"), rule=rule).refused
    assert owner_of(cm("ml-t", {}, prefix="teams"), rule=rule).refused
    assert templates_of(cm("ml-t", {"a__b.j2": ""}), prefix="teams/ml")[0].keys() == {
        "teams/ml/a/b.j2"
    }


# --------------------------------------------------------------------------- conflicts


async def test_two_configmaps_with_the_same_template_conflict_and_the_earlier_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listed = Listed()
    listed.synced.set()  # live: past the first list
    src = source(TemplateSettings(team_label_configmaps=["*"]), reflector=listed)
    await src.handle("ADDED", cm("ml-a", {"nomad__job.j2": "{# a #}"}, team="ml"), None)
    changes = src.renderer.version
    caplog.set_level(logging.WARNING, "gateway.templates")
    await src.handle(
        "ADDED",
        cm("ml-b", {"nomad__job.j2": "{# b #}", "nomad__other.j2": "{}"}, team="ml"),
        None,
    )
    # neither silently wins: the earlier keeps serving, the later is refused as a whole
    assert src.renderer.version == changes
    assert src.renderer.origin("teams/ml/nomad/job.j2").startswith(f"configmap {NS}/ml-a ")
    assert not src.renderer.exists("teams/ml/nomad/other.j2")
    (on_b,) = events(src).of("ml-b", "TemplateConflict")
    (on_a,) = events(src).of("ml-a", "TemplateConflict")
    assert f"teams/ml/nomad/job.j2 also defined by ConfigMap {NS}/ml-a" in on_b
    assert "refused (not loaded)" in on_b
    assert f"ConfigMap {NS}/ml-b also defines teams/ml/nomad/job.j2" in on_a
    assert f"ConfigMaps {NS}/ml-a and {NS}/ml-b both define teams/ml/nomad/job.j2" in caplog.text
    assert src.refused == {"conflict": 1}

    # a change of ml-a that keeps the template: ml-b stays refused, not reported again
    await src.handle("MODIFIED", cm("ml-a", {"nomad__job.j2": "{# a2 #}"}, team="ml", rv="2"), None)
    assert len(events(src).of("ml-b", "TemplateConflict")) == 1 and src.refused["conflict"] == 1
    # once ml-a is gone, ml-b is considered again and serves
    await src.handle("DELETED", cm("ml-a", {}, team="ml"), None)
    assert src.renderer.origin("teams/ml/nomad/job.j2").startswith(f"configmap {NS}/ml-b ")
    assert src.renderer.exists("teams/ml/nomad/other.j2")


async def test_a_new_version_that_conflicts_keeps_the_previous_one() -> None:
    listed = Listed()
    listed.synced.set()
    src = source(TemplateSettings(global_configmaps=["p1", "p2"]), reflector=listed)
    await src.handle("ADDED", cm("p1", {"nomad__job.j2": "{# 1 #}"}), None)
    await src.handle("ADDED", cm("p2", {"zun__container.j2": "{# 2 #}"}), None)
    await src.handle(
        "MODIFIED",
        cm("p2", {"zun__container.j2": "{# 2 #}", "nomad__job.j2": "{# 2 #}"}, rv="2"),
        None,
    )
    assert src.renderer.origin("nomad/job.j2").startswith(f"configmap {NS}/p1 ")
    assert src.renderer.origin("zun/container.j2").startswith(f"configmap {NS}/p2 ")
    (message,) = events(src).of("p2", "TemplateConflict")
    assert "the previous version keeps serving" in message


async def test_at_start_up_the_older_configmap_keeps_the_template() -> None:
    """The first list has no "before": the older ConfigMap (creationTimestamp) wins, whatever
    the list's order, so a restart keeps what served before it."""
    listed = Listed()
    src = source(TemplateSettings(team_label_configmaps=["*"]), reflector=listed)
    newer = cm("a-newer", {"nomad__job.j2": "{# n #}"}, team="ml", created="2024-05-02T00:00:00Z")
    older = cm("b-older", {"nomad__job.j2": "{# o #}"}, team="ml", created="2024-05-01T00:00:00Z")
    await src.handle("ADDED", newer, None)  # the API server lists by name
    await src.handle("ADDED", older, None)
    listed.synced.set()
    assert src.renderer.origin("teams/ml/nomad/job.j2").startswith(f"configmap {NS}/b-older ")
    assert events(src).of("a-newer", "TemplateConflict") and events(src).of(
        "b-older", "TemplateConflict"
    )
    # live, nothing displaces the one serving — not even an older ConfigMap labelled later
    old = cm("c-old", {"nomad__job.j2": "{}"}, team="ml", created="2023-01-01T00:00:00Z")
    await src.handle("ADDED", old, None)
    assert src.renderer.origin("teams/ml/nomad/job.j2").startswith(f"configmap {NS}/b-older ")
