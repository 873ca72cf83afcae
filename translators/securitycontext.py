"""A container's effective ``securityContext``: the pod's and the container's, merged as the
kubelet merges them (the container's field wins), as the list of restrictions to enforce.

Shared by admission (``gateway.pods.resolve.features``: a field the backend cannot enforce refuses the
pod) and by the translators that map them (Nomad's docker driver: ``docker_task``); the check
that a rendered job really carries each one (``missing_in_docker_task``) keeps a template that
drops one — or a driver that has none, raw_exec — from running the pod silently relaxed.

Field names (what ``Features.security_context`` lists; "request" = what makes it one):

==============================  ============================================================
``runAsUser``                   pod or container ``runAsUser`` set
``runAsGroup``                  pod or container ``runAsGroup`` set
``runAsNonRoot``                ``runAsNonRoot: true``
``readOnlyRootFilesystem``      ``readOnlyRootFilesystem: true``
``capabilities``                ``capabilities.add`` or ``capabilities.drop`` non-empty
``allowPrivilegeEscalation``    ``allowPrivilegeEscalation: false``
``seccompProfile``              ``seccompProfile.type`` set (RuntimeDefault, Unconfined, Localhost)
``fsGroup``                     pod ``fsGroup`` set
``supplementalGroups``          pod ``supplementalGroups`` non-empty
``sysctls``                     pod ``sysctls`` non-empty
``seLinuxOptions``              pod or container ``seLinuxOptions`` set
``appArmorProfile``             pod or container ``appArmorProfile`` set
``procMount``                   container ``procMount`` other than ``Default``
==============================  ============================================================

``privileged`` stays a pod feature (``gateway.pods.resolve.features``); ``windowsOptions`` is ignored
on a Linux node, as the kubelet does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Every field this module knows, in the order of the table above.
FIELDS: tuple[str, ...] = (
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "readOnlyRootFilesystem",
    "capabilities",
    "allowPrivilegeEscalation",
    "seccompProfile",
    "fsGroup",
    "supplementalGroups",
    "sysctls",
    "seLinuxOptions",
    "appArmorProfile",
    "procMount",
)
#: What Nomad's docker driver enforces (``docker_task``).
DOCKER: frozenset[str] = frozenset(FIELDS[:7])
_POD_ONLY = ("fsGroup", "supplementalGroups", "sysctls")
_BOTH = (
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "seccompProfile",
    "seLinuxOptions",
    "appArmorProfile",
)


@dataclass(frozen=True)
class Request:
    """One restriction a container asks for."""

    #: A name of ``FIELDS``.
    feature: str
    #: The pod field that sets it, e.g. ``spec.containers[app].securityContext.runAsUser``.
    where: str
    value: Any


def _is_request(feature: str, value: Any) -> bool:
    if value is None:
        return False
    if feature in ("runAsNonRoot", "readOnlyRootFilesystem"):
        return value is True
    if feature == "allowPrivilegeEscalation":
        return value is False
    if feature == "capabilities":
        return isinstance(value, dict) and bool(value.get("add") or value.get("drop"))
    if feature in ("supplementalGroups", "sysctls"):
        return bool(value)
    if feature == "procMount":
        return bool(value != "Default")
    if feature == "seccompProfile":
        return isinstance(value, dict) and bool(value.get("type"))
    return True


def requests(
    pod_spec: Mapping[str, Any], container: Mapping[str, Any], *, group: str = "containers"
) -> list[Request]:
    """The restrictions ``container`` runs under (pod fields overridden by the container's)."""
    pod_sc = pod_spec.get("securityContext") or {}
    own = container.get("securityContext") or {}
    mine = f"spec.{group}[{container.get('name', '')}].securityContext"
    out: list[Request] = []
    for feature in FIELDS:
        if feature in own and (feature in _BOTH or feature not in _POD_ONLY):
            value, where = own[feature], f"{mine}.{feature}"
        elif feature in pod_sc and (feature in _BOTH or feature in _POD_ONLY):
            value, where = pod_sc[feature], f"spec.securityContext.{feature}"
        else:
            continue
        if _is_request(feature, value):
            out.append(Request(feature, where, value))
    return out


def pod_requests(pod_spec: Mapping[str, Any]) -> list[tuple[str, list[Request]]]:
    """(container name, its requests) for every init and main container."""
    out: list[tuple[str, list[Request]]] = []
    for group in ("initContainers", "containers"):
        for c in pod_spec.get(group) or []:
            out.append((str(c.get("name", "")), requests(pod_spec, c, group=group)))
    return out


# --------------------------------------------------------------------------- docker


def _caps(names: Sequence[Any]) -> list[str]:
    """Kubernetes capability names (``NET_BIND_SERVICE``, ``ALL``) as Nomad's docker driver
    spells them (``net_bind_service``, ``all``)."""
    return [str(n).lower().removeprefix("cap_") for n in names]


def docker_task(reqs: Sequence[Request]) -> dict[str, Any]:
    """Nomad docker task values for ``reqs``: ``user`` (the task's ``User``, "uid[:gid]") and
    the driver options ``readonly_rootfs``, ``cap_add``, ``cap_drop``, ``security_opt``
    (docs/backends/nomad.md, "securityContext").  Every key; empty/False: nothing asked."""
    by = {r.feature: r.value for r in reqs}
    out: dict[str, Any] = {
        "user": "",
        "readonly_rootfs": False,
        "cap_add": [],
        "cap_drop": [],
        "security_opt": [],
    }
    if "runAsUser" in by:
        user = str(by["runAsUser"])
        out["user"] = f"{user}:{by['runAsGroup']}" if "runAsGroup" in by else user
    if by.get("readOnlyRootFilesystem"):
        out["readonly_rootfs"] = True
    caps = by.get("capabilities") or {}
    if caps.get("add"):
        out["cap_add"] = _caps(caps["add"])
    if caps.get("drop"):
        out["cap_drop"] = _caps(caps["drop"])
    opts: list[str] = []
    if by.get("allowPrivilegeEscalation") is False:
        opts.append("no-new-privileges")
    if (by.get("seccompProfile") or {}).get("type") == "Unconfined":
        opts.append("seccomp=unconfined")
    out["security_opt"] = opts
    return out


def missing_in_docker_task(
    task: Mapping[str, Any], reqs: Sequence[Request]
) -> list[tuple[Request, str]]:
    """The requests a rendered Nomad task does not enforce, each with why.

    Checked on the job as rendered, whatever the template: the docker driver with the values
    of ``docker_task`` in its ``Config`` and ``User``; any other driver enforces none."""
    driver = str(task.get("Driver", ""))
    config = task.get("Config") or {}
    user = str(task.get("User") or "")
    opts = [str(o) for o in config.get("security_opt") or []]
    wanted = docker_task(reqs)
    out: list[tuple[Request, str]] = []
    for r in reqs:
        if driver != "docker":
            out.append((r, f"the {driver or 'task'} driver cannot enforce it"))
            continue
        why = _docker_gap(r, wanted=wanted, config=config, user=user, opts=opts)
        if why:
            out.append((r, why))
    return out


def _docker_gap(
    r: Request, *, wanted: Mapping[str, Any], config: Mapping[str, Any], user: str, opts: list[str]
) -> str:
    f, v = r.feature, r.value
    if f in {"runAsUser", "runAsGroup"}:
        if f == "runAsGroup" and not wanted["user"]:
            return "docker sets a group only with a user: set runAsUser too"
        return "" if user == wanted["user"] else "the template does not set the task's User"
    if f == "runAsNonRoot":
        if not wanted["user"]:
            return (
                "vkgate cannot read the image's user before the container runs: "
                "set a non-zero runAsUser"
            )
        if wanted["user"].split(":")[0] == "0":
            return "runAsUser is 0 (root)"
        return "" if user == wanted["user"] else "the template does not set the task's User"
    if f == "readOnlyRootFilesystem":
        return "" if config.get("readonly_rootfs") is True else "the template drops readonly_rootfs"
    if f == "capabilities":
        for key in ("cap_add", "cap_drop"):
            have = {str(c).lower() for c in config.get(key) or []}
            if have != set(wanted[key]):
                return f"the template's {key} is not {wanted[key]}"
        return ""
    if f == "allowPrivilegeEscalation":
        return "" if "no-new-privileges" in opts else "the template drops no-new-privileges"
    if f == "seccompProfile":
        kind = str(v.get("type"))
        if kind == "RuntimeDefault":
            return (
                ""
                if not any(o.startswith("seccomp=") for o in opts)
                else "security_opt overrides it"
            )
        if kind == "Unconfined":
            return "" if "seccomp=unconfined" in opts else "the template drops seccomp=unconfined"
        return f"{kind} profiles are not known on the Nomad clients"
    return "the docker driver cannot enforce it"
