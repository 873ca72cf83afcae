"""Settings of the Azure Batch backend (``[backend.batch]`` in vkgate.toml).

The gateway hands the table over untouched (``TranslatorContext.settings``); this module is the one
place that reads and validates it, so a typo fails at startup naming the key
(``backend.batch.pool_id: required``).  Secrets may come from the environment instead of the file:
``VKGATE_BACKEND__BATCH__ACCOUNT_KEY`` (the generic settings mechanism) or the Azure CLI's
conventional ``AZURE_BATCH_ACCOUNT`` / ``AZURE_BATCH_ACCESS_KEY`` / ``AZURE_BATCH_ENDPOINT``.

Credentials follow the Azure SDK convention (docs/design/batch.md, "Credentials"): a shared key when one is
configured (``account_key`` or ``$AZURE_BATCH_ACCESS_KEY``), otherwise azure-identity's
``DefaultAzureCredential`` (``AZURE_TENANT_ID`` / ``AZURE_CLIENT_ID`` / ``AZURE_CLIENT_SECRET``,
workload identity, managed identity, the Azure CLI login …).  ``auth = "shared_key"`` or
``"azure_identity"`` forces one; the default ``auto`` picks as described.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vkgate_core.settings import SettingsError, coerce

ENV_ACCOUNT = "AZURE_BATCH_ACCOUNT"
ENV_KEY = "AZURE_BATCH_ACCESS_KEY"
ENV_ENDPOINT = "AZURE_BATCH_ENDPOINT"

#: Task fields a template may set only when ``template_keys`` names them
#: (translators/batch/policy.py).
TEMPLATE_KEYS = (
    "userIdentity",
    "resourceFiles",
    "authenticationTokenSettings",
    "containerHostBatchBindMounts",
    "identityReference",
)
_OPTION = re.compile(r"--[a-z0-9][a-z0-9-]*")
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_PREFIX = re.compile(r"[A-Za-z0-9_-]{0,16}")
_SECRETISH = re.compile(r"(key|password|secret|token|credential)", re.IGNORECASE)


class BatchSettingsError(SettingsError):
    """A ``[backend.batch]`` setting is missing or invalid (``key`` without ``backend.batch.``)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"backend.batch.{key}", message)


@dataclass(frozen=True)
class Registry:
    """Container registry credentials put into ``containerSettings.registry``."""

    server: str = ""
    username: str = ""
    password: str = field(default="", repr=False)


@dataclass(frozen=True)
class VmSize:
    cpus: float
    memory_bytes: int
    gpus: int = 0


