"""A small in-memory API server for PodController tests (duck-typed ``KubeClient``).

It keeps objects by API path and implements what the controller relies on: pod list + watch
with ``spec.nodeName`` field selector (events fan out to every open watch; ``pause()`` holds
them back and ``expire_watches()`` ends every watch with 410 Gone), graceful deletion
(``deletionTimestamp`` + ``deletionGracePeriodSeconds``, removal on ``gracePeriodSeconds: 0``),
the UID precondition on DELETE and on status patches, a strategic merge of the status
(``conditions`` on ``type``, ``podIPs``/``hostIPs`` on ``ip``), Events, ConfigMaps/Secrets/
Services GETs and lists, Namespaces, and list + watch of any collection (a watch sees only its
own collection's events; ``labelSelector`` and the pods' ``spec.nodeName`` field selector are
honoured, ``forbidden`` paths answer 403).  Every
write is recorded in ``writes``.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as _dt
import itertools
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from status_merge import apply_patch

from gateway.kube.errors import Conflict, Forbidden, Gone, NotFound
from gateway.pods.status import rules as st
from translators.base import (
    Capacity,
    Features,
    NodeInfo,
    PodRef,
    ResolvedPod,
    TranslatorContext,
    WorkloadState,
)
from translators.simulated import SimulatedTranslator
from vkgate_core.clock import FakeClock

_GONE = object()


def ts(t: _dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeKube:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.objects: dict[str, dict[str, Any]] = {}
        self._rv = itertools.count(100)
        self._watchers: list[tuple[str, asyncio.Queue[Any]]] = []
        self.paused = False
        self._held: list[dict[str, Any]] = []
        self.writes: list[tuple[str, str, Any]] = []
        self.stats: Counter[tuple[str, str]] = Counter()
        #: paths whose GET answers 403 (e.g. the Node authorizer before its graph caught up)
        self.forbidden: set[str] = set()

    # -- helpers for tests ---------------------------------------------------------------

    def lease_lane(self) -> FakeKube:
        """``KubeClient.lease_lane``: one fake serves the Leases too."""
        return self

    def _bump(self, obj: dict[str, Any]) -> None:
        obj.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))

    def _emit(self, etype: str, obj: dict[str, Any]) -> None:
        path = self._path_of(obj)
        ev = {"type": etype, "object": copy.deepcopy(obj), "path": path}
        if self.paused:
            self._held.append(ev)
            return
        for watched, q in self._watchers:
            if self._in(watched, path):
                q.put_nowait(ev)

    @staticmethod
    def _in(collection: str, path: str) -> bool:
        """Whether the object at ``path`` belongs to ``collection`` (a list/watch path)."""
        if collection == "/api/v1/pods":
            return "/pods/" in path
        return path.startswith(collection.rstrip("/") + "/") and path.count("/") == (
            collection.rstrip("/").count("/") + 1
        )

    @staticmethod
    def _selected(obj: dict[str, Any], selector: str) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for term in filter(None, selector.split(",")):
            key, _, value = term.partition("=")
            if key not in labels or (value and labels[key] != value):
                return False
        return True

    @staticmethod
    def _path_of(obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "Namespace":
            return f"/api/v1/namespaces/{meta.get('name')}"
        kind = {
            "Pod": "pods",
            "ConfigMap": "configmaps",
            "Secret": "secrets",
            "Service": "services",
        }.get(obj.get("kind", "Pod"), "pods")
        return f"/api/v1/namespaces/{meta.get('namespace')}/{kind}/{meta.get('name')}"

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if obj.get("kind") != "Namespace":
            meta.setdefault("namespace", "default")
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", ts(self.clock.now()))
        if obj.get("kind", "Pod") == "Pod":
            obj.setdefault("kind", "Pod")
            spec = obj.setdefault("spec", {})
            spec.setdefault("restartPolicy", "Always")
            for c in spec.get("containers") or []:
                c.setdefault("image", "busybox")
            obj.setdefault("status", {"phase": "Pending", "qosClass": st.qos_class(obj)})
        self._bump(obj)
        self.objects[self._path_of(obj)] = obj
        self._emit("ADDED", obj)
        return obj

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        return self.objects.get(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def user_delete(self, name: str, *, grace: int = 30, namespace: str = "default") -> None:
        """``kubectl delete pod`` (graceful): the API server sets deletionTimestamp."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        pod = self.objects[path]
        meta = pod["metadata"]
        if grace == 0:
            del self.objects[path]
            self._bump(pod)
            self._emit("DELETED", pod)
            return
        meta["deletionTimestamp"] = ts(self.clock.now() + _dt.timedelta(seconds=grace))
        meta["deletionGracePeriodSeconds"] = grace
        self._bump(pod)
        self._emit("MODIFIED", pod)

    def pause(self) -> None:
        self.paused = True

    def expire_watches(self) -> None:
        """End every watch with 410 Gone and drop what was held back (a compacted history)."""
        self.paused = False
        self._held.clear()
        for _, q in self._watchers:
            q.put_nowait(_GONE)

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        evs = [o for p, o in self.objects.items() if "/events/" in p]
        return [e for e in evs if reason is None or e["reason"] == reason]

    def status_writes(self, name: str) -> int:
        return sum(
            1 for m, p, _ in self.writes if m == "PATCH" and p.endswith(f"/pods/{name}/status")
        )

    # -- KubeClient surface ----------------------------------------------------------------

    async def get(self, path: str, *, params: Any = None) -> dict[str, Any]:
        await asyncio.sleep(0)
        if path in self.forbidden:
            raise Forbidden(f"{path} is forbidden", status=403, reason="Forbidden")
        obj = self.objects.get(path)
        if obj is None:
            raise NotFound(f"{path} not found", status=404, reason="NotFound")
        return copy.deepcopy(obj)

    async def list(self, path: str, *, params: Any = None) -> dict[str, Any]:
        await asyncio.sleep(0)
        if path in self.forbidden:
            raise Forbidden(f"{path} is forbidden", status=403, reason="Forbidden")
        params = params or {}
        items: list[dict[str, Any]] = []
        if path == "/api/v1/pods":
            selector = str(params.get("fieldSelector", ""))
            node = selector.split("=", 1)[1] if selector.startswith("spec.nodeName=") else None
            for p, obj in self.objects.items():
                if "/pods/" in p and (node is None or obj["spec"].get("nodeName") == node):
                    items.append(copy.deepcopy(obj))
        elif path == "/api/v1/namespaces":
            items = [copy.deepcopy(o) for p, o in self.objects.items() if self._in(path, p)]
        else:
            prefix = path.rstrip("/") + "/"
            items = [copy.deepcopy(o) for p, o in self.objects.items() if p.startswith(prefix)]
        selector = str(params.get("labelSelector", ""))
        items = [o for o in items if self._selected(o, selector)]
        return {"items": items, "metadata": {"resourceVersion": str(next(self._rv))}}

    async def watch(self, path: str, *, params: Any = None) -> AsyncIterator[dict[str, Any]]:
        q: asyncio.Queue[Any] = asyncio.Queue()
        entry = (path, q)
        self._watchers.append(entry)
        selector = str((params or {}).get("labelSelector", ""))
        fields = str((params or {}).get("fieldSelector", ""))
        node = fields.split("=", 1)[1] if fields.startswith("spec.nodeName=") else None
        try:
            while True:
                ev = await q.get()
                if ev is _GONE:
                    raise Gone("too old resource version", status=410, reason="Expired")
                obj = ev["object"]
                if node is not None and (obj.get("spec") or {}).get("nodeName") != node:
                    continue
                if self._selected(obj, selector):
                    yield {"type": ev["type"], "object": obj}
        finally:
            self._watchers.remove(entry)

    async def create(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        self.writes.append(("POST", path, body))
        self.stats[("create", path.rsplit("/", maxsplit=1)[-1])] += 1
        if path.endswith("/token"):
            return {"status": {"token": "fake-jwt"}}
        obj = copy.deepcopy(body)
        self._bump(obj)
        name = obj["metadata"]["name"]
        self.objects[f"{path}/{name}"] = obj
        return copy.deepcopy(obj)

    async def patch(
        self, path: str, body: Any, *, patch_type: str = "strategic", **_: Any
    ) -> dict[str, Any]:
        await asyncio.sleep(0)
        self.writes.append(("PATCH", path, copy.deepcopy(body)))
        if path.endswith("/status"):
            self.stats[("patch", "pods/status")] += 1
            pod = self.objects.get(path[: -len("/status")])
            if pod is None:
                raise NotFound("pod not found", status=404, reason="NotFound")
            want = (body.get("metadata") or {}).get("uid")
            if want and want != pod["metadata"]["uid"]:
                raise Conflict("Precondition failed: UID", status=409, reason="Conflict")
            pod["status"] = apply_patch(pod.get("status") or {}, body.get("status") or {})
            self._bump(pod)
            self._emit("MODIFIED", pod)
            return copy.deepcopy(pod)
        obj = self.objects.get(path)
        if obj is None:
            raise NotFound("not found", status=404, reason="NotFound")
        obj.update(body)
        self._bump(obj)
        return copy.deepcopy(obj)

    async def delete(self, path: str, *, body: Any = None) -> dict[str, Any] | None:
        await asyncio.sleep(0)
        self.writes.append(("DELETE", path, body))
        obj = self.objects.get(path)
        if obj is None:
            raise NotFound("not found", status=404, reason="NotFound")
        want = ((body or {}).get("preconditions") or {}).get("uid")
        if want and want != obj["metadata"]["uid"]:
            raise Conflict("Precondition failed: UID", status=409, reason="Conflict")
        if (body or {}).get("gracePeriodSeconds") == 0:
            del self.objects[path]
            self._bump(obj)
            self._emit("DELETED", obj)
        return copy.deepcopy(obj)

    async def aclose(self) -> None:
        return None


class Polled:
    """A translator without ``changes()`` (not a Notifier): only the periodic list sees state."""

    def __init__(self, inner: SimulatedTranslator) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.features: Features = inner.features

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def ping(self) -> None:
        await self.inner.ping()

    async def capacity(self) -> Capacity:
        return await self.inner.capacity()

    async def node_info(self) -> NodeInfo:
        return await self.inner.node_info()

    async def create(self, pod: ResolvedPod) -> WorkloadState:
        return await self.inner.create(pod)

    async def update(self, pod: ResolvedPod, current: WorkloadState) -> bool:
        return await self.inner.update(pod, current)

    async def delete(self, ref: PodRef, *, grace_seconds: int) -> WorkloadState | None:
        return await self.inner.delete(ref, grace_seconds=grace_seconds)

    async def list(self) -> Any:
        return await self.inner.list()


def sim_context(clock: FakeClock, node: str) -> TranslatorContext:
    """The simulated backend's context for ``node``: its time is the fake clock."""
    return TranslatorContext(node_name=node, settings={}, clock=clock)


async def settle(rounds: int = 60) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def run_for(clock: FakeClock, seconds: float, step: float = 0.25) -> None:
    """Advance the fake clock in steps, letting tasks run in between."""
    steps = int(seconds / step)
    for _ in range(steps):
        await clock.advance(step)
        await settle()
