"""Settings: one TOML file (``vkgate.toml``) + ``VKGATE_*`` environment + CLI flags.

Precedence is flags > environment > file > defaults.  Every setting is a dataclass field with
a one-line docstring (the ``doc`` metadata) and a sane default; this module is the only place
that reads them.  Validation names the offending key (``node.kubelet_port: expected an integer
in 1..65535, got 'abc'``) so ``vkgate config check`` can point straight at it.

Environment: ``VKGATE_<SECTION>__<KEY>`` (double underscore between levels), e.g.
``VKGATE_NODE__NAME=vk-1`` or ``VKGATE_BACKEND__KIND=nomad``.  ``backend.kind`` may name any
installed backend; its ``[backend.<kind>]`` table is validated by that backend's spec
(``translators.plugins``), with the same error type (``SettingsError``, naming the key).  Keys
named like secrets (token, key, password, secret) are masked whenever settings are printed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from gateway.config import nodes as config_nodes
from gateway.names import TAINT_EFFECTS, label_value_error, qualified_name_error
from translators import plugins
from vkgate_core.settings import Setting, SettingsError, coerce, merge_tables

SECRET_KEY = re.compile(
    r"(token|password|passwd|secret|credential|account_key|api_key|private_key|application_credential)",
    re.IGNORECASE,
)
MASK = "*****"
#: ``node.daemonsets``: what the node does with a pod a DaemonSet owns (gateway.pods.resolve.admission).
DAEMONSET_POLICIES = ("refuse", "run")
#: ``node.ignore_pod_fields``: the probe and hook fields a node may run without where its backend
#: cannot honour them (gateway.pods.resolve.features.check_probes; docs/design/probes.md, "Ignored
#: fields"): a probe kind or a hook, alone (every handler) or with one handler.
PROBE_FIELDS = ("startupProbe", "readinessProbe", "livenessProbe")
PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
HOOK_FIELDS = ("lifecycle.postStart", "lifecycle.preStop")
HOOK_HANDLERS = ("exec", "httpGet", "tcpSocket", "sleep")
IGNORABLE_POD_FIELDS = (
    *PROBE_FIELDS,
    *(f"{p}.{h}" for p in PROBE_FIELDS for h in PROBE_HANDLERS),
    *HOOK_FIELDS,
    *(f"{k}.{h}" for k in HOOK_FIELDS for h in HOOK_HANDLERS),
)


class ConfigError(SettingsError):
    """A setting is missing or invalid; ``key`` is its dotted path.

    The gateway's name for ``vkgate_core.settings.SettingsError``: a backend's own settings
    errors are ``SettingsError`` too, so callers catch that one type."""


def doc(text: str, *, lo: float | None = None, hi: float | None = None) -> dict[str, Any]:
    """Field metadata: the one-line docstring and, for numbers, the inclusive bounds that
    ``validate`` enforces (docs/design/config-bounds.md says why each bound is what it is)."""
    meta: dict[str, Any] = {"doc": text}
    if lo is not None or hi is not None:
        meta["bounds"] = (lo, hi)
    return meta


@dataclass
class Taint:
    key: str = "virtual-kubelet.io/provider"
    value: str = ""
    effect: str = "NoSchedule"


@dataclass
class NodeSettings:
    name: str = field(default="vkgate", metadata=doc("Node name (also the Lease name)"))
    internal_ip: str = field(
        default="", metadata=doc("InternalIP to publish; default: backend's or 127.0.0.1")
    )
    labels: dict[str, str] = field(default_factory=dict, metadata=doc("Extra node labels"))
    taint: Taint | None = field(
        default_factory=Taint, metadata=doc("Provider taint (value defaults to backend kind)")
    )
    disable_taint: bool = field(default=False, metadata=doc("Register without the provider taint"))
    capacity: dict[str, str] = field(
        default_factory=dict, metadata=doc("Overrides: cpu, memory, pods, nvidia.com/gpu…")
    )
    status_interval: float = field(
        default=60.0, metadata=doc("Seconds between forced node status writes", lo=1, hi=3600)
    )
    lease_duration: int = field(
        default=40, metadata=doc("Lease duration in seconds", lo=10, hi=3600)
    )
    lease_renew_interval: float = field(
        default=10.0, metadata=doc("Seconds between Lease renewals", lo=1, hi=1800)
    )
    ping_interval: float = field(
        default=10.0, metadata=doc("Seconds between backend pings", lo=0.1, hi=3600)
    )
    ping_timeout: float = field(
        default=5.0, metadata=doc("Timeout of one backend ping", lo=0.1, hi=300)
    )
    ping_failures: int = field(
        default=3, metadata=doc("Failed pings in a row before Ready=False", lo=1, hi=100)
    )
    delete_on_shutdown: bool = field(
        default=False, metadata=doc("Delete the Node on clean shutdown")
    )
    exclude_from_load_balancers: bool = field(
        default=True,
        metadata=doc(
            "Label the Node node.kubernetes.io/exclude-from-external-load-balancers "
            "(false leaves a label already on the Node)"
        ),
    )
    daemonsets: str = field(
        default="refuse",
        metadata=doc("DaemonSet pods: refuse (Failed; the DaemonSet controller backs off) or run"),
    )
    ignore_pod_fields: list[str] = field(
        default_factory=list,
        metadata=doc(
            "Probe/hook fields run without (a Warning Event) where the backend cannot honour "
            "them, instead of refusing the pod: readinessProbe, livenessProbe.exec, "
            "lifecycle.preStop, …"
        ),
    )


@dataclass
class KubeSettings:
    kubeconfig: str = field(
        default="", metadata=doc("kubeconfig path; empty: $KUBECONFIG, in-cluster, ~/.kube/config")
    )
    context: str = field(default="", metadata=doc("kubeconfig context"))
    # Defaults for a node hosting thousands of pods: docs/design/kube-client.md, "Default limits".
    qps: float = field(
        default=200.0, metadata=doc("Client requests per second (token bucket)", lo=0.1, hi=10000)
    )
    burst: int = field(default=400, metadata=doc("Client burst", lo=1, hi=100000))
    event_qps: float = field(
        default=100.0, metadata=doc("Event writes per second (own budget)", lo=0.1, hi=10000)
    )
    event_burst: int = field(default=200, metadata=doc("Event write burst", lo=1, hi=100000))
    event_queue: int = field(
        default=50_000,
        metadata=doc("Events waiting to be written; more are dropped (counted)", lo=1, hi=1000000),
    )
    timeout: float = field(default=30.0, metadata=doc("Request timeout in seconds", lo=1, hi=600))


@dataclass
class KubeletSettings:
    address: str = field(
        default="0.0.0.0", metadata=doc("Listen address (default: all interfaces, as the kubelet)")
    )
    port: int = field(default=10250, metadata=doc("Kubelet HTTPS port", lo=1, hi=65535))
    cert_file: str = field(
        default="", metadata=doc("Serving certificate (PEM); empty: self-signed")
    )
    key_file: str = field(default="", metadata=doc("Serving key (PEM)"))
    client_ca_file: str = field(default="", metadata=doc("CA for client certificates"))
    anonymous: bool = field(
        default=False, metadata=doc("Allow anonymous requests (never in production)")
    )
    authorization: str = field(
        default="webhook", metadata=doc("webhook (SubjectAccessReview) or always-allow")
    )
    metrics_address: str = field(
        default="127.0.0.1:10255", metadata=doc("Plain-HTTP own metrics; empty disables")
    )
    enabled: bool = field(default=True, metadata=doc("Serve the kubelet API"))
    csr: bool = field(
        default=False,
        metadata=doc("Serving certificate from a CSR (signer kubernetes.io/kubelet-serving)"),
    )
    csr_self_approve: bool = field(
        default=False, metadata=doc("Approve our own serving CSR (needs the approve permission)")
    )


@dataclass
class PodSettings:
    workers: int = field(default=10, metadata=doc("Pod sync workers", lo=1, hi=1000))
    reconcile_interval: float = field(
        default=5.0, metadata=doc("Seconds between backend list reconciles", lo=0.5, hi=3600)
    )
    streamed_reconcile_interval: float = field(
        default=300.0,
        metadata=doc(
            "Seconds between backend list reconciles while the backend's change stream is"
            " connected (it reports every change then; the kubelet's evented PLEG relists"
            " every 300 s)",
            lo=0.5,
            hi=86400,
        ),
    )
    max_retries: int = field(
        default=10, metadata=doc("Create attempts before giving up", lo=1, hi=1000)
    )
    backoff_base: float = field(default=0.5, metadata=doc("First retry delay (s)", lo=0.01, hi=600))
    backoff_max: float = field(default=60.0, metadata=doc("Retry delay cap (s)", lo=0.01, hi=3600))
    rate_qps: float = field(
        default=20.0,
        metadata=doc("Retry rate limit (first attempts are not limited)", lo=0.1, hi=10000),
    )
    enable_service_links: bool = field(default=True, metadata=doc("Honour enableServiceLinks"))
    config_refresh_interval: float = field(
        default=30.0,
        metadata=doc(
            "Seconds between re-reads of ConfigMaps/Secrets that pods reference", lo=1, hi=86400
        ),
    )
    inputs_timeout: float = field(
        default=60.0,
        metadata=doc(
            "Seconds pod syncs wait for their inputs (templates, team labels, caches, the "
            "backend's first list) before the wait is the error InputsNotSynced; they keep waiting",
            lo=1,
            hi=86400,
        ),
    )


@dataclass
class TemplateSettings:
    dirs: list[str] = field(
        default_factory=list, metadata=doc("Extra template directories (searched first)")
    )
    configmap_namespace: str = field(
        default="", metadata=doc("Namespace of ConfigMaps labelled vkgate.io/templates=true")
    )
    teams: dict[str, str] = field(
        default_factory=dict,
        metadata=doc("namespace → team; the operator's map wins over a namespace's team label"),
    )
    team_label_namespaces: list[str] = field(
        default_factory=list,
        metadata=doc(
            "Namespaces (globs) whose label vkgate.io/team may choose their pods' team where "
            "templates.teams does not name them; [] (default): no label chooses (docs/design/teams.md)"
        ),
    )
    configmap_teams: dict[str, str] = field(
        default_factory=dict,
        metadata=doc(
            "template ConfigMap name → the team whose templates (teams/<team>/…) it defines; "
            "wins over the ConfigMap's team label"
        ),
    )
    team_label_configmaps: list[str] = field(
        default_factory=list,
        metadata=doc(
            "Template ConfigMaps (name globs) whose label vkgate.io/team may choose their team "
            "where templates.configmap_teams does not name them; [] (default): none"
        ),
    )
    global_configmaps: list[str] = field(
        default_factory=list,
        metadata=doc(
            "Template ConfigMaps (names) that may define templates outside teams/ (the global "
            "defaults); [] (default): none — global templates come from templates.dirs and the "
            "packaged templates only"
        ),
    )
    namespace_labels: bool = field(
        default=True,
        metadata=doc(
            "Read the team from the namespace label vkgate.io/team (lists and watches namespaces);"
            " false: templates.teams only, for identities that may not (system:node:<name>)"
        ),
    )
    default: dict[str, str] = field(
        default_factory=dict, metadata=doc("backend → default template name")
    )
    allowed: dict[str, list[str]] = field(
        default_factory=dict,
        metadata=doc('team → template name globs its pods may pick by annotation ("*": all)'),
    )
    render_workers: int = field(
        default=2,
        metadata=doc(
            "Processes that render templates, each with hard memory and CPU limits "
            "(docs/design/template-safety.md); 0: render inside the agent",
            lo=0,
            hi=64,
        ),
    )
    render_memory: int = field(
        default=160,
        metadata=doc("MiB a render worker may allocate beyond its start-up size", lo=64, hi=65536),
    )


@dataclass
class ProbeSettings:
    """``[probes]``: where the node's prober may dial (docs/design/probes.md, "What a probe may
    send, and where"); per node in ``[[nodes]]`` (``probes = { allow_host = true }``)."""

    allow_host: bool = field(
        default=False,
        metadata=doc(
            "Dial the host field of httpGet/tcpSocket probes and httpGet hooks when it is not "
            "the pod's own address (false: such a pod is refused, ProbeHostRefused)"
        ),
    )


