"""Settings of the Nomad backend: the ``[backend.nomad]`` table merged over ``NOMAD_*`` env.

Precedence is *table > environment > default*: the Nomad CLI's own variables (``NOMAD_ADDR``,
``NOMAD_TOKEN``, ``NOMAD_NAMESPACE``, ``NOMAD_REGION`` and every TLS one: ``NOMAD_CACERT``,
``NOMAD_CAPATH``, ``NOMAD_CLIENT_CERT``, ``NOMAD_CLIENT_KEY``, ``NOMAD_TLS_SERVER_NAME``,
``NOMAD_SKIP_VERIFY``) work out of the box, and an explicit vkgate.toml value always wins over
whatever the shell happens to export.  ``NOMAD_SKIP_VERIFY`` takes Go's ``strconv.ParseBool``
spellings as Nomad does (``t``/``f`` too).  The TLS keys take file paths only: PEM contents
pasted into one would be printed by ``vkgate config check``, so they are refused.

Every key is validated here with the shared coercer (``vkgate_core.settings``) and a bad one
raises ``SettingsError`` naming ``backend.nomad.<key>``, so ``vkgate config check`` and the
agent's start-up report it the same way.  This dataclass is the table's schema.

Per-pod overrides (annotations ``vkgate.io/nomad-namespace``, ``-region``, ``-datacenters``,
``-priority``, ``-node-pool``) are read in ``overrides.py``, and every one is behind an allow-list:
namespace and region must be listed in ``namespaces`` / ``regions``, datacenters must match
``datacenters`` or be listed in ``allowed_datacenters``, the node pool must be ``node_pool`` or
listed in ``node_pools``, and the priority must not exceed ``max_priority``.  Letting any
Kubernetes user pick an arbitrary Nomad namespace, node pool or priority would turn a pod
annotation into a privilege (preempting other teams' jobs, running on reserved nodes), and the
backstop list and the event stream must know every namespace/region they have to watch.

The same allow-lists bound what a template renders (``policy.py``), with settings of their own
for what only a template can ask: ``drivers``, ``allow_driver_config``, ``allow_job_fields``;
and ``registry_auth`` says whether a pod's imagePullSecrets may reach the job (``pullauth.py``).
Each defaults to deny.

Namespace mapping (``namespace_from_pod``, off by default) derives the Nomad namespace from the
pod's Kubernetes namespace: ``"same"`` uses the same name, ``"table"`` looks it up in
``namespace_map`` (a pod whose namespace is not in the table gets ``namespace``).  The result
must be in the allow-list (``namespace`` + ``namespaces``): a table value outside it is a
settings error, a ``"same"`` name outside it refuses the pod.  A mapped pod's namespace is
pinned: the annotation may only repeat it (docs/backends/nomad.md, "Namespaces, clients and
capacity").
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from translators.base import cpu_millis, parse_quantity
from translators.securitycontext import FIELDS as SECURITY_FIELDS
from vkgate_core.settings import Kind, SettingsError, coerce

ENV_KEYS = {
    "address": "NOMAD_ADDR",
    "token": "NOMAD_TOKEN",
    "namespace": "NOMAD_NAMESPACE",
    "region": "NOMAD_REGION",
    "ca_cert": "NOMAD_CACERT",
    "ca_path": "NOMAD_CAPATH",
    "client_cert": "NOMAD_CLIENT_CERT",
    "client_key": "NOMAD_CLIENT_KEY",
    "tls_server_name": "NOMAD_TLS_SERVER_NAME",
    "skip_verify": "NOMAD_SKIP_VERIFY",
}
#: Keys that name a file or directory (never its contents).
PATH_KEYS = frozenset({"ca_cert", "ca_path", "client_cert", "client_key"})
#: Go's strconv.ParseBool spellings that the shared coercer does not know.
_GO_BOOLS = {"t": "true", "f": "false"}


@dataclass(frozen=True)
class NomadConfig:
    """The validated ``[backend.nomad]`` table."""

    address: str = "http://127.0.0.1:4646"
    """Nomad HTTP API address (NOMAD_ADDR)."""
    token: str = field(default="", repr=False)
    """ACL token sent as X-Nomad-Token (NOMAD_TOKEN); never logged."""
    namespace: str = "default"
    """Nomad namespace for jobs (NOMAD_NAMESPACE)."""
    region: str = ""
    """Nomad region; empty = the agent's region (NOMAD_REGION)."""
    ca_cert: str = ""
    """CA bundle (PEM file) to verify the Nomad server (NOMAD_CACERT); wins over ca_path."""
    ca_path: str = ""
    """Directory of PEM CA certificates to verify the Nomad server (NOMAD_CAPATH)."""
    client_cert: str = ""
    """Client certificate for mTLS (NOMAD_CLIENT_CERT)."""
    client_key: str = ""
    """Client key for mTLS (NOMAD_CLIENT_KEY)."""
    skip_verify: bool = False
    """Do not verify the server certificate (NOMAD_SKIP_VERIFY). Never in production."""
    tls_server_name: str = ""
    """Server name to send (SNI) and verify instead of the address host, e.g.
    server.global.nomad (NOMAD_TLS_SERVER_NAME)."""
    datacenters: tuple[str, ...] = ("*",)
    """Job datacenters; also filters the nodes that make up capacity ("*" = all)."""
    node_pool: str = ""
    """Job node pool; also filters capacity. Empty: Nomad's default pool for jobs, all pools
    for capacity."""
    namespaces: tuple[str, ...] = ()
    """Extra namespaces a pod may pick with the vkgate.io/nomad-namespace annotation."""
    namespace_from_pod: str = ""
    """Nomad namespace from the pod's namespace: "" (off), "same" (same name), "table"
    (``namespace_map``); the result must be in ``namespace`` + ``namespaces``."""
    namespace_map: Mapping[str, str] = field(default_factory=dict)
    """Kubernetes namespace → Nomad namespace, used with namespace_from_pod = "table"."""
    node_class: str = ""
    """Nomad node class the jobs run on (a ``${node.class}`` constraint); also filters
    capacity. Empty: any class."""
    regions: tuple[str, ...] = ()
    """Extra regions a pod may pick with the vkgate.io/nomad-region annotation."""
    allowed_datacenters: tuple[str, ...] = ()
    """Datacenters a pod may pick with vkgate.io/nomad-datacenters besides those that
    ``datacenters`` matches."""
    node_pools: tuple[str, ...] = ()
    """Extra node pools a pod may pick with the vkgate.io/nomad-node-pool annotation."""
    max_priority: int = 0
    """Highest priority a pod may ask for with vkgate.io/nomad-priority; 0: ``priority``."""
    mhz_per_core: float = 0.0
    """F, MHz per Kubernetes core. 0: Σ CpuShares ÷ Σ cores of the eligible nodes, else 1000."""
    priority: int = 50
    """Job priority (1..100)."""
    template: str = "nomad/job.j2"
    """Job template (nomad/job.j2 = docker, nomad/raw_exec.j2 = raw_exec)."""
    network_mode: str = "host"
    """How a pod's job is networked: "host" (the client's address, each containerPort reserved
    as the same static port), "bridge" or "cni/<name>" (an address per allocation, shared by
    the pod's containers; docs/backends/nomad.md, "Pod networking")."""
    default_cpu: str = "100m"
    """CPU for a container without requests/limits (Kubernetes quantity)."""
    default_memory: str = "300Mi"
    """Memory for a container without requests/limits (Kubernetes quantity)."""
    pods: int = 110
    """Pod capacity of the virtual node (Nomad has no pod limit)."""
    job_prefix: str = ""
    """Prefix of every job ID (e.g. "k8s-"), handy to tell vkgate's jobs apart in the UI."""
    restart_attempts: int = 2
    """Quick restarts (``restart_delay`` apart) per restart_interval (Always/OnFailure); the
    exit after them waits for the interval's end.  Nomad has no exponential delay: the defaults
    approximate the kubelet's 10 s doubling to 5 min (translators/nomad/restarts.py;
    docs/design/probes.md, "Restart backoff")."""
    restart_interval: float = 320.0
    """Window of restart_attempts (seconds or "5m20s"): restart_attempts x restart_delay + 5 min,
    so the longest wait is the kubelet's longest back-off."""
    restart_delay: float = 10.0
    """Delay before a quick restart (seconds or "10s"; the kubelet's first back-off; Nomad adds
    up to 25 % jitter)."""
    timeout: float = 30.0
    """Timeout of one ordinary HTTP call, seconds."""
    connect_timeout: float = 5.0
    """TCP/TLS connect timeout, seconds."""
    max_connections: int = 8
    """Connections to Nomad at most (the HTTP pool): every call, blocking query and the event
    stream count; log streams have their own pool (``max_log_streams``) and exec WebSockets
    are not pooled (docs/design/nomad.md, "Connections").  Nomad allows 100 per client IP (``http_max_conns_per_client``), shared by
    everything on the same address."""
    max_log_streams: int = 16
    """Log streams open at once, on a pool of their own beside ``max_connections``: a followed
    stream holds its connection as long as it follows, so sharing the pool would let a few
    ``kubectl logs -f`` starve creates; one ``kubectl logs -f`` follows stdout and stderr, two
    streams (docs/design/nomad.md, "Connections").  One more waits up to 5 s for a stream to
    end, then fails saying so."""
    retry_backoff: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 4.0)
    """Delays between retries of a 429/5xx/connection error; its length = number of retries."""
    blocking_wait: float = 60.0
    """Wait of a blocking query (list backstop), seconds."""
    stream_idle_timeout: float = 35.0
    """Reconnect the event stream when nothing (not even a heartbeat) arrived for this long."""
    backstop_interval: float = 10.0
    """Least seconds between two backstop resyncs (blocking allocation list) of the notifier
    while its event stream is down."""
    backstop_live_interval: float = 300.0
    """Seconds between two full resyncs (job and allocation lists) while the event stream is
    connected: the stream reports every change then, and the kubelet's evented PLEG relists
    every 300 s for the same reason (docs/design/nomad.md, "Change feed at rest")."""
    purge_timeout: float = 300.0
    """After a delete, purge the stopped job once its allocations ended, or after this long."""
    stats_concurrency: int = 8
    """Allocation stats calls in flight at once while serving /stats/summary or /metrics/resource
    (at most half of ``max_connections``)."""
    max_kill_timeout: float = 30.0
    """The Nomad clients' ``max_kill_timeout`` (client agent configuration; Nomad's default
    30 s): the longest grace between SIGTERM and SIGKILL a task gets, whatever its
    ``kill_timeout``.  Nomad's HTTP API does not report it (only ``/v1/agent/self`` of each
    client agent, which vkgate does not reach), so it is a setting: a pod whose grace period
    is longer gets an Event saying the containers get SIGKILL after this long."""
    relax_security_context: tuple[str, ...] = ()
    """securityContext restrictions (e.g. "runAsUser") pods may ask for where the job's driver
    cannot enforce them (raw_exec: any); they then run unenforced, with a Warning Event.
    Empty: such a pod is refused (docs/backends/nomad.md, "securityContext")."""
    drivers: tuple[str, ...] = ()
    """Task drivers a rendered job may use.  Empty: docker, and raw_exec too on a node whose
    ``template`` is nomad/raw_exec.j2 (docs/design/nomad.md, "Policy on the rendered job")."""
    allow_driver_config: tuple[str, ...] = ()
    """Driver Config keys of the policy's deny-list (e.g. "privileged", "volumes", "cap_add")
    a template may set as it likes on this node.  Empty: each is held to its rule
    (docs/design/nomad.md, "Policy on the rendered job")."""
    allow_job_fields: tuple[str, ...] = ()
    """Job fields a template may add (e.g. "Services", "Vault", "Volumes").  Empty: none
    (docs/design/nomad.md, "Policy on the rendered job")."""
    registry_auth: str = "reject"
    """imagePullSecrets: "reject" (refuse the pod), "job" (the docker driver's auth block in the
    job, readable with read-job) or "client" (no auth block: the clients' own credential
    helper logs in; docs/backends/nomad.md, "Secrets and Nomad Variables")."""

    @property
    def all_namespaces(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.namespace, *self.namespaces)))

    @property
    def all_regions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.region, *self.regions)))

    @property
    def all_node_pools(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.node_pool or "default", *self.node_pools)))

    @property
    def allowed_drivers(self) -> tuple[str, ...]:
        """``drivers``, else docker plus the driver of the packaged template ``template`` names."""
        if self.drivers:
            return self.drivers
        return tuple(dict.fromkeys(("docker", PACKAGED_DRIVERS.get(self.template, "docker"))))

    @property
    def pod_max_priority(self) -> int:
        return self.max_priority or self.priority

    def datacenter_allowed(self, dc: str) -> bool:
        """A datacenter a pod may name: matched by a ``datacenters`` glob, or listed in
        ``allowed_datacenters`` (a pod's own glob must be listed verbatim)."""
        return dc in self.allowed_datacenters or any(
            fnmatch.fnmatchcase(dc, pattern) for pattern in self.datacenters
        )

    @classmethod
    def from_settings(
        cls, table: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
    ) -> NomadConfig:
        """Validate ``[backend.nomad]``; unknown keys are an error that lists the known ones."""
        env = os.environ if environ is None else environ
        raw: dict[str, Any] = {}
        for key, var in ENV_KEYS.items():
            if env.get(var):
                raw[key] = env[var]
        if isinstance(raw.get("skip_verify"), str):
            raw["skip_verify"] = _GO_BOOLS.get(
                raw["skip_verify"].strip().lower(), raw["skip_verify"]
            )
        known = {f.name for f in dataclasses.fields(cls)}
        for key, value in (table or {}).items():
            if key not in known:
                raise _bad(key, f"unknown setting (known: {', '.join(sorted(known))})")
            raw[key] = value
        cfg = cls(**{k: _coerce(k, v) for k, v in raw.items()})
        _check_namespace_mapping(cfg)
        unknown = sorted(set(cfg.relax_security_context) - set(SECURITY_FIELDS))
        if unknown:
            raise _bad(
                "relax_security_context",
                f"unknown field {', '.join(unknown)} (known: {', '.join(SECURITY_FIELDS)})",
            )
        _check_policy_names(cfg)
        if cfg.restart_interval < 5:
            raise _bad("restart_interval", "must be at least 5s (Nomad's minimum)")
        if cfg.restart_attempts * cfg.restart_delay > cfg.restart_interval:
            raise _bad(
                "restart_interval",
                "restart_attempts x restart_delay must fit into restart_interval (Nomad rule)",
            )
        return cfg


