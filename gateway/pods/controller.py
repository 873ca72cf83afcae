"""PodController: the pod lifecycle of one virtual node, from watch event to backend and back.

    Reflector(/api/v1/pods, fieldSelector spec.nodeName=<node>) ──ns/name──▶ WorkQueue ──▶ N workers
      DELETED ─────────────────────────────────────────────GoneKey─────▶      │
    translator.changes()  (push, if the translator is a Notifier) ─┐          ▼
    translator.list()     (ONE call per interval: the backstop)  ──┴─▶ sync.PodSync (decide, act,
    RefCache.refresh()    (referenced ConfigMaps/Secrets changed) ───▶  write status, events)
    templates_changed()   (Renderer.subscribe) ──▶ the pods that failed to translate, at once

Startup order matters (docs/design/startup.md).  For "no duplicate submission after a restart":
the pod cache syncs first, then ONE successful ``translator.list()`` indexes every existing
workload by pod UID (adoption) — a pod whose workload exists is never created again.  Workloads
whose pod is gone (and which carry our node name) are queued for deletion before anything else.
If the backend is down at startup the controller keeps retrying that first list in the
background (the node reports the outage; nothing is created blind).  For "rendered with every
input": the workers start only once the node's start-up gate is open (``gateway.inputs``: the
template ConfigMaps, the namespace team labels, and this controller's own two inputs above,
``inputs``), so no pod is rendered before its team's templates and label are loaded.

The decisions per pod live in ``sync.PodSync``; this module owns the loops and the shared state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from gateway.config import Settings
from gateway.inputs import Input, InputsGate
from gateway.kube.client import KubeClient
from gateway.kube.errors import ApiError
from gateway.kube.events import EventRecorder
from gateway.kube.reflector import Reflector
from gateway.metrics import Metrics
from gateway.pods.keys import GoneKey, PodKey, QueueKey
from gateway.pods.queue import ShutDown, WorkQueue
from gateway.pods.resolve import RefCache, Resolver, references
from gateway.pods.sync import Deferred, PodState, PodSync, Retry, pod_key
from gateway.pods.teams import NamespaceTeams
from gateway.pods.translation import TranslationRetries
from translators.base import (
    BackendThrottled,
    Notifier,
    Translator,
    TranslatorError,
    WorkloadState,
)
from vkgate_core.backoff import Backoff
from vkgate_core.clock import Clock, SystemClock
from vkgate_core.kubetypes import Pod
from vkgate_core.timeparse import parse_rfc3339

log = logging.getLogger("gateway.pods")

#: A workload missing from the backend list this long after we submitted it is "lost" even if
#: its pod never reached Running (docs/design/kubelet-contract.md, "Lifecycle":
#: "Running or older than ~1 min").
LOST_AFTER = 60.0
#: Earliest next list after a "kick" (e.g. a delete): kicks within this window coalesce.
MIN_LIST_SPACING = 0.5
#: Reconcile interval while some pod waits for its backend workload to stop.
DELETING_INTERVAL = 1.0


class PodController:
    def __init__(
        self,
        kube: KubeClient,
        translator: Translator,
        events: EventRecorder,
        settings: Settings,
        *,
        clock: Clock | None = None,
        host_ip: Callable[[], str] = lambda: "127.0.0.1",
        allocatable: Callable[[], Mapping[str, str]] = dict,
        rng: random.Random | None = None,
        metrics: Metrics | None = None,
        gate: InputsGate | None = None,
        teams: NamespaceTeams | None = None,
    ) -> None:
        """``gate``: the node's start-up gate (gateway.inputs), which holds ``inputs`` too (the
        node unit adds them); None: a gate of this controller's own inputs.  ``teams``: the
        namespace team labels (gateway.pods.teams; None: no labels are read)."""
        self.kube = kube
        self.translator = translator
        #: Sync latencies go to ``metrics.pod_sync`` (gateway.metrics) when given.
        self.metrics = metrics
        self.events = events
        self.settings = settings
        self.node_name = settings.node.name
        self.clock: Clock = clock or SystemClock()
        ps = settings.pods
        self.workers = ps.workers
        self.reconcile_interval = ps.reconcile_interval
        self._rng = rng or random.Random()
        self.queue: WorkQueue[QueueKey] = WorkQueue(
            clock=self.clock,
            backoff=Backoff(base=ps.backoff_base, cap=ps.backoff_max, jitter=0.1, jitter_up=True),
            retry_qps=ps.rate_qps,
            retry_burst=max(1, int(ps.rate_qps * 2)),
            rng=self._rng,
        )
        self.reflector: Reflector[Pod] = Reflector(
            kube,
            "/api/v1/pods",
            params={"fieldSelector": f"spec.nodeName={self.node_name}"},
            clock=self.clock,
        )
        self.refs = RefCache(
            kube, clock=self.clock, refresh_interval=ps.config_refresh_interval, teams=teams
        )
        self.state = PodState()
        #: Pods whose last sync failed to translate (policy in ``gateway.pods.translation``).
        self.translation = TranslationRetries(clock=self.clock, rng=self._rng)
        resolver = Resolver(
            self.refs,
            features=translator.features,
            backend=translator.kind,
            node_name=self.node_name,
            host_ip=host_ip,
            allocatable=allocatable,
            enable_service_links=ps.enable_service_links,
            teams=settings.templates.teams,
        )
        self.sync = PodSync(
            kube=kube,
            translator=translator,
            events=events,
            resolver=resolver,
            state=self.state,
            queue=self.queue,
            clock=self.clock,
            host_ip=host_ip,
            max_retries=ps.max_retries,
            backoff_max=ps.backoff_max,
            kick=self.kick_reconcile,
            lookup=self.get_pod_by_key,
            translation=self.translation,
        )
        self.ready = asyncio.Event()
        #: Set once the first backend list succeeded (adoption done).
        self.listed = asyncio.Event()
        self._list_problem = ""
        #: The first list's last failure already reported on the pods (``_report_blocked``).
        self._blocked = ""
        #: What this controller loads before it may sync a pod: the start-up gate's view.
        self.inputs = (
            Input.of_reflector(f"the cache of pods bound to {self.node_name}", self.reflector),
            Input(
                f"the {translator.kind} backend's first list",
                loaded=self.listed,
                problem=lambda: self._list_problem,
            ),
        )
        self.gate = gate or InputsGate(
            self.inputs, clock=self.clock, timeout=ps.inputs_timeout, node=self.node_name
        )
        self._kick = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._last_list = float("-inf")
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- cache access (the kubelet server uses these) --------------------------------------

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return self.reflector.store.get(f"{namespace}/{name}")

    def get_pod_by_key(self, key: str) -> Pod | None:
        return self.reflector.store.get(key)

    def pods(self) -> list[Pod]:
        return list(self.reflector.store.values())

    def finished(self, uid: str) -> bool:
        return uid in self.state.finished

    @property
    def stats(self) -> Mapping[str, int]:
        return self.state.stats

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the pod watch and the start-up sequence; returns at once (a pod list that
        cannot load must not keep the kubelet server, or another node, from starting: the gate
        reports it)."""
        self._loop = asyncio.get_running_loop()
        self._spawn(self.reflector.run(self._on_pod_event), "pod-reflector")
        self._spawn(self._startup(), "pod-startup")

    async def stop(self) -> None:
        self.queue.shutdown()
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    def _spawn(self, coro: Any, name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def _startup(self) -> None:
        await self.reflector.synced.wait()
        backoff = Backoff(base=1.0, cap=30.0)
        failures = 0
        while True:
            try:
                states = await self.translator.list()
                break
            except TranslatorError as exc:
                failures += 1
                delay = backoff.delay(failures, self._rng)
                self._list_problem = f"list failed: {exc}"
                log.warning(
                    "initial backend list failed (%s); no pod is created before it succeeds; "
                    "retry in %.1fs",
                    exc,
                    delay,
                )
                await self._report_blocked(exc)
                await self.clock.sleep(delay)
        self._last_list = self.clock.monotonic()
        self._list_problem = ""
        adopted = orphans = 0
        for st in states:
            self.state.workloads[st.ref.uid] = st
        by_uid = {self.state.uid_of(p): p for p in self.reflector.store.values()}
        for st in states:
            pod = by_uid.get(st.ref.uid)
            if pod is not None:
                self.state.adopt(pod, st, submitted_at=self._created_at(pod))
                adopted += 1
            elif self._ours(st):
                self._queue_delete(GoneKey(PodKey(st.ref.key), st.ref.uid), None)
                orphans += 1
        self.listed.set()
        # The one gate: no pod is rendered before every input rendering reads has loaded.
        await self.gate.wait()
        log.info(
            "pod controller ready: %d pods on this node, %d backend workloads "
            "(%d adopted, %d orphans to delete)",
            len(by_uid),
            len(states),
            adopted,
            orphans,
        )
        for key in self.reflector.store:
            self.queue.add(PodKey(key))
        for i in range(self.workers):
            self._spawn(self._worker(), f"pod-worker-{i}")
        self._spawn(self._reconcile_loop(), "pod-reconcile")
        if isinstance(self.translator, Notifier):
            self._spawn(self._notify_loop(), "pod-notify")
        self._spawn(self.refs.run(self._on_refs_changed), "pod-refs")
        self.ready.set()

    async def _report_blocked(self, exc: TranslatorError) -> None:
        """The initial list failed, so no pod is created — or deleted: adoption needs the list
        first.  Say so on every pod of the node, once per distinct error, so a pod that stays
        Pending or Terminating shows why in its Events (e.g. a token without Nomad's
        ``list-jobs``), not only in vkgate's log."""
        message = (
            f"the {self.translator.kind} backend's first list failed, so no pod of this node is "
            f"created or deleted until it succeeds (retried with backoff): {exc}"
        )
        if message == self._blocked:
            return
        self._blocked = message
        for pod in list(self.reflector.store.values()):
            await self.sync.event(pod, "Warning", "BackendListFailed", message)

    def _created_at(self, pod: Pod) -> float:
        """The pod's creation time on the monotonic clock (how old an adopted workload is)."""
        created = (pod.get("metadata") or {}).get("creationTimestamp")
        if not created:
            return self.clock.monotonic()
        age = (self.clock.now() - parse_rfc3339(str(created))).total_seconds()
        return self.clock.monotonic() - max(0.0, age)

    def _ours(self, st: WorkloadState) -> bool:
        return not st.node_name or st.node_name == self.node_name

    # -- inputs ------------------------------------------------------------------------------

    async def _on_pod_event(self, etype: str, obj: Pod, old: Pod | None) -> None:
        key = pod_key(obj)
        uid = self.state.uid_of(obj)
        if etype == "DELETED":
            self.refs.untrack(key)
            self.translation.forget(key, uid)
            self._queue_delete(GoneKey(key, uid), old or obj)
            return
        if old is not None and self.state.uid_of(old) != uid:
            # replaced under the same name while we were not watching
            self._queue_delete(GoneKey(key, self.state.uid_of(old)), old)
        self.refs.track(key, references(obj))
        if self.state.is_own_echo(obj):
            return  # the watch echo of our own status write: nothing new
        self.queue.add(key)

    def _queue_delete(self, key: GoneKey, pod: Pod | None) -> None:
        self.state.gone[key] = pod
        self.queue.add(key)

    def _on_refs_changed(self, key: str) -> None:
        pod = self.reflector.store.get(key)
        if pod is not None:
            self.state.refs_changed.add(self.state.uid_of(pod))
            self.queue.add(PodKey(key))

    def templates_changed(self) -> None:
        """``Renderer.subscribe`` callback (any thread): the templates changed, so retry every
        pod whose last sync failed to translate — now, as a first attempt (no backoff, no
        retry rate limit)."""
        loop = self._loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            self._retry_translation_failures()
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: we are stopped
            loop.call_soon_threadsafe(self._retry_translation_failures)

    def _retry_translation_failures(self) -> None:
        failing = self.translation.changed()
        retried = 0
        for key, uid in failing.items():
            pod = self.reflector.store.get(key)
            if pod is None or self.state.uid_of(pod) != uid:
                self.translation.forget(key, uid)
                continue
            self.queue.add(PodKey(key))
            retried += 1
        if retried:
            log.info("templates changed: retrying %d pod(s) that failed to translate", retried)

    def kick_reconcile(self) -> None:
        """Ask for an early backend list (coalesced), e.g. right after a delete."""
        self._kick.set()

    # -- workers -----------------------------------------------------------------------------

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            started = time.perf_counter()
            result = "error"
            try:
                if isinstance(key, GoneKey):
                    await self.sync.cleanup(key)
                else:
                    await self.sync.sync(key)
                self.queue.forget(key)
                result = "ok"
            except Retry as r:
                result = "deferred" if isinstance(r, Deferred) else "retry"
                if r.delay is not None:
                    self.queue.add(key, delay=r.delay)
                else:
                    self.queue.retry(key, retry_after=r.retry_after)
            except ApiError as exc:
                delay = self.queue.retry(key, retry_after=exc.retry_after)
                log.warning("sync %s: API error %s; retry in %.1fs", key, exc, delay)
            except TranslatorError as exc:
                after = exc.retry_after if isinstance(exc, BackendThrottled) else None
                delay = self.queue.retry(key, retry_after=after)
                log.warning("sync %s: backend error %s; retry in %.1fs", key, exc, delay)
            except asyncio.CancelledError:
                raise
            except Exception:
                delay = self.queue.retry(key)
                log.exception("sync %s failed unexpectedly; retry in %.1fs", key, delay)
            finally:
                self.queue.done(key)
                if self.metrics is not None:
                    self.metrics.pod_sync.labels(result).observe(time.perf_counter() - started)

    # -- backend state -----------------------------------------------------------------------

    async def _reconcile_loop(self) -> None:
        while True:
            interval = self.reconcile_interval
            if self.state.delete_requested:
                # a graceful delete is waiting for the backend to finish: look more often, so
                # the final delete follows the backend's confirmation closely.
                interval = min(interval, DELETING_INTERVAL)
            wait = interval - (self.clock.monotonic() - self._last_list)
            if wait > 0:
                kicked = asyncio.ensure_future(self._kick.wait())
                sleeper = asyncio.ensure_future(self.clock.sleep(wait))
                try:
                    await asyncio.wait({kicked, sleeper}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    kicked.cancel()
                    sleeper.cancel()
                if self._kick.is_set():
                    spacing = MIN_LIST_SPACING - (self.clock.monotonic() - self._last_list)
                    if spacing > 0:
                        await self.clock.sleep(spacing)
            self._kick.clear()
            try:
                await self.reconcile_once()
            except asyncio.CancelledError:
                raise
            except TranslatorError as exc:
                log.warning("backend list failed: %s", exc)
            except Exception:
                log.exception("reconcile failed")

    async def reconcile_once(self) -> None:
        """ONE ``translator.list()`` for all pods; queue what changed, vanished or is orphaned."""
        started = self.clock.monotonic()
        self._last_list = started
        states = await self.translator.list()
        self.state.stats["lists"] += 1
        listed = {st.ref.uid: st for st in states}
        pods = {self.state.uid_of(p): p for p in self.reflector.store.values()}
        for uid, st in listed.items():
            pod = pods.get(uid)
            if pod is None:
                if self._ours(st) and not self.state.submitted_since(uid, started):
                    self.state.workloads[uid] = st
                    gone = GoneKey(PodKey(st.ref.key), uid)
                    if gone not in self.queue:
                        self._queue_delete(gone, self.state.gone.get(gone))
                continue
            if self.state.workloads.get(uid) != st:
                self.state.workloads[uid] = st
                self.queue.add(pod_key(pod))
        for uid, pod in pods.items():
            if uid in listed or uid not in self.state.workloads:
                continue
            if self.state.submitted_since(uid, started):
                continue  # created while the list was in flight
            self.state.workloads.pop(uid, None)
            key = pod_key(pod)
            meta = pod.get("metadata") or {}
            phase = str((pod.get("status") or {}).get("phase", ""))
            if meta.get("deletionTimestamp"):
                self.queue.add(key)
            elif phase in ("Succeeded", "Failed"):
                continue
            elif phase == "Running" or self.state.submitted_age(uid, self.clock) >= LOST_AFTER:
                self.state.lost.add(uid)
                self.queue.add(key)
            else:
                # Submitted moments ago (or Pending before a restart): create it again.
                self.state.forget_submission(uid)
                self.queue.add(key)

    async def _notify_loop(self) -> None:
        assert isinstance(self.translator, Notifier)
        backoff = Backoff(base=1.0, cap=30.0)
        failures = 0
        while True:
            try:
                async for st in self.translator.changes():
                    failures = 0
                    uid = st.ref.uid
                    if self.state.workloads.get(uid) == st:
                        continue
                    pod = self.reflector.store.get(st.ref.key)
                    if pod is None or self.state.uid_of(pod) != uid:
                        continue  # orphans are the reconcile's business
                    self.state.workloads[uid] = st
                    self.queue.add(PodKey(st.ref.key))
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                delay = backoff.delay(failures, self._rng)
                log.warning("backend change stream failed (%s); reconnect in %.1fs", exc, delay)
                await self.clock.sleep(delay)
