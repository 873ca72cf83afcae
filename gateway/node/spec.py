"""Pure builders for the Node object: labels, taint, status fields, and the patches we send.

Everything here is data in, data out (no I/O, no clock), so the rules that keep others' data
safe are unit-tested directly:

* **Labels** merge as a map: we patch only our keys whose value differs; labels set by others
  are never in the patch, so they stay.
* **Taints** have no patch-merge key in the Node API (a strategic merge *replaces* the list), so
  we send the server's list with our one taint added/updated, never fewer of others' taints, and
  guard the write with the ``resourceVersion`` it was computed from (409 → re-read, retry).
* **Status**: ``conditions`` and ``addresses`` merge by ``type`` in a strategic merge patch;
  ``capacity``/``allocatable`` merge as maps, so extended resources advertised by others survive.
  A resource *we* advertised earlier and no longer do is removed with ``null``.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from translators.base import Capacity, NodeInfo
from vkgate_core.quantity import QuantityError, format_bytes, format_cpu, parse_quantity

#: Kubernetes minor we speak; kubeletVersion is ``v<this>-vkgate.<vkgate version>`` (semver).
KUBE_VERSION = "1.36.0"
NAMESPACE_UUID = uuid.UUID("6f1c0c52-8a4f-4c0e-9a7d-2f4e7a6b9c10")
#: Load balancers (the cloud service controller, MetalLB, …) leave a Node with this label out
#: of their backend pools: a virtual node has no host that could receive the traffic
#: (docs/design/kubelet-contract.md, "Node object").  Only its presence counts.
EXCLUDE_FROM_LB = "node.kubernetes.io/exclude-from-external-load-balancers"


def vkgate_version() -> str:
    try:
        return metadata.version("vkgate")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0.0.0"


def kubelet_version() -> str:
    return f"v{KUBE_VERSION}-vkgate.{vkgate_version()}"


def machine_id(node_name: str) -> str:
    """Stable per node name: 32 hex digits like /etc/machine-id."""
    return hashlib.sha256(f"vkgate-machine:{node_name}".encode()).hexdigest()[:32]


def system_uuid(node_name: str) -> str:
    return str(uuid.uuid5(NAMESPACE_UUID, node_name))


def node_labels(
    name: str,
    kind: str,
    info: NodeInfo,
    configured: Mapping[str, str],
    *,
    exclude_from_load_balancers: bool = True,
) -> dict[str, str]:
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": info.os,
        "kubernetes.io/arch": info.arch,
        "beta.kubernetes.io/os": info.os,
        "beta.kubernetes.io/arch": info.arch,
        "type": "virtual-kubelet",
        "vkgate.io/backend": kind,
    }
    if exclude_from_load_balancers:
        labels[EXCLUDE_FROM_LB] = "true"
    labels.update(info.labels)
    labels.update(configured)
    return labels


def capacity_map(cap: Capacity | None, overrides: Mapping[str, str]) -> dict[str, str]:
    """Quantities as strings (``16``, ``64Gi``); config overrides win, key by key."""
    out: dict[str, str] = {}
    if cap is not None:
        out["cpu"] = format_cpu(cap.cpu_millis)
        out["memory"] = format_bytes(cap.memory_bytes)
        out["pods"] = str(cap.pods)
        if cap.ephemeral_storage_bytes is not None:
            out["ephemeral-storage"] = format_bytes(cap.ephemeral_storage_bytes)
        for res, n in cap.extended.items():
            out[res] = str(n)
    out.update(overrides)
    return out


@dataclass(frozen=True)
class NodeFacts:
    """Everything the node's status says besides conditions."""

    name: str
    backend_kind: str
    kubelet_port: int
    internal_ip: str
    hostname: str
    info: NodeInfo
    boot_id: str
    capacity: Mapping[str, str] = field(default_factory=dict)

    def addresses(self) -> list[dict[str, str]]:
        return [
            {"type": "InternalIP", "address": self.internal_ip or "127.0.0.1"},
            {"type": "Hostname", "address": self.hostname or self.name},
        ]

    def node_info(self) -> dict[str, str]:
        return {
            "machineID": machine_id(self.name),
            "systemUUID": system_uuid(self.name),
            "bootID": self.boot_id,
            "kernelVersion": self.info.kernel_version or "unknown",
            "osImage": self.info.os_image or f"vkgate {self.backend_kind} backend",
            "containerRuntimeVersion": self.info.runtime_version
            or f"{self.backend_kind}://unknown",
            "kubeletVersion": kubelet_version(),
            "operatingSystem": self.info.os,
            "architecture": self.info.arch,
        }

    def status(self) -> dict[str, Any]:
        """Desired status without conditions."""
        return {
            "capacity": dict(self.capacity),
            "allocatable": dict(self.capacity),
            "addresses": self.addresses(),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port}},
            "nodeInfo": self.node_info(),
        }


