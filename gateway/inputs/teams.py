"""The team label of every namespace that has one: one list + watch per process.

A pod's team is its namespace's label ``vkgate.io/team`` (else ``templates.teams``,
gateway.pods.resolve), and the team picks the pod's template for good — a submitted pod is never
rendered again.  A per-pod GET of the namespace, cached, would answer "no team" for a namespace
that could not be read (forbidden, API slow) or whose label was added after the read: the pod
would get the default template, silently.  So the labels are a cache like the pod cache: a
reflector over ``namespaces?labelSelector=vkgate.io/team``, one for every node of the process,
whose first list is an input of the start-up gate (gateway.inputs, docs/design/startup.md): no
pod is synced before it has loaded, and a label change is seen as soon as the watch delivers it.
Only labelled namespaces are cached (the API server sends DELETED when one loses the label).

It needs ``list``/``watch`` on namespaces (docs/design/rbac.md).  An identity that may not
(``system:node:<name>`` under NodeRestriction) sets ``templates.namespace_labels = false`` and
gets teams from ``templates.teams`` only; left on, such a node reports the forbidden list as
``InputsNotSynced`` instead of guessing.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from gateway.inputs.gate import Input
from gateway.kube.client import KubeClient
from gateway.kube.reflector import Reflector
from translators.render.engine import TEAM_LABEL
from vkgate_core.clock import Clock, SystemClock

#: What the start-up gate calls this input.
NAME = "namespace team labels"


class NamespaceTeams:
    """``team(namespace)`` from a live cache of the labelled namespaces."""

    def __init__(self, kube: KubeClient, *, clock: Clock | None = None) -> None:
        self.reflector: Reflector[dict[str, Any]] = Reflector(
            kube,
            "/api/v1/namespaces",
            params={"labelSelector": TEAM_LABEL},
            clock=clock or SystemClock(),
        )
        #: The start-up gate's view of this cache (gateway.inputs).
        self.input = Input.of_reflector(NAME, self.reflector)
        self._task: asyncio.Task[None] | None = None

    def team(self, namespace: str) -> str:
        """The namespace's team label; "" when it has none (or before the first list)."""
        ns = self.reflector.store.get(namespace)
        if ns is None:
            return ""
        return str(((ns.get("metadata") or {}).get("labels") or {}).get(TEAM_LABEL) or "")

    async def start(self) -> None:
        """Start listing and watching; returns at once (the gate waits for the first list)."""
        self._task = asyncio.create_task(self.reflector.run(self._ignore), name="namespace-teams")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @staticmethod
    async def _ignore(event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """The store is all we read; nothing to do per event."""
