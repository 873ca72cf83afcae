"""Pod → Nomad job: identity, the numbers a template needs, rendering, and the safety checks.

The job itself is written by a template (``templates/nomad/job.j2``, or ``raw_exec.j2`` which
extends it) because that is what operators edit.  Everything that is arithmetic or policy and
therefore deserves unit tests is computed here and handed to the template as
``backend_info``: the job ID, MHz and MiB, port labels, constraints, restart policy, template
blocks for volume files.  After rendering, ``render_job`` re-asserts what a template must not
break: the job ID, the ownership ``Meta`` and that no secret value ended up in ``Meta``.

Identity
    ``ID = <job_prefix><namespace>-<name>-<uid[:8]>``.  The UID suffix is always added: a pod
    deleted and re-created under the same name (StatefulSets do this) must not collide with
    the old job that may still be stopping, and ``a-b``/``c`` vs ``a``/``b-c`` would collide
    without it.  IDs over 128 characters are cut and get a hash of the full pod key instead.
    ``Meta`` carries ``vkgate.io/owner=vkgate``, ``vkgate.node``, ``k8s.namespace``,
    ``k8s.name``, ``k8s.uid`` (and the container names by role, for status mapping); only jobs
    whose owner *and* node match are ever listed, adopted or deleted.

restartPolicy (docs/design/nomad.md, "Pod to job mapping"; neither Always nor OnFailure gives up;
the numbers approximate the kubelet's backoff: translators/nomad/restarts.py)
    ============  =========  ==========================================================
    Always        service    restart {Attempts: restart_attempts, Mode: delay} — never gives up
    OnFailure     batch      restart {Attempts: restart_attempts, Mode: delay}, no reschedule
    Never         batch      restart {Attempts: 0, Mode: fail}, no reschedule
    ============  =========  ==========================================================

CPU and memory (F = MHz per Kubernetes core, see ``capacity.mhz_per_core``)
    ``CPU`` MHz = ceil(request millicores * F ÷ 1000), at least 1; the request is the limit when
    only a limit is set, else ``default_cpu``.  Nomad's CPU is a share, so CPU limits have no
    separate field.  ``MemoryMB`` = ceil(request bytes ÷ 2²⁰), at least 10 (default
    ``default_memory``); a memory limit above the request becomes ``MemoryMaxMB`` (Nomad only
    honours it with memory oversubscription enabled; it says so in the register warnings,
    which become Warning events).  Extended resources ``<vendor>.<tld>/<type>`` (e.g.
    ``nvidia.com/gpu``) become ``Devices: [{Name: "<vendor>/<type>", Count}]``;
    ``ephemeral-storage`` requests sum into the group's ``EphemeralDisk.SizeMB``.

nodeSelector → constraints (operand ``=``); keys not in this map were already satisfied by
Kubernetes scheduling the pod onto the virtual node and are not forwarded:
    ================================  =====================
    kubernetes.io/arch                ``${attr.cpu.arch}``
    kubernetes.io/os                  ``${attr.kernel.name}``
    node.kubernetes.io/instance-type  ``${node.class}``
    topology.kubernetes.io/zone       ``${node.datacenter}``
    topology.kubernetes.io/region     ``${node.region}``
    meta.nomad.vkgate.io/<key>        ``${meta.<key>}``
    attr.nomad.vkgate.io/<key>        ``${attr.<key>}``
    ================================  =====================
The ``node_class`` setting adds ``${node.class} = <class>`` to every job.  A node pool is not a
constraint: the job's ``NodePool`` (``node_pool``, or the ``-node-pool`` annotation) decides
which clients Nomad considers at all; the virtual node carries ``nomad.vkgate.io/node-pool`` and
``-node-class`` labels (``capacity.node_info``) for nodeSelectors to steer to it.

Nomad namespace, region, datacenters, priority and node pool: the settings, or a pod's
allow-listed ``vkgate.io/nomad-*`` annotations and the namespace mapping (``overrides.py``).

Networking (``network_mode``; docs/design/nomad.md, "Pod networking"): the group's ``Networks``
and each task's port labels come from ``network.py``, whose docstring has the rules.

Volumes: ConfigMap, Secret, projected and downwardAPI files become task ``Templates`` that
print one item of the job's own Nomad Variable (``variables.py``: non-UTF-8 content is stored
base64 and printed through ``base64Decode``), written under ``local/vkgate/<volume>/`` or, for
secrets, the in-memory ``secrets/vkgate/<volume>/``; the docker template bind-mounts that
directory at ``mountPath``.  Env values from Secrets are items too, printed into an ``Envvars``
template (``variables.secret_env_template``).  The job spec therefore carries none of the pod's
file contents or Secret env values (docs/design/secrets.md).  ``emptyDir`` is a directory in the
shared alloc dir (``../alloc/data/vkgate/<volume>``) mounted into every container that uses it.

imagePullSecrets (``pullauth.py``): refused unless ``registry_auth`` is ``"job"`` (the docker
driver's ``auth`` block in ``backend_info.tasks[*].auth``, readable with ``read-job``) or
``"client"`` (no auth block: the clients' credential helper).  A password is never put into
``Meta`` (checked after rendering) and ``vkgate render`` masks it.

After rendering (``finish_job``): the job ID must be vkgate's, ``Meta`` gets the ownership
entries back, and the node's policy (``policy.py``) checks everything else the template wrote —
against the ``backend_info`` vkgate computed, which the template never holds (``sealed``: it
renders a deep copy, so a template rendered in the agent's own process, ``render_workers = 0``,
cannot change what is checked and written after it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from translators.render.engine import Renderer

import copy
import hashlib
import math
import re
from collections.abc import Collection, Iterable, Mapping
from fractions import Fraction
from typing import Any

from translators import securitycontext
from translators.base import (
    OWNER_KEY,
    OWNER_VALUE,
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    TranslationError,
    UnsupportedError,
    cpu_millis,
    parse_quantity,
)
from translators.nomad import claims, images, literal, policy, pullauth, scheduling
from translators.nomad.config import NomadConfig
from translators.nomad.network import networks, refuse_pod_ip_references
from translators.nomad.overrides import ANNOTATION, overrides
from translators.nomad.variables import (
    MAX_VARIABLE_BYTES,
    Variable,
    file_template,
    secret_env_template,
    variable_path,
    variable_size,
)
from translators.render.engine import pod_context

JSON = dict[str, Any]

NS = 1_000_000_000
MAX_ID = 128
GROUP = "pod"

META_NODE = "vkgate.node"
META_NAMESPACE = "k8s.namespace"
META_NAME = "k8s.name"
META_UID = "k8s.uid"
#: Comma-separated task names by role, so status mapping works from allocations alone.
META_CONTAINERS = "vkgate.containers"
META_INIT = "vkgate.init_containers"
META_SIDECARS = "vkgate.sidecars"
#: The job's network mode when it is not ``host`` (absent: host, as every job before it had),
#: so status mapping knows whether the allocation has an address of its own.
META_NETWORK = "vkgate.network"
#: The securityContext fields this job runs without enforcing them, relaxed by
#: ``relax_security_context`` (absent: every restriction is carried), as
#: ``<field path> (<why>)`` joined by "; ".
META_SECURITY_RELAXED = "vkgate.security-relaxed"

SELECTOR_MAP = {
    "kubernetes.io/arch": "${attr.cpu.arch}",
    "kubernetes.io/os": "${attr.kernel.name}",
    "node.kubernetes.io/instance-type": "${node.class}",
    "topology.kubernetes.io/zone": "${node.datacenter}",
    "topology.kubernetes.io/region": "${node.region}",
}
META_SELECTOR = "meta.nomad.vkgate.io/"
ATTR_SELECTOR = "attr.nomad.vkgate.io/"

FILE_VOLUMES = frozenset({"configMap", "secret", "projected", "downwardAPI"})
_BUILTIN_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "storage"})


# --------------------------------------------------------------------------- identity


def job_id(namespace: str, name: str, uid: str, *, prefix: str = "") -> str:
    """``<prefix><ns>-<name>-<uid8>``, only ``[A-Za-z0-9._-]``, at most 128 characters."""
    suffix = "-" + re.sub(r"[^A-Za-z0-9]", "", uid)[:8]
    base = re.sub(r"[^A-Za-z0-9._-]", "-", f"{prefix}{namespace}-{name}")
    if len(base) + len(suffix) > MAX_ID:
        digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:10]
        base = base[: MAX_ID - len(suffix) - len(digest) - 1] + "-" + digest
    return base + suffix


def ownership_meta(namespace: str, name: str, uid: str, node: str) -> dict[str, str]:
    return {
        OWNER_KEY: OWNER_VALUE,
        META_NODE: node,
        META_NAMESPACE: namespace,
        META_NAME: name,
        META_UID: uid,
    }


def is_owned(meta: Mapping[str, Any] | None, node: str) -> bool:
    """True for jobs this node created (owner marker *and* node name match)."""
    return bool(meta) and meta.get(OWNER_KEY) == OWNER_VALUE and meta.get(META_NODE) == node  # type: ignore[union-attr]


# --------------------------------------------------------------------------- numbers


def mhz(cpu_quantity: str | int | float, factor: float) -> int:
    """Kubernetes CPU → Nomad MHz: ceil(millicores * F ÷ 1000), minimum 1."""
    return max(1, math.ceil(cpu_millis(cpu_quantity) * Fraction(str(factor)) / 1000))


def mebibytes(quantity: str | int | float, *, minimum: int = 10) -> int:
    """Bytes → MiB rounded up, with Nomad's minimum of 10 for MemoryMB."""
    return max(minimum, math.ceil(parse_quantity(quantity) / 2**20))