NAMESPACE_FROM_POD = ("", "same", "table")
REGISTRY_AUTH = ("reject", "job", "client")
#: The task driver of each packaged template (``drivers``' default).
PACKAGED_DRIVERS = {"nomad/job.j2": "docker", "nomad/raw_exec.j2": "raw_exec"}
#: A task driver's name as Nomad's plugin names are written.
DRIVER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


#: Driver ``Config`` keys the policy on the rendered job holds to a rule, each of which
#: ``allow_driver_config`` may lift (the rules: translators/nomad/policy.py).
DRIVER_CONFIG_KEYS: tuple[str, ...] = (
    "privileged",
    "network_mode",
    "pid_mode",
    "ipc_mode",
    "uts_mode",
    "userns_mode",
    "cgroupns",
    "volumes",
    "mount",
    "mounts",
    "volume_driver",
    "devices",
    "cap_add",
    "security_opt",
    "runtime",
    "sysctl",
    "ulimit",
    "group_add",
    "oom_score_adj",
    "ipv4_address",
    "ipv6_address",
    "mac_address",
    "cgroup_v1_override",
    "cgroup_v2_override",
)
#: Job, group and task fields the policy refuses in a rendered job unless ``allow_job_fields``
#: lists them: each reaches beyond the pod (other runs of it, Consul and Vault identities,
#: service names other workloads resolve, a storage plugin with the client's privileges,
#: host volumes).
JOB_FIELDS: tuple[str, ...] = (
    "Periodic",
    "ParameterizedJob",
    "Multiregion",
    "Services",
    "Consul",
    "Vault",
    "CSIPluginConfig",
    "Volumes",
)


