"""Zun's own API code (the ``zun`` package from PyPI) inside the contract tests.

``ZunUpstream`` runs Zun's real API application in-process: the pecan ``RootController`` with
Zun's hooks (request context, no-traceback), its ``ParsableErrorMiddleware`` (error bodies),
microversion negotiation, JSON schemas per microversion, query-parameter schemas, state checks,
policy (oslo.policy defaults) and its SQL database layer on SQLite.  What is stubbed is what sits
*behind* the API layer: the compute service (RPC to zun-compute, the scheduler, placement),
Neutron (networks, security groups) and Cinder (volumes).  ``StubCompute`` accepts every call;
the behaviour of containers over time stays in ``fake_zun.FakeOpenStack``.

``FakeOpenStack(upstream=…)`` replays every Zun request vkgate sends through this app, on a
shadow of its own state (one Zun project per fake, each object's status copied before the
replay), and returns Zun's answer whenever Zun rejects the request; reads are rendered with Zun's own view code (``format_container``,
``format_capsule``).  Disagreements between the fake and Zun are recorded and fail the test
(``tests/contract/zun/conftest.py``).
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
import threading
import warnings
from typing import Any
from urllib.parse import urlencode

ADMIN_ROLES = "admin,member,reader"
MEMBER_ROLES = "member,reader"


def zun_api_or_none() -> ZunUpstream | None:
    """Zun's API app, or None without the ``zun`` package (the ``zun-server`` extra), unless
    ``VKGATE_REQUIRE_ZUN_API`` is set (``tox -e zun`` / ``contract-zun`` / ``e2e`` set it)."""
    try:
        return ZunUpstream.get()
    except ImportError:
        if os.environ.get("VKGATE_REQUIRE_ZUN_API"):
            raise
        return None


class StubCompute:
    """``zun.compute.api.API`` without zun-compute: accepts every call, returns canned results
    (what happens next is the fake's business)."""

    def __init__(self, context: Any) -> None:
        self.context = context

    def __getattr__(self, name: str) -> Any:
        def record(context: Any, *args: Any, **kwargs: Any) -> Any:
            if name == "container_exec":
                return {"output": "", "exit_code": 0, "exec_id": None, "url": None}
            if name == "container_logs":
                return ""
            if name == "container_stats":
                return {}
            if name == "container_show":
                return args[0]
            return None

        return record


class StubNeutron:
    """``zun.network.neutron.NeutronAPI``: every network exists, security groups by name."""

    def __init__(self, context: Any) -> None:
        self.context = context

    def get_available_network(self) -> dict[str, Any]:
        return {"id": "00000000-0000-0000-0000-00000000a0a0", "shared": False}

    def get_neutron_network(self, network: str) -> dict[str, Any]:
        return {"id": network, "router:external": False, "shared": False}

    def show_network(self, network: str, **kwargs: Any) -> dict[str, Any]:
        return {"network": self.get_neutron_network(network)}

    def find_resourceid_by_name_or_id(
        self, resource: str, name_or_id: str, project_id: str | None = None
    ) -> str:
        return f"sg-{name_or_id}"


class StubVolume:
    id = "11111111-1111-1111-1111-111111111111"
    status = "available"


class StubCinder:
    """``zun.volume.cinder_api.CinderAPI``: volumes are created and found instantly."""

    def __init__(self, context: Any) -> None:
        self.context = context

    def create_volume(self, size: Any) -> StubVolume:
        return StubVolume()

    def search_volume(self, name_or_id: str) -> StubVolume:
        return StubVolume()

    def ensure_volume_usable(self, volume: Any) -> None:
        return None

    def delete_volume(self, volume_id: str) -> None:
        return None


class ZunUpstream:
    """One per process (oslo.config and the engine facade are global)."""

    _instance: ZunUpstream | None = None
    _guard = threading.Lock()

    @classmethod
    def get(cls) -> ZunUpstream:
        with cls._guard:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # eventlet / oslo deprecation noise at import
            import pecan
            import zun.conf
            import zun.db  # registers the [database] options
            from oslo_db.sqlalchemy import enginefacade
            from oslo_log import log as oslo_log
            from pecan import hooks as pecan_hooks
            from zun import objects
            from zun.api import hooks, middleware
            from zun.common import config as zun_config
            from zun.common import context as zun_context
            from zun.db.sqlalchemy import models
            from zun.network import neutron
            from zun.volume import cinder_api

            _ = zun.db
            conf = zun.conf.CONF
            self.dir = tempfile.mkdtemp(prefix="zun-upstream-")
            conf.set_default("connection", f"sqlite:///{self.dir}/zun.db", group="database")
            conf.set_default("host", "zun-api-test")
            oslo_log.register_options(conf)
            zun_config.parse_args([], default_config_files=[])
            models.Base.metadata.create_all(enginefacade.writer.get_engine())

            neutron.NeutronAPI = StubNeutron  # type: ignore[misc,assignment]
            cinder_api.CinderAPI = StubCinder  # type: ignore[misc,assignment]

            class ComputeHook(pecan_hooks.PecanHook):  # replaces hooks.RPCHook
                def before(self, state: Any) -> None:
                    state.request.compute_api = StubCompute(state.request.context)

            app = pecan.make_app(
                "zun.api.controllers.root.RootController",
                modules=["zun.api"],
                hooks=[hooks.ContextHook(), ComputeHook(), hooks.NoExceptionTracebackHook()],
                debug=False,
                force_canonical=False,
            )
            self.app = middleware.ParsableErrorMiddleware(app)
            self.objects = objects
            self.context_module = zun_context
        self.lock = threading.Lock()

    # -- requests ----------------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, list[str]] | None = None,
        version: str | None,
        body: bytes = b"",
        project_id: str,
        user_id: str,
        admin: bool,
    ) -> tuple[int, Any, dict[str, str]]:
        """Send one request to Zun's WSGI app; ``path`` starts with ``/v1``."""
        from webob import Request

        url = path + ("?" + urlencode(query, doseq=True) if query else "")
        req = Request.blank(url, method=method)
        req.headers["X-User-Id"] = user_id
        req.headers["X-Project-Id"] = project_id
        req.headers["X-Roles"] = ADMIN_ROLES if admin else MEMBER_ROLES
        req.headers["X-Auth-Token"] = "upstream"
        if version is not None:
            req.headers["OpenStack-API-Version"] = version
        if body:
            req.body = body
            req.content_type = "application/json"
        with self.lock, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                resp = req.get_response(self.app)
            except Exception as exc:  # escapes Zun's middleware: a WSGI server answers 500
                return 500, {"exception": f"{type(exc).__name__}: {exc}"}, {}
        try:
            data = json.loads(resp.body) if resp.body else None
        except ValueError:
            data = resp.body.decode(errors="replace")
        return resp.status_int, data, dict(resp.headers)

    # -- database ------------------------------------------------------------------------

    def context(self, *, project_id: str, user_id: str, admin: bool) -> Any:
        return self.context_module.RequestContext(
            user_id=user_id,
            project_id=project_id,
            is_admin=admin,
            roles=["admin", "member"] if admin else ["member"],
        )

    def set_status(self, uuid: str, status: str, *, project_id: str, user_id: str) -> None:
        """Move a shadow container (or capsule) to the fake's status before a replay."""
        ctx = self.context(project_id=project_id, user_id=user_id, admin=True)
        with self.lock:
            for cls in (
                self.objects.Container,
                self.objects.Capsule,
            ):
                try:
                    obj = cls.get_by_uuid(ctx, uuid)
                except Exception:
                    continue
                obj.status = status
                obj.save(ctx)
                return

    def adopt(self, kind: str, fields: dict[str, Any], *, project_id: str, user_id: str) -> None:
        """Put an object the fake made without the API (a test helper) into Zun's database."""
        ctx = self.context(project_id=project_id, user_id=user_id, admin=True)
        cls = {
            "capsule": self.objects.Capsule,
            "capsule_container": self.objects.CapsuleContainer,
        }.get(kind, self.objects.Container)
        with self.lock:
            obj = cls(ctx, uuid=fields["uuid"], name=fields.get("name"), status=fields["status"])
            obj.project_id, obj.user_id = project_id, user_id
            if kind != "capsule":
                obj.image = fields.get("image") or "busybox"
            if kind == "capsule_container":
                obj.capsule_id = 0  # not looked up by the container endpoints
            obj.create(ctx)

    # -- views -------------------------------------------------------------------------

    def render_container(
        self, fields: dict[str, Any], url: str, *, project_id: str, user_id: str, admin: bool
    ) -> dict[str, Any]:
        """A container as Zun's API shows it (``containers_view.format_container``)."""
        from zun.api.controllers.v1.views import containers_view

        ctx = self.context(project_id=project_id, user_id=user_id, admin=admin)
        obj = self._container_object(ctx, fields)
        with self.lock:
            view: dict[str, Any] = containers_view.format_container(ctx, url, obj)
        return json.loads(json.dumps(view, default=str))

    def _container_object(self, ctx: Any, fields: dict[str, Any], cls: Any = None) -> Any:
        cls = cls or self.objects.Container
        known = set(cls.fields)
        obj = cls(ctx)
        for key, value in fields.items():
            if key in known and key not in {"registry_id", "id"}:
                setattr(obj, key, _as_field(key, value))
        obj.registry_id = None
        obj.obj_reset_changes()
        return obj

    def render_capsule(
        self, fields: dict[str, Any], url: str, *, project_id: str, user_id: str, admin: bool
    ) -> dict[str, Any]:
        """A capsule as Zun's API shows it (``capsules_view.format_capsule``)."""
        from zun.api.controllers.v1.views import capsules_view

        ctx = self.context(project_id=project_id, user_id=user_id, admin=admin)
        cap = self._container_object(
            ctx,
            {k: v for k, v in fields.items() if k not in {"containers", "init_containers"}},
            self.objects.Capsule,
        )
        cap.containers = [
            self._container_object(ctx, c, self.objects.CapsuleContainer)
            for c in fields.get("containers") or []
        ]
        cap.init_containers = [
            self._container_object(ctx, c, self.objects.CapsuleInitContainer)
            for c in fields.get("init_containers") or []
        ]
        with self.lock:
            view: dict[str, Any] = capsules_view.format_capsule(url, cap, ctx)
        return json.loads(json.dumps(view, default=str))


def _as_field(key: str, value: Any) -> Any:
    """The fake stores Zun's wire form; objects want datetimes and strings where Zun has them."""
    import datetime as _dt

    if key.endswith("_at") and isinstance(value, str) and value:
        text = value.replace("Z", "+00:00")
        try:
            return _dt.datetime.fromisoformat(text)
        except ValueError:
            return None
    if key == "memory" and value is not None:
        return str(value)
    if key in ("command", "entrypoint") and isinstance(value, str):
        return shlex.split(value)  # the API stores what it was sent before 1.20 split like this
    return value