@dataclass
class LogSettings:
    level: str = field(default="info", metadata=doc("debug, info, warning, error"))
    format: str = field(default="text", metadata=doc("text or json"))


@dataclass
class HaSettings:
    """Leader election on the Lease ``kube-node-lease/vkgate-leader-<node>`` (docs/design/ha.md)."""

    enabled: bool = field(
        default=False,
        metadata=doc("Stand by while another instance leads (false: refuse to start instead)"),
    )
    identity: str = field(
        default="", metadata=doc("Holder identity; default: $POD_NAME or hostname, plus a suffix")
    )
    lease_duration: float = field(
        default=10.0, metadata=doc("Seconds a leader's Lease is valid", lo=2.0, hi=300.0)
    )
    renew_deadline: float = field(
        default=7.0,
        metadata=doc("A leader stops writing when it could not renew this long", lo=1.0, hi=300.0),
    )
    retry_period: float = field(
        default=2.0, metadata=doc("Seconds between acquire/renew tries", lo=0.1, hi=60.0)
    )


@dataclass
class BackendSettings:
    """``[backend]``: ``kind`` plus one ``[backend.<kind>]`` table per backend, any installed one.

    The tables are the backends' own business: ``validate`` hands the configured backend's table
    to its spec (``translators.plugins``), which checks every key and reports the effective
    values (``effective``, with defaults and the environment variables it reads)."""

    kind: str = field(
        default=plugins.DEFAULT_KIND,
        metadata=doc("an installed backend (entry point group vkgate.translators)"),
    )
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The configured backend's effective settings, filled by ``validate``.
    effective: list[Setting] = field(default_factory=list, compare=False, repr=False)

    def table(self, kind: str = "") -> dict[str, Any]:
        return self.tables.get(kind or self.kind, {})


