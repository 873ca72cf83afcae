"""Async HTTP client of the Zun API v1: microversions, re-auth, retries, one error mapping.

Design decisions:

* **Data path on httpx, auth on keystoneauth.**  Every call carries ``X-Auth-Token`` (from
  ``ZunAuth``) and ``OpenStack-API-Version: container 1.N``.  A 401 invalidates the token and
  the call is repeated once with a fresh one.
* **Negotiated microversion.**  ``negotiate()`` reads the server's advertised range
  (``OpenStack-API-Minimum/Maximum-Version`` on ``GET /v1``, else the version document at the
  root) and uses ``min(configured, server max)``.  Features that need a higher microversion are
  switched off with one log line each (``FEATURES``), never a crash.  A 406 later (the server
  was downgraded under us) triggers one re-negotiation and a retry.
* **One status → exception function** (``error_for``) into the ``translators.base`` tree, Zun's
  own cases in front of the shared ladder (translators/errors.py); Zun's error body
  ``{"errors": [{"detail": …}]}`` and Keystone's ``{"error": {"message": …}}`` are both
  understood; messages are truncated and never contain request bodies (env values).
* **Retries are data** (``retry_policy(delays)`` on the one retry layer,
  ``vkgate_core.retry.RetryTransport``, docs/design/retry.md): delays in seconds, ``Retry-After``
  honoured, 5xx only for idempotent calls; 429 and a connection refused before anything was sent
  for any call.
* **Transport seam**: ``transport=`` takes any ``httpx.AsyncBaseTransport`` (the stateful
  fake, respx, or the real network).  TLS is verified unless the config says otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from translators.base import (
    JSON,
    BackendError,
    BackendRejected,
    BackendThrottled,
    BackendUnavailable,
)
from translators.errors import status_error
from translators.zun.auth import ZunAuth
from translators.zun.config import parse_microversion
from vkgate_core.retry import IDEMPOTENT as IDEMPOTENT_REQUEST
from vkgate_core.retry import RetryPolicy, RetryTransport, parse_retry_after

log = logging.getLogger(__name__)

Version = tuple[int, int]

#: Microversion each optional feature needs (docs/design/zun.md, "Auth and microversions").
FEATURES: dict[str, tuple[Version, str]] = {
    "hostname": ((1, 9), "container hostname"),
    "async_delete": ((1, 10), "asynchronous container delete"),
    "mounts": ((1, 11), "container volume mounts (emptyDir as Cinder volume)"),
    "delete_stop": ((1, 12), "DELETE ?stop=True"),
    "command_list": ((1, 20), "command as a list (older: one shell-quoted string)"),
    "exposed_ports": ((1, 24), "exposed_ports from containerPort"),
    "quotas": ((1, 26), "capacity from quotas"),
    "registry": ((1, 31), "private registry logins (imagePullSecrets; /registries is 1.30)"),
    "capsules": ((1, 32), "capsules (multi-container pods)"),
    "capsule_init_containers": ((1, 34), "capsule initContainers"),
    "capsule_ports": ((1, 35), "capsule container ports"),
    "tty": ((1, 36), "container tty"),
    "capsule_tty": ((1, 37), "capsule tty/stdin"),
    "capsule_annotations": ((1, 38), "capsule annotations"),
    "entrypoint": ((1, 40), "entrypoint (pod command replaces the image ENTRYPOINT)"),
}

IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


def format_version(v: Version) -> str:
    return f"{v[0]}.{v[1]}"


def feature_flags(version: Version) -> dict[str, Any]:
    """``{feature: enabled}`` at ``version``, plus ``_version`` (what templates receive)."""
    flags: dict[str, Any] = {name: version >= need for name, (need, _) in FEATURES.items()}
    flags["_version"] = format_version(version)
    return flags


def _parse_header_version(value: str | None) -> Version | None:
    """``"container 1.40"`` (or ``"1.40"``) → ``(1, 40)``."""
    if not value:
        return None
    try:
        return parse_microversion(value.split()[-1])
    except ValueError:
        return None


class ZunQuotaExceeded(BackendThrottled):
    """Zun refused a create because the project's quota is used up (retry later)."""


