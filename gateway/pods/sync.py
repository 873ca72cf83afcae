"""What to do about one pod, decided from the cached pod and the latest backend state.

``PodSync.sync("ns/name")`` (docs/design/kubelet-contract.md, "Lifecycle"):

==============================================  =================================================
pod terminal (Succeeded/Failed)                 nothing: never resubmitted, status frozen
``deletionTimestamp``, never submitted          final delete now
``deletionTimestamp``, workload running         ``translator.delete(ref, grace=remaining)`` once
                                                (again if the grace was shortened), Killing
                                                events; re-check at the deadline
``deletionTimestamp``, workload ended or gone   terminal status, then final delete — at once,
                                                not at the end of the grace period
deadline passed, backend never confirmed        Warning ``ForceDeleted``, final delete
workload vanished (reconcile said ``lost``)     Always, OnFailure not done: re-create it, count
                                                a restart, keep the pod (Warning WorkloadLost);
                                                Never: Failed/NotFound, containers exit 137
unsupported feature / volume kind               Failed + Warning (reason names the field)
no workload yet                                 resolve → ``translator.create`` → Created event
                                                (config error: Pending/CreateContainerConfigError;
                                                backend error: ProviderCreateFailed, retry with
                                                backoff, then Failed (Never) or Pending/
                                                ProviderFailed; credentials refused: Pending/
                                                ProviderForbidden, retried every backoff_max,
                                                never Failed; template error: TranslationFailed,
                                                retried on a template change: ``translation``)
workload exists                                 update in place if spec/refs changed (or say it
                                                needs a re-create); status from the state
==============================================  =================================================

``PodSync.cleanup(GoneKey(ns/name, uid))``: the pod is gone from the API — delete its workload
(idempotent; not-found is done).

A backend delete that fails (e.g. a Nomad token without ``submit-job``) is a Warning
``ProviderDeleteFailed`` Event and, while the pod still exists, its status ``reason``/``message``
say so (a Terminating pod shows why it stays); the sync is retried with backoff.

The final delete is ``DELETE pods/<name>`` with ``{"gracePeriodSeconds": 0, "preconditions":
{"uid": …}}``; 404/409 mean someone else finished it.  Status goes through
``gateway.pods.status`` only, written as a strategic-merge patch when it changed.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.kube.client import KubeClient
from gateway.kube.errors import Conflict, Invalid, NotFound
from gateway.kube.events import EventRecorder
from gateway.pods import status as st
from gateway.pods.features import ephemeral_containers
from gateway.pods.keys import GoneKey, PodKey, QueueKey
from gateway.pods.queue import WorkQueue
from gateway.pods.resolve import Resolution, Resolver
from gateway.pods.translation import TranslationRetries
from translators.base import (
    BackendAuthError,
    BackendError,
    BackendNotFound,
    BackendThrottled,
    Phase,
    PodRef,
    ResolvedPod,
    TranslationError,
    Translator,
    UnsupportedError,
    WorkloadState,
)
from vkgate_core.clock import Clock
from vkgate_core.kubetypes import Pod, as_pod
from vkgate_core.timeparse import parse_rfc3339

log = logging.getLogger("gateway.pods.sync")

#: How long our own status write shadows the (possibly lagging) cached pod.
ECHO_WINDOW = 15.0
#: Seconds past the deletion deadline before we stop waiting for the backend's confirmation.
FORCE_SLACK = 1.0


class Retry(Exception):
    """Re-queue the key: after ``delay`` seconds, or with the key's backoff when None."""

    def __init__(self, *, delay: float | None = None, retry_after: float | None = None) -> None:
        super().__init__("retry")
        self.delay = delay
        self.retry_after = retry_after


class Deferred(Retry):
    """Not a failure: come back after ``delay`` (the latest state is written then)."""


#: How long a freshly created workload that has not started yet waits for its first status write.
FIRST_STATUS_DELAY = 0.5


def pod_key(pod: Pod) -> PodKey:
    return PodKey.of(pod)


def pod_ref(pod: Pod) -> PodRef:
    meta = pod.get("metadata") or {}
    return PodRef(
        str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))
    )