def status_differs(
    desired: Mapping[str, Any], current: Mapping[str, Any], stale: Iterable[str] = ()
) -> bool:
    """True when the server's status lacks something we want (our fields only)."""
    for key in ("capacity", "allocatable"):
        have = current.get(key) or {}
        want = desired.get(key) or {}
        if any(not same_quantity(have.get(k), v) for k, v in want.items()):
            return True
        if any(k in have for k in stale):
            return True
    have_addr = {(a.get("type"), a.get("address")) for a in current.get("addresses") or []}
    if any((a["type"], a["address"]) not in have_addr for a in desired["addresses"]):
        return True
    if (current.get("daemonEndpoints") or {}) != desired["daemonEndpoints"]:
        return True
    have_info = current.get("nodeInfo") or {}
    return any(have_info.get(k) != v for k, v in desired["nodeInfo"].items())


def same_quantity(have: Any, want: str) -> bool:
    """The API server stores quantities in canonical form (``2048Mi`` comes back ``2Gi``,
    ``4000m`` as ``4``), so a configured value is compared by amount, not by spelling — else
    every check would see a difference and rewrite the status."""
    if have == want:
        return True
    if not isinstance(have, str):
        return False
    try:
        return parse_quantity(have) == parse_quantity(want)
    except QuantityError:
        return False


def status_patch(
    desired: Mapping[str, Any], conditions: list[dict[str, Any]], stale: Iterable[str] = ()
) -> dict[str, Any]:
    """Strategic merge patch body for ``nodes/<name>/status``."""
    status: dict[str, Any] = {k: v for k, v in desired.items()}
    removed: dict[str, None] = dict.fromkeys(stale)
    status["capacity"] = {**removed, **desired["capacity"]}
    status["allocatable"] = {**removed, **desired["allocatable"]}
    status["conditions"] = conditions
    return {"status": status}


def provider_taint(key: str, value: str, effect: str) -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def merged_taints(
    current: list[dict[str, Any]], ours: dict[str, str] | None, *, remove: dict[str, str] | None
) -> list[dict[str, Any]]:
    """The server's taints with ours set (same key+effect replaced) or, when disabled, our
    exact taint (``remove``) dropped.  Others' taints are always kept, in order."""
    out: list[dict[str, Any]] = []
    placed = False
    for t in current:
        if ours is not None and (t.get("key"), t.get("effect")) == (ours["key"], ours["effect"]):
            if not placed:
                out.append({**t, **ours})
                placed = True
            continue
        if remove is not None and all(t.get(k, "") == v for k, v in remove.items()):
            continue
        out.append(t)
    if ours is not None and not placed:
        out.append(dict(ours))
    return out


def metadata_patch(
    node: Mapping[str, Any],
    labels: Mapping[str, str],
    ours: dict[str, str] | None,
    *,
    remove: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """Strategic merge patch for ``nodes/<name>`` bringing our labels/taint in; None if nothing
    to do.  Carries ``resourceVersion`` when it touches taints (a replace of the whole list)."""
    meta = node.get("metadata") or {}
    have_labels = meta.get("labels") or {}
    patch: dict[str, Any] = {}
    label_patch = {k: v for k, v in labels.items() if have_labels.get(k) != v}
    if label_patch:
        patch.setdefault("metadata", {})["labels"] = label_patch
    current_taints = list((node.get("spec") or {}).get("taints") or [])
    taints = merged_taints(current_taints, ours, remove=remove)
    if _strip_time(taints) != _strip_time(current_taints):
        patch["spec"] = {"taints": taints}
        patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion", "")
    return patch or None


def _strip_time(taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in t.items() if k != "timeAdded"} for t in taints]


def new_node(
    name: str, labels: Mapping[str, str], taint: dict[str, str] | None, status: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"taints": [taint]} if taint else {},
        "status": status,
    }
