"""What each Nomad call needs from vkgate's ACL token: one table of every endpoint vkgate calls.

Every request the Nomad client sends — plain calls, blocking queries, the event stream, log
streams, the exec WebSocket — is looked up here first (``endpoint_for``).  A path with no entry
raises ``UnlistedEndpoint``: a new call cannot ship without saying what it needs, because the
first test that exercises it fails.  The same table

* names what is missing when Nomad answers ``Permission denied`` (``Endpoint.refusal``), so a
  403 reads ``nomad GET /v1/jobs: 403 Permission denied (needs namespace "default" capability
  list-jobs)`` on the Node's Ready condition and in the pod's Events;
* is compared both ways with the policy vkgate ships, deploy/nomad/vkgate-policy.hcl (no call
  without a grant, no grant that no call needs: tests/unit/translators/nomad/test_nomad_acl.py);
* marks the endpoints a node cannot run pods without (``essential``); ``access.py`` probes
  those, and a refusal there makes the virtual node NotReady.

Requirements are Nomad 1.6's "ACL Required" column of each endpoint, checked against the v1.6.3
source (docs/design/nomad.md, "ACL").  A ``Need`` is all-of across an endpoint's ``needs``;
``alternatives`` are any-of within one need (logs accept ``read-logs`` or ``read-fs``);
``when`` marks a need that only some calls have (exec into a task without filesystem
isolation, e.g. raw_exec, also needs ``alloc-node-exec``; registering a job that mounts a host
volume also needs ``host_volume`` write, one that claims a CSI volume ``csi-mount-volume``:
Nomad 1.6's Job.Register checks each group volume after ``submit-job``, docs/design/nomad.md,
"ACL", and docs/backends/nomad.md, "The ACL policy").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "ENDPOINTS",
    "HOST_VOLUMES",
    "VARIABLES_PATH",
    "Endpoint",
    "Need",
    "Refusals",
    "UnlistedEndpoint",
    "endpoint_for",
]


class UnlistedEndpoint(LookupError):
    """A Nomad call that the endpoint table does not list (a programming error)."""


@dataclass(frozen=True)
class Need:
    """One ACL grant a call needs: a namespace capability, a capability on the namespace's
    ``variables { path "nomad/jobs/*" }``, ``node { policy = "read" }``, or a policy on
    ``host_volume "*"`` (``HOST_VOLUMES``: any name, since the volume is the pod's claim's)."""

    capability: str
    #: "namespace" | "node" | "variables" (``VARIABLES_PATH``) | "host_volume" (``HOST_VOLUMES``)
    scope: str = "namespace"
    alternatives: tuple[str, ...] = ()
    when: str = ""

    def describe(self, namespace: str) -> str:
        if self.scope == "node":
            return f'node policy "{self.capability}"'
        if self.scope == "host_volume":
            text = f'host_volume "{HOST_VOLUMES}" policy {self.capability}'
            return text + (f" {self.when}" if self.when else "")
        if self.scope == "variables":
            where = (
                "every namespace vkgate uses"
                if namespace == "*"
                else f'namespace "{namespace or "default"}"'
            )
            return f'variables path "{VARIABLES_PATH}" capability {self.capability} in {where}'
        caps = " or ".join((self.capability, *self.alternatives))
        if namespace == "*":
            text = f"capability {caps} in every namespace vkgate uses"
        else:
            text = f'namespace "{namespace or "default"}" capability {caps}'
        return text + (f" {self.when}" if self.when else "")


@dataclass(frozen=True)
class Endpoint:
    """One Nomad HTTP endpoint: method, path in Nomad's notation (``/job/:job_id``), needs."""

    method: str
    path: str
    needs: tuple[Need, ...]
    purpose: str
    #: A node cannot run pods when this is refused (``access.py`` probes these).
    essential: bool = False
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        regex = re.sub(r":[a-z_]+", "[^/]+", re.escape(self.path))
        object.__setattr__(self, "pattern", re.compile(f"^{regex}$"))

    def refusal(self, namespace: str) -> str:
        """``needs …`` for a ``Permission denied`` answer (empty when no ACL is needed)."""
        if not self.needs:
            return ""
        return "needs " + ", and ".join(n.describe(namespace) for n in self.needs)


def _ns(capability: str, *alternatives: str, when: str = "") -> Need:
    return Need(capability, alternatives=alternatives, when=when)


NODE_READ = Need("read", scope="node")
#: The jobs' own Variables (``variables.variable_path``): a namespace's ``variables`` block.
VARIABLES_PATH = "nomad/jobs/*"
NO_FS_ISOLATION = "for a task without filesystem isolation, e.g. raw_exec"
#: The host volumes a job may mount: a pod's claim names any client ``host_volume``.
HOST_VOLUMES = "*"
#: Registering a job with a group volume (Nomad 1.6 Job.Register; a read-only host volume
#: would do with policy "read", but a claim mounted read-write needs "write").
HOST_VOLUME_WRITE = Need("write", scope="host_volume", when="for a job that mounts a host volume")
CSI_MOUNT = _ns("csi-mount-volume", when="for a job that claims a CSI volume")

