"""Kubernetes Events (core/v1), written the way the kubelet writes them, and never fatal.

An event is a side channel: losing one must never fail a pod sync, so ``record`` swallows (and
logs) every error.  Repeats are aggregated like client-go's EventCorrelator: the first
occurrence of ``(object uid, fieldPath, reason, message, type)`` is POSTed with ``count: 1``;
later ones PATCH the same Event (``count`` + 1, ``lastTimestamp``).  If that Event has expired
meanwhile (404 on PATCH, Events have a TTL) a new one is POSTed.  The aggregation cache is a
bounded LRU, so a long-running agent does not grow without bound.

``kind``/``apiVersion`` come from the object; list items have neither, so a namespaced object
defaults to ``v1 Pod`` and a cluster-scoped one to ``v1 Node``.  Events about a cluster-scoped
object go to the ``default`` namespace (as the kubelet does for its Node).  ``record`` keeps
only the object's reference (``Involved``: the involvedObject fields), never the object: a
queued Event costs a few hundred bytes, not its whole pod (docs/benchmarks.md, "Events at
10,000 pods").

Once ``start()`` ran (the App does it), ``record`` only enqueues and ``senders`` background
tasks write the Events, with their own token bucket (kubelet: ``eventRecordQPS``/``eventBurst``):
a burst of pods never waits on its Events, as with client-go's broadcaster.  Several senders
keep the bucket, not one request's round trip, the limit (``senders_for``: one per 25 Events
per second of budget, at least 4, at most 64); an Event goes to the sender chosen by
its aggregation key, so repeats of one Event are written in order by one sender (a PATCH never
races the POST it aggregates into).  The queue is bounded (``queue_size``, default 50,000: the
4 Events of each of 10,000 pods fit while the bucket drains them); when it is full an
Event is dropped with a log line and counted (``counts["dropped"]``, exposed as
``vkgate_events_total{outcome="dropped"}``, docs/design/metrics.md).  Without ``start()`` (unit
tests, one-shot tools) ``record`` writes inline.  ``stop()`` drains what is queued, bounded by a
timeout; what is still queued then is counted as dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import logging
import math
import secrets
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.kube.client import KubeClient
from gateway.kube.errors import NotFound
from vkgate_core.clock import Clock, SystemClock
from vkgate_core.ratelimit import TokenBucket

log = logging.getLogger("gateway.kube.events")

MESSAGE_LIMIT = 1024


@dataclass(frozen=True, slots=True)
class Involved:
    """What an Event keeps of its object: the ``involvedObject`` reference, nothing more."""

    api_version: str
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Involved:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        return cls(
            api_version=str(obj.get("apiVersion") or "v1"),
            kind=str(obj.get("kind") or ("Pod" if namespace else "Node")),
            name=str(meta.get("name", "")),
            namespace=namespace,
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
        )

    def reference(self, field_path: str) -> dict[str, Any]:
        ref: dict[str, Any] = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        if self.resource_version:
            ref["resourceVersion"] = self.resource_version
        if field_path:
            ref["fieldPath"] = field_path
        return ref


@dataclass
class _Seen:
    namespace: str
    name: str
    count: int


def rfc3339(t: _dt.datetime) -> str:
    return t.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


#: (object reference, type, reason, message, fieldPath): what a queued Event holds.
_Item = tuple[Involved, str, str, str, str]


#: Events per second one sender keeps up with (a write's round trip on a busy API server is
#: about 40 ms); ``senders_for`` sizes the sender pool from the Event budget with it.
PER_SENDER_QPS = 25.0
#: The longest an Event waits for pod work to finish, and how often it looks again.
YIELD_MAX = 2.0
YIELD_STEP = 0.05


def senders_for(qps: float) -> int:
    """Senders needed for the bucket, not the round trip, to be the limit (4 to 64)."""
    return max(4, min(64, math.ceil(qps / PER_SENDER_QPS))) if qps > 0 else 4


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
        queue_size: int = 50_000,
        senders: int | None = None,
    ) -> None:
        self.client = client
        self.component = component
        self.host = host
        self.clock: Clock = clock or SystemClock()
        self.cache_size = cache_size
        #: Events have their own budget (kubelet: eventRecordQPS 50 / eventBurst 100), so a
        #: burst of pods does not queue its status writes behind its Events.
        self.limiter = TokenBucket(qps, burst, clock=self.clock)
        self.queue_size = max(1, queue_size)
        count = senders_for(qps) if senders is None else max(1, senders)
        self._queues: list[asyncio.Queue[_Item]] = [asyncio.Queue() for _ in range(count)]
        self._queued = 0
        self._senders: list[asyncio.Task[None]] = []
        #: Outcomes: ``posted`` (new Event), ``aggregated`` (PATCH of a repeat), ``failed`` (the
        #: API refused or was unreachable), ``dropped`` (the queue was full).
        self.counts: Counter[str] = Counter()
        self._seen: OrderedDict[tuple[str, str, str, str, str], _Seen] = OrderedDict()
        #: True while pod work is waiting (the node's pod queue sets it); senders then hold
        #: Events back a little so status writes go first.
        self.busy: Callable[[], bool] | None = None

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
        item = (Involved.of(obj), type, reason, message[:MESSAGE_LIMIT], field_path)
        if self._senders and not all(t.done() for t in self._senders):
            if self._queued >= self.queue_size:
                self.counts["dropped"] += 1
                log.warning("event queue full: dropped event %s (%s)", reason, message[:80])
                return
            self._queued += 1
            self._queues[hash(self._key(item)) % len(self._queues)].put_nowait(item)
            return
        await self._send(item)

    async def start(self) -> None:
        if not self._senders or all(t.done() for t in self._senders):
            self._senders = [
                asyncio.create_task(self._run(q), name=f"event-sender-{i}")
                for i, q in enumerate(self._queues)
            ]

    async def stop(self, *, drain_seconds: float = 5.0) -> None:
        """Write what is queued (at most ``drain_seconds``), then stop the senders."""
        senders, self._senders = self._senders, []
        if not senders:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(q.join() for q in self._queues)), drain_seconds)
        for t in senders:
            t.cancel()
        for t in senders:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        abandoned = 0
        for q in self._queues:
            while not q.empty():
                q.get_nowait()
                q.task_done()
                abandoned += 1
        self._queued = 0
        if abandoned:
            self.counts["dropped"] += abandoned
            log.warning("stopping: %d queued events were not written (dropped)", abandoned)

    async def _run(self, queue: asyncio.Queue[_Item]) -> None:
        while True:
            item = await queue.get()
            try:
                await self._yield_to_pods()
                await self._send(item)
            except asyncio.CancelledError:  # stopped while it waited for the bucket
                self.counts["dropped"] += 1
                raise
            finally:
                self._queued -= 1
                queue.task_done()

    async def _yield_to_pods(self) -> None:
        """Hold an Event back (at most ``YIELD_MAX`` s) while ``busy()`` says pod work waits:
        a pod's status is what its user waits for; its Events may trail it
        (docs/design/kube-client.md, "Events yield to pod work")."""
        if self.busy is None:
            return
        waited = 0.0
        while waited < YIELD_MAX and self.busy():
            await self.clock.sleep(YIELD_STEP)
            waited += YIELD_STEP

    @staticmethod
    def _key(item: _Item) -> tuple[str, str, str, str, str]:
        """The aggregation key: (object uid, fieldPath, reason, message, type)."""
        ref, etype, reason, message, field_path = item
        return (ref.uid or ref.name, field_path, reason, message, etype)

    async def _send(self, item: _Item) -> None:
        ref, etype, reason, message, field_path = item
        try:
            self.counts[await self._record(ref, etype, reason, message, field_path)] += 1
        except Exception as exc:
            self.counts["failed"] += 1
            log.warning(
                "could not record event %s for %s/%s: %s", reason, ref.namespace, ref.name, exc
            )

    async def _record(
        self, ref: Involved, etype: str, reason: str, message: str, field_path: str
    ) -> str:
        """Write one Event; returns the outcome (``posted`` or ``aggregated``)."""
        key = self._key((ref, etype, reason, message, field_path))
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
                return "aggregated"
            except NotFound:
                pass  # expired (Event TTL): start a new series below
        involved = ref.reference(field_path)
        namespace = ref.namespace or "default"
        name = f"{ref.name or 'unknown'}.{secrets.token_hex(8)}"
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
        return "posted"
