"""Who is which team: the operator decides, a label only where the operator lets it.

A team is chosen for two kinds of objects: a pod's namespace (the team picks the pod's
templates and its ``templates.allowed`` patterns) and a template ConfigMap (the team is the
``teams/<team>/`` prefix its templates go under, gateway.templating.source).  Both may carry
the label ``vkgate.io/team`` — but a label is a claim by whoever can write the object: a
namespace owner, anyone who may write ConfigMaps in ``templates.configmap_namespace``.  Left to
choose, a namespace owner who labels the namespace with another team's name gets that team's
templates and allow-lists, and a ConfigMap writer writes another team's templates.  So, for one
object named ``name`` with the label value ``label``:

1. the operator's map (``templates.teams`` for namespaces, ``templates.configmap_teams`` for
   ConfigMaps) decides when it names the object — also over a label that says otherwise;
2. else the label, when the operator lets this object's label choose: ``name`` matches a glob of
   ``templates.team_label_namespaces`` / ``templates.team_label_configmaps`` (default: none);
3. else no team.

A label that does not count is *ignored*, never an error: ``TeamDecision.ignored`` says why, in
words that name the object, the label and the setting, for the Warning the caller reports (a log
line and a metric; an Event on the pod or the ConfigMap).  The rule is pure: no I/O, no state
(docs/design/teams.md).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.config import TemplateSettings
from translators.render.engine import TEAM_LABEL

#: ``TeamDecision.reason`` (a metric label): the object's label names no team the operator
#: lets it name.
NOT_ALLOWED = "not_allowed"
#: The operator's map names another team for the object than its label does (the map wins).
MAP_DIFFERS = "map_differs"


@dataclass(frozen=True, slots=True)
class TeamDecision:
    """The team of one object, where it came from, and why its label was ignored (if so)."""

    team: str = ""
    #: Where ``team`` came from, in words (``vkgate render --explain`` prints it); "" = no team.
    source: str = ""
    #: Why the object's team label was ignored; "" when it has none or it was honoured.
    ignored: str = ""
    #: ``NOT_ALLOWED`` or ``MAP_DIFFERS`` when ``ignored`` is set.
    reason: str = ""


@dataclass(frozen=True)
class TeamRule:
    """The operator's decision for one kind of object (namespaces, or template ConfigMaps)."""

    #: "namespace" or "ConfigMap": how messages name the object.
    kind: str
    #: object name → team: the operator's map, which wins.
    mapped: Mapping[str, str] = field(default_factory=dict)
    #: Globs of object names whose ``vkgate.io/team`` label may choose the team.
    label_globs: Sequence[str] = ()
    #: The settings, named in messages.
    map_setting: str = "templates.teams"
    label_setting: str = "templates.team_label_namespaces"

    @classmethod
    def namespaces(cls, settings: TemplateSettings) -> TeamRule:
        """A pod's team, from its namespace (``templates.teams``, ``team_label_namespaces``)."""
        return cls(
            "namespace",
            dict(settings.teams),
            tuple(settings.team_label_namespaces),
            "templates.teams",
            "templates.team_label_namespaces",
        )

    @classmethod
    def configmaps(cls, settings: TemplateSettings) -> TeamRule:
        """A template ConfigMap's team (``templates.configmap_teams``,
        ``templates.team_label_configmaps``)."""
        return cls(
            "ConfigMap",
            dict(settings.configmap_teams),
            tuple(settings.team_label_configmaps),
            "templates.configmap_teams",
            "templates.team_label_configmaps",
        )

    @property
    def from_map(self) -> str:
        """``TeamDecision.source`` of a team the operator's map gave."""
        return f"the team map in config ({self.map_setting})"

    @property
    def from_label(self) -> str:
        """``TeamDecision.source`` of a team the object's label gave."""
        return f"the {self.kind} label {TEAM_LABEL}"

    def label_allowed(self, name: str) -> bool:
        """May the label of the object ``name`` choose its team?"""
        return any(fnmatch.fnmatchcase(name, g) for g in self.label_globs)

    def decide(self, name: str, label: str) -> TeamDecision:
        """The team of the object ``name`` whose team label is ``label`` ("" = none)."""
        mapped = self.mapped.get(name, "")
        if mapped:
            if label and label != mapped:
                return TeamDecision(
                    mapped,
                    self.from_map,
                    f"{self.kind} {name}: label {TEAM_LABEL}={label!r} ignored: "
                    f"{self.map_setting} makes it team {mapped!r}, and the operator's map wins",
                    MAP_DIFFERS,
                )
            return TeamDecision(mapped, self.from_map)
        if not label:
            return TeamDecision()
        if self.label_allowed(name):
            return TeamDecision(label, self.from_label)
        return TeamDecision(
            ignored=(
                f"{self.kind} {name}: label {TEAM_LABEL}={label!r} ignored: the operator "
                f"decides teams ({self.map_setting}); {self.label_setting} does not let "
                f"{self.kind} {name!r} choose its team by label"
            ),
            reason=NOT_ALLOWED,
        )
