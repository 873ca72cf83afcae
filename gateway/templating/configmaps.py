"""What one template ConfigMap defines: whose templates (``owner_of``) and which (``templates_of``).

Whose is the operator's decision (docs/design/teams.md): a ConfigMap named in
``templates.global_configmaps`` defines global templates (any name: the defaults every pod
gets); else ``TeamRule.configmaps`` gives its team — ``templates.configmap_teams``, else its
label ``vkgate.io/team`` where ``templates.team_label_configmaps`` lets it choose
(gateway.inputs.teamrule) — and its templates go under ``teams/<team>/``, which the annotation
``vkgate.io/template-prefix`` may narrow (``teams/ml/nomad``) but never leave; else it may define
none.  Pure functions of the ConfigMap and the settings (gateway.templating.source applies them).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.inputs import TeamRule
from gateway.inputs.teamrule import MAP_DIFFERS
from translators.render.engine import TEAM_LABEL, OverlayTemplate

#: The label that makes a ConfigMap in ``templates.configmap_namespace`` a template ConfigMap.
LABEL = "vkgate.io/templates"
#: The annotation that narrows where a ConfigMap's keys go (within its team's ``teams/<team>``).
PREFIX_ANNOTATION = "vkgate.io/template-prefix"


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose templates one ConfigMap defines (``owner_of``)."""

    #: Where its keys go: ``teams/<team>`` (or under it), a global ConfigMap's annotated prefix,
    #: or "" (global).
    prefix: str = ""
    #: Its team; "" for a global ConfigMap (or one refused).
    team: str = ""
    #: Why it may define no templates ("" = it may).
    refused: str = ""
    #: Why its team label was ignored ("" = no label, or honoured) and the metric reason.
    ignored: str = ""
    ignored_reason: str = ""


def owner_of(
    cm: Mapping[str, Any], *, rule: TeamRule, global_configmaps: Collection[str] = ()
) -> Owner:
    """The team (or global) whose templates ``cm`` defines, as the operator decided: a
    ConfigMap of ``global_configmaps`` is global; else ``rule`` (``TeamRule.configmaps``) gives
    its team, whose ``teams/<team>/`` its templates go under; else it may define none."""
    meta = cm.get("metadata") or {}
    name = str(meta.get("name", ""))
    label = str((meta.get("labels") or {}).get(TEAM_LABEL) or "")
    prefix = str((meta.get("annotations") or {}).get(PREFIX_ANNOTATION, "")).strip("/")
    if name in global_configmaps:
        ignored = ""
        if label:
            ignored = (
                f"ConfigMap {name}: label {TEAM_LABEL}={label!r} ignored: "
                "templates.global_configmaps names it, so its templates are global"
            )
        return Owner(prefix, ignored=ignored, ignored_reason=MAP_DIFFERS if ignored else "")
    decision = rule.decide(name, label)
    if not decision.team:
        why = f" ({decision.ignored})" if decision.ignored else ""
        return Owner(
            refused=(
                f"ConfigMap {name} is no team's{why} and not named in "
                "templates.global_configmaps: it may define no templates (the operator names a "
                "team's ConfigMaps in templates.configmap_teams, or lets their label choose with "
                "templates.team_label_configmaps; global ones in templates.global_configmaps)"
            ),
            ignored=decision.ignored,
            ignored_reason=decision.reason,
        )
    own = f"teams/{decision.team}"
    refused = ""
    if prefix and prefix != own and not prefix.startswith(f"{own}/"):
        refused = (
            f"annotation {PREFIX_ANNOTATION}={prefix!r} is outside team {decision.team!r}'s "
            f"templates ({own}/; the team from {decision.source}): a ConfigMap defines only "
            "its own team's templates"
        )
    return Owner(
        prefix or own,
        decision.team,
        refused,
        decision.ignored,
        decision.reason,
    )


def templates_of(
    cm: Mapping[str, Any], *, prefix: str = ""
) -> tuple[dict[str, OverlayTemplate], list[str]]:
    """The templates a ConfigMap provides under ``prefix`` (``owner_of``), and the problems
    with its key names."""
    meta = cm.get("metadata") or {}
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    prefix = prefix.strip("/")
    out: dict[str, OverlayTemplate] = {}
    problems: list[str] = []
    for key, source in sorted((cm.get("data") or {}).items()):
        if not key.endswith(".j2"):
            continue
        tname = key.replace("__", "/")
        if prefix:
            tname = f"{prefix}/{tname}"
        parts = tname.split("/")
        if any(p in ("", ".", "..") for p in parts):
            problems.append(f"key {key!r}: {tname!r} is not a valid template name")
            continue
        out[tname] = OverlayTemplate(str(source), origin=f"configmap {ns}/{name} key {key}")
    return out, problems
