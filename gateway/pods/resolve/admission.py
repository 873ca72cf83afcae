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

Internal to the resolver (``gateway.pods.resolve``): only the resolver module imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.pods.resolution import Unsupported

REASON_DAEMONSET = "DaemonSetRefused"
#: The ``node.daemonsets`` value that runs DaemonSet pods.
RUN = "run"


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
