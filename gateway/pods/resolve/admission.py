"""Node admission by policy: pods this node declines because of its own settings, whatever the
backend could do.  Pure functions; ``Resolver.admission`` puts them before the backend's
feature checks (``gateway.pods.resolve.features``), so a refused pod is never submitted.

**DaemonSet pods** (``node.daemonsets``, docs/design/kubelet-contract.md, "DaemonSets").  A
DaemonSet that tolerates every taint (log shippers, kube-proxy, CSI node plugins, monitoring
agents do) gets a pod on every node, the virtual one included.  Such a pod is a per-host agent:
on a virtual node it would run as one more backend workload on some backend host, watching or
serving nothing of the node it claims to be on.

==========  ==================================================================================
``refuse``  (default) the pod is ``Failed`` at once with reason ``DaemonSetRefused`` and a
            Warning Event naming ``metadata.ownerReferences`` — a kubelet admission rejection.
            The DaemonSet controller deletes a failed daemon pod and creates the next one after
            a per-node backoff that doubles from 1 s up to 15 min (its ``failedPodsBackoff``),
            so the refusal costs a handful of pods in the first minutes, then four an hour
            per DaemonSet, never a hot loop.
``run``     run it like any other pod (its other fields are still checked).
==========  ==================================================================================

The common practice is to keep DaemonSets off virtual nodes in the first place: a required
node affinity ``type NotIn [virtual-kubelet]`` in the DaemonSet's pod template (every virtual
kubelet labels its Node ``type=virtual-kubelet``); the DaemonSet controller then never creates
the pod.

**Probe requests** (``probe_requests``; docs/design/probes.md, "What a probe may send, and
where").  vkgate's prober dials from the agent, which holds the backend's token and reaches
what the pods cannot; a probe is the pod author's string put on a socket.  So, for every
``httpGet``/``tcpSocket`` probe and ``httpGet`` lifecycle hook, the pod is refused, naming the
field:

* with reason ``InvalidProbeRequest`` when a path, header name or header value breaks the rules
  of Go's HTTP client, which the kubelet's prober uses (``gateway.probes.wire``: a CR or LF
  would end the request and start another one);
* with reason ``ProbeHostRefused`` when its ``host`` is not the pod's own address (the kubelet
  dials ``host`` from the node; from vkgate that is the agent's network: the backend's API, the
  agent itself, other tenants), unless the node allows it (``probes.allow_host``).

Internal to the resolver (``gateway.pods.resolve``): only the resolver module imports it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gateway.pods.resolution import Unsupported
from gateway.probes import wire

REASON_DAEMONSET = "DaemonSetRefused"
#: The ``node.daemonsets`` value that runs DaemonSet pods.
RUN = "run"
#: A probe or hook whose request an HTTP client must not send (``gateway.probes.wire``).
REASON_PROBE_REQUEST = "InvalidProbeRequest"
#: A probe or hook that dials a host other than the pod's own address (``probes.allow_host``).
REASON_PROBE_HOST = "ProbeHostRefused"
#: The probe kinds, and the handlers of a probe or of a lifecycle hook that vkgate dials (a
#: ``tcpSocket`` hook is never dialled: it fails at run time, as in the kubelet; a ``grpc``
#: probe has no host and sends no pod string on the wire but its ``service``, as protobuf).
PROBE_KINDS = ("startupProbe", "readinessProbe", "livenessProbe")
PROBE_DIALLED = ("httpGet", "tcpSocket")
HOOK_DIALLED = ("httpGet",)
_GO_REFUSES = (
    "the kubelet's HTTP client (Go's net/http) refuses to send such a request, and so does vkgate"
)


def daemonset_owner(pod: Mapping[str, Any]) -> str | None:
    """The name of the DaemonSet controlling ``pod``, or None."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if (
            ref.get("kind") == "DaemonSet"
            and str(ref.get("apiVersion", "")).startswith("apps/")
            and ref.get("controller")
        ):
            return str(ref.get("name", ""))
    return None


def node_policy(pod: Mapping[str, Any], *, daemonsets: str) -> list[Unsupported]:
    """What this node's settings refuse of ``pod`` (empty: nothing)."""
    owner = daemonset_owner(pod)
    if owner is None or daemonsets == RUN:
        return []
    ns = str((pod.get("metadata") or {}).get("namespace", ""))
    field = f"metadata.ownerReferences[DaemonSet/{owner}]"
    return [
        Unsupported(
            field=field,
            feature="DaemonSet",
            reason=REASON_DAEMONSET,
            message=(
                f"{field}: this virtual node does not run DaemonSet pods (node.daemonsets = "
                f'"{daemonsets}"): a DaemonSet pod is a per-host agent and a virtual node has no '
                f"host of its own; keep DaemonSet {ns}/{owner} off virtual nodes with a node "
                "affinity excluding type=virtual-kubelet"
            ),
        )
    ]


def _dialled(pod: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(field, handler, action) of every probe and lifecycle hook of ``pod`` that vkgate
    dials, init containers' (sidecars') included."""
    spec = pod.get("spec") or {}
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            base = f"spec.{group}[{c.get('name', '')}]"
            for kind in PROBE_KINDS:
                probe = c.get(kind) or {}
                for handler in PROBE_DIALLED:
                    action = probe.get(handler)
                    if isinstance(action, Mapping):
                        yield f"{base}.{kind}.{handler}", handler, action
            for hook in ("postStart", "preStop"):
                hook_action = (c.get("lifecycle") or {}).get(hook) or {}
                for handler in HOOK_DIALLED:
                    action = hook_action.get(handler)
                    if isinstance(action, Mapping):
                        yield f"{base}.lifecycle.{hook}.{handler}", handler, action


def own_addresses(pod: Mapping[str, Any]) -> set[str]:
    """The pod's own addresses as its status has them (none before it first ran)."""
    status = pod.get("status") or {}
    out = {str(x.get("ip")) for x in status.get("podIPs") or [] if x.get("ip")}
    if status.get("podIP"):
        out.add(str(status["podIP"]))
    return out


def probe_requests(pod: Mapping[str, Any], *, allow_host: bool) -> list[Unsupported]:
    """The probe and hook requests of ``pod`` this node does not send (see the module doc):
    one refusal per offending field; ``allow_host`` is ``probes.allow_host``."""
    out: list[Unsupported] = []
    own = own_addresses(pod)
    for where, handler, action in _dialled(pod):
        bad = wire.problems(handler, action)
        for r in bad:
            field = f"{where}.{r.field}"
            why = r.why if r.field == "host" else f"{r.why}; {_GO_REFUSES}"
            out.append(
                Unsupported(
                    field=field,
                    feature=handler,
                    reason=REASON_PROBE_REQUEST,
                    message=f"{field}: {why}",
                )
            )
        host = str(action.get("host") or "")
        if not host or allow_host or host in own or any(r.field == "host" for r in bad):
            continue
        field = f"{where}.host"
        out.append(
            Unsupported(
                field=field,
                feature="probes.allow_host",
                reason=REASON_PROBE_HOST,
                message=(
                    f"{field}: {host!r} is not the pod's own address, and this node dials "
                    "probes and hooks only at the pod (probes.allow_host = false); leave host "
                    "empty and name a virtual host with a Host header in httpHeaders"
                ),
            )
        )
    return out
