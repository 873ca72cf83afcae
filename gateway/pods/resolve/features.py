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

Volume kinds are checked by ``gateway.pods.resolve.volumes`` (reason ``UnsupportedVolume``).

The securityContext restrictions (``translators.securitycontext``, pod and container fields
merged as the kubelet does) are checked against ``Features.security_context``, the same way and
with the same reason: a restriction the backend cannot enforce fails the pod closed instead of
running it relaxed — unless the node relaxes that field (``Features.relaxed_security_context``),
which the resolver reports as a Warning Event (``REASON_RELAXED``) on every such pod.

Probes and lifecycle hooks (``check_probes``) a backend cannot honour are refused the same way,
unless the node lists the field in ``node.ignore_pod_fields``: then the pod runs without that
probe or hook (the prober skips it) and carries a Warning Event (``REASON_IGNORED``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gateway.pods.resolution import Unsupported
from translators import securitycontext as scmod
from translators.base import Features

REASON_FEATURE = "UnsupportedPodFeature"
REASON_VOLUME = "UnsupportedVolume"
REASON_RELAXED = "SecurityContextRelaxed"
#: A probe or hook the backend cannot honour, run without because the node says so
#: (``node.ignore_pod_fields``): a Warning Event instead of ``UnsupportedPodFeature``.
REASON_IGNORED = "PodFieldIgnored"


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
    """The probes and lifecycle hooks of ``pod`` vkgate cannot run on this backend.

    ``feature`` is ``<probe kind>.<handler>`` (``readinessProbe.exec``) or
    ``lifecycle.<hook>.<handler>`` (``lifecycle.preStop.exec``): the names
    ``node.ignore_pod_fields`` matches (``ignored``).

    Hooks run in the gateway (``gateway.probes.hooks``): ``exec`` needs the translator's
    ``Executor``, ``httpGet`` a pod address vkgate can dial (unless it names its ``host``);
    ``sleep`` needs neither — but a backend with neither exec nor a pod address runs no
    hook at all (``_hook_refused``)."""
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
                if handler == "exec" and not can_exec:
                    why = f"exec probes need exec into the container, which the {backend} backend lacks"
                elif (
                    handler != "exec"
                    and not features.routable_pod_ip
                    # an explicit host is dialled as it is, like the kubelet does: it needs
                    # no pod address (a grpc probe has no host field)
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
            action = (c.get("lifecycle") or {}).get(hook)
            if action is None:
                continue
            where = f"spec.containers[{name}].lifecycle.{hook}"
            handler = next((h for h in action if action.get(h) is not None), "")
            why = _hook_refused(handler, action.get(handler) or {}, features, can_exec, backend)
            if why:
                out.append(
                    Unsupported(
                        field=where,
                        feature=f"lifecycle.{hook}.{handler}" if handler else f"lifecycle.{hook}",
                        reason=REASON_FEATURE,
                        message=f"{where}: {why}",
                    )
                )
    return out


def _hook_refused(
    handler: str, action: Mapping[str, Any], features: Features, can_exec: bool, backend: str
) -> str | None:
    """Why vkgate cannot run this hook handler on the backend (None: it runs it,
    ``gateway.probes.hooks``)."""
    if not can_exec and not features.routable_pod_ip:
        # no way into the container at all (Azure Batch): no hook is run there, a sleep
        # included — a pod that asks for one is refused rather than half-honoured
        return (
            f"lifecycle hooks are not run on the {backend} backend (no exec into the "
            "container, no pod address vkgate can reach)"
        )
    if handler == "exec" and not can_exec:
        return f"exec hooks need exec into the container, which the {backend} backend lacks"
    if handler == "httpGet" and not features.routable_pod_ip and not action.get("host"):
        return f"the {backend} backend gives pods no address vkgate can reach"
    return None  # sleep runs anywhere; tcpSocket fails at run time, as in the kubelet


def ignored_by(feature: str, ignore: Collection[str]) -> str | None:
    """The ``node.ignore_pod_fields`` entry that covers ``feature`` (the entry itself or a
    prefix of it: ``readinessProbe`` covers ``readinessProbe.exec``), or None."""
    for entry in ignore:
        if feature == entry or feature.startswith(entry + "."):
            return entry
    return None


def partition_ignored(
    found: list[Unsupported], ignore: Collection[str]
) -> tuple[list[Unsupported], list[Unsupported]]:
    """``found`` (``check_probes``) split into (refused, ignored by the node's setting)."""
    refused: list[Unsupported] = []
    ignored: list[Unsupported] = []
    for u in found:
        (ignored if ignored_by(u.feature, ignore) else refused).append(u)
    return refused, ignored


def ignored_message(u: Unsupported, ignore: Collection[str]) -> str:
    """The Warning Event (``REASON_IGNORED``) for a probe or hook the node runs without."""
    why = u.message.removeprefix(f"{u.field}: ")
    return (
        f"{u.field}: ignored, this pod runs without it: {why} (node.ignore_pod_fields lists "
        f"{ignored_by(u.feature, ignore)!r}; without that the pod would be refused)"
    )


def _how(handler: str, backend: str) -> str:
    match handler:
        case "exec":
            return f"the command through the {backend} backend's exec (as kubectl exec)"
        case "httpGet" | "tcpSocket":
            return f"{handler} straight to its host or the pod's address"
        case "grpc":
            return "grpc.health.v1.Health/Check straight to the pod's address"
        case "sleep":
            return "a timer in vkgate"
    return handler


def not_carried(
    pod: Mapping[str, Any],
    features: Features,
    *,
    can_exec: bool,
    backend: str,
    ignore: Collection[str] = (),
) -> list[tuple[str, str]]:
    """(field, fate) of every probe and lifecycle hook of ``pod``: fields no backend spec
    carries (the kubelet runs them itself; so does vkgate where it can) — run by vkgate, run
    without (``node.ignore_pod_fields``), or refused (``vkgate render --explain``)."""
    found = {u.field: u for u in check_probes(pod, features, can_exec=can_exec, backend=backend)}
    out: list[tuple[str, str]] = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        name = c.get("name", "")
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = c.get(kind) or {}
            for handler in ("httpGet", "tcpSocket", "grpc", "exec"):
                if probe.get(handler) is None:
                    continue
                where = f"spec.containers[{name}].{kind}.{handler}"
                out.append((where, _fate(found.get(where), handler, ignore, backend, "prober")))
        for hook in ("postStart", "preStop"):
            action = (c.get("lifecycle") or {}).get(hook)
            if action is None:
                continue
            where = f"spec.containers[{name}].lifecycle.{hook}"
            handler = next((h for h in action if action.get(h) is not None), "")
            out.append((where, _fate(found.get(where), handler, ignore, backend, "pod sync")))
    return out


def _fate(
    u: Unsupported | None, handler: str, ignore: Collection[str], backend: str, runner: str
) -> str:
    if u is None:
        return f"not in the {backend} spec: run by vkgate's {runner}: {_how(handler, backend)}"
    entry = ignored_by(u.feature, ignore)
    why = u.message.removeprefix(f"{u.field}: ")
    if entry is not None:
        return (
            f"ignored by this node (node.ignore_pod_fields: {entry!r}): the pod runs without "
            f"it, with a Warning Event {REASON_IGNORED} ({why})"
        )
    return f"refused ({u.reason}): {why}"


def catalogue(
    features: Features, *, can_exec: bool, backend: str, ignore: Collection[str] = ()
) -> list[tuple[str, str]]:
    """(field, fate) of every probe kind and handler, and every hook and handler, on this backend
    (``vkgate templates check``)."""
    out: list[tuple[str, str]] = []
    containers: list[dict[str, Any]] = []
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        for handler in ("exec", "httpGet", "tcpSocket", "grpc"):
            containers.append({"name": "c", kind: {handler: {}}})
    for hook in ("postStart", "preStop"):
        for handler in ("exec", "httpGet", "sleep"):
            containers.append({"name": "c", "lifecycle": {hook: {handler: {}}}})
    for c in containers:
        pod = {"spec": {"containers": [c]}}
        for where, fate in not_carried(
            pod, features, can_exec=can_exec, backend=backend, ignore=ignore
        ):
            field = where.removeprefix("spec.containers[c].")
            if "lifecycle." in field:
                field += "." + next(iter(c["lifecycle"][field.rsplit(".", 1)[1]]))
            out.append((field, fate))
    return out