def _check_policy_names(cfg: NomadConfig) -> None:
    """``allow_driver_config`` and ``allow_job_fields`` name what the policy knows."""
    for key, known in (
        ("allow_driver_config", DRIVER_CONFIG_KEYS),
        ("allow_job_fields", JOB_FIELDS),
    ):
        unknown = sorted(set(getattr(cfg, key)) - set(known))
        if unknown:
            raise _bad(key, f"unknown {', '.join(unknown)} (known: {', '.join(known)})")
    bad = [d for d in cfg.drivers if not DRIVER_NAME.fullmatch(d)]
    if bad:
        raise _bad("drivers", f"expected Nomad task driver names, got {', '.join(map(repr, bad))}")


#: ``network_mode`` values: Nomad's group network modes vkgate renders (a CNI network's name is
#: the ``name`` of a conflist in the client's ``cni_config_dir``).
NETWORK_MODE = re.compile(r"host|bridge|cni/[A-Za-z0-9][A-Za-z0-9_.-]*")


def _check_namespace_mapping(cfg: NomadConfig) -> None:
    if cfg.namespace_from_pod not in NAMESPACE_FROM_POD:
        raise _bad(
            "namespace_from_pod", f'expected "", "same" or "table", got {cfg.namespace_from_pod!r}'
        )
    if cfg.namespace_map and cfg.namespace_from_pod != "table":
        raise _bad("namespace_map", 'is only read with namespace_from_pod = "table"')
    denied = sorted({v for v in cfg.namespace_map.values() if v not in cfg.all_namespaces})
    if denied:
        raise _bad(
            "namespace_map",
            f"Nomad namespaces {', '.join(map(repr, denied))} are not allowed (allowed: "
            f"{', '.join(cfg.all_namespaces)}; add them to backend.nomad.namespaces)",
        )