def _build_backend(data: Mapping[str, Any], prefix: str) -> BackendSettings:
    kind = coerce(f"{prefix}.kind", "str", data.get("kind", plugins.DEFAULT_KIND))
    tables: dict[str, dict[str, Any]] = {}
    for name, table in data.items():
        if name == "kind":
            continue
        if not isinstance(table, Mapping):
            raise ConfigError(f"{prefix}.{name}", f"expected a [{prefix}.{name}] table")
        tables[str(name)] = dict(table)
    return BackendSettings(kind=kind, tables=tables)


@dataclass
class Settings:
    node: NodeSettings = field(default_factory=NodeSettings)
    kube: KubeSettings = field(default_factory=KubeSettings)
    kubelet: KubeletSettings = field(default_factory=KubeletSettings)
    pods: PodSettings = field(default_factory=PodSettings)
    templates: TemplateSettings = field(default_factory=TemplateSettings)
    probes: ProbeSettings = field(default_factory=ProbeSettings)
    log: LogSettings = field(default_factory=LogSettings)
    backend: BackendSettings = field(default_factory=BackendSettings)
    ha: HaSettings = field(default_factory=HaSettings)
    #: ``[[nodes]]`` (gateway.config.nodes): each virtual node's whole effective settings,
    #: the sections above being their shared defaults; empty: the one node of ``[node]``.
    nodes: list[Settings] = field(default_factory=list)

    def units(self) -> list[Settings]:
        """The settings of every virtual node this process serves, in file order."""
        return self.nodes or [self]


