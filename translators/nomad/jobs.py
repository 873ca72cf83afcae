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

Nomad namespace: ``namespace_from_pod`` (``mapped_namespace``) pins a mapped pod, its
``vkgate.io/nomad-namespace`` annotation may only repeat that; an unmapped pod's annotation may
name any allowed namespace; else ``namespace``.

Networking (``network_mode``; docs/design/nomad.md, "Pod networking"): ``host`` (default)
reserves each ``containerPort`` as the same static port on the client, so ``podIP`` (the
client's address) ``:containerPort`` answers and a taken port keeps the pod Pending with Nomad's
placement failure instead of moving it to a random port; ``bridge`` and ``cni/<name>`` give every
job one group network of that mode — one network namespace and address per allocation, shared by
the pod's containers — where only ``hostPort`` reserves anything on the client.  The mode is
recorded in ``Meta["vkgate.network"]`` (absent: host); a ``status.podIP`` fieldRef is refused in
the other modes (``refuse_pod_ip_references``).

Volumes: ConfigMap, Secret, projected and downwardAPI files become task ``Templates`` that
print one item of the job's own Nomad Variable (``nomad/jobs/<job ID>``, ``Variable``; non-UTF-8
content is stored base64 and printed through ``base64Decode``), written under
``local/vkgate/<volume>/`` or, for secrets, the in-memory ``secrets/vkgate/<volume>/``; the
docker template bind-mounts that directory at ``mountPath``.  Env values from Secrets are items
too, printed into an ``Envvars`` template (``secret_env_template``).  The job spec therefore
carries none of the pod's file contents or Secret env values (docs/design/secrets.md): the
translator writes the Variable before registering the job and removes it with the purge, and a
changed ConfigMap/Secret rewrites the Variable only — the templates' ``ChangeMode: noop``
rewrites the files in the running task, as a kubelet updates mounted files.  The template
bodies are vkgate's own text (the job ID and item keys), so no pod data is ever evaluated as a
template.  ``emptyDir`` is a directory in the shared alloc dir (``../alloc/data/vkgate/<volume>``)
mounted into every container that uses it.

imagePullSecrets: the credential that matches a task's image (``vkgate_core.imageregistry``) becomes
the docker driver's ``auth {username, password, server_address}`` (``server_address`` = the
image's registry host, ``docker.io`` for Docker Hub), in ``backend_info.tasks[*].auth``;
``raw_exec`` has no image and ignores it.  It cannot move to the Variable (the docker driver
reads ``auth`` from the job, before any template runs), so it is readable with ``read-job``;
docs/backends/nomad.md offers a credential helper on the clients instead.  It is never put into
``Meta`` (checked after rendering) and ``vkgate render`` masks the password.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from translators.render.engine import Renderer

import hashlib
import json
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
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
from translators.nomad import claims, images, literal, scheduling
from translators.nomad.config import NomadConfig
from translators.render.engine import pod_context
from vkgate_core.imageregistry import credential_for, image_host

JSON = dict[str, Any]

NS = 1_000_000_000
MAX_ID = 128
GROUP = "pod"
ANNOTATION = "vkgate.io/nomad-"

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


# --------------------------------------------------------------------------- ports


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


def variable_path(jid: str) -> str:
    """The job's own Nomad Variable: its tasks may read it with their workload identity."""
    return f"nomad/jobs/{jid}"


#: Fixed delimiters of templates vkgate writes itself: the body is ours (variable path from the
#: job ID, ``[A-Za-z0-9._-]`` only; item keys ``f<n>``/``e<n>``), never pod data.
VAR_LEFT, VAR_RIGHT = "[[vkgate", "vkgate]]"


#: Nomad refuses a Variable whose items encode to more than 64 KiB (1.6.3 answers 500; checked
#: on the e2e cluster, docs/design/nomad.md "Variables").
MAX_VARIABLE_BYTES = 64 * 1024


def variable_size(items: Mapping[str, str]) -> int:
    """The items' size as Nomad's Go JSON encodes them (``<``, ``>``, ``&`` as ``\\u003c``)."""
    text = json.dumps(dict(items), ensure_ascii=False, separators=(",", ":"))
    return len(text.encode()) + 5 * sum(text.count(ch) for ch in "<>&")