def device_name(resource: str) -> str | None:
    """``nvidia.com/gpu`` → ``nvidia/gpu``; None for built-in resources."""
    if resource in _BUILTIN_RESOURCES or resource.startswith("hugepages-"):
        return None
    if "/" not in resource:
        return None
    domain, kind = resource.split("/", 1)
    return f"{domain.split('.')[0]}/{kind}"


def task_resources(c: ResolvedContainer, *, factor: float, cfg: NomadConfig) -> dict[str, Any]:
    res = c.spec.get("resources", {}) or {}
    req: Mapping[str, Any] = res.get("requests", {}) or {}
    lim: Mapping[str, Any] = res.get("limits", {}) or {}
    where = f"spec.containers[{c.name}].resources"
    try:
        cpu = req.get("cpu") or lim.get("cpu") or cfg.default_cpu
        mem = req.get("memory") or lim.get("memory") or cfg.default_memory
        out: dict[str, Any] = {"CPU": mhz(cpu, factor), "MemoryMB": mebibytes(mem)}
        if lim.get("memory"):
            limit_mb = mebibytes(lim["memory"])
            if limit_mb > out["MemoryMB"]:
                out["MemoryMaxMB"] = limit_mb
        devices = []
        for name in sorted({*req, *lim}):
            dev = device_name(name)
            if dev is None:
                continue
            count = math.ceil(parse_quantity(lim.get(name) or req.get(name) or 0))
            if count > 0:
                devices.append({"Name": dev, "Count": count})
    except ValueError as exc:
        raise TranslationError(str(exc), field=where) from None
    if devices:
        out["Devices"] = devices
    return out


