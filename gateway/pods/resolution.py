"""What resolving a pod found, as data: the ``Resolution`` the resolver returns and decide reads.

The resolver (``gateway.pods.resolve``) reads the cluster; decide (``gateway.pods.decide``) is a
pure function that must not import it.  The data that passes between them — the resolved pod,
the Events to record, why a container cannot start, the fields the node refuses
(``Unsupported``) — therefore lives here, below both, like the plan's steps
(``gateway.pods.plan``): act hands a ``Resolution`` from one to the other
(docs/design/pod-sync.md).

Internal to the pod sync (``gateway.pods``): its siblings and sub-packages import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.pods.events import Event
from translators.base import ResolvedPod


@dataclass(frozen=True)
class Unsupported:
    """A pod field the node refuses: a feature or volume kind the backend lacks, or the node's
    policy (``gateway.pods.resolve.features``, ``gateway.pods.resolve.admission``)."""

    #: The pod field that asks for it, e.g. ``spec.containers[app].securityContext.privileged``.
    field: str
    #: The feature name (the table of ``gateway.pods.resolve.features``) or volume kind.
    feature: str
    reason: str
    message: str


@dataclass
class Resolution:
    """The outcome of resolving one pod."""

    pod: ResolvedPod | None = None
    events: list[Event] = field(default_factory=list)
    #: container -> (waiting reason, message) for containers that cannot be created.
    waiting: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: FailedMount message (a mandatory volume source is missing).
    mount_error: str = ""
    unsupported: list[Unsupported] = field(default_factory=list)
    #: Hash of everything resolved (env values, files): changes mean "the backend may need an
    #: update" even when the pod spec did not change (a referenced ConfigMap changed).
    fingerprint: str = ""

    @property
    def blocked(self) -> bool:
        return bool(self.waiting or self.mount_error or self.unsupported)
