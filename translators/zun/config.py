"""Settings of the Zun backend (the ``[backend.zun]`` table), parsed once and validated.

``gateway.config`` keeps backend tables free-form, so this module is the one place that knows
the Zun keys.  Credentials are *not* required here: they may come from ``clouds.yaml``
(``cloud`` / ``$OS_CLOUD``) or ``OS_*`` variables, which ``translators.zun.auth`` resolves.
A bad value raises ``ZunConfigError`` naming ``backend.zun.<key>``, like the gateway's own
``ConfigError`` does.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vkgate_core.settings import SettingsError, coerce

#: Keys passed through to keystoneauth (``auth`` section of a clouds.yaml entry).
AUTH_KEYS = (
    "auth_url",
    "username",
    "user_id",
    "password",
    "project_name",
    "project_id",
    "user_domain_name",
    "user_domain_id",
    "project_domain_name",
    "project_domain_id",
    "domain_name",
    "domain_id",
    "application_credential_id",
    "application_credential_name",
    "application_credential_secret",
    "token",
)


class ZunConfigError(SettingsError):
    """A ``[backend.zun]`` setting is invalid (``key`` given without the ``backend.zun.``)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"backend.zun.{key}", message)


@dataclass(frozen=True)
class ZunConfig:
    """Every ``[backend.zun]`` key with its default (one-line docs in ``help``)."""

    cloud: str = ""
    clouds_file: str = ""
    auth_type: str = ""
    auth: Mapping[str, str] = field(default_factory=dict)
    region_name: str = ""
    interface: str = ""
    service_type: str = "container"
    endpoint_override: str = ""
    verify: bool = True
    cacert: str = ""
    microversion: str = "1.40"
    timeout: float = 30.0
    retry_backoff: tuple[float, ...] = (0.5, 1.0, 2.0)
    page_size: int = 500
    name_prefix: str = "vkgate"
    security_groups: tuple[str, ...] = ()
    nets: tuple[str, ...] = ()
    availability_zone: str = ""
    on_failure_max_retries: int = 3
    capsules: bool = True
    cinder_volumes: bool = True
    emptydir_size_gb: int = 1
    force_delete: bool = False
    stop_slack: float = 5.0
    delete_poll_interval: float = 2.0
    log_poll_interval: float = 1.0
    interactive_exec: bool = True
    send_image_pull_policy: bool = False
    cpu: str = ""
    memory: str = ""
    pods: int = 0
    use_hosts: bool = False
    secret_env: str = "reject"
    secret_files: str = "reject"
    template_keys: tuple[str, ...] = ()


#: Keys of a Zun container (and of a capsule's containers) a template may set to a value vkgate
#: did not compute only when ``template_keys`` names them (translators/zun/policy.py).
TEMPLATE_KEYS = ("host", "privileged", "runtime", "security_groups", "auto_remove", "hostname")
SECRET_CHOICES = ("reject", "allow")

HELP: dict[str, str] = {
    "cloud": "clouds.yaml entry; default $OS_CLOUD; empty and unset: OS_* variables",
    "clouds_file": "explicit clouds.yaml path (default: the usual openstacksdk search path)",
    "auth_type": "keystoneauth plugin (password, v3applicationcredential, token…)",
    "auth": "auth options overriding clouds.yaml / OS_* (auth_url, username, password…)",
    "region_name": "catalog region",
    "interface": "catalog interface: public (default), internal or admin",
    "service_type": "catalog service type (application-container is tried as a fallback)",
    "endpoint_override": "Zun endpoint URL ending in /v1; skips the catalog",
    "verify": "verify TLS certificates (never turn off in production)",
    "cacert": "CA bundle for Keystone and Zun",
    "microversion": "highest container microversion to ask for (negotiated down)",
    "timeout": "HTTP timeout per call, seconds",
    "retry_backoff": "retry delays in seconds for retryable failures (Retry-After wins)",
    "page_size": "limit per list page",
    "name_prefix": "Zun name prefix: <prefix>-<namespace>-<pod>",
    "security_groups": "default security groups (annotation vkgate.io/zun-security-groups)",
    "nets": "default network UUIDs (annotation vkgate.io/zun-nets)",
    "availability_zone": "default availability zone (annotation vkgate.io/zun-availability-zone)",
    "on_failure_max_retries": "MaximumRetryCount for restartPolicy OnFailure",
    "capsules": "use capsules for multi-container pods and init containers",
    "cinder_volumes": "back emptyDir volumes with auto-removed Cinder volumes",
    "emptydir_size_gb": "size of an emptyDir Cinder volume without sizeLimit (GB)",
    "force_delete": "use ?force=True after the grace period (admin only since 1.7)",
    "stop_slack": "seconds after the grace period before a delete is escalated",
    "delete_poll_interval": "seconds between checks while a stop/delete completes",
    "log_poll_interval": "seconds between log polls for kubectl logs -f",
    "send_image_pull_policy": "send imagePullPolicy for standalone containers (Zun's default "
    "policy container:create:image_pull_policy allows it to admins only: 403 otherwise)",
    "interactive_exec": "allow interactive exec through Zun's WebSocket URL (unverified upstream)",
    "cpu": "capacity override (quantity), else quotas",
    "memory": "capacity override (quantity), else quotas",
    "pods": "capacity override, else the containers quota",
    "use_hosts": "admin only: bound unlimited quotas by the sum of GET /hosts",
    "secret_env": "env from Secrets: reject (default: Zun keeps a container's environment in "
    "plain text, readable by anyone who can read the container) or allow",
    "secret_files": "Secret/projected/service-account-token file contents in the rendered body "
    "(a template placing them, e.g. in environment): reject (default) or allow",
    "template_keys": "container keys a template may set beyond vkgate's own values: host, "
    "privileged, runtime, security_groups, auto_remove, hostname (default none)",
}


