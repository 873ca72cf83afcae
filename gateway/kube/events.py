"""Kubernetes Events (core/v1), written the way the kubelet writes them, and never fatal.

An event is a side channel: losing one must never fail a pod sync, so ``record`` swallows (and
logs) every error.  Repeats are aggregated like client-go's EventCorrelator: the first
occurrence of ``(object uid, fieldPath, reason, message, type)`` is POSTed with ``count: 1``;
later ones PATCH the same Event (``count`` + 1, ``lastTimestamp``).  If that Event has expired
meanwhile (404 on PATCH, Events have a TTL) a new one is POSTed.  The aggregation cache is a
bounded LRU, so a long-running agent does not grow without bound.

``kind``/``apiVersion`` come from the object; list items have neither, so a namespaced object
defaults to ``v1 Pod`` and a cluster-scoped one to ``v1 Node``.  Events about a cluster-scoped
object go to the ``default`` namespace (as the kubelet does for its Node).

Once ``start()`` ran (the App does it), ``record`` only enqueues and one background sender
writes the Events, with their own token bucket (kubelet: ``eventRecordQPS``/``eventBurst``):
a burst of pods never waits on its Events, as with client-go's broadcaster.  The queue is
bounded; when it is full an Event is dropped with a log line (the kubelet drops too).  Without
``start()`` (unit tests, one-shot tools) ``record`` writes inline.  ``stop()`` drains what is
queued, bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import logging
import secrets
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.clock import Clock, SystemClock
from gateway.kube.client import KubeClient, TokenBucket
from gateway.kube.errors import NotFound

log = logging.getLogger("gateway.kube.events")

MESSAGE_LIMIT = 1024


@dataclass
class _Seen:
    namespace: str
    name: str
    count: int


def rfc3339(t: _dt.datetime) -> str:
    return t.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        *,
        component: str = "vkgate",
        host: str = "",
        clock: Clock | None = None,
        cache_size: int = 4096,
        qps: float = 50.0,
        burst: int = 100,
        queue_size: int = 1000,
    ) -> None:
        self.client = client
        self.component = component
        self.host = host
        self.clock: Clock = clock or SystemClock()
        self.cache_size = cache_size
        #: Events have their own budget (kubelet: eventRecordQPS 50 / eventBurst 100), so a
        #: burst of pods does not queue its status writes behind its Events.
        self.limiter = TokenBucket(qps, burst, clock=self.clock)
        self._queue: asyncio.Queue[tuple[Mapping[str, Any], str, str, str, str]] = asyncio.Queue(
            maxsize=queue_size
        )
        self._sender: asyncio.Task[None] | None = None
        #: Events dropped because the queue was full.
        self.dropped = 0
        self._seen: OrderedDict[tuple[str, str, str, str, str], _Seen] = OrderedDict()

    async def record(
        self,
        obj: Mapping[str, Any],
        *,
        type: str,
        reason: str,
        message: str,
        field_path: str = "",
    ) -> None:
        """Write (or aggregate into) an Event about ``obj``.  Never raises; once started, only
        enqueues (the sender writes it)."""
        item = (obj, type, reason, message[:MESSAGE_LIMIT], field_path)
        if self._sender is not None and not self._sender.done():
            try:
                self._queue.put_nowait(item)
            except asyncio.QueueFull:
                self.dropped += 1
                log.warning("event queue full: dropped event %s (%s)", reason, message[:80])
            return
        await self._send(item)

    async def start(self) -> None:
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._run(), name="event-sender")

    async def stop(self, *, drain_seconds: float = 5.0) -> None:
        """Write what is queued (at most ``drain_seconds``), then stop the sender."""
        sender, self._sender = self._sender, None
        if sender is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), drain_seconds)
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender

    async def _run(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                await self._send(item)
            finally:
                self._queue.task_done()

    async def _send(self, item: tuple[Mapping[str, Any], str, str, str, str]) -> None:
        obj, etype, reason, message, field_path = item
        try:
            await self._record(obj, etype, reason, message, field_path)
        except Exception as exc:
            meta = obj.get("metadata") or {}
            log.warning(
                "could not record event %s for %s/%s: %s",
                reason,
                meta.get("namespace", ""),
                meta.get("name", ""),
                exc,
            )

    async def _record(
        self, obj: Mapping[str, Any], etype: str, reason: str, message: str, field_path: str
    ) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        key = (uid or str(meta.get("name", "")), field_path, reason, message, etype)
        now = rfc3339(self.clock.now())
        seen = self._seen.get(key)
        if seen is not None:
            self._seen.move_to_end(key)
            seen.count += 1
            try:
                await self.client.patch(
                    f"/api/v1/namespaces/{seen.namespace}/events/{seen.name}",
                    {"count": seen.count, "lastTimestamp": now, "message": message},
                    patch_type="merge",
                    limiter=self.limiter,
                )
                return
            except NotFound:
                pass  # expired (Event TTL): start a new series below
        involved = self._involved(obj, field_path)
        namespace = str(meta.get("namespace") or "default")
        name = f"{meta.get('name', 'unknown')}.{secrets.token_hex(8)}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": etype,
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        entry = _Seen(namespace=namespace, name=name, count=1)
        self._seen[key] = entry
        self._seen.move_to_end(key)
        while len(self._seen) > self.cache_size:
            self._seen.popitem(last=False)
        try:
            await self.client.create(
                f"/api/v1/namespaces/{namespace}/events", body, limiter=self.limiter
            )
        except Exception:
            self._seen.pop(key, None)
            raise

    @staticmethod
    def _involved(obj: Mapping[str, Any], field_path: str) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        namespaced = bool(meta.get("namespace"))
        ref: dict[str, Any] = {
            "apiVersion": obj.get("apiVersion") or "v1",
            "kind": obj.get("kind") or ("Pod" if namespaced else "Node"),
            "name": meta.get("name", ""),
        }
        if namespaced:
            ref["namespace"] = meta["namespace"]
        if meta.get("uid"):
            ref["uid"] = meta["uid"]
        if meta.get("resourceVersion"):
            ref["resourceVersion"] = meta["resourceVersion"]
        if field_path:
            ref["fieldPath"] = field_path
        return ref
