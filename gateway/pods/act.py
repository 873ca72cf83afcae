"""Carry out a pod's plan: the translator, the status manager, Events and the final delete.

``PodActor.sync(key)`` takes the pod from the cache, asks ``gateway.pods.decide`` for a plan
and runs it step by step; a step with an outcome (``Create``, ``Submit``, ``ResolveUpdate``,
``ApplyUpdate``, ``Stop``) ends its plan, and the outcome goes back to ``decide`` for the rest
(docs/design/pod-sync.md).  ``PodActor.cleanup(GoneKey)`` does the same for a pod gone from the
API.  The returned ``plan.Outcome`` tells the worker whether to retry; API and backend errors
propagate to it (after their Events).

This is the only place that talks to the backend about a pod, and the only writer of
``memory.ActMemory`` (what was submitted, applied, stopped, recorded).  It writes the backend's
answers through to the ``BackendView`` and hands statuses to the status manager; it calls
nothing back in the controller.

Internal to the pod sync (``gateway.pods``): only the controller imports it.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gateway.kube.client import KubeClient
from gateway.kube.errors import Conflict, NotFound
from gateway.kube.events import EventRecorder
from gateway.pods import decide as dc
from gateway.pods.events import Event
from gateway.pods.keys import GoneKey, PodKey, QueueKey
from gateway.pods.memory import (
    ActMemory,
    Applied,
    BackendView,
    PodMemory,
    RefVersions,
    pod_ref,
    spec_hash,
    uid_of,
)
from gateway.pods.plan import (
    DONE,
    ApplyUpdate,
    BackendDelete,
    Count,
    Create,
    Defer,
    FinalDelete,
    Forget,
    ForgetSubmission,
    Log,
    NoteApplied,
    NoteEmitted,
    NoteWarned,
    Outcome,
    Plan,
    Recreate,
    Requeue,
    ResolveUpdate,
    Retry,
    RunPreStop,
    Step,
    Stop,
    Submit,
    WorkloadGone,
    WriteStatus,
)
from gateway.pods.queue import WorkQueue
from gateway.pods.resolution import Resolution
from gateway.pods.resolve import Resolver
from gateway.pods.status import FIRST_STATUS_DELAY, StatusManager, Write
from gateway.pods.translation import TranslationRetries
from gateway.probes.hooks import Hooks
from translators.base import (
    BackendError,
    BackendNotFound,
    PodRef,
    TranslationError,
    Translator,
    UnsupportedError,
    WorkloadState,
)
from translators.render.masking import masked_errors
from vkgate_core.clock import Clock
from vkgate_core.kubetypes import Pod
from vkgate_core.quantity import QuantityError

log = logging.getLogger("gateway.pods.act")

_LEVELS = {"info": logging.INFO, "warning": logging.WARNING}


class PodCache(Protocol):
    """The pod cache (the reflector): ``ns/name`` → the newest pod object."""

    @property
    def store(self) -> Mapping[str, Pod]: ...


@dataclass
class _Run:
    """One sync of one pod: what its plans are decided from and run against."""

    key: PodKey
    #: The pod as the sync found it (a cleanup: its last object, None for an orphan).
    pod: Pod | None
    uid: str
    ref: PodRef
    now: _dt.datetime
    observed: WorkloadState | None = None
    memory: PodMemory = field(default_factory=PodMemory)
    #: The ``RefVersions`` version this sync saw (a create or update applies it).
    refs_version: int = 0
    #: The last ``Create``/``ResolveUpdate`` resolution.
    resolution: Resolution | None = None

    @property
    def live(self) -> Pod:
        assert self.pod is not None
        return self.pod


class PodActor:
    """Executes the plans of one node's pods (one worker per pod at a time: the work queue)."""

    def __init__(
        self,
        translator: Translator,
        *,
        kube: KubeClient,
        events: EventRecorder,
        status: StatusManager,
        resolver: Resolver,
        translation: TranslationRetries,
        view: BackendView,
        refs: RefVersions,
        pods: PodCache,
        queue: WorkQueue[QueueKey],
        clock: Clock,
        node: dc.Node,
        hooks: Hooks | None = None,
        stops_streamed: Callable[[], bool] = lambda: False,
    ) -> None:
        self.translator = translator
        self.kube = kube
        self.events = events
        self.status = status
        self.resolver = resolver
        #: Pods that failed to translate: when to retry them, whether to record the Event.
        self.translation = translation
        self.view = view
        self.refs = refs
        self.pods = pods
        self.queue = queue
        self.clock = clock
        self.node = node
        #: Lifecycle hooks (gateway.probes.hooks): runs a deletion's preStop hooks, and says
        #: where they are (``PodMemory.pre_stop``).
        self.hooks = hooks
        #: True while the backend's change stream reports a stopped workload's end (the
        #: controller's ``_stops_streamed``): a stop then asks for no list.
        self.stops_streamed = stops_streamed
        #: What this actor did, per pod (it is the only writer).
        self.acts = ActMemory()

    # -- entry points -------------------------------------------------------------------------

    async def sync(self, key: PodKey) -> Outcome:
        """Bring pod ``key`` (the cache's newest object) and its workload together."""
        pod = self.pods.store.get(key)
        if pod is None:
            return DONE
        uid = uid_of(pod)
        run = _Run(key, pod, uid, pod_ref(pod), self.clock.now(), self.view.get(uid))
        run.refs_version = self.refs.version(uid)
        wait = self.translation.hold(key, uid, spec_hash(pod)) if key in self.translation else None
        run.memory = self.acts.view(
            uid,
            now=self.clock.monotonic(),
            refs_version=run.refs_version,
            translation_wait=wait,
            attempt=self.queue.failures(key) + 1,
            pre_stop=self.hooks.pre_stop(uid) if self.hooks is not None else "",
        )
        return await self._run(
            run, dc.decide(pod, run.observed, run.memory, now=run.now, node=self.node)
        )

    async def cleanup(self, key: GoneKey, pod: Pod | None) -> Outcome:
        """The pod ``key`` is gone from the API (``pod``: its last object, if known): delete its
        workload and forget it."""
        ref = PodRef(key.pod.namespace, key.pod.name, key.uid)
        run = _Run(key.pod, pod, key.uid, ref, self.clock.now())
        known = key.uid in self.view or self.acts.is_submitted(key.uid)
        return await self._run(run, dc.gone(key, pod, known=known))

    def adopt(self, pod: Pod, *, submitted_at: float) -> None:
        """Start-up found ``pod``'s workload (``submitted_at``: an estimate, its creation)."""
        self.acts.submitted(uid_of(pod), at=submitted_at, applied=Applied.of(pod, ""))

    # -- running a plan ---------------------------------------------------------------------

    async def _run(self, run: _Run, plan: Plan) -> Outcome:
        for step in plan:
            outcome = await self._step(run, step)
            if outcome is not None:
                return outcome
        return DONE

    async def _step(self, run: _Run, step: Step) -> Outcome | None:
        match step:
            case Event(type=etype, reason=reason, message=message, field_path=fp):
                await self.events.record(
                    run.live, type=etype, reason=reason, message=message, field_path=fp
                )
            case Log(level=level, message=message):
                log.log(_LEVELS[level], "%s", message)
            case Count(name=name):
                self.acts.stats[name] += 1
            case WriteStatus():
                return await self._write_status(run, step)
            case Requeue(after=after):
                self.queue.add(run.key, delay=after)
            case Create():
                return await self._resolve(run)
            case Submit():
                return await self._submit(run)
            case ForgetSubmission():
                self.acts.forget_submission(run.uid)
            case Recreate():
                self.status.workload_recreated(run.live)
                self.view.removed(run.uid)
                self.acts.forget_submission(run.uid)
            case NoteApplied(fingerprint=fingerprint):
                self.acts.note_refs(run.uid, run.refs_version)
                self.acts.note_applied(run.uid, Applied.of(run.live, fingerprint))
            case NoteEmitted(events=events):
                self.acts.note_emitted(run.uid, events)
            case NoteWarned(names=names):
                self.acts.note_warned(run.uid, names)
            case ResolveUpdate():
                return await self._resolve_update(run)
            case ApplyUpdate():
                return await self._apply_update(run, step)
            case Stop(grace=grace):
                final = await self._backend_delete(run, grace, confirm=not self.stops_streamed())
                self.acts.delete_requested(run.uid, grace)
                return await self._run(run, dc.stopped(run.live, final, now=run.now, grace=grace))
            case RunPreStop(grace=grace):
                if self.hooks is not None:
                    self.hooks.start_pre_stop(run.live, run.observed, grace)
            case BackendDelete(grace=grace):
                # every plan with this step ends the pod or its workload without waiting for a
                # list (final delete, cleanup, terminal status): none is asked
                await self._backend_delete(run, grace, confirm=False)
            case WorkloadGone():
                # the cleanup after the pod's DELETED event then sends no second backend delete
                # (and asks for no list to confirm it)
                self.view.removed(run.uid)
                self.acts.workload_gone(run.uid)
            case FinalDelete():
                await self._final_delete(run.live)
            case Forget():
                self.view.forget(run.uid)
                self.acts.forget(run.uid)
                self.status.forget(run.key, run.uid)
            case Retry() | Defer():
                return step
        return None

    # -- steps --------------------------------------------------------------------------------

    async def _write_status(self, run: _Run, step: WriteStatus) -> Outcome | None:
        target = run.pod
        if step.latest:
            target = self.pods.store.get(run.key)
            if target is None or uid_of(target) != run.uid:
                return None
        assert target is not None
        match await self.status.set_status(target, step.source, first=step.first):
            case Write.HELD:
                return Defer(FIRST_STATUS_DELAY)
            case Write.CONFLICT | Write.REJECTED:
                return Retry()  # decide again from the pod's newer version
        return None

    async def _resolve(self, run: _Run) -> Outcome:
        self.acts.note_refs(run.uid, run.refs_version)
        run.resolution = await self.resolver.resolve(run.live)
        return await self._run(run, dc.resolved(run.live, run.resolution, node=self.node))

    async def _submit(self, run: _Run) -> Outcome:
        pod, key, res = run.live, run.key, run.resolution
        assert res is not None and res.pod is not None
        generation = self.translation.generation
        try:
            with masked_errors(res.pod):  # an error may quote the rendered spec
                state = await self.translator.create(res.pod)
        except (TranslationError, QuantityError) as exc:
            message = f"template {exc}"
            verdict = self.translation.failed(
                key, run.uid, message, started=generation, spec=spec_hash(pod)
            )
            return await self._run(run, dc.template_failed(pod, message, verdict))
        except UnsupportedError as exc:
            where = f"{exc.field}: " if exc.field else ""
            return await self._run(run, dc.create_refused(pod, exc.reason, f"{where}{exc}"))
        except BackendError as exc:
            failure = dc.BackendFailure.of(exc)
            return await self._run(run, dc.create_failed(pod, failure, run.memory, node=self.node))
        self.translation.succeeded(key)
        self.acts.stats["creates"] += 1
        self.view.answered(state)
        self.acts.submitted(
            run.uid, at=self.clock.monotonic(), applied=Applied.of(pod, res.fingerprint)
        )
        log.info("pod %s submitted to %s as %s", key, self.translator.kind, state.backend_id)
        current = self.pods.store.get(key)
        return await self._run(run, dc.created(pod, state, current, node=self.node))

    async def _resolve_update(self, run: _Run) -> Outcome:
        assert run.observed is not None
        self.acts.note_refs(run.uid, run.refs_version)
        run.resolution = await self.resolver.resolve(run.live)
        return await self._run(
            run, dc.update_resolved(run.live, run.observed, run.memory, run.resolution)
        )

    async def _apply_update(self, run: _Run, step: ApplyUpdate) -> Outcome:
        assert run.observed is not None and run.resolution is not None
        assert run.resolution.pod is not None
        try:
            with masked_errors(run.resolution.pod):
                in_place = bool(await self.translator.update(run.resolution.pod, run.observed))
        except BackendError as exc:
            await self._run(run, dc.update_failed(str(exc), node=self.node))
            raise
        return await self._run(
            run, dc.updated(run.live, run.observed, run.memory, step, in_place, node=self.node)
        )

    async def _backend_delete(
        self, run: _Run, grace: int, *, confirm: bool
    ) -> WorkloadState | None:
        """The backend's delete; its final state when the workload stopped within the call.
        ``confirm``: without a final state, ask for a list soon to learn of the end (a stop
        the change stream does not report).  A list per delete was a full job and allocation
        list every ``MIN_LIST_SPACING`` through a mass delete (docs/benchmarks.md)."""
        final: WorkloadState | None = None
        try:
            final = await self.translator.delete(run.ref, grace_seconds=max(0, grace))
            self.acts.stats["backend_deletes"] += 1
        except BackendNotFound:
            pass
        except BackendError as exc:
            await self._run(run, dc.delete_failed(run.pod, str(exc), node=self.node))
            raise
        if final is None and confirm:
            self.view.refresh_soon()  # a list soon says when it is gone
        return final

    def _path(self, pod: Pod) -> str:
        meta = pod.get("metadata") or {}
        return f"/api/v1/namespaces/{meta.get('namespace')}/pods/{meta.get('name')}"

    async def _final_delete(self, pod: Pod) -> None:
        uid = uid_of(pod)
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        try:
            await self.kube.delete(self._path(pod), body=body)
            self.acts.final_delete_sent(uid)
            self.acts.stats["final_deletes"] += 1
            log.info("pod %s deleted (uid %s)", PodKey.of(pod), uid)
        except (NotFound, Conflict):
            pass  # already gone, or a new pod with the same name