def retry_policy(
    backoff: tuple[float, ...] = (0.5, 1.0, 2.0), *, max_retry_after: float = 60.0
) -> RetryPolicy:
    """Zun's policy on the one retry layer: ``backoff`` is the tuple of delays."""
    return RetryPolicy(
        delays=backoff,
        max_retry_after=max_retry_after,
        idempotent=IDEMPOTENT,
        statuses=RETRY_STATUSES,
    )


def _redact(detail: str) -> str:
    """Zun's schema errors echo the rejected value (``… Value: {'PASSWORD': …}. reason``),
    which may be a Secret-backed env value: keep the field, drop the value."""
    head, sep, _ = detail.partition("Value:")
    return f"{head.rstrip()} (value redacted)" if sep else detail


def error_detail(resp: httpx.Response) -> str:
    """The human message of a Zun or Keystone error body, truncated, values redacted."""
    return _redact(_raw_detail(resp))


def _raw_detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip()[:300]
    if isinstance(body, dict):
        errors = body.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            e = errors[0]
            return str(e.get("detail") or e.get("title") or e.get("code") or "")[:300]
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("message") or err.get("title") or "")[:300]
        if isinstance(err, str):
            return err[:300]
    return str(body)[:300]


def _retry_after(resp: httpx.Response) -> float | None:
    return parse_retry_after(resp.headers.get("Retry-After"))


def error_for(resp: httpx.Response, *, method: str, path: str) -> BackendError:
    """THE mapping of a failed Zun response to the translator error tree: Zun's own cases
    (image not found at create, quotas, microversions), then the one ladder of
    translators/errors.py."""
    status = resp.status_code
    detail = error_detail(resp)
    msg = f"Zun {method} {path}: {status} {detail}".rstrip()
    low = detail.lower()
    image_problem = "image" in low and ("not found" in low or "could not be found" in low)
    if status in (400, 404) and image_problem and method == "POST":
        return BackendRejected(msg, status=status, reason="ErrImagePull")
    if status in (400, 422):
        return BackendRejected(msg, status=status)
    if status == 403 and "quota" in low:
        return ZunQuotaExceeded(msg, status=403, retry_after=None)
    if status == 406:
        return BackendRejected(msg, status=406, reason="UnsupportedMicroversion")
    retry_after = _retry_after(resp)
    if status == 413:
        return ZunQuotaExceeded(msg, status=413, retry_after=retry_after)
    return status_error(
        status, msg, otherwise=_other, retry_after=retry_after, busy=retry_after is not None
    )


def _other(msg: str, status: int) -> BackendError:
    """A status Zun's mapping has no word for: a plain (retryable) backend error."""
    return BackendError(msg, status=status)


@dataclass
class Negotiated:
    version: Version
    server_min: Version
    server_max: Version
    disabled: tuple[str, ...] = field(default=())