def _namespace_map(value: Any) -> dict[str, str]:
    """A TOML table, or ``"k8s-ns=nomad-ns,…"`` (the form an environment variable takes)."""
    key = _key("namespace_map")
    if isinstance(value, str):
        pairs = [p.split("=", 1) for p in value.split(",") if p.strip()]
        if any(len(p) != 2 for p in pairs):
            raise SettingsError(key, f'expected "k8s-ns=nomad-ns,…", got {value!r}')
        value = {k.strip(): v.strip() for k, v in pairs}
    if not isinstance(value, Mapping):
        raise SettingsError(key, f"expected a table of namespace names, got {value!r}")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str) or not k or not v:
            raise SettingsError(f"{key}.{k}", f"expected a Nomad namespace name, got {v!r}")
        out[k] = v
    return out


def _key(k: str) -> str:
    return f"backend.nomad.{k}"


def _bad(key: str, message: str) -> SettingsError:
    return SettingsError(_key(key), message)


#: key → (kind, lower bound, upper bound) for the keys the shared coercer reads as is.
_KINDS: dict[str, tuple[Kind, float | None, float | None]] = {
    "datacenters": ("strings", None, None),
    "namespaces": ("strings", None, None),
    "regions": ("strings", None, None),
    "allowed_datacenters": ("strings", None, None),
    "node_pools": ("strings", None, None),
    "relax_security_context": ("strings", None, None),
    "drivers": ("strings", None, None),
    "allow_driver_config": ("strings", None, None),
    "allow_job_fields": ("strings", None, None),
    "skip_verify": ("bool", None, None),
    "priority": ("int", 1, 100),
    "max_priority": ("int", 0, 100),
    "pods": ("int", 0, None),
    "restart_attempts": ("int", 0, None),
    "max_connections": ("int", 1, 99),  # Nomad allows 100 connections per client IP
    "max_log_streams": ("int", 1, 64),
    "stats_concurrency": ("int", 1, 256),
    "mhz_per_core": ("float", 0, None),
    "restart_interval": ("duration", 1, 7 * 86400),
    "restart_delay": ("duration", 0, 3600),
    "timeout": ("duration", 0.1, 3600),
    "connect_timeout": ("duration", 0.1, 600),
    "blocking_wait": ("duration", 1, 600),  # 0 would spin
    "stream_idle_timeout": ("duration", 0.1, 86400),
    "purge_timeout": ("duration", 0, 3600),
    "max_kill_timeout": ("duration", 1, 7 * 86400),
    "backstop_interval": ("duration", 1, 3600),  # 0 would spin
    "backstop_live_interval": ("duration", 10, 86400),
    "retry_backoff": ("durations", 0, 600),
}