T = TypeVar("T")


def _coerce(key: str, tp: Any, value: Any) -> Any:
    origin = getattr(tp, "__origin__", None)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a table, got {value!r}")
        return _build(tp, value, key)
    scalar = {bool: "bool", int: "int", float: "float", str: "str"}.get(tp)
    if scalar is not None:
        try:
            return coerce(key, scalar, value)  # type: ignore[arg-type]
        except SettingsError as exc:
            raise ConfigError(exc.key, exc.message) from None
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a table, got {value!r}")
        val_tp = tp.__args__[1]
        if val_tp is Any:
            return dict(value)
        return {str(k): _coerce(f"{key}.{k}", val_tp, v) for k, v in value.items()}
    if origin is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(key, f"expected a list, got {value!r}")
        return [_coerce(f"{key}[{i}]", tp.__args__[0], v) for i, v in enumerate(value)]
    args = getattr(tp, "__args__", ())
    if type(None) in args:  # Optional[X]
        if value is None or value is False:
            return None
        inner = next(a for a in args if a is not type(None))
        return _coerce(key, inner, value)
    return value


def _build(cls: type[T], data: Mapping[str, Any], prefix: str) -> T:
    if cls is BackendSettings:
        return _build_backend(data, prefix)  # type: ignore[return-value]
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for k in data:
        if k not in names:
            path = f"{prefix}.{k}" if prefix else k
            raise ConfigError(path, f"unknown setting (known: {', '.join(sorted(names))})")
    kwargs = {k: _coerce(f"{prefix}.{k}" if prefix else k, hints[k], v) for k, v in data.items()}
    return cls(**kwargs)


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith("VKGATE_") or "__" not in name:
            continue
        parts = [p.lower() for p in name[len("VKGATE_") :].split("__")]
        cur = out
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = value
    return out


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in a nested dict (used for ``--set`` flags)."""
    parts = dotted.split(".")
    cur = data
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value


def _check_bounds(obj: Any, prefix: str) -> None:
    """Every numeric field with ``bounds`` metadata, recursively: finite and within bounds.

    A zero interval makes a loop spin (a reconcile every 0 s is 90+ % CPU), a negative timeout
    never returns; bounds keep every setting in the range where the agent still works."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}.{f.name}" if prefix else f.name
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            _check_bounds(value, key)
            continue
        bounds = f.metadata.get("bounds")
        if bounds is None or not isinstance(value, int | float) or isinstance(value, bool):
            continue
        lo, hi = bounds
        if (
            not math.isfinite(value)
            or (lo is not None and value < lo)
            or (hi is not None and value > hi)
        ):
            kind = "an integer" if isinstance(value, int) else "a number"
            raise ConfigError(key, f"expected {kind} in {_fmt(lo)}..{_fmt(hi)}, got {value!r}")


