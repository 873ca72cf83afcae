"""The shapes of the raw Kubernetes JSON vkgate reads, as ``TypedDict``s.

vkgate keeps API objects as the JSON the server sent (``gateway/kube/client.py`` explains why: a
round trip through generated models drops fields they do not know).  These types name that
JSON where it flows — the pod cache, the pod controller and its sync, the Resolver, the status
writer and the translators' ``ResolvedPod.pod`` — so mypy checks the keys read.  Every field is
optional (``total=False``): the server omits empty ones, and code must say what it does when a
field is missing.  Sub-objects vkgate reads only through helpers that take ``Mapping[str, Any]``
(probes, security contexts, volume sources) stay ``dict[str, Any]``.

Field names and meanings: the Kubernetes API reference (docs/design/kubelet-contract.md lists
the ones vkgate owes).  Lives in the neutral core because the gateway and the translators both
read pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict, cast

__all__ = [
    "CONTAINER_GROUPS",
    "Container",
    "ContainerGroup",
    "ContainerStatus",
    "Node",
    "ObjectMeta",
    "OwnerReference",
    "Pod",
    "PodSpec",
    "PodStatus",
    "as_node",
    "as_pod",
]


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    finalizers: list[str]
    creationTimestamp: str
    deletionTimestamp: str
    deletionGracePeriodSeconds: int
    managedFields: list[dict[str, Any]]


class Container(TypedDict, total=False):
    name: str
    image: str
    imagePullPolicy: str
    command: list[str]
    args: list[str]
    workingDir: str
    env: list[dict[str, Any]]
    envFrom: list[dict[str, Any]]
    ports: list[dict[str, Any]]
    resources: dict[str, Any]
    resizePolicy: list[dict[str, Any]]
    restartPolicy: str
    volumeMounts: list[dict[str, Any]]
    volumeDevices: list[dict[str, Any]]
    livenessProbe: dict[str, Any]
    readinessProbe: dict[str, Any]
    startupProbe: dict[str, Any]
    lifecycle: dict[str, Any]
    securityContext: dict[str, Any]
    terminationMessagePath: str
    terminationMessagePolicy: str
    stdin: bool
    stdinOnce: bool
    tty: bool
    targetContainerName: str


class PodSpec(TypedDict, total=False):
    containers: list[Container]
    initContainers: list[Container]
    ephemeralContainers: list[Container]
    volumes: list[dict[str, Any]]
    nodeName: str
    nodeSelector: dict[str, str]
    restartPolicy: str
    terminationGracePeriodSeconds: int
    activeDeadlineSeconds: int
    serviceAccountName: str
    serviceAccount: str
    automountServiceAccountToken: bool
    imagePullSecrets: list[dict[str, Any]]
    enableServiceLinks: bool
    hostname: str
    subdomain: str
    hostNetwork: bool
    hostPID: bool
    hostIPC: bool
    shareProcessNamespace: bool
    dnsPolicy: str
    dnsConfig: dict[str, Any]
    hostAliases: list[dict[str, Any]]
    securityContext: dict[str, Any]
    affinity: dict[str, Any]
    tolerations: list[dict[str, Any]]
    priority: int
    priorityClassName: str
    preemptionPolicy: str
    runtimeClassName: str
    schedulerName: str
    overhead: dict[str, str]
    readinessGates: list[dict[str, Any]]
    topologySpreadConstraints: list[dict[str, Any]]
    os: dict[str, Any]
    hostUsers: bool
    schedulingGates: list[dict[str, Any]]
    resourceClaims: list[dict[str, Any]]
    setHostnameAsFQDN: bool


class ContainerStatus(TypedDict, total=False):
    name: str
    image: str
    imageID: str
    containerID: str
    ready: bool
    started: bool
    restartCount: int
    state: dict[str, Any]
    lastState: dict[str, Any]
    resources: dict[str, Any]
    allocatedResources: dict[str, str]


class PodStatus(TypedDict, total=False):
    phase: str
    reason: str
    message: str
    conditions: list[dict[str, Any]]
    hostIP: str
    hostIPs: list[dict[str, str]]
    podIP: str
    podIPs: list[dict[str, str]]
    startTime: str
    qosClass: str
    nominatedNodeName: str
    containerStatuses: list[ContainerStatus]
    initContainerStatuses: list[ContainerStatus]
    ephemeralContainerStatuses: list[ContainerStatus]
    observedGeneration: int


class Pod(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class Node(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]
    status: dict[str, Any]


#: The two container lists of a pod spec, for loops over both (a literal key keeps mypy's
#: TypedDict check: ``spec.get(group)`` is ``list[Container] | None``).
ContainerGroup = Literal["initContainers", "containers"]
CONTAINER_GROUPS: tuple[ContainerGroup, ...] = ("initContainers", "containers")


def as_pod(obj: Mapping[str, Any]) -> Pod:
    """The boundary where JSON the API server sent (a GET, a PATCH answer) becomes a ``Pod``;
    no copy, no check: a missing field is handled where it is read."""
    return cast(Pod, obj)


def as_node(obj: Mapping[str, Any]) -> Node:
    """The boundary where a Node the API server sent becomes a ``Node`` (as ``as_pod``)."""
    return cast(Node, obj)
