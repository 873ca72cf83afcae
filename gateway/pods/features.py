"""Admission: does the backend support what this pod asks for?  Pure functions.

A virtual kubelet that silently ignores ``hostNetwork: true`` or ``privileged: true`` runs a
workload that is not what the user asked for.  Instead, before a pod is submitted, every
feature it uses is checked against the translator's ``Features``; anything missing makes the
pod ``Failed`` with a reason and a message naming the field — like a kubelet admission
rejection (``OutOfcpu``, ``NodeAffinity``) — plus a Warning Event.

Feature names (what a translator lists in ``Features.pod_features``):

==========================  ====================================================
``hostNetwork``             ``spec.hostNetwork: true``
``hostPID`` / ``hostIPC``   ``spec.hostPID`` / ``spec.hostIPC``
``shareProcessNamespace``   ``spec.shareProcessNamespace: true``
``privileged``              a container's ``securityContext.privileged: true``
``hostPort``                a container port with ``hostPort``
``initContainers``          an init container (``restartPolicy`` unset)
``sidecars``                an init container with ``restartPolicy: Always``
``ephemeralContainers``     ``spec.ephemeralContainers`` (``kubectl debug``)
==========================  ====================================================

Volume kinds are checked by ``gateway.pods.volumes`` (reason ``UnsupportedVolume``).

The securityContext restrictions (``translators.securitycontext``, pod and container fields
merged as the kubelet does) are checked against ``Features.security_context``, the same way and
with the same reason: a restriction the backend cannot enforce fails the pod closed instead of
running it relaxed — unless the node relaxes that field (``Features.relaxed_security_context``),
which the resolver reports as a Warning Event (``REASON_RELAXED``) on every such pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from translators import securitycontext as scmod
from translators.base import Features

REASON_FEATURE = "UnsupportedPodFeature"
REASON_VOLUME = "UnsupportedVolume"
REASON_RELAXED = "SecurityContextRelaxed"


@dataclass(frozen=True)
class Unsupported:
    #: The pod field that asks for it, e.g. ``spec.containers[app].securityContext.privileged``.
    field: str
    #: The feature name (see the table above) or volume kind.
    feature: str
    reason: str
    message: str


def _used_features(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    spec = pod.get("spec") or {}
    used: list[tuple[str, str]] = []
    for flag in ("hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace"):
        if spec.get(flag):
            used.append((flag, f"spec.{flag}"))
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            name = c.get("name", "")
            if (c.get("securityContext") or {}).get("privileged"):
                used.append(("privileged", f"spec.{group}[{name}].securityContext.privileged"))
            for port in c.get("ports") or []:
                if port.get("hostPort"):
                    used.append(("hostPort", f"spec.{group}[{name}].ports.hostPort"))
                    break
    for c in spec.get("initContainers") or []:
        kind = "sidecars" if c.get("restartPolicy") == "Always" else "initContainers"
        used.append((kind, f"spec.initContainers[{c.get('name', '')}]"))
    if spec.get("ephemeralContainers"):
        used.append(("ephemeralContainers", "spec.ephemeralContainers"))
    return used


def check_pod(pod: Mapping[str, Any], features: Features, *, backend: str) -> list[Unsupported]:
    """Everything this pod uses that ``features`` does not declare (first use of each)."""
    out: list[Unsupported] = []
    seen: set[str] = set()
    for feature, where in _used_features(pod):
        if feature in features.pod_features or feature in seen:
            continue
        seen.add(feature)
        out.append(
            Unsupported(
                field=where,
                feature=feature,
                reason=REASON_FEATURE,
                message=f"{where}: {feature} is not supported by the {backend} backend",
            )
        )
    spec = pod.get("spec") or {}
    allowed = features.security_context | features.relaxed_security_context
    for _, reqs in scmod.pod_requests(spec):
        for r in reqs:
            if r.feature in allowed or r.feature in seen:
                continue
            seen.add(r.feature)
            out.append(
                Unsupported(
                    field=r.where,
                    feature=r.feature,
                    reason=REASON_FEATURE,
                    message=(
                        f"{r.where}: the {backend} backend cannot enforce securityContext."
                        f"{r.feature}, and vkgate does not run a pod with a restriction relaxed"
                    ),
                )
            )
    # Main containers only: init containers and sidecars are the features of the same names
    # (Batch runs one container per task and chains init containers as tasks of their own).
    count = len(spec.get("containers") or [])
    if features.max_containers is not None and count > features.max_containers:
        out.append(
            Unsupported(
                field="spec.containers",
                feature="containers",
                reason=REASON_FEATURE,
                message=(
                    f"spec.containers: {count} containers, the {backend} backend "
                    f"supports at most {features.max_containers}"
                ),
            )
        )
    return out


def unsupported_volume(name: str, kind: str, *, backend: str) -> Unsupported:
    return Unsupported(
        field=f"spec.volumes[{name}]",
        feature=kind,
        reason=REASON_VOLUME,
        message=f'volume "{name}": {kind} volumes are not supported by the {backend} backend',
    )


def ephemeral_containers(pod: Mapping[str, Any]) -> list[str]:
    return [
        str(c.get("name", "")) for c in (pod.get("spec") or {}).get("ephemeralContainers") or []
    ]


def relaxed_security(pod: Mapping[str, Any], features: Features) -> list[tuple[str, str]]:
    """(field, feature) of each restriction of ``pod`` the node runs relaxed (first use of
    each feature): what the Warning Events name."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for _, reqs in scmod.pod_requests(pod.get("spec") or {}):
        for r in reqs:
            if r.feature in features.relaxed_security_context and r.feature not in seen:
                seen.add(r.feature)
                out.append((r.where, r.feature))
    return out


def check_probes(
    pod: Mapping[str, Any], features: Features, *, can_exec: bool, backend: str
) -> list[Unsupported]:
    """The probes and lifecycle hooks of ``pod`` vkgate cannot run on this backend."""
    out: list[Unsupported] = []
    spec = pod.get("spec") or {}
    for c in spec.get("containers") or []:
        name = c.get("name", "")
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = c.get(kind) or {}
            for handler in ("httpGet", "tcpSocket", "grpc", "exec"):
                if probe.get(handler) is None:
                    continue
                where = f"spec.containers[{name}].{kind}.{handler}"
                why = None
                if handler == "grpc":
                    why = "grpc probes are not run by vkgate"
                elif handler == "exec" and not can_exec:
                    why = f"exec probes need exec into the container, which the {backend} backend lacks"
                elif (
                    handler in ("httpGet", "tcpSocket")
                    and not features.routable_pod_ip
                    # an explicit host is dialled as it is, like the kubelet does: it needs
                    # no pod address
                    and not (probe.get(handler) or {}).get("host")
                ):
                    why = f"the {backend} backend gives pods no address vkgate can probe"
                if why:
                    out.append(
                        Unsupported(
                            field=where,
                            feature=f"{kind}.{handler}",
                            reason=REASON_FEATURE,
                            message=f"{where}: {why}",
                        )
                    )
        for hook in ("postStart", "preStop"):
            if ((c.get("lifecycle") or {}).get(hook)) is not None:
                where = f"spec.containers[{name}].lifecycle.{hook}"
                out.append(
                    Unsupported(
                        field=where,
                        feature=f"lifecycle.{hook}",
                        reason=REASON_FEATURE,
                        message=f"{where}: lifecycle hooks are not run on the {backend} backend",
                    )
                )
    return out
