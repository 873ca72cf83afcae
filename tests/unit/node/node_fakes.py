"""A small stateful fake of the API server paths the node controller uses, on httpx.MockTransport.

Objects live in a dict keyed by their API path.  It implements what the real server does for
these verbs that our code relies on: uid/resourceVersion assignment, 404/409, ``resourceVersion``
preconditions on PUT and PATCH, a strategic merge that merges ``conditions``/``addresses`` by
``type`` (the Node API's patch-merge keys) and replaces other lists (``spec.taints``), and the
``/status`` subresource touching only ``status``, and the lists of namespaces and ConfigMaps.
``fail(...)`` queues injected failures.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from vkgate_core.clock import FakeClock
from vkgate_core.quantity import cpu_millis, format_bytes, format_cpu, parse_quantity

MERGE_KEYS = {"conditions": "type", "addresses": "type"}
#: The collections the agent lists and watches that this fake serves (namespaces for the team
#: labels, ConfigMaps for the templates).
COLLECTIONS = re.compile(r"^/api/v1/namespaces(/[^/]+/configmaps)?$")


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    if isinstance(patch, dict) and isinstance(base, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = strategic_merge(base.get(k), v, k)
        return out
    if isinstance(patch, list) and isinstance(base, list) and key in MERGE_KEYS:
        mk = MERGE_KEYS[key]
        out_list = [copy.deepcopy(x) for x in base]
        for item in patch:
            for i, existing in enumerate(out_list):
                if existing.get(mk) == item.get(mk):
                    out_list[i] = strategic_merge(existing, item)
                    break
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(patch)


def canonical_quantities(status: dict[str, Any]) -> dict[str, Any]:
    """What the API server does to capacity/allocatable: quantities come back in canonical
    form (``2048Mi`` → ``2Gi``, ``4000m`` → ``4``)."""
    for key in ("capacity", "allocatable"):
        res = status.get(key)
        if isinstance(res, dict):
            for name, q in list(res.items()):
                if name == "cpu":
                    res[name] = format_cpu(cpu_millis(q))
                elif name in ("memory", "ephemeral-storage"):
                    res[name] = format_bytes(int(parse_quantity(q)))
    return status


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


@dataclass
class Failure:
    method: str
    pattern: str
    status: int | None  # None = connection error
    times: int = 1
    body: dict[str, Any] | None = None


@dataclass
class FakeApi:
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    lease_api: bool = True
    _rv: itertools.count[int] = field(default_factory=lambda: itertools.count(100))
    _uid: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def fail(
        self, method: str, pattern: str, status: int | None, *, times: int = 1, reason: str = ""
    ) -> None:
        body = status_body(status, reason or "Injected", "injected failure") if status else None
        self.failures.append(Failure(method, pattern, status, times, body))

    def writes(self, method: str | None = None, pattern: str = "") -> list[tuple[str, str, Any]]:
        return [
            r
            for r in self.requests
            if r[0] != "GET" and (method is None or r[0] == method) and pattern in r[1]
        ]

    def node(self, name: str = "vk-test") -> dict[str, Any]:
        return self.objects[f"/api/v1/nodes/{name}"]

    def lease(self, name: str = "vk-test") -> dict[str, Any]:
        return self.objects[
            f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        ]

    def put_node(self, node: dict[str, Any]) -> dict[str, Any]:
        node = copy.deepcopy(node)
        meta = node.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self._uid)}")
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[f"/api/v1/nodes/{meta['name']}"] = node
        return node

    # -- transport ---------------------------------------------------------------------

    def _collection(self, request: httpx.Request) -> httpx.Response:
        """List a collection's objects (``labelSelector``: ``key`` or ``key=value`` terms); a
        watch ends at once with no event (the client re-watches after its backoff)."""
        if request.url.params.get("watch") == "true":
            return httpx.Response(200, text="")
        path = request.url.path
        terms = [t.partition("=") for t in request.url.params.get("labelSelector", "").split(",")]

        def selected(obj: dict[str, Any]) -> bool:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            return all(k in labels and (not v or labels[k] == v) for k, _, v in terms if k)

        items = [
            o
            for p, o in self.objects.items()
            if p.startswith(path + "/") and p.count("/") == path.count("/") + 1 and selected(o)
        ]
        return self._json(200, {"items": items, "metadata": {"resourceVersion": "1"}})

    def _json(self, code: int, body: Any) -> httpx.Response:
        return httpx.Response(code, json=body)

    def handler(self, request: httpx.Request) -> httpx.Response:
        method = request.method
        path = request.url.path
        body: Any = json.loads(request.content) if request.content else None
        self.requests.append((method, path, body))
        for f in self.failures:
            if f.times > 0 and f.method in (method, "*") and re.search(f.pattern, path):
                f.times -= 1
                if f.status is None:
                    raise httpx.ConnectError("connection refused", request=request)
                return self._json(f.status, f.body)
        if path == "/apis/coordination.k8s.io/v1":
            if not self.lease_api:
                return httpx.Response(404, text="404 page not found")
            return self._json(200, {"kind": "APIResourceList", "resources": [{"name": "leases"}]})
        if method == "GET" and COLLECTIONS.match(path):
            return self._collection(request)
        if path.endswith("/events"):
            return self._json(201, body)
        if "/events/" in path:
            return self._json(200, body)
        status_sub = path.endswith("/status")
        obj_path = path[: -len("/status")] if status_sub else path
        if method == "GET":
            if obj_path not in self.objects:
                return self._json(404, status_body(404, "NotFound", f"{path} not found"))
            return self._json(200, self.objects[obj_path])
        if method == "POST":
            name = body["metadata"]["name"]
            target = f"{path}/{name}"
            if target in self.objects:
                return self._json(409, status_body(409, "AlreadyExists", f"{name} already exists"))
            obj = copy.deepcopy(body)
            obj["metadata"]["uid"] = f"uid-{next(self._uid)}"
            obj["metadata"]["resourceVersion"] = str(next(self._rv))
            self.objects[target] = obj
            return self._json(201, obj)
        if obj_path not in self.objects:
            return self._json(404, status_body(404, "NotFound", f"{path} not found"))
        current: dict[str, Any] = self.objects[obj_path]
        if method == "DELETE":
            del self.objects[obj_path]
            return self._json(200, {"kind": "Status", "status": "Success"})
        want_rv = (
            (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        )
        if want_rv and want_rv != current["metadata"]["resourceVersion"]:
            return self._json(409, status_body(409, "Conflict", "the object has been modified"))
        if method == "PUT":
            new: dict[str, Any] = copy.deepcopy(body)
            new["metadata"]["uid"] = current["metadata"]["uid"]
        elif method == "PATCH":
            if status_sub:
                new = copy.deepcopy(current)
                new["status"] = canonical_quantities(
                    strategic_merge(current.get("status") or {}, body.get("status") or {})
                )
            else:
                patch = {k: v for k, v in body.items() if k != "status"}
                new = strategic_merge(current, patch)
        else:
            return self._json(405, status_body(405, "MethodNotAllowed", method))
        new["metadata"]["resourceVersion"] = str(next(self._rv))
        self.objects[obj_path] = new
        return self._json(200, new)


async def settle(rounds: int = 200) -> None:
    """Let every runnable task make progress (no real time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def advance(clock: FakeClock, seconds: float, step: float = 0.5) -> None:
    """Advance fake time in small steps, settling between them, so chains of awaits
    (HTTP round trips on the mock transport) complete before the next deadline."""
    await settle()
    remaining = seconds
    while remaining > 1e-9:
        d = min(step, remaining)
        await clock.advance(d)
        await settle()
        remaining -= d


class FakeTranslator:
    """A controllable backend: ``down`` makes ping/capacity fail, ``refused`` makes the ping
    an ACL refusal, ``hang`` makes ping hang."""

    kind = "simulated"

    def __init__(self) -> None:
        from translators.base import Capacity, Features, NodeInfo

        self.features = Features()
        self.down = ""
        self.refused = ""
        self.hang = False
        self.pings = 0
        self.cap = Capacity(
            cpu_millis=8000, memory_bytes=32 * 2**30, pods=110, extended={"nvidia.com/gpu": 2}
        )
        self.info = NodeInfo(
            hostname="vk-test",
            kernel_version="5.15-sim",
            os_image="Simulated OS",
            runtime_version="simulated://0.1",
        )

    def _check(self) -> None:
        from translators.base import BackendUnavailable

        if self.down:
            raise BackendUnavailable(self.down)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        from translators.base import BackendAuthError

        self.pings += 1
        if self.hang:
            await asyncio.Event().wait()
        self._check()
        if self.refused:
            raise BackendAuthError(self.refused, status=403)

    async def capacity(self) -> Any:
        self._check()
        return self.cap

    async def node_info(self) -> Any:
        return self.info

    async def create(self, pod: Any) -> Any:
        raise NotImplementedError

    async def update(self, pod: Any, current: Any) -> bool:
        raise NotImplementedError

    async def delete(self, ref: Any, *, grace_seconds: int) -> None:
        raise NotImplementedError

    async def list(self) -> Any:
        return []


class Component:
    """A pod controller / kubelet server stand-in that logs its start and stop."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def start(self) -> None:
        self.log.append(f"{self.name}.start")

    async def stop(self) -> None:
        self.log.append(f"{self.name}.stop")

    # the kubelet server's metrics endpoint (KubeletServer.start_metrics/stop_metrics)
    metrics_port: int | None = None

    async def start_metrics(self) -> None:
        pass

    async def stop_metrics(self) -> None:
        pass