def ephemeral_disk_mb(containers: Iterable[ResolvedContainer]) -> int:
    total = Fraction(0)
    for c in containers:
        req = (c.spec.get("resources", {}) or {}).get("requests", {}) or {}
        if req.get("ephemeral-storage"):
            total += parse_quantity(req["ephemeral-storage"])
    return math.ceil(total / 2**20) if total else 0


# --------------------------------------------------------------------------- constraints


def selector_target(key: str) -> str | None:
    """The Nomad attribute a node label key stands for (``SELECTOR_MAP``, ``meta.`` and
    ``attr.`` prefixes), or None: a key Kubernetes matched against the virtual node."""
    if key in SELECTOR_MAP:
        return SELECTOR_MAP[key]
    if key.startswith(META_SELECTOR) and len(key) > len(META_SELECTOR):
        return "${meta." + key[len(META_SELECTOR) :] + "}"
    if key.startswith(ATTR_SELECTOR) and len(key) > len(ATTR_SELECTOR):
        return "${attr." + key[len(ATTR_SELECTOR) :] + "}"
    return None


def constraints(node_selector: Mapping[str, str], *, node_class: str = "") -> list[dict[str, str]]:
    """``${node.class}`` = the ``node_class`` setting (the node's pin, which a selector cannot
    lift), then the pod's nodeSelector through ``SELECTOR_MAP``, without repeats."""
    out = []
    if node_class:
        out.append({"LTarget": "${node.class}", "RTarget": node_class, "Operand": "="})
    for key in sorted(node_selector):
        value = str(node_selector[key])
        target = selector_target(key)
        if target is None:
            continue
        constraint = {"LTarget": target, "RTarget": value, "Operand": "="}
        if constraint not in out:
            out.append(constraint)
    return out


