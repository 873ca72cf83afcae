"""Container lifecycle hooks as data: which hook a container has, which containers a stop waits
for, and the grace periods — the pure rules, beside the probe spec (``gateway.probes.spec``).

The pod sync's decision (``gateway.pods.decide``) reads them without importing the hook runner
(``gateway.probes.hooks``), which does I/O (Events, exec, HTTP); the runner reads them too
(docs/design/probes.md, "Lifecycle hooks").
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from translators.base import WorkloadState
from vkgate_core.kubetypes import Pod

#: The kubelet gives a container at least this long between SIGTERM and SIGKILL after its
#: preStop hook (``minimumGracePeriodInSeconds``).
MIN_STOP_GRACE = 2
#: The handlers a lifecycle hook may name (``core/v1`` LifecycleHandler).
HANDLERS = ("exec", "httpGet", "sleep", "tcpSocket")


class PreStop(enum.StrEnum):
    """Where a pod's preStop hooks are, as the pod sync reads it (``PodMemory.pre_stop``)."""

    NONE = ""
    RUNNING = "running"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class Hook:
    """One hook of one container: its handler kind and the handler's fields."""

    handler: str
    action: Mapping[str, Any]


def hook_of(container: Mapping[str, Any], which: str) -> Hook | None:
    """The container's ``lifecycle.<which>`` hook (``postStart`` / ``preStop``), if any."""
    raw = (container.get("lifecycle") or {}).get(which)
    if not isinstance(raw, Mapping):
        return None
    handler = next((h for h in HANDLERS if raw.get(h) is not None), None)
    if handler is None:
        return None
    action = raw.get(handler)
    return Hook(handler, action if isinstance(action, Mapping) else {})


def pre_stop_containers(pod: Pod, state: WorkloadState | None) -> list[str]:
    """The running containers of ``pod`` that have a preStop hook (what a stop waits for)."""
    running = {c.name for c in (state.containers if state else ()) if c.state == "running"}
    return [
        str(c.get("name", ""))
        for c in (pod.get("spec") or {}).get("containers") or []
        if c.get("name") in running and hook_of(c, "preStop") is not None
    ]


def grace_of(pod: Pod) -> float:
    """The grace period of a kill that is not a deletion: ``terminationGracePeriodSeconds``."""
    spec = pod.get("spec") or {}
    grace = spec.get("terminationGracePeriodSeconds")
    return float(30 if grace is None else grace)