def _coerce(key: str, value: Any) -> Any:
    if key in _KINDS:
        kind, lo, hi = _KINDS[key]
        out = coerce(_key(key), kind, value, lo=lo, hi=hi)
        if key == "datacenters" and not out:
            out = ("*",)
        return out
    if key == "namespace_map":
        return _namespace_map(value)
    try:
        if key == "default_cpu":
            cpu_millis(value)
            return str(value)
        if key == "default_memory":
            parse_quantity(value)
            return str(value)
    except ValueError as exc:
        raise _bad(key, str(exc)) from None
    if key == "registry_auth":
        return coerce(_key(key), "str", value, choices=REGISTRY_AUTH)
    value = coerce(_key(key), "str", value)
    if key in PATH_KEYS and "-----BEGIN" in value:
        raise _bad(key, "expected a file path, not PEM contents")
    if key == "network_mode" and not NETWORK_MODE.fullmatch(value):
        raise _bad(key, f'expected "host", "bridge" or "cni/<name>", got {value!r}')
    if key == "template" and not value.strip():
        raise _bad(key, "must name a template (e.g. nomad/job.j2 or nomad/raw_exec.j2)")
    if key == "address":
        if not re.match(r"^https?://", value):
            raise _bad(key, f"expected http(s)://host:port, got {value!r}")
        return value.rstrip("/")
    return value