class ZunClient:
    """Typed-enough calls of the Zun API; raw JSON dicts in and out."""

    def __init__(
        self,
        auth: ZunAuth,
        *,
        microversion: str = "1.40",
        transport: httpx.AsyncBaseTransport | None = None,
        verify: bool | str = True,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        page_size: int = 500,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self.auth = auth
        self.wanted = parse_microversion(microversion)
        self.retry = retry if retry is not None else retry_policy()
        self.page_size = page_size
        if transport is None:
            transport = httpx.AsyncHTTPTransport(verify=verify)
        self._http = httpx.AsyncClient(
            transport=RetryTransport(
                transport, policy=self.retry, sleep=sleep if sleep is not None else asyncio.sleep
            ),
            timeout=timeout,
            follow_redirects=False,
        )
        self.negotiated: Negotiated | None = None
        self._negotiate_lock = asyncio.Lock()
        #: (method, path template) → count, for tests and metrics.
        self.calls: dict[str, int] = {}

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- microversions -------------------------------------------------------------------

    @property
    def version(self) -> Version:
        return self.negotiated.version if self.negotiated else self.wanted

    def supports(self, feature: str) -> bool:
        return self.version >= FEATURES[feature][0]

    async def ensure_negotiated(self) -> Negotiated:
        if self.negotiated is None:
            await self.negotiate()
        assert self.negotiated is not None
        return self.negotiated

    async def negotiate(self) -> Negotiated:
        """Pick ``min(wanted, server max)`` from the server's advertised range."""
        async with self._negotiate_lock:
            endpoint = await self.auth.endpoint()
            token = await self.auth.token()
            lo, hi = await self._advertised(endpoint, token)
            chosen = min(self.wanted, hi)
            if chosen < lo:
                log.warning(
                    "zun: server minimum microversion %s is above the configured %s; using %s",
                    format_version(lo),
                    format_version(self.wanted),
                    format_version(lo),
                )
                chosen = lo
            disabled = tuple(name for name, (need, _) in FEATURES.items() if chosen < need)
            previous = self.negotiated
            self.negotiated = Negotiated(chosen, lo, hi, disabled)
            if previous is None or previous.version != chosen:
                log.info(
                    "zun: using microversion container %s (server %s-%s)",
                    format_version(chosen),
                    format_version(lo),
                    format_version(hi),
                )
                for name in disabled:
                    need, what = FEATURES[name]
                    log.info(
                        "zun: %s disabled: needs microversion %s, server gives %s",
                        what,
                        format_version(need),
                        format_version(chosen),
                    )
            return self.negotiated

    async def _advertised(self, endpoint: str, token: str) -> tuple[Version, Version]:
        try:
            resp = await self._http.get(endpoint, headers={"X-Auth-Token": token})
        except httpx.TransportError as exc:
            raise BackendUnavailable(f"cannot reach Zun at {endpoint}: {exc!r}") from exc
        lo = _parse_header_version(resp.headers.get("OpenStack-API-Minimum-Version"))
        hi = _parse_header_version(resp.headers.get("OpenStack-API-Maximum-Version"))
        if lo and hi:
            return lo, hi
        root = endpoint.rsplit("/v1", 1)[0] + "/"
        try:
            doc = (await self._http.get(root)).json()
        except (httpx.TransportError, ValueError) as exc:
            raise BackendUnavailable(f"Zun at {endpoint} advertises no microversions") from exc
        for v in [doc.get("default_version"), *(doc.get("versions") or [])]:
            if isinstance(v, dict) and v.get("id") == "v1":
                lo = _parse_header_version(str(v.get("min_version") or "1.1"))
                hi = _parse_header_version(str(v.get("max_version") or "1.1"))
                if lo and hi:
                    return lo, hi
        return (1, 1), (1, 1)

    # -- the one request function --------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        idempotent: bool | None = None,
        label: str = "",
    ) -> httpx.Response:
        """Send one Zun call with auth, microversion, re-auth on 401 and retries."""
        await self.ensure_negotiated()
        key = f"{method} {label or path}"
        extensions = {} if idempotent is None else {IDEMPOTENT_REQUEST: idempotent}
        reauthed = renegotiated = False
        while True:
            token = await self.auth.token()
            base = await self.auth.endpoint()
            headers = {
                "X-Auth-Token": token,
                "OpenStack-API-Version": f"container {format_version(self.version)}",
                "Accept": "application/json",
            }
            self.calls[key] = self.calls.get(key, 0) + 1
            try:
                resp = await self._http.request(
                    method,
                    base + path,
                    params=params,
                    json=json,
                    headers=headers,
                    extensions=extensions,
                )
            except httpx.TransportError as exc:
                raise BackendUnavailable(f"Zun {method} {path}: {exc!r}") from exc
            if resp.status_code < 400:
                return resp
            if resp.status_code == 401 and not reauthed:
                reauthed = True
                log.info("zun: token rejected (401); re-authenticating")
                await self.auth.invalidate()
                continue
            if resp.status_code == 406 and not renegotiated:
                renegotiated = True
                before = self.version
                await self.negotiate()
                if self.version != before:
                    log.warning(
                        "zun: server rejected microversion %s; now %s",
                        format_version(before),
                        format_version(self.version),
                    )
                    continue
            raise error_for(resp, method=method, path=path)

    async def get_json(self, path: str, *, params: Mapping[str, Any] | None = None) -> Any:
        return (await self.request("GET", path, params=params)).json()

    # -- containers ----------------------------------------------------------------------

    async def list_all(self, resource: str) -> list[JSON]:
        """Every item of ``/containers`` or ``/capsules``, following ``next`` markers."""
        items: list[JSON] = []
        marker = ""
        for _ in range(100_000):
            params: dict[str, Any] = {"limit": self.page_size}
            if marker:
                params["marker"] = marker
            resp = await self.request("GET", f"/{resource}", params=params, label=f"/{resource}")
            body = resp.json()
            page = body.get(resource) or []
            items.extend(page)
            nxt = body.get("next")
            if not nxt or not page:
                break
            query = parse_qs(urlsplit(str(nxt)).query)
            new_marker = (query.get("marker") or [str(page[-1].get("uuid", ""))])[0]
            if not new_marker or new_marker == marker:
                break
            marker = new_marker
        return items

    async def create_container(self, body: JSON, *, run: bool = True) -> JSON:
        resp = await self.request(
            "POST", "/containers", params={"run": "true" if run else "false"}, json=body
        )
        return dict(resp.json())

    async def get_container(self, ident: str) -> JSON:
        return dict(await self.get_json(f"/containers/{ident}"))

    async def stop_container(self, ident: str, *, timeout: int) -> None:  # noqa: ASYNC109
        await self.request(
            "POST",
            f"/containers/{ident}/stop",
            params={"timeout": max(0, int(timeout))},
            idempotent=True,
            label="/containers/{id}/stop",
        )

    async def delete_container(
        self, ident: str, *, stop: bool = False, force: bool = False
    ) -> None:
        params: dict[str, str] = {}
        if stop:
            params["stop"] = "True"
        if force:
            params["force"] = "True"
        await self.request(
            "DELETE", f"/containers/{ident}", params=params or None, label="/containers/{id}"
        )

    async def container_logs(self, ident: str, params: Mapping[str, Any]) -> str:
        resp = await self.request(
            "GET", f"/containers/{ident}/logs", params=params, label="/containers/{id}/logs"
        )
        return _text_body(resp)

    async def execute(
        self, ident: str, command: str, *, run: bool = True, interactive: bool = False
    ) -> JSON:
        resp = await self.request(
            "POST",
            f"/containers/{ident}/execute",
            params={
                "command": command,
                "run": "true" if run else "false",
                "interactive": "true" if interactive else "false",
            },
            idempotent=False,
            label="/containers/{id}/execute",
        )
        return dict(resp.json())

    async def execute_resize(self, ident: str, exec_id: str, width: int, height: int) -> None:
        await self.request(
            "POST",
            f"/containers/{ident}/execute_resize",
            params={"exec_id": exec_id, "w": width, "h": height},
            idempotent=True,
            label="/containers/{id}/execute_resize",
        )

    # -- capsules ------------------------------------------------------------------------

    async def create_capsule(self, body: JSON) -> JSON:
        """``body`` is ``{"template": {…}}`` as rendered by ``zun/capsule.j2``."""
        resp = await self.request("POST", "/capsules", json=body)
        return dict(resp.json())

    async def get_capsule(self, ident: str) -> JSON:
        return dict(await self.get_json(f"/capsules/{ident}"))

    async def delete_capsule(self, ident: str) -> None:
        await self.request("DELETE", f"/capsules/{ident}", label="/capsules/{id}")

    # -- registries (≥1.30; a container's ``registry`` needs 1.31) -------------------------

    async def find_registries(self, **filters: str) -> list[JSON]:
        """Registry objects of the project matching ``filters`` (``name``/``domain``/
        ``username``), one page (vkgate names are unique enough)."""
        params: dict[str, Any] = {"limit": self.page_size, **filters}
        body = await self.get_json("/registries", params=params)
        return [dict(r) for r in body.get("registries") or []]

    async def create_registry(self, registry: JSON) -> JSON:
        resp = await self.request("POST", "/registries", json={"registry": registry})
        return dict(resp.json().get("registry") or {})

    async def update_registry(self, ident: str, registry: JSON) -> JSON:
        resp = await self.request(
            "PATCH",
            f"/registries/{ident}",
            json={"registry": registry},
            idempotent=True,
            label="/registries/{id}",
        )
        return dict(resp.json().get("registry") or {})

    # -- node side -----------------------------------------------------------------------

    async def quotas(self, project_id: str) -> JSON:
        return dict(await self.get_json(f"/quotas/{project_id}", params={"usages": "True"}))

    async def hosts(self) -> list[JSON]:
        return await self.list_all("hosts")


def _text_body(resp: httpx.Response) -> str:
    """Logs come as text or as a JSON-encoded string: accept both.

    (docs/design/zun.md, "Endpoints".)
    """
    if "json" in resp.headers.get("content-type", ""):
        try:
            value = resp.json()
        except ValueError:
            return resp.text
        return value if isinstance(value, str) else resp.text
    return resp.text
