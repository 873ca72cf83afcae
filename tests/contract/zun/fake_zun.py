"""A stateful fake OpenStack — Keystone v3 tokens + Zun API v1 — built from the public API
reference (and docs/design/zun.md), for the Zun translator's contract and e2e tests.

It keeps containers and capsules in memory and moves them through
``Creating → Created → Running → Stopped/Error`` (and ``Restarting``, ``Deleting``) on a
controllable clock: tests call ``advance(seconds)``; the e2e server uses real time.
Transitions are applied lazily before every request, in time order.

What it enforces, like the real services:

* Keystone: ``POST /identity/v3/auth/tokens`` (password, application credential) issues an
  ``X-Subject-Token`` with a catalog (service type ``container``); Zun calls without a valid
  token get Keystone's 401; ``expire_tokens()`` revokes every token.
* Microversions: ``OpenStack-API-Version: container X.Y`` must be within ``[min, max]``
  (406 otherwise, also for a wrong service name); responses carry
  ``OpenStack-API-Minimum/Maximum-Version``; request fields and endpoints newer than the
  requested version are rejected (400 ``Additional properties are not allowed`` / 406).
* Private registries (≥1.30 ``/registries``: create, list with ``name``/``domain``/``username``
  filters, show, PATCH, DELETE; the password reads back as ``***``) and the container create key
  ``registry`` (≥1.31, a registry uuid or name → ``registry_id``).  ``require_login(host, user,
  password)`` makes images on ``host`` fail to pull (status Error) unless the container
  references a registry object with exactly that login.
* Zun's error body ``{"errors": [{"status", "title", "detail", …}]}``; state checks (delete of
  a running container → 409, logs/exec only in the allowed states); pagination with
  ``limit``/``marker`` and a ``next`` URL; capsule containers are invisible to
  ``/containers`` (404), as upstream.

Behaviour per image is a ``Script`` (run time, exit code, log lines, pull error, …); images
without a script run until stopped.  Served as an ``httpx.MockTransport`` (``transport()``),
as a ``requests`` session for keystoneauth (``requests_session()``), or on a loopback port
(``LoopbackServer``, real time) for the gateway e2e test.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import re
import shlex
import threading
import time
import uuid as _uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx

T0 = _dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=_dt.UTC)
NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")
PORT_RE = re.compile(r"^\d+(/(tcp|udp))?$")

#: container create keys → microversion that introduced them (1.1 = always).
CREATE_KEYS: dict[str, tuple[int, int]] = {
    "name": (1, 1),
    "image": (1, 1),
    "command": (1, 1),
    "cpu": (1, 1),
    "memory": (1, 1),
    "workdir": (1, 1),
    "labels": (1, 1),
    "environment": (1, 1),
    "restart_policy": (1, 1),
    "interactive": (1, 1),
    "image_driver": (1, 1),
    "security_groups": (1, 1),
    "nets": (1, 1),
    "availability_zone": (1, 1),
    "image_pull_policy": (1, 1),
    "hints": (1, 1),
    "auto_remove": (1, 3),
    "runtime": (1, 5),
    "hostname": (1, 9),
    "mounts": (1, 11),
    "privileged": (1, 21),
    "healthcheck": (1, 22),
    "exposed_ports": (1, 24),
    "disk": (1, 25),
    "registry": (1, 31),
    "auto_heal": (1, 31),
    "tty": (1, 36),
    "host": (1, 39),
    "entrypoint": (1, 40),
}
CAPSULE_CONTAINER_KEYS: dict[str, tuple[int, int]] = {
    "image": (1, 1),
    "command": (1, 1),
    "args": (1, 1),
    "resources": (1, 1),
    "volumeMounts": (1, 1),
    "env": (1, 1),
    "workDir": (1, 1),
    "imagePullPolicy": (1, 1),
    "ports": (1, 35),
    "tty": (1, 37),
    "stdin": (1, 37),
}
VALID_STATES = {
    "delete": {"Created", "Error", "Stopped", "Deleted", "Dead"},
    "delete_force": {
        "Created",
        "Creating",
        "Error",
        "Running",
        "Stopped",
        "Unknown",
        "Deleted",
        "Dead",
        "Restarting",
        "Rebuilding",
        "Deleting",
    },
    "delete_after_stop": {"Running", "Created", "Error", "Stopped", "Deleted", "Dead"},
    "start": {"Created", "Stopped", "Error"},
    "stop": {"Running"},
    "kill": {"Running"},
    "execute": {"Running"},
    "execute_resize": {"Running"},
    "logs": {"Created", "Error", "Paused", "Running", "Stopped", "Unknown"},
}


def _v(text: str) -> tuple[int, int]:
    a, b = text.split(".")
    return int(a), int(b)


def _fmt(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def zun_time(t: _dt.datetime) -> str:
    """Zun's timestamp format: ``2026-03-01 10:00:00+00:00``."""
    return t.astimezone(_dt.UTC).replace(microsecond=0).isoformat(sep=" ")


def docker_time(t: _dt.datetime) -> str:
    """Docker log timestamps: RFC3339Nano, trailing zeros trimmed."""
    frac = f"{t.microsecond:06d}000".rstrip("0")
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


@dataclass
class Script:
    """How a container with a given image behaves."""

    #: seconds Running before it exits; None = until stopped
    run_seconds: float | None = None
    exit_code: int = 0
    #: log lines printed when the container starts (stdout unless prefixed "stderr:")
    logs: tuple[str, ...] = ()
    #: non-empty: pulling fails, status Error with this status_reason
    pull_error: str = ""
    #: SIGTERM is ignored (stop waits for the timeout, exit 137)
    ignores_sigterm: bool = False
    #: a stop request is accepted but nothing happens (a wedged container)
    stuck_stop: bool = False
    #: exec handler: command string → (output, exit code)
    exec: Callable[[str], tuple[str, int]] | None = None


def default_exec(command: str) -> tuple[str, int]:
    argv = shlex.split(command)
    m = re.search(r"\bexit (\d+)", command)
    code = int(m.group(1)) if m else 0
    return f"ran {json.dumps(argv)}\n", code


