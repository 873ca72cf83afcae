"""The one ``Event`` type of the pod sync: a Kubernetes Event to record about a pod, as data.

Resolution reports Events (``gateway.pods.resolve``: a missing optional key, a relaxed
securityContext, an unreadable pull secret) and a plan records them (``gateway.pods.plan``'s
``Event`` step); both are this type, so a resolution's Events can go into a plan as they are.  It
sits below both, in the bottom layer of the pod sync, and imports nothing.

Internal to the pod sync (``gateway.pods``): its siblings and sub-packages import it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """Record a Kubernetes Event about the pod."""

    type: str
    reason: str
    message: str
    field_path: str = ""
