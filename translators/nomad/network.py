"""Pod ports → the job group's ``Networks`` (docs/design/nomad.md, "Pod networking").

Networking (``network_mode``): ``host`` (default) reserves each ``containerPort`` as the same
static port on the client, so ``podIP`` (the client's address) ``:containerPort`` answers and a
taken port keeps the pod Pending with Nomad's placement failure instead of moving it to a random
port; ``bridge`` and ``cni/<name>`` give every job one group network of that mode — one network
namespace and address per allocation, shared by the pod's containers — where only ``hostPort``
reserves anything on the client.  The mode is recorded in ``Meta["vkgate.network"]`` (absent:
host; ``jobs.META_NETWORK``); a ``status.podIP`` fieldRef is refused in the other modes
(``refuse_pod_ip_references``).

Pure functions over the resolved containers; ``jobs.backend_info`` hands their result to the
template.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from translators.base import ResolvedContainer, UnsupportedError
from translators.nomad import literal


def port_label(port: Mapping[str, Any], taken: set[str]) -> str:
    """Port name sanitized to ``[A-Za-z0-9_]`` (else ``p<port>``), unique in the group."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", str(port.get("name") or ""))
    label = name or f"p{port.get('containerPort')}"
    unique, n = label, 2
    while unique in taken:
        unique, n = f"{label}_{n}", n + 1
    taken.add(unique)
    return unique


def networks(
    containers: Sequence[ResolvedContainer], *, mode: str = "host"
) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Group ``Networks`` and the port labels each task exposes (docs/design/nomad.md, "Pod
    networking").

    ``host``: the pod has the client's address, so each ``containerPort`` is reserved as the
    same static port (``ReservedPorts {Value: containerPort, To: containerPort}``): Nomad then
    places the pod only where that port is free, and ``podIP:containerPort`` answers.  A
    ``hostPort`` other than its ``containerPort`` cannot be honoured (the pod has no address of
    its own to put the container port on) and is refused, as Kubernetes refuses it for
    ``hostNetwork`` pods.  No port: no network block (Nomad's default, host).

    ``bridge`` / ``cni/<name>``: always one network of that mode, so the allocation gets its own
    network namespace shared by the pod's containers (localhost between them) and its own
    address; a ``containerPort`` needs nothing on the client.  A ``hostPort`` is a
    ``ReservedPorts {Value: hostPort, To: containerPort}`` entry that Nomad maps from the
    client's address into the allocation, as a kubelet's hostPort does.

    A port number declared twice in one pod (e.g. 53/TCP and 53/UDP) is one reservation: Nomad
    reserves numbers, not protocols.
    """
    own_network = mode != "host"
    reserved: list[dict[str, Any]] = []
    labels: dict[str, list[str]] = {}
    by_value: dict[int, str] = {}
    taken: set[str] = set()
    for c in containers:
        for i, p in enumerate(c.spec.get("ports", []) or []):
            if not p.get("containerPort"):
                continue
            container_port = int(p["containerPort"])
            host_port = int(p.get("hostPort") or 0)
            if own_network and not host_port:
                continue
            if not own_network and host_port and host_port != container_port:
                raise UnsupportedError(
                    f"hostPort {host_port} differs from containerPort {container_port}: with "
                    'backend.nomad.network_mode = "host" the pod has its client\'s address, so '
                    "each containerPort is reserved there as the same port (set hostPort to "
                    'the containerPort or leave it out, or use network_mode = "bridge")',
                    reason="UnsupportedPodFeature",
                    field=f"spec.containers[{c.name}].ports[{i}].hostPort",
                )
            value = host_port or container_port
            label = by_value.get(value)
            if label is None:
                label = by_value[value] = port_label(p, taken)
                reserved.append({"Label": label, "Value": value, "To": container_port})
            if label not in labels.setdefault(c.name, []):
                labels[c.name].append(label)
    if not own_network and not reserved:
        return [], labels
    net: dict[str, Any] = {"Mode": mode}
    if reserved:
        net["ReservedPorts"] = reserved
    return [net], labels


def refuse_pod_ip_references(containers: Iterable[ResolvedContainer], *, mode: str) -> None:
    """With an allocation address (``bridge``/``cni``) a ``status.podIP`` fieldRef cannot be
    resolved: the address exists only once the client sets up the network, and Nomad has no task
    variable for it (``literal.POD_IP_SENTINEL`` can only become the client's address).  The pod
    is refused with the field named rather than given a wrong address."""
    if mode == "host":
        return
    why = (
        f"status.podIP is not known before Nomad places the pod with backend.nomad.network_mode"
        f" = {mode!r} (the allocation's address is assigned on the client and Nomad has no task"
        " variable for it)"
    )
    for c in containers:
        for e in c.env:
            if literal.POD_IP_SENTINEL in e.value:
                raise UnsupportedError(
                    f"{why}; env {e.name} refers to it",
                    reason="UnsupportedPodFeature",
                    field=f"spec.containers[{c.name}].env[{e.name}]",
                )
        for what, values in (("command", c.command), ("args", c.args)):
            if any(literal.POD_IP_SENTINEL in v for v in values):
                raise UnsupportedError(
                    f"{why}; {what} refers to it",
                    reason="UnsupportedPodFeature",
                    field=f"spec.containers[{c.name}].{what}",
                )
