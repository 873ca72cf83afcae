"""Keystone authentication for the Zun backend: token, catalog endpoint, project id.

Configuration is loaded the way every OpenStack client loads it: openstacksdk's config loader
(``openstack.config.loader.OpenStackConfig``) reads ``clouds.yaml`` and ``secure.yaml`` from
the usual places (or ``$OS_CLIENT_CONFIG_FILE`` / ``$OS_CLIENT_SECURE_FILE``), expands vendor
profiles (``profile:``), selects the cloud (``cloud`` setting, ``$OS_CLOUD``, the ``OS_*``
variables) and region, and builds the keystoneauth session.  ``[backend.zun]`` keys (``auth``,
``auth_type``, ``region_name``, ``interface``, ``verify``, ``cacert``) override what it found.
See docs/design/zun.md, "Credentials".

keystoneauth1 is **synchronous** (``requests``), so every call into it runs in a worker thread
via ``asyncio.to_thread`` and an ``asyncio.Lock`` keeps concurrent requests from starting a
thundering herd of re-authentications.  The data path (``client.py``) never touches it: it
only asks for ``token()`` and ``endpoint()`` and calls ``invalidate()`` after a 401.
``requests_session`` is the transport seam for tests (a ``requests.Session`` with an adapter
that routes to the fake Keystone).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import functools
import logging
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from translators.base import BackendAuthError, BackendError, BackendUnavailable
from translators.zun.config import ZunConfig, ZunConfigError

if TYPE_CHECKING:
    from openstack.config.cloud_region import CloudRegion

log = logging.getLogger(__name__)

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

    @property
    def verify(self) -> bool | str:
        """TLS verification for the Zun endpoint too: on, off, or a CA bundle's path."""
        ...


def describe(region: CloudRegion) -> str:
    """Safe one-line description of a loaded cloud for logs (no secrets)."""
    auth = region.config.get("auth") or {}
    who = (
        auth.get("username")
        or auth.get("user_id")
        or ("app-credential " + str(auth.get("application_credential_id", "")))
    )
    where = f"cloud {region.name}" if region.name else "defaults"
    return f"{region.config.get('auth_type')} {who} @ {auth.get('auth_url', '?')} ({where})"


# --------------------------------------------------------------------------- loading


def _overrides(cfg: ZunConfig) -> dict[str, Any]:
    """``[backend.zun]`` values that win over clouds.yaml and ``OS_*`` (unset ones are left out)."""
    out: dict[str, Any] = {"api_timeout": cfg.timeout}
    if cfg.auth:
        out["auth"] = dict(cfg.auth)
    for key in ("auth_type", "region_name", "interface", "cacert"):
        if getattr(cfg, key):
            out[key] = getattr(cfg, key)
    if not cfg.verify:
        out["verify"] = False
    return out