def _ran_before(pod: Pod) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") == "Running":
        return True
    return any(
        c.get("containerID")
        for c in (
            *(status.get("containerStatuses") or []),
            *(status.get("initContainerStatuses") or []),
        )
    )


def spec_hash(pod: Pod) -> str:
    meta = pod.get("metadata") or {}
    body = {
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "spec": {k: v for k, v in (pod.get("spec") or {}).items() if k != "ephemeralContainers"},
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def snapshot(pod: Pod) -> Pod:
    """What ``_changed_fields`` compares of a submitted pod: labels, annotations and spec.

    Kept per pod for as long as it runs, so it holds only these (the cache shares them with
    the current version while they are unchanged, docs/design/kube-client.md, "Cache"), not
    the whole pod of the time with its status."""
    meta = pod.get("metadata") or {}
    return as_pod(
        {
            "metadata": {"labels": meta.get("labels"), "annotations": meta.get("annotations")},
            "spec": pod.get("spec"),
        }
    )


def _same_objects(snap: Pod, pod: Pod) -> bool:
    """True when ``pod`` has the very spec, labels and annotations objects of ``snap``."""
    meta, snap_meta = pod.get("metadata") or {}, snap.get("metadata") or {}
    return (
        snap.get("spec") is pod.get("spec")
        and snap_meta.get("labels") is meta.get("labels")
        and snap_meta.get("annotations") is meta.get("annotations")
    )


def _changed_fields(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    if old is None:
        return ["the pod spec"]
    out = []
    for part in ("labels", "annotations"):
        if (old.get("metadata") or {}).get(part) != (new.get("metadata") or {}).get(part):
            out.append(f"metadata.{part}")
    a, b = old.get("spec") or {}, new.get("spec") or {}
    for k in sorted(set(a) | set(b)):
        if k != "ephemeralContainers" and a.get(k) != b.get(k):
            out.append(f"spec.{k}")
    return out


@dataclass
class _Written:
    rv: str
    status: dict[str, Any]
    at: float


@dataclass
class PodState:
    """Everything the controller remembers about pods and workloads (per node, in memory)."""

    #: pod UID -> latest backend state.
    workloads: dict[str, WorkloadState] = field(default_factory=dict)
    #: pod UID -> monotonic time this process submitted (or adopted: -inf) it.
    submitted: dict[str, float] = field(default_factory=dict)
    #: pod UID -> (spec hash, ``snapshot`` of the pod, resolved fingerprint) as last submitted.
    applied: dict[str, tuple[str, Pod, str]] = field(default_factory=dict)
    written: dict[str, _Written] = field(default_factory=dict)
    #: pod UID -> grace period we asked the backend to stop with.
    delete_requested: dict[str, int] = field(default_factory=dict)
    #: UIDs whose final delete was sent (until the pod's cleanup): the kubelet API's running
    #: pods leave them out even while the cache still holds the pod.
    finished: set[str] = field(default_factory=set)
    #: UIDs the reconcile found missing from the backend.
    lost: set[str] = field(default_factory=set)
    #: pod UID -> container -> runs before its workload was re-created (restartCount base).
    restart_base: dict[str, dict[str, int]] = field(default_factory=dict)
    #: UIDs whose referenced ConfigMaps/Secrets changed.
    refs_changed: set[str] = field(default_factory=set)
    #: cleanup key -> last known pod object (None for orphans).
    gone: dict[GoneKey, Pod | None] = field(default_factory=dict)
    #: pod UID -> backend events already recorded.
    emitted: dict[str, tuple[tuple[str, str, str, str], ...]] = field(default_factory=dict)
    #: UIDs that got their "ephemeral containers unsupported" event.
    warned_ephemeral: dict[str, set[str]] = field(default_factory=dict)
    stats: Counter[str] = field(default_factory=Counter)
    #: status writes per pod key (the happy path should need <= 3).
    status_writes: Counter[str] = field(default_factory=Counter)

    @staticmethod
    def uid_of(pod: Pod) -> str:
        return str((pod.get("metadata") or {}).get("uid", ""))

    def adopt(self, pod: Pod, state: WorkloadState, *, submitted_at: float) -> None:
        """A workload found at startup; ``submitted_at`` estimates when (pod creation time)."""
        uid = state.ref.uid
        self.workloads[uid] = state
        self.submitted[uid] = submitted_at
        self.applied[uid] = (spec_hash(pod), snapshot(pod), "")

    def submitted_since(self, uid: str, since: float) -> bool:
        t = self.submitted.get(uid)
        return t is not None and t >= since

    def submitted_age(self, uid: str, clock: Clock) -> float:
        t = self.submitted.get(uid)
        return math.inf if t is None else clock.monotonic() - t

    def forget_submission(self, uid: str) -> None:
        self.submitted.pop(uid, None)
        self.applied.pop(uid, None)

    def remember_write(self, uid: str, now: float) -> None:
        """Make room for a write of ``uid``: entries past ``ECHO_WINDOW`` are dropped.

        ``written`` is only read within the window; an echo that arrived before our write's
        answer never matches, so without this every pod's last status stayed here.  Entries
        are in write order (re-inserted on each write), so the old ones are at the front."""
        written = self.written
        written.pop(uid, None)
        while written:
            first = next(iter(written))
            if now - written[first].at < ECHO_WINDOW:
                break
            del written[first]

    def is_own_echo(self, pod: Pod) -> bool:
        w = self.written.get(self.uid_of(pod))
        rv = str((pod.get("metadata") or {}).get("resourceVersion", ""))
        if w is not None and w.rv == rv:
            del self.written[self.uid_of(pod)]
            return True
        return False

    def forget(self, uid: str) -> None:
        for table in (
            self.workloads,
            self.submitted,
            self.applied,
            self.written,
            self.delete_requested,
            self.emitted,
            self.restart_base,
        ):
            table.pop(uid, None)
        self.lost.discard(uid)
        self.finished.discard(uid)
        self.refs_changed.discard(uid)
        self.warned_ephemeral.pop(uid, None)


class PodSync:
    def __init__(
        self,
        *,
        kube: KubeClient,
        translator: Translator,
        events: EventRecorder,
        resolver: Resolver,
        state: PodState,
        queue: WorkQueue[QueueKey],
        clock: Clock,
        host_ip: Callable[[], str],
        max_retries: int,
        backoff_max: float,
        kick: Callable[[], None],
        lookup: Callable[[str], Pod | None],
        translation: TranslationRetries | None = None,
    ) -> None:
        self.kube = kube
        self.translator = translator
        self.backend = translator.kind
        self.events = events
        self.resolver = resolver
        self.state = state
        self.queue = queue
        self.clock = clock
        self.host_ip = host_ip
        self.max_retries = max_retries
        self.backoff_max = backoff_max
        self.kick = kick
        self.lookup = lookup
        #: Pods that failed to translate: when to retry them, whether to record the Event.
        self.translation = (
            translation if translation is not None else TranslationRetries(clock=clock)
        )

    # -- helpers -----------------------------------------------------------------------------

    async def event(
        self, pod: Pod, etype: str, reason: str, message: str, field_path: str = ""
    ) -> None:
        await self.events.record(
            pod, type=etype, reason=reason, message=message, field_path=field_path
        )

    def _path(self, pod: Pod) -> str:
        meta = pod.get("metadata") or {}
        return f"/api/v1/namespaces/{meta.get('namespace')}/pods/{meta.get('name')}"

    async def write_status(self, pod: Pod, desired: Mapping[str, Any]) -> bool:
        """Patch the status if it changed semantically; returns True if written."""
        uid = self.state.uid_of(pod)
        key = pod_key(pod)
        base: Mapping[str, Any] = pod.get("status") or {}
        w = self.state.written.get(uid)
        if w is not None and self.clock.monotonic() - w.at < ECHO_WINDOW:
            base = w.status  # the cache may not have seen our last write yet
        patch = st.status_patch(base, desired, uid)
        if patch is None:
            return False
        transitions = st.transition_events(base, desired)
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            # containers stopped because the pod is being deleted: "Killing" said it; an exit
            # code from that stop (143, 137) is not a failure to warn about
            transitions = [t for t in transitions if t[1] != "Failed"]
        try:
            resp = await self.kube.patch(f"{self._path(pod)}/status", patch, patch_type="strategic")
        except NotFound:
            return False
        except Conflict:
            # UID precondition failed or a write race: re-read and decide again.
            fresh = await self._reread(pod)
            if fresh is None:
                return False
            raise Retry() from None
        except Invalid as exc:
            log.error("status of %s rejected by the API server: %s (patch %s)", key, exc, patch)
            await self.event(
                pod, "Warning", "StatusUpdateFailed", f"status update rejected: {exc.message}"
            )
            raise Retry() from None
        meta = resp.get("metadata") or {}
        self.state.remember_write(uid, self.clock.monotonic())
        self.state.written[uid] = _Written(
            str(meta.get("resourceVersion", "")),
            st.normalize(resp.get("status") or {}),
            self.clock.monotonic(),
        )
        self.state.status_writes[key] += 1
        self.state.stats["status_writes"] += 1
        log.info(
            "pod %s status: %s (status write #%d)",
            key,
            desired.get("phase"),
            self.state.status_writes[key],
        )
        for etype, reason, message, fp in transitions:
            await self.event(pod, etype, reason, message, fp)
        return True

    async def _reread(self, pod: Pod) -> Pod | None:
        try:
            fresh = as_pod(await self.kube.get(self._path(pod)))
        except NotFound:
            return None
        if self.state.uid_of(fresh) != self.state.uid_of(pod):
            return None
        return fresh

    async def final_delete(self, pod: Pod) -> None:
        uid = self.state.uid_of(pod)
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        try:
            await self.kube.delete(self._path(pod), body=body)
            self.state.finished.add(uid)
            self.state.stats["final_deletes"] += 1
            log.info("pod %s deleted (uid %s)", pod_key(pod), uid)
        except (NotFound, Conflict):
            pass  # already gone, or a new pod with the same name

    def _now(self) -> _dt.datetime:
        return self.clock.now()

    # -- sync --------------------------------------------------------------------------------

    async def sync(self, key: PodKey) -> None:
        pod = self.lookup(key)
        if pod is None:
            return
        uid = self.state.uid_of(pod)
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            await self._sync_deleting(pod)
            return
        if st.is_terminal(pod):
            return
        state = self.state.workloads.get(uid)
        if state is None and uid not in self.state.submitted and _ran_before(pod):
            # found Running (or with started containers) but the backend has no workload, e.g.
            # it vanished while the gateway was down: the same verdict as the reconcile's
            self.state.lost.add(uid)
        if uid in self.state.lost:
            self.state.lost.discard(uid)
            self.state.stats["lost"] += 1
            if st.runs_again(pod):
                await self._recreate_lost(pod)
                return
            desired = st.lost(pod, now=self._now(), host_ip=self.host_ip(), backend=self.backend)
            await self.event(pod, "Warning", "NotFound", str(desired.get("message", "")))
            await self.write_status(pod, desired)
            return
        if state is None:
            await self._create(pod)
            return
        await self._check_deadline(pod)
        await self._maybe_update(pod, state)
        desired = self._desired(pod, state)
        seen = self.state.emitted.get(uid, ())
        for ev in state.events:
            if ev not in seen:
                etype, reason, message, container = ev
                fp = f"spec.containers{{{container}}}" if container else ""
                await self.event(pod, etype, reason, message, fp)
        self.state.emitted[uid] = state.events
        await self.write_status(pod, desired)

    # -- create ------------------------------------------------------------------------------

    async def _create(self, pod: Pod) -> None:
        key = pod_key(pod)
        uid = self.state.uid_of(pod)
        policy = str((pod.get("spec") or {}).get("restartPolicy") or "Always")
        spec = spec_hash(pod)
        wait = None if uid in self.state.refs_changed else self.translation.hold(key, uid, spec)
        if wait is not None:
            raise Retry(delay=wait)  # failed to translate; nothing changed that could fix it
        self.state.refs_changed.discard(uid)
        if not (pod.get("status") or {}).get("startTime"):
            await self.event(
                pod,
                "Normal",
                "Accepted",
                f"Pod accepted by node {self.resolver.node_name} ({self.backend} backend)",
            )
        res = await self.resolver.resolve(pod)
        for ev in res.events:
            await self.event(pod, ev.type, ev.reason, ev.message, ev.field_path)
        if res.unsupported:
            await self._reject_unsupported(pod, res)
            return
        if res.waiting or res.mount_error:
            desired = st.pending(pod, now=self._now(), host_ip=self.host_ip(), waiting=res.waiting)
            await self.write_status(pod, desired)
            raise Retry()
        assert res.pod is not None
        generation = self.translation.generation
        try:
            state = await self.translator.create(res.pod)
        except TranslationError as exc:
            msg = f"template {exc}"
            verdict = self.translation.failed(key, uid, msg, started=generation, spec=spec)
            if verdict.record_event:
                await self.event(pod, "Warning", "TranslationFailed", msg)
            log.warning(
                "pod %s: %s; retry when the templates change (or in %.0fs)", key, msg, verdict.delay
            )
            await self.write_status(
                pod,
                st.pending(
                    pod,
                    now=self._now(),
                    host_ip=self.host_ip(),
                    reason="TranslationFailed",
                    message=msg,
                    waiting=st.all_waiting(pod, "TranslationFailed", msg),
                ),
            )
            raise Retry(delay=verdict.delay) from None
        except UnsupportedError as exc:
            where = f"{exc.field}: " if exc.field else ""
            await self.event(pod, "Warning", exc.reason, f"{where}{exc}")
            await self.write_status(
                pod,
                st.rejected(
                    pod,
                    now=self._now(),
                    host_ip=self.host_ip(),
                    reason=exc.reason,
                    message=f"{where}{exc}",
                ),
            )
            return
        except BackendError as exc:
            await self._create_failed(pod, exc, policy)
            return
        self.translation.succeeded(key)
        self.state.stats["creates"] += 1
        self.state.workloads[uid] = state
        self.state.submitted[uid] = self.clock.monotonic()
        self.state.applied[uid] = (spec_hash(pod), snapshot(pod), res.fingerprint)
        log.info("pod %s submitted to %s as %s", key, self.backend, state.backend_id)
        await self.event(
            pod,
            "Normal",
            "Created",
            f"Created workload {state.backend_id} in the {self.backend} backend",
        )
        current = self.lookup(key)
        if current is None or self.state.uid_of(current) != uid:
            # deleted while we were creating: the cleanup may have run before we knew the uid
            await self._backend_delete(pod_ref(pod), 0, pod)
            return
        if state.phase == Phase.PENDING and not any(c.state == "running" for c in state.containers):
            # Like the kubelet's status manager, write the latest status, not every step: a
            # backend that starts the pod within FIRST_STATUS_DELAY gets one write (Running)
            # instead of two; a slower one shows Pending after the delay
            # (docs/design/kubelet-contract.md, "Status writes").
            raise Deferred(delay=FIRST_STATUS_DELAY)
        await self.write_status(current, self._desired(current, state))

    def _desired(self, pod: Pod, state: WorkloadState) -> dict[str, Any]:
        desired = st.from_workload(
            pod, state, now=self._now(), host_ip=self.host_ip(), backend=self.backend
        )
        return st.carry_restarts(
            desired, pod, self.state.restart_base.get(self.state.uid_of(pod), {})
        )

    async def _recreate_lost(self, pod: Pod) -> None:
        """The backend lost the workload of a pod that must keep running (restartPolicy Always,
        or OnFailure not done): run its containers again, as the kubelet restarts a container
        that died, and count it as a restart of each container."""
        uid = self.state.uid_of(pod)
        policy = str((pod.get("spec") or {}).get("restartPolicy") or "Always")
        self.state.restart_base[uid] = {n: c + 1 for n, c in st.restart_counts(pod).items()}
        self.state.workloads.pop(uid, None)
        self.state.forget_submission(uid)
        self.state.stats["recreated"] += 1
        msg = (
            f"the {self.backend} backend no longer knows this pod's workload (it was lost or "
            f"removed outside vkgate); restartPolicy {policy}: running it again"
        )
        log.warning("pod %s: %s", pod_key(pod), msg)
        await self.event(pod, "Warning", "WorkloadLost", msg)
        await self._create(pod)

    async def _reject_unsupported(self, pod: Pod, res: Resolution) -> None:
        first = res.unsupported[0]
        message = "; ".join(u.message for u in res.unsupported)
        for u in res.unsupported:
            await self.event(pod, "Warning", u.reason, u.message)
        self.state.stats["rejected"] += 1
        await self.write_status(
            pod,
            st.rejected(
                pod, now=self._now(), host_ip=self.host_ip(), reason=first.reason, message=message
            ),
        )

    async def _create_failed(self, pod: Pod, exc: BackendError, policy: str) -> None:
        key = pod_key(pod)
        attempts = self.queue.failures(key) + 1
        if isinstance(exc, BackendAuthError):
            await self._create_forbidden(pod, exc, attempts)
        final = not exc.retryable or attempts >= self.max_retries
        await self.event(pod, "Warning", "ProviderCreateFailed", f"{self.backend}: {exc}")
        log.warning(
            "pod %s: create failed (attempt %d, %s): %s",
            key,
            attempts,
            "final" if final else "will retry",
            exc,
        )
        if final and policy == "Never":
            msg = f"the {self.backend} backend refused the pod after {attempts} attempt(s): {exc}"
            await self.write_status(
                pod,
                st.rejected(
                    pod,
                    now=self._now(),
                    host_ip=self.host_ip(),
                    reason="ProviderFailed",
                    message=msg,
                ),
            )
            return
        if final:
            msg = f"the {self.backend} backend refused the pod ({attempts} attempt(s), retrying every {self.backoff_max:.0f}s): {exc}"
        else:
            msg = f"creating the workload in the {self.backend} backend failed, retrying: {exc}"
        await self.write_status(
            pod,
            st.pending(
                pod,
                now=self._now(),
                host_ip=self.host_ip(),
                reason="ProviderFailed",
                message=msg,
            ),
        )
        retry_after = exc.retry_after if isinstance(exc, BackendThrottled) else None
        if final:
            raise Retry(delay=self.backoff_max)
        raise Retry(retry_after=retry_after)

    async def _create_forbidden(self, pod: Pod, exc: BackendAuthError, attempts: int) -> None:
        """The backend refused vkgate's credentials: not transient (the same token gets the same
        answer) and not the pod's fault, so no quick retries and never Failed — Pending with
        the refusal (which names the missing grant), tried again every ``backoff_max`` until
        the backend's policy allows it."""
        msg = f"the {self.backend} backend refused vkgate's credentials: {exc}"
        await self.event(pod, "Warning", "ProviderCreateFailed", f"{self.backend}: {exc}")
        log.warning(
            "pod %s: create refused (attempt %d; retry in %.0fs): %s",
            pod_key(pod),
            attempts,
            self.backoff_max,
            exc,
        )
        await self.write_status(
            pod,
            st.pending(
                pod,
                now=self._now(),
                host_ip=self.host_ip(),
                reason="ProviderForbidden",
                message=msg,
            ),
        )
        raise Retry(delay=self.backoff_max)

    # -- update ------------------------------------------------------------------------------

    async def _maybe_update(self, pod: Pod, state: WorkloadState) -> None:
        uid = self.state.uid_of(pod)
        await self._warn_ephemeral(pod)
        applied = self.state.applied.get(uid)
        refs_changed = uid in self.state.refs_changed
        if applied is not None and not refs_changed and _same_objects(applied[1], pod):
            return  # the cache shares unchanged parts: no hash needed
        if applied is not None and applied[0] == spec_hash(pod) and not refs_changed:
            return
        self.state.refs_changed.discard(uid)
        if applied is None:
            self.state.applied[uid] = (spec_hash(pod), snapshot(pod), "")
            return
        res = await self.resolver.resolve(pod)
        if res.pod is None or (res.fingerprint == applied[2] and applied[0] == spec_hash(pod)):
            self.state.applied[uid] = (spec_hash(pod), snapshot(pod), applied[2])
            return
        fields = _changed_fields(applied[1], pod) or ["referenced ConfigMap/Secret data"]
        if await self._update(res.pod, state):
            log.info("pod %s updated in place (%s)", pod_key(pod), ", ".join(fields))
            self.state.stats["updates"] += 1
        else:
            await self.event(
                pod,
                "Warning",
                "UpdateRequiresRecreate",
                f"the {self.backend} backend cannot apply a change of {', '.join(fields)} to the running "
                "workload; delete and re-create the pod to apply it",
            )
        self.state.applied[uid] = (spec_hash(pod), snapshot(pod), res.fingerprint)

    async def _update(self, resolved: ResolvedPod, state: WorkloadState) -> bool:
        try:
            return bool(await self.translator.update(resolved, state))
        except BackendError as exc:
            await self.event(
                resolved.pod, "Warning", "ProviderUpdateFailed", f"{self.backend}: {exc}"
            )
            raise

    async def _warn_ephemeral(self, pod: Pod) -> None:
        if "ephemeralContainers" in self.translator.features.pod_features:
            return
        names = set(ephemeral_containers(pod))
        uid = self.state.uid_of(pod)
        new = names - self.state.warned_ephemeral.get(uid, set())
        if new:
            self.state.warned_ephemeral.setdefault(uid, set()).update(new)
            await self.event(
                pod,
                "Warning",
                "UnsupportedPodFeature",
                f"spec.ephemeralContainers: ephemeral containers ({', '.join(sorted(new))}) "
                f"are not supported by the {self.backend} backend and will not run",
            )

    async def _check_deadline(self, pod: Pod) -> None:
        """spec.activeDeadlineSeconds: the kubelet kills the pod and fails it (DeadlineExceeded)."""
        spec = pod.get("spec") or {}
        deadline = spec.get("activeDeadlineSeconds")
        start = (pod.get("status") or {}).get("startTime")
        if deadline is None or not start:
            return
        left = parse_rfc3339(str(start)) + _dt.timedelta(seconds=int(deadline)) - self._now()
        if left.total_seconds() > 0:
            self.queue.add(pod_key(pod), delay=left.total_seconds())
            return
        grace = int(spec.get("terminationGracePeriodSeconds", 30))
        await self._backend_delete(pod_ref(pod), grace, pod)
        msg = f"Pod was active on the node longer than the specified deadline ({deadline}s)"
        await self.event(pod, "Normal", "DeadlineExceeded", msg)
        desired = st.lost(
            pod,
            now=self._now(),
            host_ip=self.host_ip(),
            backend=self.backend,
            reason="DeadlineExceeded",
            message=msg,
        )
        await self.write_status(pod, desired)
        raise Retry(delay=0)  # status is now terminal; the next sync is a no-op

    # -- delete ------------------------------------------------------------------------------

    def _workload_gone(self, uid: str) -> None:
        """The backend no longer has the workload: the cleanup after the pod's DELETED event
        then sends no second backend delete (and kicks no list to confirm it)."""
        self.state.workloads.pop(uid, None)
        self.state.submitted.pop(uid, None)

    async def _backend_delete(
        self, ref: PodRef, grace: int, pod: Pod | None
    ) -> WorkloadState | None:
        """The backend's delete; its final state when the workload stopped within the call."""
        final: WorkloadState | None = None
        try:
            final = await self.translator.delete(ref, grace_seconds=max(0, grace))
            self.state.stats["backend_deletes"] += 1
        except BackendNotFound:
            pass
        except BackendError as exc:
            if pod is not None:
                await self.event(pod, "Warning", "ProviderDeleteFailed", f"{self.backend}: {exc}")
                await self._delete_failed_status(pod, exc)
            raise
        if final is None:
            self.kick()
        return final

    async def _delete_failed_status(self, pod: Pod, exc: BackendError) -> None:
        """A pod still in the API whose backend delete failed: its status ``reason``/``message``
        say why it stays (the next status write clears them); a final status stays final."""
        current = self.lookup(pod_key(pod))
        if current is None or self.state.uid_of(current) != self.state.uid_of(pod):
            return
        if st.is_terminal(current):
            return
        w = self.state.written.get(self.state.uid_of(current))
        base: Mapping[str, Any] = current.get("status") or {}
        if w is not None and self.clock.monotonic() - w.at < ECHO_WINDOW:
            base = w.status
        await self.write_status(
            current,
            {
                **base,
                "reason": "ProviderDeleteFailed",
                "message": f"deleting the workload in the {self.backend} backend failed, "
                f"retrying with backoff: {exc}",
            },
        )

    async def _sync_deleting(self, pod: Pod) -> None:
        uid = self.state.uid_of(pod)
        meta = pod.get("metadata") or {}
        ref = pod_ref(pod)
        state = self.state.workloads.get(uid)
        submitted = state is not None or uid in self.state.submitted
        if not submitted:
            await self.final_delete(pod)
            return
        if st.is_terminal(pod):
            await self._backend_delete(ref, 0, pod)  # purge the stopped workload
            self._workload_gone(uid)
            await self.final_delete(pod)
            return
        ended = (
            state is None
            or all(c.state == "terminated" for c in state.containers)
            or str(state.phase) in st.TERMINAL
        )
        if ended:
            desired = st.deleted(
                pod, state, now=self._now(), host_ip=self.host_ip(), backend=self.backend
            )
            await self.write_status(pod, desired)
            if state is not None:
                await self._backend_delete(ref, 0, pod)
            self._workload_gone(uid)
            await self.final_delete(pod)
            return
        grace = int(meta.get("deletionGracePeriodSeconds") or 0)
        remaining = (parse_rfc3339(str(meta["deletionTimestamp"])) - self._now()).total_seconds()
        asked = self.state.delete_requested.get(uid)
        if remaining <= -FORCE_SLACK and asked is not None:
            await self.event(
                pod,
                "Warning",
                "ForceDeleted",
                f"the {self.backend} backend did not confirm the stop within the grace period "
                f"({grace}s); deleting the pod anyway",
            )
            await self._backend_delete(ref, 0, pod)
            desired = st.deleted(
                pod, None, now=self._now(), host_ip=self.host_ip(), backend=self.backend
            )
            await self.write_status(pod, desired)
            await self.final_delete(pod)
            return
        stop_grace = max(0, math.ceil(remaining))
        if asked is None or stop_grace < asked:
            for c in (pod.get("spec") or {}).get("containers") or []:
                await self.event(
                    pod,
                    "Normal",
                    "Killing",
                    f"Stopping container {c.get('name')}",
                    f"spec.containers{{{c.get('name')}}}",
                )
            final = await self._backend_delete(ref, stop_grace, pod)
            self.state.delete_requested[uid] = stop_grace
            if final is not None:
                # stopped within the call: finish now, without waiting for a list to see it gone
                self._workload_gone(uid)
                desired = st.deleted(
                    pod, final, now=self._now(), host_ip=self.host_ip(), backend=self.backend
                )
                await self.write_status(pod, desired)
                await self.final_delete(pod)
                return
        # Done earlier if the backend reports the end (notifier / kicked reconcile re-queue us);
        # otherwise decide at the deadline.
        raise Retry(delay=max(remaining, 0.0) + FORCE_SLACK + 0.05)

    async def cleanup(self, key: GoneKey) -> None:
        """The pod ``ns/name`` with ``uid`` is gone from the API: remove its workload."""
        ns, name, uid = key.pod.namespace, key.pod.name, key.uid
        pod = self.state.gone.get(key)
        known = uid in self.state.workloads or uid in self.state.submitted
        if known:
            meta = (pod or {}).get("metadata") or {}
            grace = int(meta.get("deletionGracePeriodSeconds") or 0)
            await self._backend_delete(PodRef(ns, name, uid), grace, pod)
            log.info("workload of %s/%s (uid %s) deleted from the backend", ns, name, uid)
            self.state.stats["cleanups"] += 1
        self.state.forget(uid)
        self.state.gone.pop(key, None)
        self.state.status_writes.pop(key.pod, None)