# --------------------------------------------------------------------------- volumes


def volume_root(vol: ResolvedVolume) -> str:
    if vol.kind == "emptyDir":
        return f"../alloc/data/vkgate/{vol.name}"
    secret = vol.kind == "secret" or any(f.secret for f in vol.files)
    return f"{'secrets' if secret else 'local'}/vkgate/{vol.name}"


def task_volumes(
    c: ResolvedContainer, volumes: Mapping[str, ResolvedVolume], var: Variable
) -> tuple[list[dict[str, Any]], list[str]]:
    """(Nomad ``Templates`` for the files, docker ``volumes`` bind strings) of one container."""
    templates: list[dict[str, Any]] = []
    binds: list[str] = []
    written: set[str] = set()
    for m in c.mounts:
        vol = volumes.get(m.volume)
        if vol is None:
            raise TranslationError(
                f"volume {m.volume!r} is mounted but not defined",
                field=f"spec.containers[{c.name}].volumeMounts",
            )
        if vol.kind == claims.CLAIM:  # a Nomad volume request and VolumeMounts (claims.py)
            continue
        if vol.kind not in FILE_VOLUMES and vol.kind != "emptyDir":
            raise UnsupportedError(
                f"volume {vol.name!r} of kind {vol.kind} is not supported by the Nomad backend",
                reason="UnsupportedVolume",
                field=f"spec.volumes[{vol.name}]",
            )
        root = volume_root(vol)
        if vol.kind in FILE_VOLUMES:
            for f in vol.files:
                if m.sub_path and f.path != m.sub_path:
                    continue
                dest = f"{root}/{f.path}"
                if dest not in written:
                    written.add(dest)
                    templates.append(file_template(var, f.content, f.mode, dest))
        src = f"{root}/{m.sub_path}" if m.sub_path else root
        binds.append(f"{src}:{m.mount_path}" + (":ro" if m.read_only else ""))
    return templates, binds


# --------------------------------------------------------------------------- policy


def restart_policy(
    policy: str, cfg: NomadConfig
) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """(job Type, group RestartPolicy, group ReschedulePolicy or None for Nomad's default)."""
    interval = int(cfg.restart_interval * NS)
    delay = int(cfg.restart_delay * NS)
    attempts = max(1, cfg.restart_attempts)
    no_reschedule = {"Attempts": 0, "Unlimited": False}
    if policy == "Always":
        return (
            "service",
            {"Attempts": attempts, "Interval": interval, "Delay": delay, "Mode": "delay"},
            None,
        )
    if policy == "OnFailure":
        # Mode delay: a failing container restarts for ever, as with the kubelet (a Job's
        # backoffLimit, not the node, decides when to give up); a clean exit ends the task
        return (
            "batch",
            {"Attempts": attempts, "Interval": interval, "Delay": delay, "Mode": "delay"},
            no_reschedule,
        )
    if policy == "Never":
        return (
            "batch",
            {"Attempts": 0, "Interval": interval, "Delay": delay, "Mode": "fail"},
            no_reschedule,
        )
    raise TranslationError(f"unknown restartPolicy {policy!r}", field="spec.restartPolicy")


# --------------------------------------------------------------------------- context + render