def _fmt(bound: float | None) -> str:
    if bound is None:
        return ""
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _check_names(s: Settings) -> None:
    for key, value in s.node.labels.items():
        if (err := qualified_name_error(key)) is not None:
            raise ConfigError(f"node.labels.{key}", f"invalid label key {err}")
        if (err := label_value_error(value)) is not None:
            raise ConfigError(f"node.labels.{key}", f"invalid label value {err}")
    taint = s.node.taint
    if taint is not None:
        if (err := qualified_name_error(taint.key)) is not None:
            raise ConfigError("node.taint.key", f"invalid taint key {err}")
        if (err := label_value_error(taint.value)) is not None:
            raise ConfigError("node.taint.value", f"invalid taint value {err}")
        if taint.effect not in TAINT_EFFECTS:
            raise ConfigError(
                "node.taint.effect",
                f"must be NoSchedule, PreferNoSchedule or NoExecute, got {taint.effect!r}",
            )
    for res in s.node.capacity:
        if (err := qualified_name_error(res)) is not None:
            raise ConfigError(f"node.capacity.{res}", f"invalid resource name {err}")
    _check_teams(s.templates)


def _check_teams(t: TemplateSettings) -> None:
    """Team names become template folders (``teams/<team>/``): label values, never empty; a
    template ConfigMap is either one team's or global, not both (docs/design/teams.md)."""
    for table, mapping in (("teams", t.teams), ("configmap_teams", t.configmap_teams)):
        for name, team in mapping.items():
            if not team or (err := label_value_error(team)) is not None:
                why = err if team else "must not be empty"
                raise ConfigError(f"templates.{table}.{name}", f"invalid team name {why}")
    for i, name in enumerate(t.global_configmaps):
        if name in t.configmap_teams:
            raise ConfigError(
                f"templates.global_configmaps[{i}]",
                f"ConfigMap {name!r} is also team {t.configmap_teams[name]!r}'s in "
                "templates.configmap_teams: a template ConfigMap is one team's or global",
            )