def _strings(key: str, value: Any) -> tuple[str, ...]:
    out: tuple[str, ...] = coerce(f"backend.zun.{key}", "strings", value)
    return out


def _bool(key: str, value: Any) -> bool:
    return bool(coerce(f"backend.zun.{key}", "bool", value))


#: Inclusive bounds of the numeric settings: intervals of 0 would spin, timeouts of 0 never
#: connect (docs/design/config-bounds.md).
_BOUNDS: dict[str, tuple[float, float]] = {
    "timeout": (0.1, 3600),
    "page_size": (1, 10000),
    "on_failure_max_retries": (0, 1000),
    "emptydir_size_gb": (1, 16384),
    "stop_slack": (0, 3600),
    "delete_poll_interval": (0.1, 600),
    "log_poll_interval": (0.1, 600),
    "pods": (0, 1_000_000),
    "retry_backoff": (0, 600),
}


def _number(key: str, value: Any, kind: type[int] | type[float]) -> Any:
    lo, hi = _BOUNDS.get(key, (0, math.inf))
    return coerce(f"backend.zun.{key}", "int" if kind is int else "float", value, lo=lo, hi=hi)


def parse_microversion(text: str) -> tuple[int, int]:
    """``"1.40"`` → ``(1, 40)``; ``ValueError`` otherwise."""
    major, _, minor = text.strip().partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise ValueError(f"invalid microversion {text!r} (expected e.g. 1.40)")
    return int(major), int(minor)


def load_config(table: Mapping[str, Any]) -> ZunConfig:
    """Build a ``ZunConfig`` from the raw settings table; unknown keys are errors."""
    fields = {f.name: f for f in dataclasses.fields(ZunConfig)}
    kwargs: dict[str, Any] = {}
    auth: dict[str, str] = {}
    for key, value in table.items():
        if key in AUTH_KEYS:  # flat auth keys are accepted too: [backend.zun] password = …
            auth[key] = str(value)
            continue
        if key not in fields:
            known = ", ".join(sorted([*fields, *AUTH_KEYS]))
            raise ZunConfigError(key, f"unknown setting (known: {known})")
        default = fields[key].default
        if key == "auth":
            if not isinstance(value, Mapping):
                raise ZunConfigError(key, f"expected a table, got {value!r}")
            auth.update({str(k): str(v) for k, v in value.items()})
        elif key in {"security_groups", "nets", "template_keys"}:
            kwargs[key] = _strings(key, value)
        elif key == "retry_backoff":
            if isinstance(value, str | bytes) or not isinstance(value, Sequence):
                raise ZunConfigError(key, f"expected a list of seconds, got {value!r}")
            kwargs[key] = tuple(_number(key, v, float) for v in value)
        elif isinstance(default, bool):
            kwargs[key] = _bool(key, value)
        elif isinstance(default, int):
            kwargs[key] = _number(key, value, int)
        elif isinstance(default, float):
            kwargs[key] = _number(key, value, float)
        elif not isinstance(value, str):
            raise ZunConfigError(key, f"expected a string, got {value!r}")
        else:
            kwargs[key] = value
    kwargs["auth"] = auth
    cfg = ZunConfig(**kwargs)
    _validate(cfg)
    return cfg


def _validate(cfg: ZunConfig) -> None:
    try:
        parse_microversion(cfg.microversion)
    except ValueError as exc:
        raise ZunConfigError("microversion", str(exc)) from None
    if cfg.interface not in {"", "public", "internal", "admin"}:
        raise ZunConfigError(
            "interface", f"must be public, internal or admin, got {cfg.interface!r}"
        )
    if cfg.page_size < 1:
        raise ZunConfigError("page_size", "must be at least 1")
    if cfg.on_failure_max_retries < 0:
        raise ZunConfigError("on_failure_max_retries", "must be 0 or more")
    if cfg.timeout <= 0:
        raise ZunConfigError("timeout", "must be positive")
    if any(d < 0 for d in cfg.retry_backoff):
        raise ZunConfigError("retry_backoff", "delays must not be negative")
    for key in ("secret_env", "secret_files"):
        if getattr(cfg, key) not in SECRET_CHOICES:
            raise ZunConfigError(key, f"must be reject or allow, got {getattr(cfg, key)!r}")
    unknown = [k for k in cfg.template_keys if k not in TEMPLATE_KEYS]
    if unknown:
        raise ZunConfigError(
            "template_keys", f"{unknown[0]!r} is not one of {', '.join(TEMPLATE_KEYS)}"
        )
    if cfg.name_prefix and not cfg.name_prefix[0].isalnum():
        raise ZunConfigError("name_prefix", "must start with a letter or digit")
    from translators.base import parse_quantity

    for key in ("cpu", "memory"):
        value = getattr(cfg, key)
        if value:
            try:
                parse_quantity(value)
            except ValueError as exc:
                raise ZunConfigError(key, str(exc)) from None
