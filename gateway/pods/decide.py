"""What to do about one pod: a pure function of the pod, its workload and what we remember.

``decide(pod, observed, memory, now=…, node=…)`` returns a ``plan.Plan``; ``gateway.pods.act``
executes it (docs/design/kubelet-contract.md, "Lifecycle"; docs/design/pod-sync.md).  Nothing
here does I/O, reads a clock or changes a table.

Its decision table is data: ``gateway/pods/decide_table.toml`` lists each row — what vkgate knows
of the pod and its workload, and what it observes → the steps, in order — with its cases, and
tests/unit/pods/test_pods_decide_table.py holds this module to it case by case; the scenario
files of ``tests/golden/decide`` (pod + workload + memory + now → plan) each show a row.  In
short: a terminal pod is left alone; a pod being deleted has its workload stopped (its preStop
hooks first) and is deleted once the workload ended or is gone, or the grace period is over; a
pod with no workload gets one — again when it was lost and its restartPolicy says so, else it
fails; a running pod's changes are applied and its status follows the workload; a pod gone
from the API has its workload deleted.

The rows whose plan needs an answer from outside end with the step that asks (``Create``,
``Submit``, ``ResolveUpdate``, ``ApplyUpdate``, ``Stop``); the function named after the answer
(``resolved``, ``created``, ``create_failed``, …) decides the rest, as purely.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.pods.events import Event
from gateway.pods.keys import GoneKey, PodKey
from gateway.pods.memory import PodMemory, changed_fields, same_objects, spec_hash, uid_of
from gateway.pods.plan import (
    ApplyUpdate,
    BackendDelete,
    Count,
    Create,
    Deleted,
    DeleteFailed,
    Ended,
    FinalDelete,
    Forget,
    ForgetSubmission,
    FromWorkload,
    Log,
    NotCreated,
    NoteApplied,
    NoteEmitted,
    NoteWarned,
    Plan,
    Recreate,
    Rejected,
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
from gateway.pods.status import ephemeral
from gateway.pods.status import rules as st
from gateway.pods.status.ephemeral import names as ephemeral_containers
from gateway.probes.hookspec import MIN_STOP_GRACE, PreStop, pre_stop_containers
from translators.base import BackendAuthError, BackendError, BackendThrottled, WorkloadState
from vkgate_core.kubetypes import Pod
from vkgate_core.timeparse import parse_rfc3339

if TYPE_CHECKING:
    from gateway.pods.resolution import Resolution
    from gateway.pods.translation import Verdict

#: A workload missing from the backend this long after we submitted it is lost even if its pod
#: never reached Running (docs/design/kubelet-contract.md, "Lifecycle": "Running or older than
#: ~1 min").
LOST_AFTER = 60.0
#: Seconds past the deletion deadline before we stop waiting for the backend's confirmation.
FORCE_SLACK = 1.0


@dataclass(frozen=True, slots=True)
class Node:
    """What ``decide`` knows of the node and its backend."""

    #: The node's name.
    name: str
    #: The backend kind (``nomad``, ``simulated``, …), as messages name it.
    backend: str
    #: Create attempts before a retryable backend error is final.
    max_retries: int = 5
    #: The retry interval after a final create failure (``pods.backoff_max``).
    backoff_max: float = 60.0
    #: The backend runs ephemeral containers (else a Warning names them).
    ephemeral_containers: bool = False
    #: The longest grace between SIGTERM and SIGKILL the backend honours (Nomad: the client's
    #: ``max_kill_timeout``); None: no cap.  A longer grace gets an Event saying what happens.
    max_kill_timeout: int | None = None


@dataclass(frozen=True, slots=True)
class BackendFailure:
    """A create the backend refused, as ``create_failed`` reads it."""

    message: str
    retryable: bool = True
    #: The backend refused vkgate's credentials (not the pod's fault, not transient).
    forbidden: bool = False
    #: The backend asked to wait this long (throttled).
    retry_after: float | None = None

    @classmethod
    def of(cls, exc: BackendError) -> BackendFailure:
        return cls(
            message=str(exc),
            retryable=exc.retryable,
            forbidden=isinstance(exc, BackendAuthError),
            retry_after=exc.retry_after if isinstance(exc, BackendThrottled) else None,
        )


# --------------------------------------------------------------------------- the sync


def decide(
    pod: Pod,
    observed: WorkloadState | None,
    memory: PodMemory,
    *,
    now: _dt.datetime,
    node: Node,
) -> Plan:
    """The plan for ``pod`` (from the cache), its workload as last ``observed`` and ``memory``."""
    if _meta(pod).get("deletionTimestamp"):
        return _deleting(pod, observed, memory, now=now, node=node)
    if st.is_terminal(pod):
        return ()
    if observed is None:
        if _ran_before(pod) or (memory.submitted and memory.submitted_age >= LOST_AFTER):
            return _lost(pod, memory, node)
        forget: Plan = (ForgetSubmission(),) if memory.submitted else ()
        return forget + _create(pod, memory, node)
    return _running(pod, observed, memory, now=now, node=node)


def _meta(pod: Pod | Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _policy(pod: Pod) -> str:
    return str((pod.get("spec") or {}).get("restartPolicy") or "Always")


def _ran_before(pod: Pod) -> bool:
    """Found Running, or with containers that were started: a workload existed."""
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


# --------------------------------------------------------------------------- lost


def _lost(pod: Pod, memory: PodMemory, node: Node) -> Plan:
    """The backend has no workload for a pod that had one (the list lost it, or it vanished
    while the gateway was down): what the kubelet does for containers that died."""
    if st.runs_again(pod):
        message = (
            f"the {node.backend} backend no longer knows this pod's workload (it was lost or "
            f"removed outside vkgate); restartPolicy {_policy(pod)}: running it again"
        )
        return (
            Count("lost"),
            Recreate(),
            Count("recreated"),
            Log("warning", f"pod {PodKey.of(pod)}: {message}"),
            Event("Warning", "WorkloadLost", message),
            *_create(pod, memory, node),
        )
    message = st.lost_message(node.backend)
    return (
        Count("lost"),
        Event("Warning", "NotFound", message),
        WriteStatus(Ended("NotFound", message)),
    )


# --------------------------------------------------------------------------- create


def _create(pod: Pod, memory: PodMemory, node: Node) -> Plan:
    if memory.translation_wait is not None and not memory.refs_changed:
        # failed to translate, and nothing changed that could fix it (gateway.pods.translation)
        return (Retry(after=memory.translation_wait),)
    accepted: Plan = ()
    if not (pod.get("status") or {}).get("startTime"):
        accepted = (
            Event(
                "Normal", "Accepted", f"Pod accepted by node {node.name} ({node.backend} backend)"
            ),
        )
    return (*accepted, Create())


def resolved(pod: Pod, res: Resolution, *, node: Node) -> Plan:
    """After ``Create``: the pod resolved to ``res``."""
    steps: list[Step] = [*res.events]
    if res.unsupported:
        first = res.unsupported[0]
        steps += [Event("Warning", u.reason, u.message) for u in res.unsupported]
        steps += [
            Count("rejected"),
            WriteStatus(Rejected(first.reason, "; ".join(u.message for u in res.unsupported))),
        ]
        return tuple(steps)
    if res.waiting or res.mount_error:
        return (*steps, WriteStatus(NotCreated(waiting=dict(res.waiting))), Retry())
    return (*steps, Submit())


def created(pod: Pod, state: WorkloadState, current: Pod | None, *, node: Node) -> Plan:
    """After ``Submit``: the backend created the workload; ``current`` is the pod as the cache
    has it now (None: deleted meanwhile)."""
    event = Event(
        "Normal", "Created", f"Created workload {state.backend_id} in the {node.backend} backend"
    )
    if current is None or uid_of(current) != uid_of(pod):
        # deleted while we were creating: the cleanup may have run before we knew the uid
        return (event, BackendDelete(0))
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    cap = node.max_kill_timeout
    capped: Plan = ()
    if cap is not None and grace is not None and int(grace) > cap:
        capped = (
            Event(
                "Normal",
                "GracePeriodCapped",
                f"terminationGracePeriodSeconds {int(grace)} s exceeds the "
                f"{node.backend.capitalize()} "
                f"client's max_kill_timeout {cap} s: when stopped, the containers get SIGKILL "
                f"{cap} s after SIGTERM",
            ),
        )
    return (event, *capped, WriteStatus(FromWorkload(state), first=True, latest=True))


def template_failed(pod: Pod, message: str, verdict: Verdict) -> Plan:
    """After ``Submit``: the template failed to render (``verdict``: what
    ``TranslationRetries.failed`` said)."""
    event: Plan = (Event("Warning", "TranslationFailed", message),) if verdict.record_event else ()
    return (
        *event,
        Log(
            "warning",
            f"pod {PodKey.of(pod)}: {message}; retry when the templates change "
            f"(or in {verdict.delay:.0f}s)",
        ),
        WriteStatus(
            NotCreated(
                "TranslationFailed",
                message,
                st.all_waiting(pod, "TranslationFailed", message),
            )
        ),
        Retry(after=verdict.delay),
    )


def create_refused(pod: Pod, reason: str, message: str) -> Plan:
    """After ``Submit``: the backend can never run this pod (``UnsupportedError``)."""
    return (Event("Warning", reason, message), WriteStatus(Rejected(reason, message)))


def create_failed(pod: Pod, failure: BackendFailure, memory: PodMemory, *, node: Node) -> Plan:
    """After ``Submit``: the backend refused the create."""
    key, backend, attempts = PodKey.of(pod), node.backend, memory.attempt
    event = Event("Warning", "ProviderCreateFailed", f"{backend}: {failure.message}")
    if failure.forbidden:
        # not transient (the same token gets the same answer) and not the pod's fault: no quick
        # retries and never Failed — Pending with the refusal (which names the missing grant),
        # tried again every backoff_max until the backend's policy allows it
        return (
            event,
            Log(
                "warning",
                f"pod {key}: create refused (attempt {attempts}; retry in "
                f"{node.backoff_max:.0f}s): {failure.message}",
            ),
            WriteStatus(
                NotCreated(
                    "ProviderForbidden",
                    f"the {backend} backend refused vkgate's credentials: {failure.message}",
                )
            ),
            Retry(after=node.backoff_max),
        )
    final = not failure.retryable or attempts >= node.max_retries
    steps: list[Step] = [
        event,
        Log(
            "warning",
            f"pod {key}: create failed (attempt {attempts}, "
            f"{'final' if final else 'will retry'}): {failure.message}",
        ),
    ]
    if final and _policy(pod) == "Never":
        message = (
            f"the {backend} backend refused the pod after {attempts} attempt(s): {failure.message}"
        )
        return (*steps, WriteStatus(Rejected("ProviderFailed", message)))
    if final:
        message = (
            f"the {backend} backend refused the pod ({attempts} attempt(s), retrying every "
            f"{node.backoff_max:.0f}s): {failure.message}"
        )
        retry = Retry(after=node.backoff_max)
    else:
        message = (
            f"creating the workload in the {backend} backend failed, retrying: {failure.message}"
        )
        retry = Retry(retry_after=failure.retry_after)
    return (*steps, WriteStatus(NotCreated("ProviderFailed", message)), retry)


# --------------------------------------------------------------------------- running


def _running(
    pod: Pod, observed: WorkloadState, memory: PodMemory, *, now: _dt.datetime, node: Node
) -> Plan:
    steps: list[Step] = []
    spec = pod.get("spec") or {}
    deadline = spec.get("activeDeadlineSeconds")
    start = (pod.get("status") or {}).get("startTime")
    if deadline is not None and start:
        # spec.activeDeadlineSeconds: the kubelet kills the pod and fails it
        left = parse_rfc3339(str(start)) + _dt.timedelta(seconds=int(deadline)) - now
        if left.total_seconds() > 0:
            steps.append(Requeue(left.total_seconds()))
        else:
            message = f"Pod was active on the node longer than the specified deadline ({deadline}s)"
            return (
                BackendDelete(int(spec.get("terminationGracePeriodSeconds", 30))),
                Event("Normal", "DeadlineExceeded", message),
                WriteStatus(Ended("DeadlineExceeded", message)),
                Retry(after=0),  # the status is terminal now: the next sync does nothing
            )
    if not node.ephemeral_containers:
        new = frozenset(ephemeral_containers(pod)) - memory.warned_ephemeral
        if new:
            steps += [
                NoteWarned(new),
                Event(
                    "Warning",
                    ephemeral.REASON,
                    ephemeral.message(sorted(new), backend=node.backend),
                ),
            ]
    applied = memory.applied
    if applied is None:
        steps.append(NoteApplied(""))
    elif memory.refs_changed or (
        # the cache shares unchanged parts: no hash needed while they are the same objects
        not same_objects(applied.snapshot, pod) and applied.spec != spec_hash(pod)
    ):
        return (*steps, ResolveUpdate())
    return (*steps, *_status(observed, memory))


def _status(observed: WorkloadState, memory: PodMemory) -> Plan:
    """Backend events not yet recorded, and the status of the workload."""
    steps: list[Step] = []
    for etype, reason, message, container in observed.events:
        if (etype, reason, message, container) not in memory.emitted:
            fp = f"spec.containers{{{container}}}" if container else ""
            steps.append(Event(etype, reason, message, fp))
    if observed.events != memory.emitted:
        steps.append(NoteEmitted(observed.events))
    steps.append(WriteStatus(FromWorkload(observed)))
    return tuple(steps)


def update_resolved(pod: Pod, observed: WorkloadState, memory: PodMemory, res: Resolution) -> Plan:
    """After ``ResolveUpdate``: the running pod resolved to ``res``."""
    applied = memory.applied
    assert applied is not None
    if res.pod is None or (
        res.fingerprint == applied.fingerprint and applied.spec == spec_hash(pod)
    ):
        return (NoteApplied(applied.fingerprint), *_status(observed, memory))
    fields = changed_fields(applied.snapshot, pod) or ["referenced ConfigMap/Secret data"]
    return (ApplyUpdate(tuple(fields), res.fingerprint),)


def updated(
    pod: Pod,
    observed: WorkloadState,
    memory: PodMemory,
    update: ApplyUpdate,
    in_place: bool,
    *,
    node: Node,
) -> Plan:
    """After ``ApplyUpdate``: the backend applied it in place, or cannot."""
    fields = ", ".join(update.fields)
    if in_place:
        said: Plan = (
            Log("info", f"pod {PodKey.of(pod)} updated in place ({fields})"),
            Count("updates"),
        )
    else:
        said = (
            Event(
                "Warning",
                "UpdateRequiresRecreate",
                f"the {node.backend} backend cannot apply a change of {fields} to the running "
                "workload; delete and re-create the pod to apply it",
            ),
        )
    return (*said, NoteApplied(update.fingerprint), *_status(observed, memory))


def update_failed(message: str, *, node: Node) -> Plan:
    """After ``ApplyUpdate``: the backend failed (the sync is retried with backoff)."""
    return (Event("Warning", "ProviderUpdateFailed", f"{node.backend}: {message}"),)


# --------------------------------------------------------------------------- delete


def _deleting(
    pod: Pod, observed: WorkloadState | None, memory: PodMemory, *, now: _dt.datetime, node: Node
) -> Plan:
    if observed is None and not memory.submitted:
        return (FinalDelete(),)
    if st.is_terminal(pod):
        return (BackendDelete(0), WorkloadGone(), FinalDelete())  # purge the stopped workload
    if (
        observed is None
        or all(c.state == "terminated" for c in observed.containers)
        or str(observed.phase) in st.TERMINAL
    ):
        purge: Plan = (BackendDelete(0),) if observed is not None else ()
        return (WriteStatus(Deleted(observed)), *purge, WorkloadGone(), FinalDelete())
    meta = _meta(pod)
    grace = int(meta.get("deletionGracePeriodSeconds") or 0)
    remaining = _remaining(pod, now)
    asked = memory.delete_requested
    pre_stop = PreStop(memory.pre_stop)
    # after a preStop hook the stop gets at least MIN_STOP_GRACE (the kubelet's minimum), so
    # the backend's confirmation is awaited that much past the deletion deadline
    floor = MIN_STOP_GRACE if pre_stop is PreStop.DONE else 0
    if remaining + floor <= -FORCE_SLACK and asked is not None:
        return (
            Event(
                "Warning",
                "ForceDeleted",
                f"the {node.backend} backend did not confirm the stop within the grace period "
                f"({grace}s); deleting the pod anyway",
            ),
            BackendDelete(0),
            WriteStatus(Deleted(None)),
            FinalDelete(),
        )
    names = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
    killing = tuple(
        Event("Normal", "Killing", f"Stopping container {n}", f"spec.containers{{{n}}}")
        for n in names
    )
    if asked is None and remaining > 0:
        if pre_stop is PreStop.NONE and pre_stop_containers(pod, observed):
            # killContainer: Killing, then the preStop hooks; the stop gets what they leave
            return (*killing, RunPreStop(remaining), _recheck(remaining))
        if pre_stop is PreStop.RUNNING:
            return (_recheck(remaining),)
    stop_grace = max(floor, math.ceil(remaining))
    # asked again only when the deletion's grace was shortened (a later ``kubectl delete
    # --grace-period``), not because time passed since the stop was asked
    if asked is None or (grace < asked and stop_grace < asked):
        said = killing if pre_stop is PreStop.NONE else ()  # a preStop's start said it
        capped = _capped(pod, stop_grace, node, after_pre_stop=pre_stop is PreStop.DONE)
        return (*said, *capped, Stop(stop_grace))
    return (_recheck(remaining + floor),)


def _capped(pod: Pod, stop_grace: int, node: Node, *, after_pre_stop: bool) -> Plan:
    """A Warning when the backend cannot honour the stop's grace period."""
    cap = node.max_kill_timeout
    if cap is None or stop_grace <= cap:
        return ()
    spec_grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    spec_grace = 30 if spec_grace is None else int(spec_grace)
    grace = int(_meta(pod).get("deletionGracePeriodSeconds") or spec_grace)
    named = (
        f"terminationGracePeriodSeconds {grace} s"
        if grace == spec_grace
        else f"the deletion's grace period {grace} s"
    )
    what = f"what the preStop hooks left of {named}, {stop_grace} s," if after_pre_stop else named
    return (
        Event(
            "Warning",
            "GracePeriodCapped",
            f"{what} exceeds the {node.backend.capitalize()} client's max_kill_timeout {cap} s: "
            f"the containers get SIGKILL {cap} s after SIGTERM",
        ),
    )