def backend_info(pod: ResolvedPod, *, cfg: NomadConfig, factor: float) -> dict[str, Any]:
    """Everything Nomad-specific a template needs, keyed by name (documented in the README)."""
    meta = pod.pod.get("metadata", {}) or {}
    spec = pod.pod.get("spec", {}) or {}
    pullauth.check(pod, cfg)
    where = overrides(meta.get("annotations", {}) or {}, cfg, pod_namespace=pod.namespace)
    # Scheduling intent (translators/nomad/scheduling.py): the priority annotation wins over
    # spec.priority; what Kubernetes enforced on the virtual node only is listed in Meta.
    if ANNOTATION + "priority" not in (meta.get("annotations") or {}):
        where["priority"] = scheduling.nomad_priority(
            spec.get("priority"), default=cfg.priority, maximum=cfg.pod_max_priority
        )
    required, affinities = scheduling.node_affinity(spec, selector_target)
    unforwarded = scheduling.not_forwarded(spec)
    jtype, restart, reschedule = restart_policy(str(spec.get("restartPolicy", "Always")), cfg)
    containers = (*pod.init_containers, *pod.containers)
    names = [c.name for c in containers]
    if len(set(names)) != len(names):
        raise TranslationError("container names must be unique", field="spec.containers")
    refuse_pod_ip_references(containers, mode=cfg.network_mode)
    nets, labels = networks(containers, mode=cfg.network_mode)
    volumes = {v.name: v for v in pod.volumes}
    grace = spec.get("terminationGracePeriodSeconds")
    kill_timeout = int((30 if grace is None else int(grace)) * NS)
    jid = job_id(pod.namespace, pod.name, pod.uid, prefix=cfg.job_prefix)
    var = Variable(variable_path(jid))
    tasks: dict[str, Any] = {}
    for c in containers:
        templates, binds = task_volumes(c, volumes, var)
        lifecycle = None
        if c.role == "init":
            lifecycle = {"Hook": "prestart", "Sidecar": False}
        elif c.role == "sidecar":
            lifecycle = {"Hook": "prestart", "Sidecar": True}
        argv = literal.config_literals([*c.command, *c.args])
        env = literal.split_env({e.name: e.value for e in c.env if not e.secret}, container=c.name)
        if env.template is not None:
            templates.append(env.template)
        secret_env = secret_env_template(
            var, {e.name: e.value for e in c.env if e.secret}, container=c.name
        )
        if secret_env is not None:
            templates.append(secret_env)
        tasks[c.name] = {
            "name": c.name,
            "lifecycle": lifecycle,
            "resources": task_resources(c, factor=factor, cfg=cfg),
            "port_labels": labels.get(c.name, []),
            "templates": templates,
            "docker_volumes": literal.config_literals(binds),
            "volume_mounts": claims.task_mounts(c, volumes),
            "env": env.env,
            "force_pull": c.spec.get("imagePullPolicy") == "Always",
            "auth": pullauth.task_auth(c, pod, cfg),
            # securityContext as docker driver values: user, readonly_rootfs, cap_add,
            # cap_drop, security_opt (translators/securitycontext.py; finish_job checks them).
            "security": securitycontext.docker_task(
                securitycontext.requests(spec, c.spec, group=_group(c))
            ),
            "raw_command": argv[0] if argv else "",
            "raw_args": argv[1:],
            "kill_timeout": kill_timeout,
        }
    size = variable_size(var.items)
    if size > MAX_VARIABLE_BYTES:
        raise TranslationError(
            f"the pod's volume files and Secret env values take {size} bytes in the job's Nomad"
            f" Variable, and Nomad accepts at most {MAX_VARIABLE_BYTES} (docs/backends/nomad.md,"
            ' "Secrets and Nomad Variables")',
            field="spec.volumes",
        )
    return {
        "job_id": jid,
        "job_name": f"{pod.namespace}/{pod.name}",
        "group": GROUP,
        "type": jtype,
        "restart_policy": restart,
        "reschedule_policy": reschedule,
        "namespace": where["namespace"],
        "region": where["region"],
        "datacenters": where["datacenters"],
        "priority": where["priority"],
        "node_pool": where["node_pool"],
        "meta": {
            **ownership_meta(pod.namespace, pod.name, pod.uid, pod.node_name),
            META_CONTAINERS: ",".join(c.name for c in pod.containers),
            META_INIT: ",".join(c.name for c in pod.init_containers),
            META_SIDECARS: ",".join(c.name for c in pod.init_containers if c.role == "sidecar"),
            **({META_NETWORK: cfg.network_mode} if cfg.network_mode != "host" else {}),
            **({scheduling.META_NOT_FORWARDED: ",".join(unforwarded)} if unforwarded else {}),
        },
        "constraints": scheduling.merge(
            constraints(spec.get("nodeSelector", {}) or {}, node_class=cfg.node_class), required
        ),
        "affinities": affinities,
        "networks": nets,
        "volumes": claims.group_volumes(volumes),
        "ephemeral_disk_mb": ephemeral_disk_mb(containers),
        "mhz_per_core": factor,
        "tasks": tasks,
        # Never rendered into the job: written as the job's Nomad Variable before it is
        # registered (``NomadTranslator.create``).
        "variable": {"path": var.path, "items": var.items},
    }


