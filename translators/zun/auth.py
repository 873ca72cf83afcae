"""Keystone authentication for the Zun backend: token, catalog endpoint, project id.

keystoneauth1 (the library openstacksdk uses) does the Keystone protocol: plugins for
passwords, application credentials and tokens, the service catalog, token caching.  It is
**synchronous** (``requests``), so every call into it runs in a worker thread via
``asyncio.to_thread`` and an ``asyncio.Lock`` keeps concurrent requests from starting a
thundering herd of re-authentications.  The data path (``client.py``) never touches it: it
only asks for ``token()`` and ``endpoint()`` and calls ``invalidate()`` after a 401.

Where credentials come from, first match wins for each value:

1. ``[backend.zun]`` keys (``auth`` table or flat ``auth_url``/``password``…),
2. the ``clouds.yaml`` entry named by ``cloud`` or ``$OS_CLOUD`` (plus ``secure.yaml``),
3. ``OS_*`` environment variables (``OS_AUTH_URL``, ``OS_USERNAME`` …).

openstacksdk is deliberately not used to read clouds.yaml: it is a large dependency with no
Zun support, and the file format needed here is small.  ``requests_session`` is the transport
seam for tests (a ``requests.Session`` with an adapter that routes to the fake Keystone).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from translators.base import BackendAuthError, BackendError, BackendUnavailable
from translators.zun.config import AUTH_KEYS, ZunConfig, ZunConfigError

log = logging.getLogger(__name__)

#: Environment variable → keystoneauth option.
ENV_AUTH = {f"OS_{k.upper()}": k for k in AUTH_KEYS}
ENV_AUTH["OS_TENANT_NAME"] = "project_name"
ENV_AUTH["OS_TENANT_ID"] = "project_id"

#: The official name of the service type; python-zunclient and most catalogs use "container".
SERVICE_TYPE_ALIASES = ("container", "application-container")

#: Re-authenticate this many seconds before the token's expiry.
STALE_SECONDS = 60


class ZunAuth(Protocol):
    """What the HTTP client needs from authentication."""

    async def token(self) -> str: ...

    async def endpoint(self) -> str:
        """The Zun endpoint, ending in ``/v1``."""
        ...

    async def project_id(self) -> str: ...

    async def invalidate(self) -> None:
        """Forget the token (after a 401); the next ``token()`` re-authenticates."""
        ...


@dataclass(frozen=True)
class Credentials:
    """Everything needed to build a keystoneauth session (secrets included: never log)."""

    auth_type: str
    auth: Mapping[str, str]
    region_name: str = ""
    interface: str = "public"
    verify: bool = True
    cacert: str = ""
    source: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """Safe one-line description for logs (no secrets)."""
        who = (
            self.auth.get("username")
            or self.auth.get("user_id")
            or ("app-credential " + self.auth.get("application_credential_id", ""))
        )
        return f"{self.auth_type} {who} @ {self.auth.get('auth_url', '?')} (from {self.source})"


# --------------------------------------------------------------------------- clouds.yaml


def clouds_yaml_paths(environ: Mapping[str, str], name: str = "clouds.yaml") -> list[Path]:
    """openstacksdk's search order: $OS_CLIENT_CONFIG_FILE, ./, ~/.config/openstack, /etc."""
    paths: list[Path] = []
    if name == "clouds.yaml" and environ.get("OS_CLIENT_CONFIG_FILE"):
        paths.append(Path(environ["OS_CLIENT_CONFIG_FILE"]))
    home = Path(environ.get("HOME", str(Path.home())))
    paths += [Path.cwd() / name, home / ".config/openstack" / name, Path("/etc/openstack") / name]
    return paths


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ZunConfigError("clouds_file", f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ZunConfigError("clouds_file", f"{path}: expected a mapping")
    return data


def load_cloud(
    cloud: str, *, clouds_file: str = "", environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The ``clouds.<cloud>`` entry, merged with the same entry of ``secure.yaml``."""
    env = os.environ if environ is None else environ
    candidates = [Path(clouds_file)] if clouds_file else clouds_yaml_paths(env)
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        where = ", ".join(str(p) for p in candidates)
        raise ZunConfigError("cloud", f"cloud {cloud!r} requested but no clouds.yaml in {where}")
    clouds = _read_yaml(found).get("clouds") or {}
    if cloud not in clouds:
        raise ZunConfigError(
            "cloud", f"no cloud {cloud!r} in {found} (has: {', '.join(sorted(clouds)) or 'none'})"
        )
    entry: dict[str, Any] = dict(clouds[cloud] or {})
    secure = next((p for p in clouds_yaml_paths(env, "secure.yaml") if p.is_file()), None)
    if secure is not None:
        extra = (_read_yaml(secure).get("clouds") or {}).get(cloud) or {}
        entry["auth"] = {**(entry.get("auth") or {}), **(extra.get("auth") or {})}
        entry.update({k: v for k, v in extra.items() if k != "auth"})
    entry["_source"] = f"{found}#{cloud}"
    return entry


def resolve_credentials(cfg: ZunConfig, environ: Mapping[str, str] | None = None) -> Credentials:
    """Merge settings, clouds.yaml and OS_* variables (see the module docstring)."""
    env = os.environ if environ is None else environ
    cloud_name = cfg.cloud or env.get("OS_CLOUD", "")
    auth: dict[str, str] = {}
    base: dict[str, Any] = {}
    if cloud_name:
        base = load_cloud(cloud_name, clouds_file=cfg.clouds_file, environ=env)
        auth.update({str(k): str(v) for k, v in (base.get("auth") or {}).items()})
        source = str(base["_source"])
    else:
        auth.update({opt: env[var] for var, opt in ENV_AUTH.items() if env.get(var)})
        base = {
            "region_name": env.get("OS_REGION_NAME", ""),
            "interface": env.get("OS_INTERFACE", ""),
            "auth_type": env.get("OS_AUTH_TYPE", ""),
            "cacert": env.get("OS_CACERT", ""),
        }
        source = "OS_* environment"
    if cfg.auth:
        auth.update(cfg.auth)
        source += " + settings"
    auth_type = cfg.auth_type or str(base.get("auth_type") or "")
    if not auth_type:
        if auth.get("application_credential_id") or auth.get("application_credential_name"):
            auth_type = "v3applicationcredential"
        elif auth.get("token") and not auth.get("password"):
            auth_type = "token"
        else:
            auth_type = "password"
    if not auth.get("auth_url"):
        raise ZunConfigError(
            "auth",
            "no Keystone credentials: set [backend.zun] cloud (clouds.yaml), OS_CLOUD, "
            "or OS_AUTH_URL and friends",
        )
    verify_value = base.get("verify", True)
    verify = cfg.verify and str(verify_value).lower() not in {"false", "0", "no"}
    return Credentials(
        auth_type=auth_type,
        auth=auth,
        region_name=cfg.region_name or str(base.get("region_name") or ""),
        interface=cfg.interface or str(base.get("interface") or "") or "public",
        verify=verify,
        cacert=cfg.cacert or str(base.get("cacert") or ""),
        source=source,
    )


# --------------------------------------------------------------------------- errors


def keystone_error(exc: BaseException) -> BackendError:
    """Map a keystoneauth exception to the translator error tree (one place)."""
    from keystoneauth1 import exceptions as ks

    text = str(exc)[:300]
    if isinstance(exc, ks.Unauthorized):
        return BackendAuthError(f"Keystone rejected the credentials: {text}", status=401)
    if isinstance(exc, ks.Forbidden):
        return BackendAuthError(f"Keystone refused access: {text}", status=403)
    if isinstance(exc, ks.SSLError):
        return BackendUnavailable(f"TLS verification of Keystone failed: {text}")
    if isinstance(exc, ks.ConnectionError):
        return BackendUnavailable(f"cannot reach Keystone: {text}")
    if isinstance(exc, ks.EndpointNotFound):
        return BackendUnavailable(f"no Zun endpoint in the service catalog: {text}")
    if isinstance(exc, ks.HttpError):
        status = getattr(exc, "http_status", None)
        return BackendUnavailable(f"Keystone error {status}: {text}", status=status)
    return BackendUnavailable(f"Keystone: {type(exc).__name__}: {text}")


# --------------------------------------------------------------------------- implementations


class KeystoneAuth:
    """``ZunAuth`` on a keystoneauth1 session; every blocking call runs in a thread."""

    def __init__(
        self,
        creds: Credentials,
        *,
        service_type: str = "container",
        endpoint_override: str = "",
        timeout: float = 30.0,
        requests_session: Any = None,
    ) -> None:
        from keystoneauth1 import exceptions as ks
        from keystoneauth1 import loading
        from keystoneauth1 import session as ks_session

        try:
            loader: Any = loading.get_plugin_loader(creds.auth_type)
        except ks.NoMatchingPlugin:
            raise ZunConfigError("auth_type", f"unknown auth type {creds.auth_type!r}") from None
        dests = {o.dest for o in loader.get_options()}
        options = {k.replace("-", "_"): v for k, v in creds.auth.items()}
        try:
            self._plugin = loader.load_from_options(
                **{k: v for k, v in options.items() if k in dests}
            )
        except ks.MissingRequiredOptions as exc:
            names = ", ".join(o.dest for o in exc.options)
            raise ZunConfigError("auth", f"missing for {creds.auth_type}: {names}") from None
        verify: bool | str = creds.cacert if (creds.verify and creds.cacert) else creds.verify
        if not creds.verify:
            log.warning("zun: TLS verification is OFF for Keystone and Zun (verify = false)")
        self._session = ks_session.Session(
            auth=self._plugin, verify=verify, timeout=timeout, session=requests_session
        )
        self.creds = creds
        self.service_type = service_type
        self.endpoint_override = endpoint_override.rstrip("/")
        self._lock = asyncio.Lock()
        self._token = ""
        self._expires: _dt.datetime | None = None
        self._endpoint = ""
        self._project = ""
        self.authentications = 0

    @property
    def verify(self) -> bool | str:
        value: bool | str | None = self._session.verify
        return True if value is None else value

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except BackendError:
            raise
        except Exception as exc:
            raise keystone_error(exc) from exc

    def _fetch_token(self) -> tuple[str, str, _dt.datetime | None]:
        access = self._plugin.get_access(self._session)
        if access.will_expire_soon(stale_duration=STALE_SECONDS):
            self._plugin.invalidate()
            access = self._plugin.get_access(self._session)
        return str(access.auth_token), str(access.project_id or ""), access.expires

    def _fresh(self) -> bool:
        if not self._token:
            return False
        if self._expires is None:
            return True
        left = self._expires - _dt.datetime.now(_dt.UTC)
        return left.total_seconds() > STALE_SECONDS

    async def token(self) -> str:
        """The cached token; re-authenticates when it is missing or about to expire."""
        if self._fresh():
            return self._token
        async with self._lock:
            if not self._fresh():
                self._token, self._project, self._expires = await self._call(self._fetch_token)
                self.authentications += 1
                log.debug("zun: authenticated %s", self.creds.describe())
            return self._token

    def _lookup_endpoint(self) -> str:
        from keystoneauth1 import exceptions as ks

        types = [self.service_type] + [t for t in SERVICE_TYPE_ALIASES if t != self.service_type]
        for service_type in types:
            try:
                url = self._session.get_endpoint(
                    service_type=service_type,
                    interface=self.creds.interface,
                    region_name=self.creds.region_name or None,
                    skip_discovery=True,
                )
            except ks.EndpointNotFound:
                url = None
            if url:
                return str(url).rstrip("/")
        region = f", region {self.creds.region_name}" if self.creds.region_name else ""
        raise BackendUnavailable(
            f"no {'/'.join(types)} endpoint in the service catalog "
            f"(interface {self.creds.interface}{region})"
        )

    async def endpoint(self) -> str:
        if self.endpoint_override:
            return self.endpoint_override
        if not self._endpoint:
            await self.token()
            async with self._lock:
                if not self._endpoint:
                    self._endpoint = await self._call(self._lookup_endpoint)
        return self._endpoint

    async def project_id(self) -> str:
        if not self._project:
            await self.token()
        if not self._project:
            self._project = str(await self._call(self._session.get_project_id) or "")
        return self._project

    async def invalidate(self) -> None:
        async with self._lock:
            self._token = ""
            self._endpoint = ""
            await self._call(self._plugin.invalidate)


class StaticAuth:
    """A fixed token and endpoint (tests, or a pre-issued token with ``endpoint_override``)."""

    def __init__(self, token: str, endpoint: str, project_id: str = "") -> None:
        self._token = token
        self._endpoint = endpoint.rstrip("/")
        self._project = project_id
        self.invalidations = 0

    async def token(self) -> str:
        return self._token

    async def endpoint(self) -> str:
        return self._endpoint

    async def project_id(self) -> str:
        return self._project

    async def invalidate(self) -> None:
        self.invalidations += 1


def build_auth(
    cfg: ZunConfig, *, environ: Mapping[str, str] | None = None, requests_session: Any = None
) -> KeystoneAuth:
    """The production ``ZunAuth`` for a config (raises ``ZunConfigError`` on bad credentials)."""
    creds = resolve_credentials(cfg, environ)
    return KeystoneAuth(
        creds,
        service_type=cfg.service_type,
        endpoint_override=cfg.endpoint_override,
        timeout=cfg.timeout,
        requests_session=requests_session,
    )