def validate(s: Settings, environ: Mapping[str, str] | None = None) -> Settings:
    """Check one node's settings (and the shared sections); fill ``backend.effective``."""
    try:
        spec = plugins.load(s.backend.kind)
    except plugins.PluginError as exc:
        raise ConfigError("backend.kind", str(exc)) from None
    _check_bounds(s, "")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", s.node.name):
        raise ConfigError("node.name", f"must be a DNS subdomain (lowercase), got {s.node.name!r}")
    if s.log.level.lower() not in {"debug", "info", "warning", "error"}:
        raise ConfigError(
            "log.level", f"must be debug, info, warning or error, got {s.log.level!r}"
        )
    if s.log.format not in {"text", "json"}:
        raise ConfigError("log.format", f"must be text or json, got {s.log.format!r}")
    _check_names(s)
    if not s.ha.renew_deadline < s.ha.lease_duration:
        raise ConfigError(
            "ha.renew_deadline",
            f"must be below ha.lease_duration ({s.ha.lease_duration}), got {s.ha.renew_deadline}",
        )
    if s.node.daemonsets not in DAEMONSET_POLICIES:
        raise ConfigError("node.daemonsets", f"must be refuse or run, got {s.node.daemonsets!r}")
    for i, name in enumerate(s.node.ignore_pod_fields):
        if name not in IGNORABLE_POD_FIELDS:
            raise ConfigError(
                f"node.ignore_pod_fields[{i}]",
                f"{name!r} is not a probe or hook field (a probe kind such as readinessProbe, "
                "optionally with a handler: livenessProbe.exec; or lifecycle.postStart / "
                "lifecycle.preStop, optionally with a handler: lifecycle.preStop.httpGet)",
            )
    if s.kubelet.authorization not in {"webhook", "always-allow"}:
        raise ConfigError(
            "kubelet.authorization",
            f"must be webhook or always-allow, got {s.kubelet.authorization!r}",
        )
    from vkgate_core.quantity import parse_quantity

    for res, q in s.node.capacity.items():
        try:
            parse_quantity(q)
        except ValueError as exc:
            raise ConfigError(f"node.capacity.{res}", str(exc)) from None
    if s.node.lease_renew_interval >= s.node.lease_duration:
        raise ConfigError(
            "node.lease_renew_interval",
            f"must be shorter than node.lease_duration ({s.node.lease_duration} s), "
            f"got {s.node.lease_renew_interval}",
        )
    if s.pods.backoff_base > s.pods.backoff_max:
        raise ConfigError(
            "pods.backoff_base",
            f"must not exceed pods.backoff_max ({s.pods.backoff_max}), got {s.pods.backoff_base}",
        )
    env = os.environ if environ is None else environ
    s.backend.effective = spec.settings(s.backend.table(), env, s.node.name)
    return s


