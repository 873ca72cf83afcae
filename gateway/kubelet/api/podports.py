"""Which ports of a pod ``kubectl port-forward`` may reach: the pod's, never its host's.

A kubelet forwards into the pod's own network namespace, so every port there is the pod's.
vkgate dials the pod's address instead (``gateway.kubelet.api.dial``), and with host
networking (``WorkloadState.host_network``: Nomad's ``network_mode = "host"``, Batch) that
address is the host's: a port there may be the Nomad agent's API or another tenant's
service.  So, the one rule (docs/kubelet.md, "Port-forward"):

=================================  ===========================================================
the workload's state               ports forwarded
=================================  ===========================================================
own network namespace              any (the kubelet's behaviour)
host network                       the pod's declared ``containerPort``s (every container:
                                   init containers and sidecars too) and the ports the
                                   backend reserved for it (``WorkloadState.host_ports``)
``pod_ip`` equal to ``host_ip``    as host network, whatever the backend says: the address is
                                   the host's (a kubelet sets ``podIP = hostIP`` for exactly
                                   the ``hostNetwork`` pods)
not known: no state yet (just      the declared ``containerPort``s: until the backend says the
after a restart), or a state for   address is the pod's own, it may be the host's
another address than ``podIP``
=================================  ===========================================================

Any other port is refused on the connection's error stream, in the kubelet's words
(``error forwarding port 8500 to pod default/web, uid …: port 8500 is not declared by the
pod (host network: …)``): the kubelet puts the runtime's reason after the colon, and the
runtime's reason for a port the pod does not serve (``connection refused`` inside the pod's
namespace) would be untrue here — something may well listen on the host.

Internal to ``gateway.kubelet.api``: ``portforward`` asks it once per request, for both the
SPDY and the WebSocket protocol.
"""

from __future__ import annotations

from dataclasses import dataclass

from translators.base import WorkloadState
from vkgate_core.kubetypes import CONTAINER_GROUPS, Pod


@dataclass(frozen=True, slots=True)
class Reach:
    """The ports of one pod's address that are the pod's."""

    #: None: every port (the pod's own network namespace); else only these.
    ports: frozenset[int] | None
    #: Why only these, for the refusal ("host network").
    why: str = ""

    def refusal(self, port: int) -> str:
        """Why ``port`` is not forwarded ("" when it is)."""
        if self.ports is None or port in self.ports:
            return ""
        allowed = ", ".join(str(p) for p in sorted(self.ports)) or "none"
        return f"port {port} is not declared by the pod ({self.why}: {allowed})"


def declared_ports(pod: Pod) -> frozenset[int]:
    """Every ``containerPort`` of the pod's containers, init containers and sidecars
    (ephemeral containers cannot declare ports)."""
    spec = pod.get("spec") or {}
    found: set[int] = set()
    for group in CONTAINER_GROUPS:
        for c in spec.get(group) or []:
            for p in c.get("ports") or []:
                number = p.get("containerPort")
                if isinstance(number, int) and not isinstance(number, bool):
                    found.add(number)
    return frozenset(found)


def reach(pod: Pod, state: WorkloadState | None) -> Reach:
    """The ports port-forward may reach on this pod's address (the module's table).  The
    state speaks for the address only when it reports that address: a state without it (a
    workload being replaced, the pod's status not updated yet) is no state."""
    declared = declared_ports(pod)
    address = str((pod.get("status") or {}).get("podIP") or "")
    if state is None or state.pod_ip != address:
        return Reach(
            declared,
            "its network is not known: until the backend reports the address it runs at, "
            "port-forward reaches only its declared containerPorts",
        )
    if state.host_network or (state.pod_ip and state.pod_ip == state.host_ip):
        return Reach(
            declared | frozenset(state.host_ports),
            "host network: its address is its host's, and port-forward reaches only its "
            "declared containerPorts and the ports reserved for it",
        )
    return Reach(None)