SAFE_SETTINGS = frozenset(
    {"address", "namespace", "region", "datacenters", "node_pool", "priority", "template", "pods"}
)


def context(
    pod: ResolvedPod, *, cfg: NomadConfig, settings: Mapping[str, Any], factor: float
) -> dict[str, Any]:
    """The template context: ``pod_context`` plus ``backend_info`` (no token or keys)."""
    safe = {k: v for k, v in settings.items() if k in SAFE_SETTINGS}
    info = backend_info(pod, cfg=cfg, factor=factor)
    ctx = pod_context(pod, backend="nomad", settings=safe, extra=info)
    for c in (*ctx["init_containers"], *ctx["sidecars"], *ctx["containers"]):
        _as_nomad_literals(c, info["tasks"][c["name"]])
    return ctx


def sealed(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """What a template renders with: a deep copy of ``ctx``.  A template rendered in the
    agent's own process (``templates.render_workers = 0``) can change what it is handed
    (``backend_info.update(…)``); what vkgate checks and writes after the render — the job ID,
    the Variable's items, the pod's securityContext — is read from ``ctx``, never from that."""
    return copy.deepcopy(dict(ctx))


def _as_nomad_literals(c: dict[str, Any], task: Mapping[str, Any]) -> None:
    """The container's strings as Nomad must receive them to hand the process the pod's bytes
    (``translators.nomad.literal``): escaped for driver ``Config``; ``env`` holds only what may
    go into ``Env`` (the rest is in the task's env template, ``backend_info.tasks[*].templates``).
    """
    c["image"] = literal.config_literal(c["image"])
    c["command"] = literal.config_literals(c["command"])
    c["args"] = literal.config_literals(c["args"])
    c["working_dir"] = literal.config_literal(c["working_dir"])
    c["env"] = dict(task["env"])
    c["env_list"] = [
        {**e, "value": task["env"][e["name"]]} for e in c["env_list"] if e["name"] in task["env"]
    ]
    for m in c["mounts"]:
        m["mount_path"] = literal.config_literal(m["mount_path"])


def _secret_values(pod: ResolvedPod) -> set[str]:
    values = {e.value for c in (*pod.init_containers, *pod.containers) for e in c.env if e.secret}
    for v in pod.volumes:
        for f in v.files:
            if f.secret or v.kind == "secret":
                values.add(f.content.decode("utf-8", errors="replace"))
    values.update(c.password for c in pod.registry_credentials)
    return {s for s in values if len(s) >= 4}


def template_for(pod: ResolvedPod, *, renderer: Renderer, cfg: NomadConfig) -> str:
    """The renderer's lookup (annotation ``vkgate.io/template``, team template, default) with
    ``template`` from the settings as the backend default."""
    return str(renderer.select(pod, backend="nomad", default=cfg.template).name)


def _group(c: ResolvedContainer) -> str:
    return "containers" if c.role == "main" else "initContainers"


def _check_security(
    job: dict[str, Any], pod: ResolvedPod, *, relaxed: Collection[str], template: str
) -> None:
    """Fail closed: every securityContext restriction of a container is carried by its task as
    rendered (the docker driver with ``backend_info.tasks[*].security``), or relaxed by
    ``relax_security_context``; else the pod is refused naming the first field, the message
    listing every one.  What runs relaxed is written down in ``META_SECURITY_RELAXED``."""
    spec = pod.pod.get("spec") or {}
    tasks = {str(t.get("Name")): t for g in job["TaskGroups"] for t in (g or {}).get("Tasks") or []}
    refused: list[tuple[securitycontext.Request, str]] = []
    relaxed_gaps: list[str] = []
    for c in (*pod.init_containers, *pod.containers):
        reqs = securitycontext.requests(spec, c.spec, group=_group(c))
        for r, why in securitycontext.missing_in_docker_task(tasks.get(c.name) or {}, reqs):
            if r.feature in relaxed:
                relaxed_gaps.append(f"{r.where} ({why})")
            else:
                refused.append((r, why))
    if refused:
        first = refused[0][0]
        every = "; ".join(f"{r.where}: {why}" for r, why in refused)
        raise UnsupportedError(
            f"securityContext.{first.feature} cannot be enforced by the job of template "
            f"{template}, and vkgate does not run a pod with a restriction relaxed "
            f"(backend.nomad.relax_security_context lists those a node may relax). "
            f"Not enforced: {every}",
            reason="UnsupportedPodFeature",
            field=first.where,
        )
    if relaxed_gaps:
        job["Meta"][META_SECURITY_RELAXED] = "; ".join(relaxed_gaps)


def finish_job(
    out: Any, pod: ResolvedPod, *, info: Mapping[str, Any], template: str, cfg: NomadConfig
) -> JSON:
    """Check a rendered job against vkgate's ``info`` (never the copy the template was handed)
    and the node's policy; re-assert identity and ownership (``{"Job": {...}}``)."""
    job = out.get("Job", out) if isinstance(out, dict) else None
    if not isinstance(job, dict) or not isinstance(job.get("TaskGroups"), list):
        raise TranslationError(
            "output must be a Nomad job object with TaskGroups", template=template, field="Job"
        )
    if job.get("ID") != info["job_id"]:
        raise TranslationError(
            f"Job.ID must be {info['job_id']!r} (vkgate's identity for this pod), "
            f"got {job.get('ID')!r}",
            template=template,
            field="Job.ID",
        )
    meta = job.get("Meta") or {}
    if not isinstance(meta, dict):
        raise TranslationError("Job.Meta must be an object", template=template, field="Job.Meta")
    meta = {str(k): str(v) for k, v in meta.items()}
    meta.update(info["meta"])
    meta.update(images.meta(job))
    secrets = _secret_values(pod)
    for k, v in meta.items():
        if any(s in v for s in secrets):
            raise TranslationError(
                f"Job.Meta[{k!r}] contains a Secret value; secrets must never go into Meta",
                template=template,
                field="Job.Meta",
            )
    job["Meta"] = meta
    if job.get("Namespace") is None:
        job["Namespace"] = info["namespace"]
    policy.check(job, pod, info=info, cfg=cfg, template=template, secrets=secrets)
    _check_commands(job, template=template)
    claims.check_rendered(job, info, template=template)
    _check_security(job, pod, relaxed=cfg.relax_security_context, template=template)
    return {"Job": job}


def _check_commands(job: Mapping[str, Any], *, template: str) -> None:
    """raw_exec has no image, so no entrypoint to fall back on: a task needs a command."""
    for group in job["TaskGroups"]:
        for task in (group or {}).get("Tasks") or []:
            if task.get("Driver") == "raw_exec" and not (task.get("Config") or {}).get("command"):
                name = task.get("Name")
                raise TranslationError(
                    f"container {name!r} has no command: the raw_exec driver runs a host"
                    " executable and has no image entrypoint to fall back on (set command,"
                    " or use the docker template)",
                    template=template,
                    field=f"spec.containers[{name}].command",
                )


def render_job(
    pod: ResolvedPod,
    *,
    renderer: Any,
    cfg: NomadConfig,
    settings: Mapping[str, Any],
    factor: float,
    template: str = "",
) -> JSON:
    """Render the pod's job synchronously (offline use: golden files, ``vkgate render``)."""
    name = template or template_for(pod, renderer=renderer, cfg=cfg)
    ctx = context(pod, cfg=cfg, settings=settings, factor=factor)
    return finish_job(
        renderer.render(name, sealed(ctx)), pod, info=ctx["backend_info"], template=name, cfg=cfg
    )