def _remaining(pod: Pod, now: _dt.datetime) -> float:
    return (parse_rfc3339(str(_meta(pod)["deletionTimestamp"])) - now).total_seconds()


def _recheck(remaining: float) -> Retry:
    """Done earlier if the backend reports the end (change stream, or the list a stop asks
    for re-queues the pod); otherwise decide at the deadline."""
    return Retry(after=max(remaining, 0.0) + FORCE_SLACK + 0.05)


def stopped(pod: Pod, final: WorkloadState | None, *, now: _dt.datetime, grace: int = 0) -> Plan:
    """After ``Stop(grace)``: ``final`` is the workload's end when it stopped within the
    call."""
    if final is None:
        remaining = _remaining(pod, now)
        # a stop longer than the deadline (the minimum after a preStop) is awaited in full
        return (_recheck(float(grace) if grace > math.ceil(remaining) else remaining),)
    # stopped within the call: finish now, without waiting for a list to see it gone
    return (WorkloadGone(), WriteStatus(Deleted(final)), FinalDelete())


def delete_failed(pod: Pod | None, message: str, *, node: Node) -> Plan:
    """A backend delete failed (the sync is retried with backoff): say so, and while the pod
    is in the API its status ``reason``/``message`` say why it stays (the next status write
    clears them)."""
    if pod is None:
        return ()
    return (
        Event("Warning", "ProviderDeleteFailed", f"{node.backend}: {message}"),
        WriteStatus(
            DeleteFailed(
                f"deleting the workload in the {node.backend} backend failed, retrying with "
                f"backoff: {message}"
            ),
            latest=True,
        ),
    )


def gone(key: GoneKey, pod: Pod | None, *, known: bool) -> Plan:
    """The pod ``key`` is gone from the API (``pod``: its last object, None for an orphan);
    ``known``: this node knows of a workload for it."""
    forget: Plan = (Forget(),)
    if not known:
        return forget
    grace = int(_meta(pod or {}).get("deletionGracePeriodSeconds") or 0)
    return (
        BackendDelete(grace),
        Log(
            "info",
            f"workload of {key.pod.namespace}/{key.pod.name} (uid {key.uid}) deleted from the "
            "backend",
        ),
        Count("cleanups"),
        *forget,
    )