def load(
    path: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Load and validate settings.  Raises ``ConfigError`` naming the key."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(str(p), "file not found") from None
        except IsADirectoryError:
            raise ConfigError(str(p), "is a directory, not a TOML file") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                str(p),
                f"not UTF-8 text (byte {exc.start}: {exc.object[exc.start : exc.start + 1]!r})",
            ) from None
        except OSError as exc:
            raise ConfigError(str(p), f"cannot read: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(str(p), f"invalid TOML: {exc}") from None
    env = os.environ if environ is None else environ
    data = merge_tables(data, _env_overrides(env))
    if overrides:
        data = merge_tables(data, overrides)
    if "nodes" not in data:
        return validate(_build(Settings, data, ""), env)
    return _load_nodes(data, env)


def _load_nodes(data: Mapping[str, Any], env: Mapping[str, str]) -> Settings:
    """``[[nodes]]``: the top level holds the shared defaults; every entry is built and
    validated as a whole ``Settings``, its errors named as in the entry (``nodes[1].…``)."""
    shared = _build(Settings, {k: v for k, v in data.items() if k != "nodes"}, "")
    try:
        tables = config_nodes.entry_tables(
            data,
            data["nodes"],
            node_keys=[f.name for f in dataclasses.fields(NodeSettings)],
            kubelet_keys=[f.name for f in dataclasses.fields(KubeletSettings)],
        )
    except SettingsError as exc:
        raise ConfigError(exc.key, exc.message) from None
    for i, table in enumerate(tables):
        try:
            shared.nodes.append(validate(_build(Settings, table, ""), env))
        except SettingsError as exc:
            raise ConfigError(config_nodes.rename_key(i, exc.key), exc.message) from None
    try:
        config_nodes.check_unique(
            [(n.node.name, n.kubelet.port, n.kubelet.enabled) for n in shared.nodes]
        )
    except SettingsError as exc:
        raise ConfigError(exc.key, exc.message) from None
    return shared


def node_settings(s: Settings, name: str | None = None) -> Settings:
    """The settings of the node ``name`` (``[[nodes]]``), or of the first node."""
    units = s.units()
    if not name:
        return units[0]
    for unit in units:
        if unit.node.name == name:
            return unit
    known = ", ".join(u.node.name for u in units)
    raise ConfigError("node", f"no node {name!r} in this configuration (nodes: {known})")


def masked(value: Any, key: str = "") -> Any:
    """A copy of a settings tree with secret-looking keys masked."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return {k: masked(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, key) for v in value]
    if key and SECRET_KEY.search(key) and value not in ("", None) and not key.endswith("_file"):
        return MASK
    return value


def to_toml(data: Mapping[str, Any], prefix: str = "") -> str:
    """Render a (masked) settings dict as TOML for ``vkgate config check``."""
    import json

    scalars: list[str] = []
    tables: list[str] = []
    for k, v in data.items():
        name = f"{prefix}.{k}" if prefix else k
        if isinstance(v, Mapping):
            tables.append(to_toml(v, name))
        elif isinstance(v, list) and v and all(isinstance(i, Mapping) for i in v):
            tables += [_array_table(name, item) for item in v]  # [[nodes]]
        elif v is None:
            scalars.append(f"# {k} = (unset)")
        else:
            scalars.append(f"{_toml_key(k)} = {json.dumps(v)}")
    head = f"[{prefix}]\n" if prefix and scalars else ""
    out = head + "".join(s + "\n" for s in scalars)
    return out + ("\n" if out and tables else "") + "\n".join(t for t in tables if t)


def _array_table(name: str, item: Mapping[str, Any]) -> str:
    """One ``[[name]]`` entry: its scalars, then its sub-tables as ``[name.sub]``."""
    scalars = {k: v for k, v in item.items() if not isinstance(v, Mapping)}
    subs = {k: v for k, v in item.items() if isinstance(v, Mapping)}
    body = to_toml(scalars).strip("\n")
    out = f"[[{name}]]\n" + (body + "\n" if body else "")
    return out + "".join(to_toml(v, f"{name}.{k}") for k, v in subs.items())


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else f'"{k}"'


def _toml_value(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, list | tuple | set | frozenset):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(str(value))


def check_report(s: Settings) -> str:
    """``vkgate config check``: the effective settings as TOML, secrets masked; the backend's
    table shows every key — defaults and values read from the environment marked as such.
    With ``[[nodes]]``: the shared sections once, then each node's own node, kubelet and
    backend sections under a ``# nodes[i]`` heading."""
    if not s.nodes:
        data = masked(s)
        data.pop("backend", None)
        data.pop("nodes", None)
        return _report(to_toml(data), s)
    shared = masked(s)
    for key in ("node", "backend", "nodes", *config_nodes.PER_NODE_TABLES):
        shared.pop(key, None)
    out = [to_toml(shared).rstrip("\n"), ""]
    for i, node in enumerate(s.nodes):
        out.append(f"# ---- nodes[{i}]: {node.node.name} ({node.backend.kind}) ----")
        own = {k: masked(getattr(node, k)) for k in ("node", *config_nodes.PER_NODE_TABLES)}
        own.pop("backend")
        out.append(_report(to_toml(own), node))
    return "\n".join(out)


def _report(head: str, s: Settings) -> str:
    kind = s.backend.kind
    lines = [head.rstrip("\n"), "", "[backend]", f"kind = {_toml_value(kind)}", ""]
    lines.append(f"[backend.{_toml_key(kind)}]")
    prefix = f"backend.{kind}."
    env_lines = []
    for item in s.backend.effective:
        key = item.key.removeprefix(prefix)
        value = masked({key.rsplit(".", 1)[-1]: item.value})[key.rsplit(".", 1)[-1]]
        if key.startswith("env."):  # a variable the backend's client library reads itself
            env_lines.append(f"# {key[4:]} = {_toml_value(value)}  (environment)")
            continue
        if value is None:
            lines.append(f"# {_toml_key(key)} = (unset)")
            continue
        note = "" if item.source == "file" else f"  # {item.source}"
        lines.append(f"{_toml_key(key)} = {_toml_value(value)}{note}")
    if env_lines:
        lines += ["# read from the environment by the backend's client library:", *env_lines]
    return "\n".join(lines) + "\n"