#: Every endpoint vkgate calls.  Paths are relative to ``/v1``.
ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("GET", "/status/leader", (), "health: the region has a leader"),
    Endpoint("GET", "/agent/health", (), "health: the agent vkgate talks to is healthy"),
    Endpoint("GET", "/jobs", (_ns("list-jobs"),), "list vkgate's jobs", essential=True),
    Endpoint(
        "POST",
        "/jobs",
        (_ns("submit-job"), HOST_VOLUME_WRITE, CSI_MOUNT),
        "register a pod's job",
        essential=True,
    ),
    Endpoint("GET", "/job/:job_id", (_ns("read-job"),), "read one job", essential=True),
    Endpoint("DELETE", "/job/:job_id", (_ns("submit-job"),), "stop / purge a job", essential=True),
    Endpoint(
        "POST",
        "/job/:job_id/plan",
        (_ns("submit-job"),),
        "access probe: may the token submit jobs (a dry run, nothing is registered)",
        essential=True,
    ),
    Endpoint(
        "GET",
        "/job/:job_id/allocations",
        (_ns("read-job"),),
        "a job's allocations",
        essential=True,
    ),
    Endpoint(
        "GET", "/evaluations", (_ns("read-job"),), "why jobs are not placed (blocked evaluations)"
    ),
    Endpoint(
        "GET", "/allocations", (_ns("read-job"),), "all allocations (backstop)", essential=True
    ),
    Endpoint("GET", "/allocation/:alloc_id", (_ns("read-job"),), "one allocation"),
    Endpoint(
        "GET",
        "/event/stream",
        (_ns("read-job"),),
        "event stream, topics Job, Allocation, Evaluation",
    ),
    Endpoint(
        "PUT",
        "/var/nomad/jobs/:job_id",
        (Need("write", scope="variables"),),
        "write a job's Variable (the pod's files and Secret env) before it is registered",
    ),
    Endpoint(
        "DELETE",
        "/var/nomad/jobs/:job_id",
        (Need("destroy", scope="variables"),),
        "remove a job's Variable when the job is purged",
    ),
    Endpoint("GET", "/nodes", (NODE_READ,), "capacity and node addresses"),
    Endpoint(
        "GET",
        "/node/:node_id",
        (NODE_READ,),
        "node info (versions, OS); the client agent's HTTP address an exec goes to",
    ),
    Endpoint(
        "POST",
        "/client/allocation/:alloc_id/signal",
        (_ns("alloc-lifecycle"),),
        "SIGKILL when a delete's grace is shorter than the task's kill timeout",
    ),
    Endpoint(
        "POST",
        "/client/allocation/:alloc_id/restart",
        (_ns("alloc-lifecycle"),),
        "restart a container whose liveness or startup probe failed",
    ),
    Endpoint(
        "GET",
        "/client/allocation/:alloc_id/stats",
        (_ns("read-job"),),
        "metrics: allocation CPU and memory",
    ),
    Endpoint(
        "GET",
        "/client/allocation/:alloc_id/exec",
        (_ns("alloc-exec"), _ns("alloc-node-exec", when=NO_FS_ISOLATION)),
        "kubectl exec (WebSocket)",
    ),
    Endpoint(
        "GET",
        "/client/fs/logs/:alloc_id",
        (_ns("read-logs", "read-fs"),),
        "kubectl logs",
    ),
    Endpoint(
        "GET",
        "/client/fs/ls/:alloc_id",
        (_ns("read-fs"),),
        "log file sizes: exact --tail with -f, --previous windows",
    ),
)


def endpoint_for(method: str, path: str) -> Endpoint:
    """The table entry of one call (``path`` relative to ``/v1``, no query)."""
    for ep in ENDPOINTS:
        if ep.method == method and ep.pattern.match(path):
            return ep
    raise UnlistedEndpoint(
        f"nomad {method} /v1{path} is not in translators/nomad/acl.py ENDPOINTS: add it with"
        " the ACL it needs (and grant that in deploy/nomad/vkgate-policy.hcl)"
    )


class Refusals:
    """ACL refusals seen on real calls, per (capability, namespace), each kept until a call
    that needs the same grant in the same namespace succeeds.  Only endpoints with exactly
    one need are attributed (exec's refusal may be either of its two), except that a job's
    register (``submit-job``, and a volume grant only when the job has volumes) is attributed
    to ``submit-job``: the access probe's plan then asks again, and clears it when the token
    may submit.  A success clears only the needs every call of the endpoint has (``when``
    empty): a job without volumes says nothing of the volume grants."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], str] = {}

    def refused(self, endpoint: Endpoint, namespace: str, message: str) -> None:
        needs = endpoint.needs
        if len(needs) == 1 or (needs and needs[0].capability == "submit-job"):
            self._seen[(endpoint.needs[0].capability, namespace)] = message

    def allowed(self, endpoint: Endpoint, namespace: str) -> None:
        for need in endpoint.needs:
            if not need.when:
                self._seen.pop((need.capability, namespace), None)

    def get(self, capability: str, namespace: str) -> str | None:
        """The last refusal of ``capability`` in ``namespace`` still standing, if any."""
        return self._seen.get((capability, namespace))
