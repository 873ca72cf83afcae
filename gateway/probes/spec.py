"""A container probe as data: which handler, and the kubelet's timing fields with their API
defaults (``core/v1`` Probe: initialDelaySeconds 0, periodSeconds 10, timeoutSeconds 1,
successThreshold 1, failureThreshold 3)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Kind(enum.StrEnum):
    READINESS = "readiness"
    LIVENESS = "liveness"
    STARTUP = "startup"

    @property
    def field(self) -> str:
        """The container field of this probe kind, e.g. ``readinessProbe``."""
        return f"{self.value}Probe"

    @property
    def label(self) -> str:
        """As the kubelet names it in Events: ``Readiness``."""
        return self.value.capitalize()


#: The handler kinds vkgate runs itself.
HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    kind: Kind
    #: ``exec`` | ``httpGet`` | ``tcpSocket`` | ``grpc``.
    handler: str
    #: The handler's own fields (``command``, ``path``, ``port``, …).
    action: Mapping[str, Any] = field(default_factory=dict)
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def of(cls, kind: Kind, probe: Mapping[str, Any]) -> ProbeSpec | None:
        """The probe, or None when it names no handler (the API server refuses that)."""
        handler = next((h for h in HANDLERS if probe.get(h) is not None), None)
        if handler is None:
            return None
        success = int(probe.get("successThreshold") or 1)
        if kind is not Kind.READINESS:
            success = 1  # the API server insists on 1 for liveness and startup probes
        return cls(
            kind=kind,
            handler=handler,
            action=probe.get(handler) or {},
            initial_delay=float(probe.get("initialDelaySeconds") or 0),
            period=float(probe.get("periodSeconds") or 10),
            timeout=float(probe.get("timeoutSeconds") or 1),
            success_threshold=max(1, success),
            failure_threshold=max(1, int(probe.get("failureThreshold") or 3)),
        )


def probes_of(container: Mapping[str, Any]) -> dict[Kind, ProbeSpec]:
    """The probes a container declares, by kind."""
    out: dict[Kind, ProbeSpec] = {}
    for kind in Kind:
        raw = container.get(kind.field)
        if isinstance(raw, Mapping):
            spec = ProbeSpec.of(kind, raw)
            if spec is not None:
                out[kind] = spec
    return out
