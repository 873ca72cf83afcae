"""The team label of every namespace that has one: one list + watch per process.

A pod's team is the operator's ``templates.teams`` map, else its namespace's label
``vkgate.io/team`` where ``templates.team_label_namespaces`` lets that namespace choose
(gateway.inputs.teamrule; the resolver applies the rule, gateway.pods.resolve), and the team
picks the pod's template for good — a submitted pod is never rendered again.  A per-pod GET of the namespace, cached, would answer "no team" for a namespace
that could not be read (forbidden, API slow) or whose label was added after the read: the pod
would get the default template, silently.  So the labels are a cache like the pod cache: a
reflector over ``namespaces?labelSelector=vkgate.io/team``, one for every node of the process,
whose first list is an input of the start-up gate (gateway.inputs, docs/design/startup.md): no
pod is synced before it has loaded, and a label change is seen as soon as the watch delivers it.
Only labelled namespaces are cached (the API server sends DELETED when one loses the label).

A label the rule ignores (the namespace may not choose, or the operator's map names another
team) is a Warning log line when the watch first delivers it, and is counted by ``ignored()``
(the metric ``vkgate_team_labels_ignored``); each pod of such a namespace gets a Warning Event
``TeamLabelIgnored`` when it is resolved.

It needs ``list``/``watch`` on namespaces (docs/design/rbac.md).  An identity that may not
(``system:node:<name>`` under NodeRestriction) sets ``templates.namespace_labels = false`` and
gets teams from ``templates.teams`` only; left on, such a node reports the forbidden list as
``InputsNotSynced`` instead of guessing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from typing import Any

from gateway.inputs.gate import Input
from gateway.inputs.teamrule import TeamRule
from gateway.kube.client import KubeClient
from gateway.kube.reflector import Reflector
from translators.render.engine import TEAM_LABEL
from vkgate_core.clock import Clock, SystemClock

log = logging.getLogger("gateway.inputs.teams")

#: What the start-up gate calls this input.
NAME = "namespace team labels"


class NamespaceTeams:
    """``team(namespace)`` from a live cache of the labelled namespaces."""

    def __init__(
        self, kube: KubeClient, *, clock: Clock | None = None, rule: TeamRule | None = None
    ) -> None:
        """``rule``: the operator's (``TeamRule.namespaces``), for the Warning about a label it
        ignores; None: no warnings (the resolver applies its own rule either way)."""
        self.reflector: Reflector[dict[str, Any]] = Reflector(
            kube,
            "/api/v1/namespaces",
            params={"labelSelector": TEAM_LABEL},
            clock=clock or SystemClock(),
        )
        #: The start-up gate's view of this cache (gateway.inputs).
        self.input = Input.of_reflector(NAME, self.reflector)
        self.rule = rule
        self._task: asyncio.Task[None] | None = None
        #: namespace → the last warning logged about its label (logged once per change).
        self._warned: dict[str, str] = {}

    def team(self, namespace: str) -> str:
        """The namespace's team label; "" when it has none (or before the first list)."""
        ns = self.reflector.store.get(namespace)
        return "" if ns is None else _label(ns)

    async def start(self) -> None:
        """Start listing and watching; returns at once (the gate waits for the first list)."""
        self._task = asyncio.create_task(self.reflector.run(self._changed), name="namespace-teams")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def ignored(self) -> Counter[str]:
        """How many labelled namespaces' labels the rule ignores now, by reason."""
        out: Counter[str] = Counter()
        if self.rule is not None:
            for name in list(self.reflector.store):
                decision = self.rule.decide(name, self.team(name))
                if decision.ignored:
                    out[decision.reason] += 1
        return out

    async def _changed(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """The store is all we read; an ignored label is logged once (per change)."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        if event == "DELETED" or self.rule is None:
            self._warned.pop(name, None)
            return
        ignored = self.rule.decide(name, _label(obj)).ignored
        if ignored and self._warned.get(name) != ignored:
            log.warning("%s", ignored)
        if ignored:
            self._warned[name] = ignored
        else:
            self._warned.pop(name, None)


def _label(ns: dict[str, Any]) -> str:
    return str(((ns.get("metadata") or {}).get("labels") or {}).get(TEAM_LABEL) or "")