class Variable:
    """The items of a job's Nomad Variable (docs/design/secrets.md): every volume file and
    every Secret env value of the pod, so none of them sits in the job spec."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.items: dict[str, str] = {}

    def put(self, prefix: str, value: str) -> str:
        key = f"{prefix}{sum(1 for k in self.items if k.startswith(prefix))}"
        self.items[key] = value
        return key

    def read(self, expression: str) -> str:
        """A template body that prints one item: the value is data, never template text."""
        return (
            f'{VAR_LEFT} with nomadVar "{self.path}" {VAR_RIGHT}'
            f"{VAR_LEFT} {expression} {VAR_RIGHT}{VAR_LEFT} end {VAR_RIGHT}"
        )


def _template(var: Variable, content: bytes, mode: int, dest: str) -> dict[str, Any]:
    """A file whose content is an item of the job's Variable (base64 when not UTF-8);
    ``ChangeMode: noop``: a changed item rewrites the file without touching the task."""
    try:
        key = var.put("f", content.decode("utf-8"))
        expression = "." + key
    except UnicodeDecodeError:
        import base64

        key = var.put("f", base64.b64encode(content).decode())
        expression = f"base64Decode .{key}.Value"
    return {
        "EmbeddedTmpl": var.read(expression),
        "DestPath": dest,
        "ChangeMode": "noop",
        "Perms": f"{mode:04o}",
        "LeftDelim": VAR_LEFT,
        "RightDelim": VAR_RIGHT,
    }


#: Where a task's Secret env values are rendered (in-memory secrets dir, ``Envvars``).
SECRET_ENV_FILE = "secrets/vkgate-secret.env"


def secret_env_template(
    var: Variable, env: Mapping[str, str], *, container: str
) -> dict[str, Any] | None:
    """An ``Envvars`` template of the Secret env values, each an item of the job's Variable
    (quoted for go-envparse as ``literal.split_env`` quotes), so the values are not in
    ``Env``.  ``ChangeMode: noop``: a changed Secret reaches the file, not the running process
    (its env changes only with a restart, as on a kubelet)."""
    if not env:
        return None
    ip = f'{VAR_LEFT} env "{literal.POD_IP_ATTR}" {VAR_RIGHT}'
    lines = [f'{VAR_LEFT} with nomadVar "{var.path}" {VAR_RIGHT}']
    for key, value in env.items():
        if not literal.ENVFILE_KEY.fullmatch(key):
            raise TranslationError(
                f"env var {key!r} from a Secret: its value goes to a Nomad env file (so it is not"
                " in the job spec), and Nomad env files only take names matching"
                " [A-Za-z_][A-Za-z0-9_./]*",
                field=f"spec.containers[{container}].env[{key}]",
            )
        parts = [
            f"{VAR_LEFT} .{var.put('e', json.dumps(p, ensure_ascii=False)[1:-1])} {VAR_RIGHT}"
            for p in value.split(literal.POD_IP_SENTINEL)
        ]
        lines.append(f'{key}="{ip.join(parts)}"\n')
    lines.append(f"{VAR_LEFT} end {VAR_RIGHT}")
    return {
        "EmbeddedTmpl": "".join(lines),
        "DestPath": SECRET_ENV_FILE,
        "ChangeMode": "noop",
        "Perms": "0600",
        "Envvars": True,
        "LeftDelim": VAR_LEFT,
        "RightDelim": VAR_RIGHT,
    }


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
                    templates.append(_template(var, f.content, f.mode, dest))
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


def mapped_namespace(pod_namespace: str, cfg: NomadConfig) -> str | None:
    """The Nomad namespace ``namespace_from_pod`` pins the pod to (None: not mapped).

    Raises ``TranslationError`` (field ``metadata.namespace``) when the mapping names a
    namespace outside the allow-list; a ``"table"`` value always passed that check at start-up.
    """
    if cfg.namespace_from_pod == "same":
        mapped: str | None = pod_namespace
    elif cfg.namespace_from_pod == "table":
        mapped = cfg.namespace_map.get(pod_namespace)
    else:
        return None
    if mapped is not None and mapped not in cfg.all_namespaces:
        raise TranslationError(
            f"Nomad namespace {mapped!r} (from the pod's namespace {pod_namespace!r}, "
            f"backend.nomad.namespace_from_pod = {cfg.namespace_from_pod!r}) is not allowed "
            f"(allowed: {', '.join(cfg.all_namespaces)}; add it to backend.nomad.namespaces)",
            field="metadata.namespace",
        )
    return mapped


def overrides(
    annotations: Mapping[str, str], cfg: NomadConfig, *, pod_namespace: str = ""
) -> dict[str, Any]:
    """Per-pod ``vkgate.io/nomad-*`` annotations and the namespace mapping, validated against
    the allow-lists.  Namespace: the mapping (``mapped_namespace``) pins a mapped pod, and its
    annotation may only repeat that value; an unmapped pod's annotation picks any allowed
    namespace; else ``namespace``."""
    mapped = mapped_namespace(pod_namespace, cfg)
    out: dict[str, Any] = {
        "namespace": cfg.namespace if mapped is None else mapped,
        "region": cfg.region,
        "datacenters": list(cfg.datacenters),
        "priority": cfg.priority,
        "node_pool": cfg.node_pool,
    }

    def field(name: str) -> str:
        return f"metadata.annotations[{ANNOTATION}{name}]"

    if (v := annotations.get(ANNOTATION + "namespace")) is not None:
        if mapped is not None and v != mapped:
            raise TranslationError(
                f"Nomad namespace {v!r} is not allowed: the pod's namespace {pod_namespace!r} "
                f"maps to {mapped!r} (backend.nomad.namespace_from_pod = "
                f"{cfg.namespace_from_pod!r}), and a mapped pod cannot pick another one",
                field=field("namespace"),
            )
        if v not in cfg.all_namespaces:
            raise TranslationError(
                f"Nomad namespace {v!r} is not allowed (allowed: {', '.join(cfg.all_namespaces)};"
                " add it to backend.nomad.namespaces)",
                field=field("namespace"),
            )
        out["namespace"] = v
    if (v := annotations.get(ANNOTATION + "region")) is not None:
        if v not in cfg.all_regions:
            raise TranslationError(
                f"Nomad region {v!r} is not allowed (add it to backend.nomad.regions)",
                field=field("region"),
            )
        out["region"] = v
    if (v := annotations.get(ANNOTATION + "datacenters")) is not None:
        dcs = [d.strip() for d in v.split(",") if d.strip()]
        if not dcs:
            raise TranslationError("expected a comma-separated list", field=field("datacenters"))
        denied = [d for d in dcs if not cfg.datacenter_allowed(d)]
        if denied:
            raise TranslationError(
                f"Nomad datacenters {', '.join(map(repr, denied))} are not allowed (allowed: "
                f"{', '.join((*cfg.datacenters, *cfg.allowed_datacenters))}; add them to "
                "backend.nomad.allowed_datacenters)",
                field=field("datacenters"),
            )
        out["datacenters"] = dcs
    if (v := annotations.get(ANNOTATION + "priority")) is not None:
        if not v.strip().isdigit() or not 1 <= int(v) <= 100:
            raise TranslationError(f"expected 1..100, got {v!r}", field=field("priority"))
        if int(v) > cfg.pod_max_priority:
            raise TranslationError(
                f"Nomad priority {int(v)} is not allowed (at most {cfg.pod_max_priority}; "
                "raise backend.nomad.max_priority)",
                field=field("priority"),
            )
        out["priority"] = int(v)
    if (v := annotations.get(ANNOTATION + "node-pool")) is not None:
        if v.strip() not in cfg.all_node_pools:
            raise TranslationError(
                f"Nomad node pool {v.strip()!r} is not allowed (allowed: "
                f"{', '.join(cfg.all_node_pools)}; add it to backend.nomad.node_pools)",
                field=field("node-pool"),
            )
        out["node_pool"] = v.strip()
    return out


# --------------------------------------------------------------------------- context + render


def backend_info(pod: ResolvedPod, *, cfg: NomadConfig, factor: float) -> dict[str, Any]:
    """Everything Nomad-specific a template needs, keyed by name (documented in the README)."""
    meta = pod.pod.get("metadata", {}) or {}
    spec = pod.pod.get("spec", {}) or {}
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
        cred = credential_for(c.image, pod.registry_credentials)
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
            "auth": (
                {
                    "username": cred.username,
                    "password": cred.password,
                    "server_address": image_host(c.image),
                }
                if cred is not None
                else None
            ),
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
    out: Any,
    pod: ResolvedPod,
    *,
    info: Mapping[str, Any],
    template: str,
    relaxed: Collection[str] = (),
) -> JSON:
    """Check a rendered job and re-assert identity and ownership (``{"Job": {...}}``)."""
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
    job.setdefault("Namespace", info["namespace"])
    _check_commands(job, template=template)
    claims.check_rendered(job, info, template=template)
    _check_security(job, pod, relaxed=relaxed, template=template)
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
        renderer.render(name, ctx),
        pod,
        info=ctx["backend_info"],
        template=name,
        relaxed=cfg.relax_security_context,
    )