def load_cloud_region(
    cfg: ZunConfig,
    *,
    session_constructor: Callable[..., Any] | None = None,
    vendor_files: list[str] | None = None,
) -> CloudRegion:
    """openstacksdk's config loader: clouds.yaml + secure.yaml + ``OS_*`` + vendor profile.

    ``cloud`` (else ``$OS_CLOUD``, else the ``OS_*`` variables, else the only cloud in
    clouds.yaml) selects the entry; ``[backend.zun]`` keys override it.  ``session_constructor``
    and ``vendor_files`` are seams for tests (a ``requests`` transport, a vendor file).
    """
    from keystoneauth1 import exceptions as ks
    from openstack import exceptions as os_exc
    from openstack.config import loader

    try:
        config = loader.OpenStackConfig(
            config_files=[cfg.clouds_file] if cfg.clouds_file else None,
            vendor_files=vendor_files,
            session_constructor=session_constructor,  # type: ignore[arg-type]
            app_name="vkgate",
        )
    except os_exc.ConfigException as exc:
        raise ZunConfigError("clouds_file", str(exc)) from None
    if cfg.clouds_file and config.config_filename is None:
        raise ZunConfigError("clouds_file", f"cannot read {cfg.clouds_file}")
    cloud = cfg.cloud or None
    try:
        with warnings.catch_warnings():
            # openstacksdk 4.x warns about InfluxDB on every CloudRegion even when no metrics
            # are configured (its empty default is a dict of Nones); nothing here uses it.
            warnings.filterwarnings("ignore", message="Support for InfluxDB requires")
            return config.get_one(cloud=cloud, **_overrides(cfg))
    except os_exc.ConfigException as exc:
        if "region" in str(exc).lower():
            raise ZunConfigError("region_name", str(exc)) from None
        clouds = ", ".join(sorted(config.cloud_config.get("clouds") or {})) or "none"
        where = config.config_filename or "no clouds.yaml found"
        raise ZunConfigError("cloud", f"{exc} ({where}; clouds: {clouds})") from None
    except ks.NoMatchingPlugin as exc:
        raise ZunConfigError("auth_type", f"unknown auth type: {exc}") from None
    except ks.MissingRequiredOptions as exc:
        names = ", ".join(o.dest for o in exc.options)
        if "auth_url" in names:
            raise ZunConfigError(
                "auth",
                "no Keystone credentials: set [backend.zun] cloud (clouds.yaml), OS_CLOUD, "
                f"or OS_AUTH_URL and friends (missing: {names})",
            ) from None
        raise ZunConfigError("auth", f"missing: {names}") from None


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
        region: CloudRegion,
        *,
        service_type: str = "container",
        endpoint_override: str = "",
    ) -> None:
        self.region = region
        self._plugin: Any = region.get_auth()
        self._session: Any = region.get_session()
        interface = region.get_interface()
        self.interface = str(interface[0] if isinstance(interface, list) else interface or "public")
        self.region_name = str(region.region_name or "")
        if not self._session.verify:
            log.warning("zun: TLS verification is OFF for Keystone and Zun (verify = false)")
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
                log.debug("zun: authenticated %s", describe(self.region))
            return self._token

    def _lookup_endpoint(self) -> str:
        from keystoneauth1 import exceptions as ks

        types = [self.service_type] + [t for t in SERVICE_TYPE_ALIASES if t != self.service_type]
        for service_type in types:
            try:
                url = self._session.get_endpoint(
                    service_type=service_type,
                    interface=self.interface,
                    region_name=self.region_name or None,
                    skip_discovery=True,
                )
            except ks.EndpointNotFound:
                url = None
            if url:
                return str(url).rstrip("/")
        region = f", region {self.region_name}" if self.region_name else ""
        raise BackendUnavailable(
            f"no {'/'.join(types)} endpoint in the service catalog "
            f"(interface {self.interface}{region})"
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

    def __init__(
        self, token: str, endpoint: str, project_id: str = "", *, verify: bool | str = True
    ) -> None:
        self._token = token
        self._endpoint = endpoint.rstrip("/")
        self._project = project_id
        self._verify = verify
        self.invalidations = 0

    @property
    def verify(self) -> bool | str:
        return self._verify

    async def token(self) -> str:
        return self._token

    async def endpoint(self) -> str:
        return self._endpoint

    async def project_id(self) -> str:
        return self._project

    async def invalidate(self) -> None:
        self.invalidations += 1


def build_auth(cfg: ZunConfig, *, requests_session: Any = None) -> KeystoneAuth:
    """The production ``ZunAuth`` for a config (raises ``ZunConfigError`` on bad credentials)."""
    constructor = None
    if requests_session is not None:
        from keystoneauth1 import session as ks_session

        constructor = functools.partial(ks_session.Session, session=requests_session)
    region = load_cloud_region(cfg, session_constructor=constructor)
    return KeystoneAuth(
        region, service_type=cfg.service_type, endpoint_override=cfg.endpoint_override
    )