@dataclass(frozen=True)
class BatchSettings:
    endpoint: str
    """``https://<account>.<region>.batch.azure.com`` (or a loopback fake in tests)."""
    pool_id: str
    """The pool every task of this virtual node runs on."""
    job_id: str
    """vkgate's job for this node; default ``vkgate-<node name>``."""
    auth: str = "shared_key"
    """Resolved: ``shared_key`` (account_name + account_key) or ``azure_identity``."""
    account_name: str = ""
    account_key: str = field(default="", repr=False)
    api_version: str = ""
    """Empty: the SDK default."""
    task_id_prefix: str = "vk-"
    on_failure_retries: int = 3
    """maxTaskRetryCount for restartPolicy OnFailure (-1 = unlimited)."""
    always: str = "retry"
    """restartPolicy Always: ``retry`` (maxTaskRetryCount -1, a clean exit ends the pod) or
    ``reject``."""
    cores_per_slot: float = 0.0
    """CPU cores one task slot stands for; 0: pool VM cores ÷ taskSlotsPerNode (else 1)."""
    resource_limits: str = "auto"
    """``auto`` (docker --cpus/--memory on dockerCompatible pools), ``always`` or ``never``."""
    container_run_options: str = ""
    """Appended to every task's containerRunOptions (the operator's own text, not checked)."""
    template_run_options: tuple[str, ...] = ()
    """docker options a task template may add to containerRunOptions besides vkgate's own
    (``--shm-size``, …; written ``--name=value`` or as a flag); default none."""
    template_keys: tuple[str, ...] = ()
    """Task fields a template may set beyond what vkgate builds (``TEMPLATE_KEYS``); default
    none."""
    working_directory: str = "containerImageDefault"
    elevation: str = ""
    """``admin`` or ``nonadmin`` to set userIdentity.autoUser; empty: the pool default."""
    retention: str = ""
    """constraints.retentionTime (ISO 8601) for finished tasks; empty: service default."""
    registry: Registry = Registry()
    file_volumes: str = "shell"
    """ConfigMap/Secret volumes: ``shell`` (written by a /bin/sh wrapper from env) or ``reject``."""
    max_file_volume_bytes: int = 65536
    secret_env: str = "allow"
    """Secret values: ``allow`` (env and Secret/projected/service-account-token files travel in
    plain environmentSettings; Batch has no secure task env) or ``reject`` (such pods are
    refused, and so is a template that places a Secret value in the task)."""
    vm_sizes: Mapping[str, VmSize] = field(default_factory=dict)
    """Extra / overriding VM sizes (lower-case name → cores, memory, gpus)."""
    capacity: Mapping[str, str] = field(default_factory=dict)
    """Capacity overrides (cpu, memory, pods, nvidia.com/gpu); they win over the pool."""
    node_refresh_seconds: float = 30.0
    capacity_refresh_seconds: float = 60.0
    full_relist_seconds: float = 600.0
    """A list without the incremental $filter at least this often."""
    log_poll_seconds: float = 1.0
    request_timeout: float = 30.0
    retry_delays: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    """Backoff steps for 429/503 (Retry-After wins when the service sends it)."""
    max_retry_after: float = 60.0
    max_collection_tasks: int = 100
    max_collection_bytes: int = 1_000_000
    submit_linger: float = 0.02
    """Seconds a create waits for others to share its add-task-collection call."""
    task_template: str = "batch/task.j2"
    job_template: str = "batch/_job.j2"

    def template_view(self) -> dict[str, Any]:
        """The settings a template may see: everything but credentials."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if _SECRETISH.search(f.name) or f.name == "registry":
                continue
            value = getattr(self, f.name)
            if f.name == "vm_sizes":
                value = {k: dataclasses.asdict(v) for k, v in value.items()}
            out[f.name] = list(value) if isinstance(value, tuple) else value
        out["registry_server"] = self.registry.server
        return out


def _str(table: Mapping[str, Any], key: str, default: str = "") -> str:
    return str(coerce(f"backend.batch.{key}", "str", table.get(key, default)))


#: Inclusive bounds of the float settings: refresh and poll intervals of 0 would spin, a
#: timeout of 0 never answers (docs/design/config-bounds.md).
_BOUNDS: dict[str, tuple[float, float]] = {
    "cores_per_slot": (0, 1024),
    "node_refresh_seconds": (1, 86400),
    "capacity_refresh_seconds": (1, 86400),
    "full_relist_seconds": (10, 86400),
    "log_poll_seconds": (0.1, 600),
    "request_timeout": (0.1, 3600),
    "max_retry_after": (0, 3600),
    "submit_linger": (0, 10),
}


def _num(table: Mapping[str, Any], key: str, default: float) -> float:
    lo, hi = _BOUNDS.get(key, (0, math.inf))
    return float(coerce(f"backend.batch.{key}", "float", table.get(key, default), lo=lo, hi=hi))


def _int(table: Mapping[str, Any], key: str, default: int, *, minimum: int = 0) -> int:
    return int(coerce(f"backend.batch.{key}", "int", table.get(key, default), lo=minimum))


def _choice(table: Mapping[str, Any], key: str, default: str, choices: tuple[str, ...]) -> str:
    value = table.get(key, default)
    return str(coerce(f"backend.batch.{key}", "str", value, choices=choices))


def _names(
    table: Mapping[str, Any], key: str, ok: Callable[[str], bool], what: str
) -> tuple[str, ...]:
    names: tuple[str, ...] = coerce(f"backend.batch.{key}", "strings", table.get(key, ()))
    for name in names:
        if not ok(name):
            raise BatchSettingsError(key, f"{name!r} is not {what}")
    return names


def sanitize_id(raw: str) -> str:
    """A Batch id from free text: allowed characters kept, others → ``-``, ≤ 64 chars."""
    out = re.sub(r"[^A-Za-z0-9_-]", "-", raw)[:64]
    return out or "vkgate"


def _vm_sizes(raw: Any) -> dict[str, VmSize]:
    from translators.base import cpu_millis, parse_quantity

    if not isinstance(raw, Mapping):
        raise BatchSettingsError("vm_sizes", f"expected a table, got {raw!r}")
    out: dict[str, VmSize] = {}
    for name, spec in raw.items():
        key = f"vm_sizes.{name}"
        if not isinstance(spec, Mapping) or "cpu" not in spec or "memory" not in spec:
            raise BatchSettingsError(key, "expected a table with cpu and memory")
        try:
            out[str(name).lower()] = VmSize(
                cpus=cpu_millis(str(spec["cpu"])) / 1000,
                memory_bytes=int(parse_quantity(str(spec["memory"]))),
                gpus=int(spec.get("gpus", 0)),
            )
        except (TypeError, ValueError) as exc:
            raise BatchSettingsError(key, str(exc)) from None
    return out


def parse_settings(
    table: Mapping[str, Any], *, node_name: str, environ: Mapping[str, str] | None = None
) -> BatchSettings:
    """Validate a ``[backend.batch]`` table (plus environment fallbacks) into ``BatchSettings``."""
    env = environ or {}
    known = {f.name for f in dataclasses.fields(BatchSettings)}
    for k in table:
        if k not in known:
            raise BatchSettingsError(k, f"unknown setting (known: {', '.join(sorted(known))})")

    auth = _choice(table, "auth", "auto", ("auto", "shared_key", "azure_identity"))
    account = _str(table, "account_name") or env.get(ENV_ACCOUNT, "")
    key = _str(table, "account_key") or env.get(ENV_KEY, "")
    if auth == "auto":
        auth = "shared_key" if key else "azure_identity"
    endpoint = _str(table, "endpoint") or env.get(ENV_ENDPOINT, "")
    if not endpoint:
        raise BatchSettingsError(
            "endpoint", "required (https://<account>.<region>.batch.azure.com)"
        )
    if not re.match(r"https?://", endpoint):
        raise BatchSettingsError("endpoint", f"expected an http(s) URL, got {endpoint!r}")
    if auth == "shared_key":
        if not account:
            raise BatchSettingsError(
                "account_name", f"required for shared_key auth (or ${ENV_ACCOUNT})"
            )
        if not key:
            raise BatchSettingsError("account_key", f"required for shared_key auth (or ${ENV_KEY})")
        try:
            base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            raise BatchSettingsError(
                "account_key", "is not base64 (copy the key from the portal)"
            ) from None

    pool_id = _str(table, "pool_id")
    if not pool_id:
        raise BatchSettingsError("pool_id", "required")
    job_id = _str(table, "job_id") or sanitize_id(f"vkgate-{node_name}")
    for k, v in (("pool_id", pool_id), ("job_id", job_id)):
        if not _ID.fullmatch(v):
            raise BatchSettingsError(k, f"must be 1-64 letters, digits, '-' or '_', got {v!r}")
    prefix = _str(table, "task_id_prefix", "vk-")
    if not _PREFIX.fullmatch(prefix):
        raise BatchSettingsError(
            "task_id_prefix", f"must be 0-16 letters, digits, '-' or '_', got {prefix!r}"
        )

    reg = table.get("registry", {}) or {}
    if not isinstance(reg, Mapping):
        raise BatchSettingsError("registry", f"expected a table, got {reg!r}")
    unknown = set(reg) - {"server", "username", "password"}
    if unknown:
        raise BatchSettingsError(f"registry.{sorted(unknown)[0]}", "unknown setting")
    registry = Registry(
        server=str(reg.get("server", "")),
        username=str(reg.get("username", "")),
        password=str(reg.get("password", "")),
    )
    if registry.server and not (registry.username and registry.password):
        raise BatchSettingsError("registry", "server needs username and password")

    delays_raw = table.get("retry_delays", (1.0, 2.0, 4.0, 8.0))
    if isinstance(delays_raw, str):
        delays_raw = [d for d in delays_raw.split(",") if d.strip()]
    try:
        delays = tuple(float(d) for d in delays_raw)
    except (TypeError, ValueError):
        raise BatchSettingsError(
            "retry_delays", f"expected a list of seconds, got {delays_raw!r}"
        ) from None

    capacity = table.get("capacity", {}) or {}
    if not isinstance(capacity, Mapping):
        raise BatchSettingsError("capacity", f"expected a table, got {capacity!r}")

    max_tasks = _int(table, "max_collection_tasks", 100, minimum=1)
    if max_tasks > 100:
        raise BatchSettingsError("max_collection_tasks", "the service accepts at most 100")

    return BatchSettings(
        endpoint=endpoint.rstrip("/"),
        pool_id=pool_id,
        job_id=job_id,
        auth=auth,
        account_name=account,
        account_key=key,
        api_version=_str(table, "api_version"),
        task_id_prefix=prefix,
        on_failure_retries=_int(table, "on_failure_retries", 3, minimum=-1),
        always=_choice(table, "always", "retry", ("retry", "reject")),
        cores_per_slot=_num(table, "cores_per_slot", 0.0),
        resource_limits=_choice(table, "resource_limits", "auto", ("auto", "always", "never")),
        container_run_options=_str(table, "container_run_options"),
        template_run_options=_names(
            table,
            "template_run_options",
            lambda n: bool(_OPTION.fullmatch(n)),
            "a long docker option name (--name)",
        ),
        template_keys=_names(
            table,
            "template_keys",
            lambda n: n in TEMPLATE_KEYS,
            f"one of {', '.join(TEMPLATE_KEYS)}",
        ),
        working_directory=_choice(
            table,
            "working_directory",
            "containerImageDefault",
            ("containerImageDefault", "taskWorkingDirectory"),
        ),
        elevation=_choice(table, "elevation", "", ("", "admin", "nonadmin")),
        retention=_str(table, "retention"),
        registry=registry,
        file_volumes=_choice(table, "file_volumes", "shell", ("shell", "reject")),
        max_file_volume_bytes=_int(table, "max_file_volume_bytes", 65536),
        secret_env=_choice(table, "secret_env", "allow", ("allow", "reject")),
        vm_sizes=_vm_sizes(table.get("vm_sizes", {}) or {}),
        capacity={str(k): str(v) for k, v in capacity.items()},
        node_refresh_seconds=_num(table, "node_refresh_seconds", 30.0),
        capacity_refresh_seconds=_num(table, "capacity_refresh_seconds", 60.0),
        full_relist_seconds=_num(table, "full_relist_seconds", 600.0),
        log_poll_seconds=_num(table, "log_poll_seconds", 1.0),
        request_timeout=_num(table, "request_timeout", 30.0),
        retry_delays=delays,
        max_retry_after=_num(table, "max_retry_after", 60.0),
        max_collection_tasks=max_tasks,
        max_collection_bytes=_int(table, "max_collection_bytes", 1_000_000, minimum=1024),
        submit_linger=_num(table, "submit_linger", 0.02),
        task_template=_str(table, "task_template", "batch/task.j2"),
        job_template=_str(table, "job_template", "batch/_job.j2"),
    )
