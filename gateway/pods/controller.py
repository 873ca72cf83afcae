"""PodController: the pod lifecycle of one virtual node, from watch event to backend and back.

    Reflector(/api/v1/pods, fieldSelector spec.nodeName=<node>) ──ns/name──▶ WorkQueue ──▶ N workers
      DELETED ─────────────────────────────────────────────GoneKey─────▶      │
    translator.changes()  (push, if the translator is a Notifier) ─┐          ▼
    translator.list()     (ONE call per interval: the backstop)  ──┴─▶ act.PodActor: decide.decide
    RefCache.refresh()    (referenced ConfigMaps/Secrets changed) ───▶  → a plan → run it; statuses
    templates_changed()   (Renderer.subscribe) ──▶ the pods that       through the status manager
                                                    failed to translate, at once

Startup order matters (docs/design/startup.md).  For "no duplicate submission after a restart":
the pod cache syncs first, then ONE successful ``translator.list()`` indexes every existing
workload by pod UID (adoption) — a pod whose workload exists is never created again.  Workloads
whose pod is gone (and which carry our node name) are queued for deletion before anything else.
If the backend is down at startup the controller keeps retrying that first list in the
background (the node reports the outage; nothing is created blind).  For "rendered with every
input": the workers start only once the node's start-up gate is open (``gateway.inputs``: the
template ConfigMaps, the namespace team labels, and this controller's own two inputs above,
``inputs``), so no pod is rendered before its team's templates and label are loaded.

This module owns the loops and what they observe: the pod cache, the backend view (what the
backend lists and streams, ``memory.BackendView``), the reference changes (``memory.RefVersions``)
and the last object of each pod gone from the API.  What to do about a pod is decided in
``decide`` and done in ``act``; its status is written by ``status.StatusManager`` — none of them calls
back into this module (docs/design/pod-sync.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from gateway.config import Settings
from gateway.inputs import Input, InputsGate, NamespaceTeams
from gateway.kube.client import KubeClient
from gateway.kube.errors import ApiError
from gateway.kube.events import EventRecorder
from gateway.kube.reflector import Reflector
from gateway.metrics import Metrics
from gateway.pods.act import PodActor
from gateway.pods.decide import Node
from gateway.pods.keys import GoneKey, PodKey, QueueKey
from gateway.pods.memory import BackendView, RefVersions, pod_ref, uid_of
from gateway.pods.plan import Defer, Retry
from gateway.pods.queue import ShutDown, WorkQueue
from gateway.pods.resolve import RefCache, Resolver, references
from gateway.pods.status import StatusManager
from gateway.pods.status import rules as st
from gateway.pods.translation import TranslationRetries
from gateway.probes.handlers import Handlers
from gateway.probes.hooks import Hooks
from gateway.probes.hookspec import grace_of
from gateway.probes.manager import Prober
from translators.base import (
    BackendThrottled,
    Executor,
    Killer,
    Notifier,
    Restarter,
    StreamHealth,
    Translator,
    TranslatorError,
    Vanished,
    WorkloadState,
)
from vkgate_core.backoff import Backoff
from vkgate_core.clock import Clock, SystemClock
from vkgate_core.kubetypes import Pod
from vkgate_core.timeparse import parse_rfc3339

log = logging.getLogger("gateway.pods")


def _kills(translator: Translator) -> bool:
    """The backend can kill (and restart) one container: a probe or hook failure acts."""
    return isinstance(translator, Restarter | Killer)


#: Earliest next list after a "kick" (e.g. a delete): kicks within this window coalesce.
MIN_LIST_SPACING = 0.5
#: Reconcile interval while some pod waits for its backend workload to stop, unless the
#: backend's change stream reports the stops (``StreamHealth``; docs/design/pod-sync.md).
DELETING_INTERVAL = 1.0
#: A workload the change stream saw deleted within this many seconds of its pod's (re)create
#: is left to the next list (the deletion may be of the workload it replaced).
VANISH_GRACE = 5.0


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
        namespace team labels (gateway.inputs.teams; None: no labels are read)."""
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
        self.streamed_interval = max(ps.reconcile_interval, ps.streamed_reconcile_interval)
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
        #: What the backend has, per pod uid (the lists and the change stream below; ``act``
        #: writes the backend's answers to its own requests through).
        self.view = BackendView()
        #: How often each pod's referenced ConfigMaps/Secrets changed.
        self.refs_changed = RefVersions()
        #: Cleanup key → the pod's last object (None for an orphan), until its cleanup is done.
        self._gone: dict[GoneKey, Pod | None] = {}
        self._stats: Counter[str] = Counter()
        #: Pods whose last sync failed to translate (policy in ``gateway.pods.translation``).
        self.translation = TranslationRetries(clock=self.clock, rng=self._rng)
        #: The one writer of PodStatus.
        self.status = StatusManager(
            kube,
            events,
            clock=self.clock,
            backend=translator.kind,
            host_ip=host_ip,
            ephemeral_containers="ephemeralContainers" in translator.features.pod_features,
        )
        resolver = Resolver(
            self.refs,
            features=translator.features,
            backend=translator.kind,
            node_name=self.node_name,
            host_ip=host_ip,
            allocatable=allocatable,
            enable_service_links=ps.enable_service_links,
            teams=settings.templates.teams,
            team_label_namespaces=settings.templates.team_label_namespaces,
            daemonsets=settings.node.daemonsets,
            can_exec=isinstance(translator, Executor),
            ignore_pod_fields=settings.node.ignore_pod_fields,
            allow_probe_host=settings.probes.allow_host,
        )
        #: Container probes (gateway.probes): readiness verdicts are one more input of the
        #: status manager; the pod is synced again when one changes.
        self.prober = Prober(
            Handlers(
                executor=translator if isinstance(translator, Executor) else None,
                allow_host=settings.probes.allow_host,
            ),
            events,
            clock=self.clock,
            set_readiness=self.status.set_container_readiness,
            queue=lambda key: self.queue.add(PodKey(key)),
            restart=self._restart_container if _kills(translator) else None,
            set_started=self.status.set_container_started,
            skip=lambda pod: [u.field for u in resolver.ignored(pod)],
            pre_kill=self._pre_kill,
        )
        #: Lifecycle hooks (gateway.probes.hooks): postStart keeps a container waiting until
        #: it returns (an input of the status manager); a deletion's preStop hooks run before
        #: the backend is asked to stop (the plan's ``RunPreStop``).
        self.hooks = Hooks(
            self.prober.handlers,
            events,
            clock=self.clock,
            set_starting=self.status.set_container_starting,
            queue=lambda key: self.queue.add(PodKey(key)),
            restart=self._restart_container if _kills(translator) else None,
            skip=lambda pod: [u.field for u in resolver.ignored(pod)],
        )
        self.actor = PodActor(
            translator,
            kube=kube,
            events=events,
            status=self.status,
            resolver=resolver,
            translation=self.translation,
            view=self.view,
            refs=self.refs_changed,
            pods=self.reflector,
            queue=self.queue,
            clock=self.clock,
            stops_streamed=self._stops_streamed,
            node=Node(
                name=self.node_name,
                backend=translator.kind,
                max_retries=ps.max_retries,
                backoff_max=ps.backoff_max,
                ephemeral_containers="ephemeralContainers" in translator.features.pod_features,
                max_kill_timeout=translator.features.max_kill_timeout,
            ),
            hooks=self.hooks,
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
        self._tasks: list[asyncio.Task[None]] = []
        self._last_list = float("-inf")
        #: True while ``_notify_loop`` consumes the backend's change stream (not backing off).
        self._notify_up = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _pre_kill(self, pod: Pod, container: str) -> None:
        """A probe kills ``container``: its preStop hook first, as the kubelet's
        ``killContainer`` runs it (bounded by ``terminationGracePeriodSeconds``)."""
        await self.hooks.run_pre_stop(pod, container, grace_of(pod))

    async def _restart_container(self, pod: Pod, container: str, why: str) -> None:
        """A liveness or startup probe or a postStart hook failed: the container is killed,
        and restarted per restartPolicy — the backend restarts it (``Restarter``: its state
        then shows the restart, and the next list or change queues the pod), or, for
        ``Never``, only kills it (``Killer``)."""
        never = (pod.get("spec") or {}).get("restartPolicy") == "Never"
        try:
            if isinstance(self.translator, Restarter) and not never:
                await self.translator.restart_container(pod_ref(pod), container)
            elif isinstance(self.translator, Killer):
                # the backend's restart policy (the pod's) decides what follows the kill
                await self.translator.kill_container(
                    pod_ref(pod), container, grace_seconds=int(grace_of(pod))
                )
            else:
                log.warning(
                    "%s: %s, but the %s backend cannot kill it without a restart and "
                    "restartPolicy is Never: it keeps running",
                    PodKey.of(pod),
                    why,
                    self.translator.kind,
                )
                return
        except TranslatorError as exc:
            log.warning("%s: kill of %s failed: %s", PodKey.of(pod), container, exc)
            await self.events.record(
                pod,
                type="Warning",
                reason="FailedRestart" if not never else "FailedKillPod",
                message=f"{why}, but the backend refused: {exc}",
                field_path=f"spec.containers{{{container}}}",
            )
            return
        self.view.refresh_soon()

    # -- cache access (the kubelet server uses these) --------------------------------------

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return self.reflector.store.get(f"{namespace}/{name}")

    def get_pod_by_key(self, key: str) -> Pod | None:
        return self.reflector.store.get(key)

    def pods(self) -> list[Pod]:
        return list(self.reflector.store.values())

    def finished(self, uid: str) -> bool:
        return self.actor.acts.finished(uid)

    def workload(self, uid: str) -> WorkloadState | None:
        return self.view.get(uid)

    @property
    def stats(self) -> Mapping[str, int]:
        """Pod sync counters by name: this controller's, the actor's and the status manager's."""
        out: Counter[str] = Counter()
        for part in (self._stats, self.actor.acts.stats, self.status.stats):
            out.update(part)
        return out

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
        self.prober.stop()
        self.hooks.stop()
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
        for state in states:
            self.view.observe(state)
        by_uid = {uid_of(p): p for p in self.reflector.store.values()}
        for state in states:
            pod = by_uid.get(state.ref.uid)
            if pod is not None:
                self.actor.adopt(pod, submitted_at=self._created_at(pod))
                adopted += 1
            elif self._ours(state):
                self._queue_delete(GoneKey(PodKey(state.ref.key), state.ref.uid), None)
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
            await self.events.record(
                pod, type="Warning", reason="BackendListFailed", message=message
            )

    def _created_at(self, pod: Pod) -> float:
        """The pod's creation time on the monotonic clock (how old an adopted workload is)."""
        created = (pod.get("metadata") or {}).get("creationTimestamp")
        if not created:
            return self.clock.monotonic()
        age = (self.clock.now() - parse_rfc3339(str(created))).total_seconds()
        return self.clock.monotonic() - max(0.0, age)

    def _ours(self, state: WorkloadState) -> bool:
        return not state.node_name or state.node_name == self.node_name

    # -- inputs ------------------------------------------------------------------------------

    async def _on_pod_event(self, etype: str, obj: Pod, old: Pod | None) -> None:
        key = PodKey.of(obj)
        uid = uid_of(obj)
        if etype == "DELETED":
            self.refs.untrack(key)
            self.translation.forget(key, uid)
            self._queue_delete(GoneKey(key, uid), old or obj)
            return
        if old is not None and uid_of(old) != uid:
            # replaced under the same name while we were not watching
            self._queue_delete(GoneKey(key, uid_of(old)), old)
        self.refs.track(key, references(obj))
        if self.status.is_own_echo(obj):
            return  # the watch echo of our own status write: nothing new
        self.queue.add(key)

    def _queue_delete(self, key: GoneKey, pod: Pod | None) -> None:
        self._gone[key] = pod
        self.queue.add(key)

    def _on_refs_changed(self, key: str) -> None:
        pod = self.reflector.store.get(key)
        if pod is not None:
            self.refs_changed.changed(uid_of(pod))
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
            if pod is None or uid_of(pod) != uid:
                self.translation.forget(key, uid)
                continue
            self.queue.add(PodKey(key))
            retried += 1
        if retried:
            log.info("templates changed: retrying %d pod(s) that failed to translate", retried)

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
                    outcome = await self.actor.cleanup(key, self._gone.get(key))
                    self._gone.pop(key, None)
                    self.refs_changed.forget(key.uid)
                    self.prober.forget(key.uid)
                    self.hooks.forget(key.uid)
                else:
                    pod = self.reflector.store.get(key)
                    if pod is not None:  # probe verdicts first: the status below renders them
                        self.prober.sync(pod, self.view.get(uid_of(pod)))
                        self.hooks.sync(pod, self.view.get(uid_of(pod)))
                    outcome = await self.actor.sync(key)
                if isinstance(outcome, Defer):
                    result = "deferred"
                    self.queue.add(key, delay=outcome.after)
                elif isinstance(outcome, Retry):
                    result = "retry"
                    if outcome.after is not None:
                        self.queue.add(key, delay=outcome.after)
                    else:
                        self.queue.retry(key, retry_after=outcome.retry_after)
                else:
                    result = "ok"
                    self.queue.forget(key)
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
            streamed = self._stops_streamed()
            interval = self.streamed_interval if streamed else self.reconcile_interval
            stopping = self.actor.acts.stopping()
            if stopping and not streamed:
                # a graceful delete is waiting for the backend to finish and no change stream
                # reports it: look more often, so the final delete follows the backend's
                # confirmation closely.
                interval = min(interval, DELETING_INTERVAL)
            wait = interval - (self.clock.monotonic() - self._last_list)
            if wait > 0:
                # while stops are pending, check every DELETING_INTERVAL that the stream still
                # reports them (it may drop): a check, not a list
                nap = min(wait, DELETING_INTERVAL) if stopping else wait
                if streamed:
                    # the long interval holds only while the stream does: look again at the
                    # normal interval (a check, not a list)
                    nap = min(nap, self.reconcile_interval)
                kicked = asyncio.ensure_future(self.view.refresh.wait())
                sleeper = asyncio.ensure_future(self.clock.sleep(nap))
                try:
                    await asyncio.wait({kicked, sleeper}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    kicked.cancel()
                    sleeper.cancel()
                if self.view.refresh.is_set():
                    spacing = MIN_LIST_SPACING - (self.clock.monotonic() - self._last_list)
                    if spacing > 0:
                        await self.clock.sleep(spacing)
                elif nap < wait:
                    continue
            self.view.refresh.clear()
            try:
                await self.reconcile_once()
            except asyncio.CancelledError:
                raise
            except TranslatorError as exc:
                log.warning("backend list failed: %s", exc)
            except Exception:
                log.exception("reconcile failed")

    def _stops_streamed(self) -> bool:
        """True while the backend's change stream is up and reports a stopping workload's end:
        then a pod waiting for its stop needs no list per second (at thousands of stopping pods
        on Nomad that was a full job list per second).  A backend without a stream, or with
        one that is down (reconnecting, or our consumer of it failing), gets the fast list."""
        translator = self.translator
        return (
            self._notify_up
            and isinstance(translator, StreamHealth)
            and translator.change_stream_live()
        )

    async def reconcile_once(self) -> None:
        """ONE ``translator.list()`` for all pods; queue what changed, vanished or is orphaned."""
        started = self.clock.monotonic()
        self._last_list = started
        states = await self.translator.list()
        self._stats["lists"] += 1
        listed = {state.ref.uid: state for state in states}
        pods = {uid_of(p): p for p in self.reflector.store.values()}
        submissions = self.actor.acts
        for uid, state in listed.items():
            pod = pods.get(uid)
            if pod is None:
                if self._ours(state) and not submissions.submitted_since(uid, started):
                    self.view.observe(state)
                    gone = GoneKey(PodKey(state.ref.key), uid)
                    if gone not in self.queue:
                        self._queue_delete(gone, self._gone.get(gone))
                continue
            if self.view.observe(state):
                self.queue.add(PodKey.of(pod))
        for uid, pod in pods.items():
            if uid in listed or uid not in self.view:
                continue
            if submissions.submitted_since(uid, started):
                continue  # created while the list was in flight
            # vanished: what that means for the pod (lost, or created again) is decide's
            self.view.vanish(uid)
            if (pod.get("metadata") or {}).get("deletionTimestamp") or not st.is_terminal(pod):
                self.queue.add(PodKey.of(pod))

    def _vanished(self, gone: Vanished) -> None:
        """The change stream saw a workload deleted: what the next list would find out,
        now (``reconcile_once``'s rule for a workload the list no longer has)."""
        uid = gone.ref.uid
        pod = self.reflector.store.get(gone.ref.key)
        if pod is None or uid_of(pod) != uid or uid not in self.view:
            return  # orphans are the reconcile's business; a removal act made is known
        if self.actor.acts.submitted_since(uid, self.clock.monotonic() - VANISH_GRACE):
            # just (re)created: the deletion may be of the workload it replaced; a list
            # decides, now rather than at the next interval (300 s while the stream is live)
            self.view.refresh_soon()
            return
        self.view.vanish(uid)
        if (pod.get("metadata") or {}).get("deletionTimestamp") or not st.is_terminal(pod):
            self.queue.add(PodKey.of(pod))

    async def _notify_loop(self) -> None:
        assert isinstance(self.translator, Notifier)
        backoff = Backoff(base=1.0, cap=30.0)
        failures = 0
        while True:
            self._notify_up = True
            try:
                async for state in self.translator.changes():
                    failures = 0
                    if isinstance(state, Vanished):
                        self._vanished(state)
                        continue
                    uid = state.ref.uid
                    if self.view.get(uid) == state:
                        continue
                    pod = self.reflector.store.get(state.ref.key)
                    if pod is None or uid_of(pod) != uid:
                        continue  # orphans are the reconcile's business
                    self.view.observe(state)
                    self.queue.add(PodKey(state.ref.key))
                self._notify_up = False
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._notify_up = False
                failures += 1
                delay = backoff.delay(failures, self._rng)
                log.warning("backend change stream failed (%s); reconnect in %.1fs", exc, delay)
                await self.clock.sleep(delay)