class ComputeFailure(Exception):
    """A rejection decided behind Zun's API layer (zun-compute), which the fake imitates."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class ZunFailure(Exception):
    def __init__(self, status: int, detail: str, title: str = "") -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title or {
            400: "Bad Request",
            401: "Unauthorized",
            403: "Forbidden",
            404: "Not Found",
            406: "Not Acceptable",
            409: "Conflict",
            500: "Internal Server Error",
        }.get(status, "Error")


@dataclass
class _Private:
    """Fake-only state of a container record."""

    script: Script
    run: bool = True
    due: float | None = None
    next: str = ""
    restarts: int = 0
    capsule: str = ""
    init: bool = False
    delete_after_stop: bool = False
    logs: list[tuple[float, str, str]] = field(default_factory=list)
    seq: int = 0


class FakeOpenStack:
    """Keystone + Zun in one object.  All times are seconds on the fake clock."""

    def __init__(
        self,
        *,
        base_url: str = "http://openstack.test",
        min_version: str = "1.1",
        max_version: str = "1.40",
        username: str = "demo",
        password: str = "secret",
        project_name: str = "demo",
        project_id: str = "p0000000000000000000000000000001",
        region: str = "RegionOne",
        service_type: str = "container",
        admin: bool = False,
        max_limit: int = 1000,
        create_seconds: float = 1.0,
        start_seconds: float = 1.0,
        stop_seconds: float = 0.5,
        delete_seconds: float = 1.0,
        restart_delay: float = 2.0,
        token_ttl: float = 3600.0,
        clock: Callable[[], float] | None = None,
        upstream: Any = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        #: ``zun_upstream.ZunUpstream``: Zun's own API app; every Zun request is replayed
        #: through it first (its rejections win) and reads are rendered with its views.
        self.upstream = upstream
        #: fake id → the same object's id in Zun's database (containers, capsules, registries,
        #: the project)
        self.shadow: dict[str, str] = {project_id: "s" + _uuid.uuid4().hex}
        #: requests Zun's API accepted but the fake rejected (a test fails on any)
        self.disagreements: list[str] = []
        #: (method, path, status) of every request Zun's API answered
        self.upstream_answers: list[tuple[str, str, int]] = []
        self.min_version = _v(min_version)
        self.max_version = _v(max_version)
        self.username = username
        self.password = password
        self.project_name = project_name
        self.project_id = project_id
        self.user_id = "u" + "0" * 31
        self.region = region
        self.service_type = service_type
        #: catalog URL of the ``internal`` interface (default: the public one)
        self.internal_url = ""
        #: served at ``/.well-known/openstack/api``: an openstacksdk remote vendor profile
        self.vendor_profile: dict[str, Any] | None = None
        self.admin = admin
        self.max_limit = max_limit
        self.create_seconds = create_seconds
        self.start_seconds = start_seconds
        self.stop_seconds = stop_seconds
        self.delete_seconds = delete_seconds
        self.restart_delay = restart_delay
        self.token_ttl = token_ttl
        self._clock = clock
        self._manual = 0.0
        self._real0 = time.monotonic()
        self.scripts: dict[str, Script] = {}
        #: images the API refuses at create time (404 ImageNotFound)
        self.api_missing_images: set[str] = set()
        self.app_credentials: dict[str, str] = {}
        self.containers: dict[str, dict[str, Any]] = {}
        self.capsules: dict[str, dict[str, Any]] = {}
        self._priv: dict[str, _Private] = {}
        self._cap_priv: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, float] = {}
        self.token_requests = 0
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.exec_calls: list[dict[str, Any]] = []
        self.quota = {"containers": 40, "cpu": 20, "memory": 51200, "disk": 100}
        #: usage of other tenants of the same project, added to in_use
        self.foreign_usage = {"containers": 0, "cpu": 0.0, "memory": 0}
        self.ws_url = ""
        self.fail_next: list[tuple[str, str, int]] = []
        self._seq = itertools.count(1)
        self._ips = itertools.count(10)
        self._lock = threading.RLock()
        #: real time (the loopback server for the gateway e2e test) instead of ``advance``
        self.realtime = False
        #: registry objects by uuid (real password kept; the API shows ``***``)
        self.registries: dict[str, dict[str, Any]] = {}
        #: image host → (username, password) a pull from it needs
        self.logins: dict[str, tuple[str, str]] = {}

    # -- clock ---------------------------------------------------------------------------

    def now(self) -> float:
        if self._clock is not None:
            return self._clock()
        if self.realtime:
            return time.monotonic() - self._real0
        return self._manual

    def at(self, t: float) -> _dt.datetime:
        return T0 + _dt.timedelta(seconds=t)

    def advance(self, seconds: float) -> None:
        """Move the fake clock (manual mode) and apply every transition that became due."""
        with self._lock:
            target = self._manual + seconds
            while True:
                due = self._next_due()
                if due is None or due > target:
                    break
                self._manual = max(self._manual, due)
                self._tick(self._manual)
            self._manual = target
            self._tick(target)

    def sync(self) -> None:
        """Apply the transitions due by now (they are otherwise applied on each request)."""
        with self._lock:
            self._tick(self.now())

    def _next_due(self) -> float | None:
        dues = [p.due for p in self._priv.values() if p.due is not None]
        dues += [c["due"] for c in self._cap_priv.values() if c.get("due") is not None]
        return min(dues) if dues else None

    # -- test controls -------------------------------------------------------------------

    def script(self, image: str, **kwargs: Any) -> Script:
        self.scripts[image] = Script(**kwargs)
        return self.scripts[image]

    def expire_tokens(self) -> None:
        with self._lock:
            self.tokens.clear()

    def count(self, method: str, path: str) -> int:
        return sum(1 for m, p, _ in self.requests if m == method and p == path)

    def require_login(self, host: str, username: str, password: str) -> None:
        """Images on ``host`` pull only with a registry object holding this login."""
        self.logins[host] = (username, password)

    def registry_of(self, container_uuid: str) -> dict[str, Any] | None:
        """The registry object (with its real password) a container pulls with."""
        rid = self.containers[container_uuid].get("registry_id")
        return next((r for r in self.registries.values() if r["_id"] == rid), None)

    def set_versions(self, min_version: str, max_version: str) -> None:
        self.min_version, self.max_version = _v(min_version), _v(max_version)

    def add_foreign_container(
        self, *, name: str = "someone-else", labels: dict[str, str] | None = None
    ) -> str:
        """A container vkgate does not own (same project)."""
        body = {"name": name, "image": "busybox", "labels": labels or {"team": "other"}}
        c = self._new_container(body, run=True, version=self.max_version)
        return str(c["uuid"])

    # -- transports ----------------------------------------------------------------------

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def requests_session(self) -> Any:
        import requests
        from requests.adapters import BaseAdapter
        from requests.structures import CaseInsensitiveDict

        fake = self

        class Adapter(BaseAdapter):
            def send(
                self,
                request: Any,
                stream: bool = False,
                timeout: Any = None,
                verify: Any = True,
                cert: Any = None,
                proxies: Any = None,
            ) -> Any:
                body = request.body or b""
                if isinstance(body, str):
                    body = body.encode()
                req = httpx.Request(
                    request.method, request.url, headers=dict(request.headers), content=body
                )
                resp = fake.handle(req)
                out = requests.Response()
                out.status_code = resp.status_code
                out.headers = CaseInsensitiveDict(dict(resp.headers))
                out._content = resp.content
                out.url = request.url
                out.request = request
                out.reason = resp.reason_phrase
                out.encoding = "utf-8"
                return out

            def close(self) -> None:
                return None

        session = requests.Session()
        session.mount("http://", Adapter())
        session.mount("https://", Adapter())
        return session

    @property
    def auth_url(self) -> str:
        return f"{self.base_url}/identity/v3"

    @property
    def zun_url(self) -> str:
        return f"{self.base_url}/container/v1"

    def clouds_yaml(self, cloud: str = "fake") -> dict[str, Any]:
        return {
            "clouds": {
                cloud: {
                    "auth": {
                        "auth_url": self.auth_url,
                        "username": self.username,
                        "password": self.password,
                        "project_name": self.project_name,
                        "user_domain_name": "Default",
                        "project_domain_name": "Default",
                    },
                    "region_name": self.region,
                    "interface": "public",
                }
            }
        }

    # -- dispatch ------------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            url = urlsplit(str(request.url))
            path = url.path.rstrip("/") or "/"
            query = parse_qs(url.query, keep_blank_values=True)
            self.requests.append((request.method, path, query))
            for i, (method, prefix, status) in enumerate(self.fail_next):
                if method == request.method and path.startswith(prefix):
                    del self.fail_next[i]
                    return self._zun_error(ZunFailure(status, "injected failure"), {})
            if path == "/.well-known/openstack/api" and self.vendor_profile is not None:
                return httpx.Response(200, json=self.vendor_profile)
            if path.startswith("/identity"):
                return self._keystone(request, path[len("/identity") :] or "/")
            if path.startswith("/container"):
                return self._zun(request, path[len("/container") :] or "/", query)
            return httpx.Response(404, text="not found")

    # -- keystone ------------------------------------------------------------------------

    def _keystone(self, request: httpx.Request, path: str) -> httpx.Response:
        v3 = {
            "id": "v3.14",
            "status": "stable",
            "updated": "2020-04-07T00:00:00Z",
            "links": [{"rel": "self", "href": f"{self.auth_url}/"}],
            "media-types": [
                {"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}
            ],
        }
        if request.method == "GET" and path == "/":
            return httpx.Response(300, json={"versions": {"values": [v3]}})
        if request.method == "GET" and path == "/v3":
            return httpx.Response(200, json={"version": v3})
        if request.method == "POST" and path == "/v3/auth/tokens":
            return self._issue_token(request)
        return httpx.Response(
            404, json={"error": {"code": 404, "title": "Not Found", "message": "not found"}}
        )

    def _unauthorized(self) -> httpx.Response:
        return httpx.Response(
            401,
            json={
                "error": {
                    "code": 401,
                    "title": "Unauthorized",
                    "message": "The request you have made requires authentication.",
                }
            },
            headers={"WWW-Authenticate": f'Keystone uri="{self.auth_url}"'},
        )

    def _issue_token(self, request: httpx.Request) -> httpx.Response:
        self.token_requests += 1
        try:
            auth = json.loads(request.content)["auth"]
            identity = auth["identity"]
        except (ValueError, KeyError):
            return httpx.Response(
                400, json={"error": {"code": 400, "title": "Bad Request", "message": "malformed"}}
            )
        methods = identity.get("methods") or []
        ok = False
        if "password" in methods:
            user = identity["password"]["user"]
            ok = (user.get("name") == self.username or user.get("id") == self.user_id) and user.get(
                "password"
            ) == self.password
        elif "application_credential" in methods:
            cred = identity["application_credential"]
            ok = self.app_credentials.get(str(cred.get("id"))) == cred.get("secret")
        elif "token" in methods:
            ok = identity["token"].get("id") in self.tokens
        if not ok:
            return self._unauthorized()
        token = "gAAAA" + _uuid.uuid4().hex
        self.tokens[token] = self.now() + self.token_ttl
        real_now = _dt.datetime.now(_dt.UTC)
        endpoint = lambda iface: {  # noqa: E731
            "id": _uuid.uuid4().hex,
            "interface": iface,
            "region": self.region,
            "region_id": self.region,
            "url": (self.internal_url or self.zun_url) if iface == "internal" else self.zun_url,
        }
        body = {
            "token": {
                "methods": methods,
                "user": {
                    "id": self.user_id,
                    "name": self.username,
                    "domain": {"id": "default", "name": "Default"},
                },
                "project": {
                    "id": self.project_id,
                    "name": self.project_name,
                    "domain": {"id": "default", "name": "Default"},
                },
                "roles": [{"id": "r1", "name": "admin" if self.admin else "member"}],
                "issued_at": real_now.isoformat().replace("+00:00", "Z"),
                "expires_at": (real_now + _dt.timedelta(hours=1))
                .isoformat()
                .replace("+00:00", "Z"),
                "catalog": [
                    {
                        "type": "identity",
                        "name": "keystone",
                        "id": "k",
                        "endpoints": [
                            {
                                "id": "ke",
                                "interface": "public",
                                "region": self.region,
                                "region_id": self.region,
                                "url": self.auth_url,
                            }
                        ],
                    },
                    {
                        "type": self.service_type,
                        "name": "zun",
                        "id": "z",
                        "endpoints": [endpoint("public"), endpoint("internal")],
                    },
                ],
            }
        }
        return httpx.Response(201, json=body, headers={"X-Subject-Token": token})

    # -- zun: version handling -----------------------------------------------------------

    def _version_headers(self, version: tuple[int, int] | None) -> dict[str, str]:
        h = {
            "OpenStack-API-Minimum-Version": f"container {_fmt(self.min_version)}",
            "OpenStack-API-Maximum-Version": f"container {_fmt(self.max_version)}",
            "Vary": "OpenStack-API-Version",
        }
        if version:
            h["OpenStack-API-Version"] = f"container {_fmt(version)}"
        return h

    def _requested_version(self, request: httpx.Request) -> tuple[int, int]:
        header = request.headers.get("OpenStack-API-Version", f"container {_fmt(self.min_version)}")
        try:
            service, value = header.split()
        except ValueError:
            raise ZunFailure(406, "Invalid service type for OpenStack-API-Version header") from None
        if value.lower() == "latest":
            value = _fmt(self.max_version)
        if service != "container":
            raise ZunFailure(406, "Invalid service type for OpenStack-API-Version header")
        try:
            version = _v(value)
        except ValueError:
            raise ZunFailure(406, "Invalid value for OpenStack-API-Version header") from None
        if not self.min_version <= version <= self.max_version:
            raise ZunFailure(
                406,
                f"Version {_fmt(version)} was requested but the minor version is not supported by "
                f"this service. The supported version range is: [container {_fmt(self.min_version)}, "
                f"container {_fmt(self.max_version)}].",
            )
        return version

    def _zun_error(self, exc: ZunFailure, headers: dict[str, str]) -> httpx.Response:
        body = {
            "errors": [
                {
                    "request_id": "req-" + _uuid.uuid4().hex,
                    "code": "",
                    "status": exc.status,
                    "title": exc.title,
                    "detail": exc.detail,
                    "links": [],
                }
            ]
        }
        return httpx.Response(exc.status, json=body, headers=headers)

    def _zun(
        self, request: httpx.Request, path: str, query: dict[str, list[str]]
    ) -> httpx.Response:
        if path == "/" and request.method == "GET":
            link = [{"href": f"{self.base_url}/container/v1/", "rel": "self"}]
            v1 = {
                "id": "v1",
                "links": link,
                "status": "CURRENT",
                "max_version": _fmt(self.max_version),
                "min_version": _fmt(self.min_version),
            }
            return httpx.Response(
                200,
                json={
                    "name": "OpenStack Zun API",
                    "description": "Zun is an OpenStack project which aims to provide containers service.",
                    "versions": [v1],
                    "default_version": v1,
                },
            )
        if not path.startswith("/v1"):
            return self._zun_error(ZunFailure(404, "The resource could not be found."), {})
        public = path == "/v1" and request.method == "GET"
        if not public:
            token = request.headers.get("X-Auth-Token", "")
            expiry = self.tokens.get(token)
            if expiry is None or expiry <= self.now():
                self.tokens.pop(token, None)
                return self._unauthorized()
        try:
            version = self._requested_version(request)
        except ZunFailure as exc:
            return self._zun_error(exc, self._version_headers(None))
        headers = self._version_headers(version)
        self._tick(self.now())
        upstream = self._replay(request, path, query) if self.upstream is not None else None
        if upstream is not None and upstream[0] >= 400:
            return httpx.Response(upstream[0], json=upstream[1], headers=headers)
        try:
            status, body = self._route(request, path[3:] or "/", query, version)
        except ComputeFailure as exc:
            return self._zun_error(ZunFailure(exc.status, exc.detail), headers)
        except ZunFailure as exc:
            if upstream is not None:
                self.disagreements.append(
                    f"{request.method} {path}: Zun's API answered {upstream[0]}, "
                    f"the fake {exc.status} {exc.detail}"
                )
            return self._zun_error(exc, headers)
        if upstream is not None and request.method == "POST" and isinstance(body, dict):
            self._remember_shadow(body, upstream[1])
        if status == 204:
            return httpx.Response(204, headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    def _route(
        self, request: httpx.Request, path: str, q: dict[str, list[str]], version: tuple[int, int]
    ) -> tuple[int, Any]:
        method = request.method
        parts = [p for p in path.split("/") if p]

        def arg(name: str, default: str = "") -> str:
            return (q.get(name) or [default])[0]

        if not parts:
            return 200, {
                "id": "v1",
                "media_types": [
                    {"base": "application/json", "type": "application/vnd.openstack.zun.v1+json"}
                ],
                "links": [],
            }
        head = parts[0]
        if head == "containers":
            if len(parts) == 1:
                if method == "GET":
                    return 200, self._list("containers", self._visible_containers(), q, version)
                if method == "POST":
                    body = json.loads(request.content or b"{}")
                    run = arg("run", "false").lower() in ("true", "1", "yes")
                    self._validate_container(body, version)
                    c = self._new_container(body, run=run, version=version)
                    return 202, self._view(c, version)
            c = self._find_container(parts[1])
            if len(parts) == 2:
                if method == "GET":
                    return 200, self._view(c, version)
                if method == "DELETE":
                    return self._delete_container(c, arg, version)
            action = parts[2] if len(parts) > 2 else ""
            if method == "POST" and action == "stop":
                self._check_state(c, "stop")
                self._stop(c, float(arg("timeout", "10") or 10))
                return 202, None
            if method == "POST" and action == "start":
                self._check_state(c, "start")
                self._schedule(c, "start", 0.0)
                return 202, None
            if method == "POST" and action == "kill":
                self._check_state(c, "kill")
                self._schedule(c, "killed", 0.0)
                return 202, None
            if method == "GET" and action == "logs":
                self._check_state(c, "logs")
                return 200, self._logs(c, arg)
            if method == "POST" and action == "execute":
                self._check_state(c, "execute")
                return 200, self._execute(c, arg)
            if method == "POST" and action == "execute_resize":
                self._check_state(c, "execute_resize")
                return 200, {"exec_id": arg("exec_id"), "width": arg("w"), "height": arg("h")}
            raise ZunFailure(404, "The resource could not be found.")
        if head == "capsules":
            if version < (1, 32):
                raise ZunFailure(
                    406,
                    f"Version {_fmt(version)} was requested but the requested API capsules is not supported for this version.",
                )
            if len(parts) == 1:
                if method == "GET":
                    return 200, self._list(
                        "capsules",
                        list(self.capsules.values()),
                        q,
                        version,
                        view=self._capsule_view,
                    )
                if method == "POST":
                    body = json.loads(request.content or b"{}")
                    return 202, self._capsule_view(self._new_capsule(body, version), version)
            cap = self._find_capsule(parts[1])
            if method == "GET":
                return 200, self._capsule_view(cap, version)
            if method == "DELETE":
                self._delete_capsule(cap)
                return 204, None
        if head == "registries":
            return self._registries(request, parts, q, version)
        if head == "quotas" and len(parts) == 2 and method == "GET":
            if version < (1, 26):
                raise ZunFailure(
                    406,
                    f"Version {_fmt(version)} was requested but the requested API quotas is not supported for this version.",
                )
            if parts[1] != self.project_id and not self.admin:
                raise ZunFailure(403, "Policy doesn't allow quota:get to be performed.")
            return 200, self._quotas(arg("usages", "false").lower() in ("true", "1"))
        if head == "hosts" and method == "GET":
            if not self.admin:
                raise ZunFailure(403, "Policy doesn't allow host:get_all to be performed.")
            hosts = [
                {
                    "uuid": "h1",
                    "hostname": "compute-1",
                    "cpus": 8,
                    "cpu_used": 0,
                    "mem_total": 16384,
                    "mem_used": 0,
                    "disk_total": 100,
                    "disk_used": 0,
                    "total_containers": len(self.containers),
                    "architecture": "x86_64",
                    "os": "Ubuntu",
                }
            ]
            return 200, {"hosts": hosts, "next": None}
        raise ZunFailure(404, "The resource could not be found.")

    # -- listing -------------------------------------------------------------------------

    def _visible_containers(self) -> list[dict[str, Any]]:
        return [c for c in self.containers.values() if not self._priv[c["uuid"]].capsule]

    def _list(
        self,
        kind: str,
        items: list[dict[str, Any]],
        q: dict[str, list[str]],
        version: tuple[int, int],
        view: Callable[[dict[str, Any], tuple[int, int]], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        items = sorted(items, key=lambda i: i["_id"])
        limit_text = (q.get("limit") or [""])[0]
        limit = self.max_limit
        if limit_text:
            if not limit_text.isdigit() or int(limit_text) <= 0:
                raise ZunFailure(400, f"Limit must be positive integer: {limit_text}")
            limit = min(int(limit_text), self.max_limit)
        marker = (q.get("marker") or [""])[0]
        if marker:
            ids = [i["uuid"] for i in items]
            if marker not in ids:
                raise ZunFailure(404, f"{kind[:-1].capitalize()} {marker} could not be found.")
            items = items[ids.index(marker) + 1 :]
        page = items[:limit]
        render = view or self._view
        nxt = None
        if page and len(page) == limit:
            nxt = f"{self.base_url}/v1/{kind}?" + urlencode(
                {"limit": limit, "marker": page[-1]["uuid"]}
            )
        return {kind: [render(i, version) for i in page], "next": nxt}

    # -- containers ----------------------------------------------------------------------

    def _find_container(self, ident: str) -> dict[str, Any]:
        visible = self._visible_containers()
        hit = [c for c in visible if c["uuid"] == ident]
        if not hit:
            hit = [c for c in visible if c["name"] == ident]
        if len(hit) > 1:
            raise ZunFailure(
                409,
                "Multiple containers exist with same name. Please use the container uuid instead.",
            )
        if not hit:
            raise ZunFailure(404, f"Container {ident} could not be found.")
        return hit[0]

    def _check_state(self, c: dict[str, Any], action: str) -> None:
        if c["status"] not in VALID_STATES[action]:
            raise ZunFailure(409, f"Cannot {action} container {c['uuid']} in {c['status']} state.")

    def _validate_container(self, body: Any, version: tuple[int, int]) -> None:
        def bad(attr: str, value: Any, reason: str) -> ZunFailure:
            return ZunFailure(
                400, f"Invalid input for field/attribute {attr}. Value: {value}. {reason}"
            )

        if not isinstance(body, dict):
            raise ZunFailure(400, "Invalid input: body must be an object")
        for key in body:
            need = CREATE_KEYS.get(key)
            if need is None or version < need:
                raise ZunFailure(
                    400,
                    f"Invalid input for field/attribute container. Additional properties are not allowed ('{key}' was unexpected)",
                )
        name = body.get("name")
        if name is not None and (
            not isinstance(name, str) or not NAME_RE.match(name) or len(name) > 255
        ):
            raise bad("name", name, "does not match '^[a-zA-Z0-9][a-zA-Z0-9_.-]+$'")
        if not isinstance(body.get("image"), str) or len(body["image"]) < 2:
            raise bad("image", body.get("image"), "is required")
        cmd = body.get("command")
        if cmd is not None:
            want_list = version >= (1, 20)
            if want_list and not (isinstance(cmd, list) and all(isinstance(x, str) for x in cmd)):
                raise bad("command", cmd, "is not of type 'array'")
            if not want_list and not isinstance(cmd, str):
                raise bad("command", cmd, "is not of type 'string'")
        ep = body.get("entrypoint")
        if ep is not None and not (isinstance(ep, list) and all(isinstance(x, str) for x in ep)):
            raise bad("entrypoint", ep, "is not of type 'array'")
        if "cpu" in body and not isinstance(body["cpu"], int | float):
            raise bad("cpu", body["cpu"], "is not of type 'number'")
        mem = body.get("memory")
        if mem is not None and not (
            isinstance(mem, int) or (isinstance(mem, str) and mem.isdigit())
        ):
            raise bad("memory", mem, "does not match '^[0-9]+$'")
        env = body.get("environment") or {}
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise bad("environment", env, "values must be strings")
        labels = body.get("labels") or {}
        if not isinstance(labels, dict):
            raise bad("labels", labels, "is not of type 'object'")
        rp = body.get("restart_policy")
        if rp is not None:
            if not isinstance(rp, dict) or rp.get("Name") not in (
                "no",
                "always",
                "on-failure",
                "unless-stopped",
            ):
                raise bad(
                    "restart_policy", rp, "Name must be no, always, on-failure or unless-stopped"
                )
            count = str(rp.get("MaximumRetryCount", "0"))
            if not count.isdigit():
                raise bad("restart_policy", rp, "MaximumRetryCount must be a number")
            if rp["Name"] in ("always", "unless-stopped") and int(count) != 0:
                raise ZunFailure(
                    400, f"maximum retry count not valid with restart policy of {rp['Name']}"
                )
        for port in body.get("exposed_ports") or {}:
            if not PORT_RE.match(port):
                raise bad("exposed_ports", port, "invalid port")
        for m in body.get("mounts") or []:
            if (
                not isinstance(m, dict)
                or "destination" not in m
                or not ({"source", "size"} & set(m))
            ):
                raise bad("mounts", m, "needs destination and source or size")
        for n in body.get("nets") or []:
            if not isinstance(n, dict) or not ({"network", "port"} & set(n)):
                raise bad("nets", n, "needs network or port")
        pull = body.get("image_pull_policy")
        if pull is not None and pull not in ("never", "always", "ifnotpresent"):
            raise bad(
                "image_pull_policy", pull, "is not one of ['never', 'always', 'ifnotpresent']"
            )
        if body["image"] in self.api_missing_images:
            # zun.compute.api.API.container_create asks a compute host (image_search over RPC)
            raise ComputeFailure(404, f"Image {body['image']} could not be found.")
        if "registry" in body:
            self._find_registry(str(body["registry"]))

    def _new_container(
        self,
        body: dict[str, Any],
        *,
        run: bool,
        version: tuple[int, int],
        capsule: str = "",
        init: bool = False,
    ) -> dict[str, Any]:
        now = self.now()
        uid = str(_uuid.uuid4())
        image = str(body["image"])
        script = self.scripts.get(image, Script())
        rp = body.get("restart_policy") or {"Name": "no", "MaximumRetryCount": "0"}
        mem = body.get("memory")
        c: dict[str, Any] = {
            "_id": next(self._seq),
            "uuid": uid,
            "name": body.get("name") or f"zeta-{next(self._seq)}-container",
            "image": image,
            "labels": dict(body.get("labels") or {}),
            "environment": dict(body.get("environment") or {}),
            "command": body.get("command") or [],
            "entrypoint": body.get("entrypoint"),
            "cpu": float(body.get("cpu") or 1.0),
            "memory": str(mem) if mem is not None else None,
            "workdir": body.get("workdir"),
            "status": "Creating",
            "status_detail": None,
            "status_reason": None,
            "task_state": "image_pulling",
            "host": None,
            "hostname": body.get("hostname"),
            "addresses": {},
            "ports": [int(p.split("/")[0]) for p in body.get("exposed_ports") or {}],
            "security_groups": body.get("security_groups") or ["default"],
            "restart_policy": {
                "Name": rp["Name"],
                "MaximumRetryCount": str(rp.get("MaximumRetryCount", "0")),
            },
            "auto_remove": bool(body.get("auto_remove")),
            "interactive": bool(body.get("interactive")),
            "tty": bool(body.get("tty")),
            "image_driver": body.get("image_driver") or "docker",
            "image_pull_policy": body.get("image_pull_policy"),
            "runtime": body.get("runtime") or "runc",
            "disk": 0,
            "healthcheck": None,
            "nets": body.get("nets") or [],
            "mounts": body.get("mounts") or [],
            "exposed_ports": body.get("exposed_ports") or {},
            "availability_zone": body.get("availability_zone"),
            "registry_id": (
                self._find_registry(str(body["registry"]))["_id"] if body.get("registry") else None
            ),
            "user_id": self.user_id,
            "project_id": self.project_id,
            "created_at": zun_time(self.at(now)),
            "updated_at": None,
            "started_at": None,
        }
        self.containers[uid] = c
        self._priv[uid] = _Private(script=script, run=run, capsule=capsule, init=init)
        if not capsule:
            self._schedule(c, "created", self.create_seconds)
        return c

    # -- Zun's own API (zun_upstream) --------------------------------------------------------

    def _to_shadow(self, text: str) -> str:
        for ours, theirs in self.shadow.items():
            text = text.replace(ours, theirs)
        return text

    def _replay(
        self, request: httpx.Request, path: str, query: dict[str, list[str]]
    ) -> tuple[int, Any] | None:
        """Send the request through Zun's API app, on the shadow of the object it names."""
        parts = [p for p in path.split("/") if p]
        project, user = self.shadow[self.project_id], self.user_id
        for ident in (parts[2:3] if parts[1:2] in (["containers"], ["capsules"]) else []) + (
            query.get("marker") or []
        ):
            obj = self.containers.get(ident) or self.capsules.get(ident)
            if obj is not None and ident not in self.shadow:  # made by a test helper
                kind = "capsule" if ident in self.capsules else "container"
                if kind == "container" and self._priv[ident].capsule:
                    kind = "capsule_container"
                self.upstream.adopt(kind, obj, project_id=project, user_id=user)
                self.shadow[ident] = ident
        if len(parts) >= 3 and parts[1] in ("containers", "capsules"):
            obj = self.containers.get(parts[2]) or self.capsules.get(parts[2])
            if obj is None:
                # gone from the fake (deleted) or named, not by uuid: the fake answers alone
                return None
            if parts[2] in self.shadow:
                self.upstream.set_status(
                    self.shadow[parts[2]],
                    obj["status"],
                    project_id=self.shadow[self.project_id],
                    user_id=self.user_id,
                )
        status, body, _ = self.upstream.call(
            request.method,
            self._to_shadow(path),
            query={k: [self._to_shadow(v) for v in vs] for k, vs in query.items()},
            version=request.headers.get("OpenStack-API-Version"),
            body=self._to_shadow(request.content.decode()).encode() if request.content else b"",
            project_id=self.shadow[self.project_id],
            user_id=self.user_id,
            admin=self.admin,
        )
        self.upstream_answers.append((request.method, "/container" + path, status))
        return status, body

    def _remember_shadow(self, ours: dict[str, Any], theirs: Any) -> None:
        def uuid_of(body: Any) -> str:
            if not isinstance(body, dict):
                return ""
            inner = body.get("registry") if isinstance(body.get("registry"), dict) else body
            return str(inner.get("uuid") or "")

        if uuid_of(ours) and uuid_of(theirs):
            self.shadow[uuid_of(ours)] = uuid_of(theirs)

    def _render(self, out: dict[str, Any], kind: str) -> dict[str, Any]:
        """``out`` as Zun's own view code shows it (field set, policy filtering, links)."""
        if self.upstream is None:
            return out
        render = (
            self.upstream.render_capsule if kind == "capsule" else self.upstream.render_container
        )
        return dict(
            render(
                out,
                f"{self.base_url}/container",
                project_id=self.project_id,
                user_id=self.user_id,
                admin=self.admin,
            )
        )

    def _view(self, c: dict[str, Any], version: tuple[int, int]) -> dict[str, Any]:
        return self._render(self._fake_view(c, version), "container")

    def _fake_view(self, c: dict[str, Any], version: tuple[int, int]) -> dict[str, Any]:
        out = {
            k: v
            for k, v in c.items()
            if not k.startswith("_")
            and k not in ("nets", "mounts", "exposed_ports", "availability_zone")
        }
        if not self.admin:
            out["host"] = None
        if version < (1, 40):
            out.pop("entrypoint", None)
        return out

    def _schedule(
        self, c: dict[str, Any], what: str, delay: float, base: float | None = None
    ) -> None:
        p = self._priv[c["uuid"]]
        p.next = what
        p.due = (self.now() if base is None else base) + delay

    def _touch(self, c: dict[str, Any], t: float) -> None:
        c["updated_at"] = zun_time(self.at(t))

    def _tick(self, now: float) -> None:
        for _ in range(1000):
            due = [
                (p.due, uid) for uid, p in self._priv.items() if p.due is not None and p.due <= now
            ]
            cap_due = [
                (cp["due"], cid)
                for cid, cp in self._cap_priv.items()
                if cp.get("due") is not None and cp["due"] <= now
            ]
            if not due and not cap_due:
                return
            first = min(due + cap_due)
            if first in due:
                t, uid = first
                p = self._priv[uid]
                what = p.next
                p.due, p.next = None, ""
                self._transition(self.containers[uid], what, t)
            else:
                t, cid = first
                self._cap_priv[cid]["due"] = None
                self._capsule_step(self.capsules[cid], t)

    def _transition(self, c: dict[str, Any], what: str, t: float) -> None:
        p = self._priv[c["uuid"]]
        when = self.at(t)
        self._touch(c, t)
        if what == "created":
            denied = self._pull_denied(c)
            if denied:
                c.update(status="Error", status_reason=denied, task_state=None, status_detail=None)
                return
            if p.script.pull_error:
                c.update(
                    status="Error",
                    status_reason=p.script.pull_error,
                    task_state=None,
                    status_detail=None,
                )
                return
            ip = f"10.0.0.{next(self._ips)}"
            c.update(
                status="Created",
                status_detail="Created",
                task_state=None,
                host="compute-1",
                addresses={
                    "net-1": [
                        {
                            "addr": ip,
                            "version": 4,
                            "port": "p-" + c["uuid"][:8],
                            "subnet_id": "s1",
                            "preserve_on_delete": False,
                        }
                    ]
                },
            )
            if p.run:
                self._schedule(c, "start", self.start_seconds, base=t)
        elif what == "start":
            c.update(
                status="Running",
                status_detail="Up Less than a second",
                task_state=None,
                started_at=zun_time(when),
                status_reason=None,
            )
            for i, raw in enumerate(p.script.logs):
                stream, text = "stdout", raw
                if raw.startswith("stderr:"):
                    stream, text = "stderr", raw[len("stderr:") :]
                p.logs.append((t + i * 0.001, stream, text))
            if p.script.run_seconds is not None:
                self._schedule(c, "exit", p.script.run_seconds, base=t)
        elif what == "exit":
            code = p.script.exit_code
            c.update(
                status="Stopped",
                status_detail=f"Exited({code}) Less than a second ago",
                task_state=None,
            )
            rp = c["restart_policy"]
            max_retries = int(rp.get("MaximumRetryCount") or 0)
            again = rp["Name"] in ("always", "unless-stopped") or (
                rp["Name"] == "on-failure" and code != 0 and p.restarts < max_retries
            )
            if again:
                c.update(
                    status="Restarting", status_detail=f"Restarting ({code}) Less than a second ago"
                )
                self._schedule(c, "restart", self.restart_delay, base=t)
        elif what == "restart":
            p.restarts += 1
            self._transition(c, "start", t)
        elif what in ("stopped", "killed"):
            code = 137 if what == "killed" else 143
            if c["status"] in ("Running", "Restarting", "Paused", "Created"):
                c.update(
                    status="Stopped",
                    status_detail=f"Exited({code}) Less than a second ago",
                    task_state=None,
                )
            if p.delete_after_stop:
                self._start_delete(c, t)
        elif what == "gone":
            self.containers.pop(c["uuid"], None)
            self._priv.pop(c["uuid"], None)

    def _stop(self, c: dict[str, Any], timeout: float) -> None:
        p = self._priv[c["uuid"]]
        c["task_state"] = "container_stopping"
        if p.script.stuck_stop:
            return
        if p.script.ignores_sigterm:
            self._schedule(c, "killed", timeout)
        else:
            self._schedule(c, "stopped", min(self.stop_seconds, timeout))

    def _start_delete(self, c: dict[str, Any], t: float) -> None:
        c.update(status="Deleting", task_state="container_deleting")
        self._touch(c, t)
        self._schedule(c, "gone", self.delete_seconds, base=t)

    def _delete_container(
        self, c: dict[str, Any], arg: Callable[[str, str], str], version: tuple[int, int]
    ) -> tuple[int, Any]:
        force = arg("force", "false").lower() in ("true", "1", "yes")
        stop = arg("stop", "false").lower() in ("true", "1", "yes")
        if stop and version < (1, 12):
            raise ZunFailure(
                400,
                "Invalid input for query parameters stop. Additional properties are not allowed",
            )
        if force:
            if version >= (1, 7) and not self.admin:
                raise ZunFailure(
                    403, "Policy doesn't allow container:delete_force to be performed."
                )
            self._check_state(c, "delete_force")
            self._start_delete(c, self.now())
        elif stop:
            self._check_state(c, "delete_after_stop")
            if c["status"] == "Running":
                self._priv[c["uuid"]].delete_after_stop = True
                self._stop(c, 10.0)
            else:
                self._start_delete(c, self.now())
        else:
            self._check_state(c, "delete")
            self._start_delete(c, self.now())
        if version < (1, 10):  # synchronous delete before 1.10
            self.containers.pop(c["uuid"], None)
            self._priv.pop(c["uuid"], None)
        return 204, None

    def _logs(self, c: dict[str, Any], arg: Callable[[str, str], str]) -> str:
        p = self._priv[c["uuid"]]
        want = {
            s
            for s, flag in (("stdout", arg("stdout", "True")), ("stderr", arg("stderr", "True")))
            if flag.lower() in ("true", "1", "yes")
        }
        lines = [entry for entry in p.logs if entry[1] in want]
        since = arg("since", "")
        if since:
            lines = [entry for entry in lines if self.at(entry[0]).timestamp() >= float(since)]
        tail = arg("tail", "all")
        if tail != "all":
            lines = lines[-int(tail) :] if int(tail) else []
        stamps = arg("timestamps", "False").lower() in ("true", "1", "yes")
        return "".join(
            (docker_time(self.at(t)) + " " if stamps else "") + text + "\n" for t, _, text in lines
        )

    def _execute(self, c: dict[str, Any], arg: Callable[[str, str], str]) -> dict[str, Any]:
        command = arg("command", "")
        run = arg("run", "true").lower() in ("true", "1", "yes")
        interactive = arg("interactive", "false").lower() in ("true", "1", "yes")
        self.exec_calls.append(
            {"uuid": c["uuid"], "command": command, "run": run, "interactive": interactive}
        )
        if not command:
            raise ZunFailure(400, "Invalid input for query parameters command.")
        if interactive and not run:
            exec_id = _uuid.uuid4().hex + _uuid.uuid4().hex
            url = f"{self.ws_url}?exec_id={exec_id}" if self.ws_url else None
            return {"output": None, "exit_code": None, "exec_id": exec_id, "url": url}
        handler = self._priv[c["uuid"]].script.exec or default_exec
        output, code = handler(command)
        return {"output": output, "exit_code": code, "exec_id": None, "url": None}

    # -- capsules ------------------------------------------------------------------------

    def _find_capsule(self, ident: str) -> dict[str, Any]:
        hit = [c for c in self.capsules.values() if c["uuid"] == ident] or [
            c for c in self.capsules.values() if c["name"] == ident
        ]
        if len(hit) > 1:
            raise ZunFailure(
                409, "Multiple capsules exist with same name. Please use the capsule uuid instead."
            )
        if not hit:
            raise ZunFailure(404, f"Capsule {ident} could not be found.")
        return hit[0]

    def _new_capsule(self, body: Any, version: tuple[int, int]) -> dict[str, Any]:
        tpl = body.get("template") if isinstance(body, dict) else None
        if isinstance(tpl, str):
            tpl = json.loads(tpl)
        if not isinstance(tpl, dict) or str(tpl.get("kind", "")).lower() != "capsule":
            raise ZunFailure(
                400, "Invalid input for field/attribute template. 'kind' is a required property"
            )
        for key in tpl:
            allowed = {"kind", "capsuleVersion", "metadata", "spec", "nets", "availabilityZone"}
            if key not in allowed:
                raise ZunFailure(
                    400, f"Additional properties are not allowed ('{key}' was unexpected)"
                )
        meta = tpl.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ZunFailure(
                400, f"Invalid input for field/attribute metadata.name. Value: {name}."
            )
        if "annotations" in meta and version < (1, 38):
            raise ZunFailure(
                400, "Additional properties are not allowed ('annotations' was unexpected)"
            )
        spec = tpl.get("spec") or {}
        if spec.get("initContainers") and version < (1, 34):
            raise ZunFailure(
                400, "Additional properties are not allowed ('initContainers' was unexpected)"
            )
        restart = spec.get("restartPolicy", "Always")
        if restart not in ("Always", "OnFailure", "Never"):
            raise ZunFailure(
                400, f"Invalid input for field/attribute restartPolicy. Value: {restart}."
            )
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            raise ZunFailure(
                400, "Invalid input for field/attribute spec. 'containers' is a required property"
            )
        for item in [*containers, *(spec.get("initContainers") or [])]:
            for key in item:
                need = CAPSULE_CONTAINER_KEYS.get(key)
                if need is None or version < need:
                    raise ZunFailure(
                        400, f"Additional properties are not allowed ('{key}' was unexpected)"
                    )
            if not item.get("image"):
                raise ZunFailure(400, "'image' is a required property")
        cap_uuid = str(_uuid.uuid4())
        policy = {"Always": "always", "OnFailure": "on-failure", "Never": "no"}[restart]

        def member(item: dict[str, Any], init: bool) -> str:
            res = (item.get("resources") or {}).get("requests") or {}
            rp = {"Name": policy, "MaximumRetryCount": "0"}
            if init and policy == "always":
                rp = {"Name": "on-failure", "MaximumRetryCount": "10"}
            body_c = {
                "name": f"capsule-{name}-{_uuid.uuid4().hex[:6]}",
                "image": item["image"],
                "command": list(item.get("command") or []) + list(item.get("args") or []),
                "environment": item.get("env") or {},
                "workdir": item.get("workDir"),
                "cpu": res.get("cpu", 1.0),
                "memory": res.get("memory"),
                "restart_policy": rp,
                "labels": {},
            }
            c = self._new_container(body_c, run=False, version=version, capsule=cap_uuid, init=init)
            return str(c["uuid"])

        init_ids = [member(i, True) for i in spec.get("initContainers") or []]
        main_ids = [member(i, False) for i in containers]
        now = self.now()
        cap = {
            "_id": next(self._seq),
            "uuid": cap_uuid,
            "name": name,
            "status": "Creating",
            "status_reason": None,
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
            "restart_policy": {"Name": policy, "MaximumRetryCount": "0"},
            "addresses": {},
            "host": None,
            "project_id": self.project_id,
            "user_id": self.user_id,
            "created_at": zun_time(self.at(now)),
            "updated_at": None,
            "availability_zone": tpl.get("availabilityZone"),
        }
        self.capsules[cap_uuid] = cap
        self._cap_priv[cap_uuid] = {
            "init": init_ids,
            "main": main_ids,
            "phase": "creating",
            "due": now + self.create_seconds,
        }
        return cap

    def _capsule_step(self, cap: dict[str, Any], t: float) -> None:
        cp = self._cap_priv[cap["uuid"]]
        members = [self.containers[u] for u in cp["init"] + cp["main"] if u in self.containers]
        if cp["phase"] == "creating":
            failing = [m for m in members if self._priv[m["uuid"]].script.pull_error]
            if failing:
                for m in failing:
                    m.update(
                        status="Error",
                        status_reason=self._priv[m["uuid"]].script.pull_error,
                        task_state=None,
                    )
                cap.update(status="Error", status_reason=failing[0]["status_reason"])
                cp["phase"] = "error"
                return
            ip = f"10.0.0.{next(self._ips)}"
            cap.update(
                host="compute-1",
                addresses={
                    "net-1": [
                        {
                            "addr": ip,
                            "version": 4,
                            "port": "p-" + cap["uuid"][:8],
                            "subnet_id": "s1",
                            "preserve_on_delete": False,
                        }
                    ]
                },
            )
            for m in members:
                m.update(
                    status="Created",
                    status_detail="Created",
                    task_state=None,
                    host="compute-1",
                    addresses=cap["addresses"],
                )
            cp["phase"] = "init"
        if cp["phase"] == "init":
            for u in cp["init"]:
                m = self.containers[u]
                p = self._priv[u]
                if m["status"] == "Created" and p.due is None:
                    self._schedule(m, "start", self.start_seconds, base=t)
                    cp["due"] = None
                    self._watch_capsule(cap, t)
                    return
                if m["status"] in ("Running", "Restarting") or p.due is not None:
                    self._watch_capsule(cap, t)
                    return
                if m["status"] == "Stopped" and (m["status_detail"] or "").startswith("Exited(0)"):
                    continue
                cap.update(
                    status="Error",
                    status_reason=f"init container {m['name']} failed: {m['status_detail']}",
                )
                cp["phase"] = "error"
                return
            for u in cp["main"]:
                self._schedule(self.containers[u], "start", self.start_seconds, base=t)
            cp["phase"] = "starting"
            self._watch_capsule(cap, t)
            return
        if cp["phase"] == "starting":
            if all(self.containers[u]["status"] != "Created" for u in cp["main"]):
                cap["status"] = "Running"
                self._touch(cap, t)
                cp["phase"] = "running"
            else:
                self._watch_capsule(cap, t)
        elif cp["phase"] == "deleting":
            for u in cp["init"] + cp["main"]:
                self.containers.pop(u, None)
                self._priv.pop(u, None)
            self.capsules.pop(cap["uuid"], None)
            self._cap_priv.pop(cap["uuid"], None)

    def _watch_capsule(self, cap: dict[str, Any], t: float) -> None:
        """Re-check the capsule a little later (init sequencing)."""
        self._cap_priv[cap["uuid"]]["due"] = t + 0.25

    def _capsule_view(self, cap: dict[str, Any], version: tuple[int, int]) -> dict[str, Any]:
        cp = self._cap_priv[cap["uuid"]]
        mains = [
            self._fake_view(self.containers[u], version) for u in cp["main"] if u in self.containers
        ]
        inits = [
            self._fake_view(self.containers[u], version) for u in cp["init"] if u in self.containers
        ]
        out = {k: v for k, v in cap.items() if not k.startswith("_") and k != "availability_zone"}
        if version < (1, 38):
            out.pop("annotations", None)
        if not self.admin:
            out["host"] = None
        out["containers"] = mains
        out["init_containers"] = inits
        out["cpu"] = sum(float(c.get("cpu") or 0) for c in mains)
        out["memory"] = str(sum(int(c.get("memory") or 0) for c in mains))
        return self._render(out, "capsule")

    def _delete_capsule(self, cap: dict[str, Any]) -> None:
        cp = self._cap_priv[cap["uuid"]]
        cap.update(status="Deleting")
        for u in cp["init"] + cp["main"]:
            if u in self.containers:
                self.containers[u].update(status="Deleting", task_state="container_deleting")
                self._priv[u].due = None
        cp["phase"] = "deleting"
        cp["due"] = self.now() + self.delete_seconds

    # -- quotas --------------------------------------------------------------------------

    # -- registries ----------------------------------------------------------------------

    def _registries(
        self,
        request: httpx.Request,
        parts: list[str],
        q: dict[str, list[str]],
        version: tuple[int, int],
    ) -> tuple[int, Any]:
        if version < (1, 30):
            raise ZunFailure(
                406,
                f"Version {_fmt(version)} was requested but the requested API registries is not supported for this version.",
            )
        method = request.method
        if len(parts) == 1 and method == "GET":
            items = list(self.registries.values())
            for key in ("name", "domain", "username"):
                if q.get(key):
                    items = [r for r in items if r[key] == q[key][0]]
            unknown = set(q) - {"name", "domain", "username", "limit", "marker", "all_projects"}
            if unknown:
                raise ZunFailure(400, f"Unknown parameters: {', '.join(sorted(unknown))}")
            return 200, self._list("registries", items, q, version, view=self._registry_view)
        if len(parts) == 1 and method == "POST":
            body = json.loads(request.content or b"{}")
            reg = self._registry_body(body, create=True)
            r = {
                "_id": next(self._seq),
                "uuid": str(_uuid.uuid4()),
                "name": reg.get("name") or "",
                "domain": reg["domain"],
                "username": reg.get("username") or "",
                "password": reg.get("password") or "",
                "user_id": self.user_id,
                "project_id": self.project_id,
            }
            self.registries[r["uuid"]] = r
            return 202, {"registry": self._registry_view(r, version)}
        r = self._find_registry(parts[1])
        if method == "GET":
            return 200, {"registry": self._registry_view(r, version)}
        if method == "PATCH":
            body = json.loads(request.content or b"{}")
            r.update(self._registry_body(body, create=False))
            return 200, {"registry": self._registry_view(r, version)}
        if method == "DELETE":
            del self.registries[r["uuid"]]
            return 204, None
        raise ZunFailure(404, "The resource could not be found.")

    @staticmethod
    def _registry_body(body: Any, *, create: bool) -> dict[str, Any]:
        reg = body.get("registry") if isinstance(body, dict) else None
        if not isinstance(reg, dict) or set(body) != {"registry"}:
            raise ZunFailure(
                400, "Invalid input for field/attribute registry. 'registry' is a required property"
            )
        extra = set(reg) - {"name", "domain", "username", "password"}
        if extra:
            raise ZunFailure(
                400,
                "Invalid input for field/attribute registry. Additional properties are not "
                f"allowed ('{sorted(extra)[0]}' was unexpected)",
            )
        if create and not reg.get("domain"):
            raise ZunFailure(
                400, "Invalid input for field/attribute registry. 'domain' is a required property"
            )
        name = reg.get("name")
        if name is not None and (not isinstance(name, str) or not NAME_RE.match(name)):
            raise ZunFailure(400, f"Invalid input for field/attribute name. Value: {name}.")
        for key in ("domain", "username", "password"):
            if key in reg and not isinstance(reg[key], str):
                raise ZunFailure(400, f"Invalid input for field/attribute {key}.")
        return dict(reg)

    def _find_registry(self, ident: str) -> dict[str, Any]:
        hit = [r for r in self.registries.values() if r["uuid"] == ident]
        if not hit:
            hit = [r for r in self.registries.values() if r["name"] == ident]
        if len(hit) > 1:
            raise ZunFailure(
                409,
                "Multiple registries exist with same name. Please use the registry uuid instead.",
            )
        if not hit:
            raise ZunFailure(404, f"Registry {ident} could not be found.")
        return hit[0]

    def _registry_view(self, r: dict[str, Any], version: tuple[int, int]) -> dict[str, Any]:
        out = {k: v for k, v in r.items() if not k.startswith("_")}
        out["password"] = "***"
        out["links"] = [{"href": f"{self.base_url}/v1/registries/{r['uuid']}", "rel": "self"}]
        return out

    def _pull_denied(self, c: dict[str, Any]) -> str:
        image = str(c["image"])
        first = image.split("/", 1)[0]
        host = first if "/" in image and ("." in first or ":" in first) else "docker.io"
        need = self.logins.get(host)
        if need is None:
            return ""
        reg = self.registry_of(c["uuid"])
        if reg is not None and (reg["domain"], reg["username"], reg["password"]) == (host, *need):
            return ""
        return (
            f"Docker internal error: 500 Server Error: pull access denied for {image}, "
            "repository does not exist or may require 'docker login'"
        )

    def _quotas(self, usages: bool) -> dict[str, Any]:
        mine = [c for c in self.containers.values() if c["project_id"] == self.project_id]
        used = {
            "containers": len(mine) + int(self.foreign_usage["containers"]),
            "cpu": sum(float(c.get("cpu") or 0) for c in mine) + float(self.foreign_usage["cpu"]),
            "memory": sum(int(c.get("memory") or 0) for c in mine)
            + int(self.foreign_usage["memory"]),
            "disk": 0,
        }
        if not usages:
            return dict(self.quota)
        return {k: {"limit": v, "in_use": used[k]} for k, v in self.quota.items()}


class LoopbackServer:
    """``fake`` behind a real HTTP/1.1 server on 127.0.0.1, in real time (for a gateway
    subprocess); a context manager."""

    def __init__(self, fake: FakeOpenStack) -> None:
        import http.server

        self.fake = fake
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                content = self.rfile.read(length) if length else b""
                url = owner.fake.base_url + self.path
                req = httpx.Request(
                    self.command, url, headers=list(self.headers.items()), content=content
                )
                resp = owner.fake.handle(req)
                self.send_response(resp.status_code)
                for k, v in resp.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(resp.content)))
                self.end_headers()
                self.wfile.write(resp.content)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackServer:
        port = self.httpd.server_address[1]
        self.fake.base_url = f"http://127.0.0.1:{port}"
        self.fake.realtime = True
        self.fake._real0 = time.monotonic()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
