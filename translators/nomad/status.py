"""Nomad job + allocations → ``WorkloadState`` (what the backend reports, nothing more).

Pure functions over plain JSON, so the golden files in ``tests/golden/nomad/states/`` pin the
whole mapping.  Pod conditions and "should we write?" belong to ``gateway.pods.status``.

Phase, from the newest allocation by ``CreateIndex`` (replaced allocations are history):

========================  ====================================================================
no allocation             Pending; containers waiting ``ContainerCreating``; with failed
                          placements: reason ``Unschedulable``, message = Nomad's text
``pending``               Pending (placed); Running once a task has started (Nomad reports
                          an allocation whose task is restarting as pending again)
``running``               Running
``complete``              Succeeded; Failed if a container did not exit 0 (a stopped job's
                          allocation is "complete" too)
``failed``                Failed
``lost``                  Failed, reason ``NodeLost``
``unknown``               Unknown (client disconnected)
========================  ====================================================================

Only a terminal *job* may end a pod (docs/design/backend-faults.md): a ``failed`` or ``lost``
allocation of a job that is not ``dead`` (and not stopped) is one Nomad will replace — a
reschedule, not the pod's end — so the pod stays Running (Pending if nothing ever started),
with the allocation's fate as the message.  A controller that saw Failed would start a second
copy next to the one Nomad is about to run.

Containers, from ``TaskStates`` and their events: ``dead`` → terminated with the exit code,
signal and OOM flag of the last ``Terminated`` event (exit code 0 with a signal → 128+signal;
reason ``OOMKilled`` (message: Nomad's, e.g. ``Exit Code: 137, Signal: 9``) / ``Completed`` /
``Error``); ``running`` → running since ``StartedAt``; after ``Restarting`` →
``CrashLoopBackOff`` with the kubelet's message and Nomad's real delay ("back-off 10s restarting
failed container=app pod=web_default(uid)", ``backoff_message``), otherwise ``ContainerCreating`` (``PodInitializing`` for main containers
while prestart tasks run).

A task Nomad could not start is never given a process exit code (docs/design/nomad.md,
"Task events"): the failure event picks the kubelet's reason (``failure_reason``:
``CreateContainerConfigError`` for ``Failed Validation``, ``ErrImagePull``/
``ImagePullBackOff``, ``RunContainerError``/``StartError``, ``CreateContainerError``), the
message is ``<event type>: <Nomad's text>``, waiting while Nomad retries, terminated with 128
(containerd's code for ``StartError``) once it gave up.  The pod's message carries the same
words (and so the Warning Events ``gateway.pods.status`` records from the container states).  Every terminated state has real times: a run's
``startedAt`` is its ``Started`` event, ``finishedAt`` its ``Terminated`` event.  ``restartCount`` = ``Restarts`` + one per earlier allocation of the
job, less the restart Nomad has scheduled but not made yet while the task waits (the kubelet
counts a restart when it starts the container); ``lastState`` = the ``Terminated`` event before the current run.

The pod's address (``pod_ip``): the allocation's own with bridge / CNI networking, else its
client's — host networking, where the ports of that address are the client's and its other
tenants': the state says so (``host_network``) and names the ports Nomad reserved for the
allocation (``host_ports``), the only ones besides the pod's declared ``containerPort``s
that ``kubectl port-forward`` reaches (docs/design/nomad.md, "Pod networking").

Which tasks are init containers is recorded in the job's ``Meta`` (``vkgate.containers``,
``vkgate.init_containers``) when vkgate submits the job, because allocation stubs and events do
not carry the job spec.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from translators.base import ContainerState, Phase, PodRef, WorkloadState
from translators.nomad import images
from translators.nomad.jobs import (
    META_CONTAINERS,
    META_INIT,
    META_NAME,
    META_NAMESPACE,
    META_NETWORK,
    META_NODE,
    META_SIDECARS,
    META_UID,
)
from vkgate_core import timeparse
from vkgate_core.backoff import go_duration

JSON = dict[str, Any]

_PHASES = {
    "pending": Phase.PENDING,
    "running": Phase.RUNNING,
    "complete": Phase.SUCCEEDED,
    "failed": Phase.FAILED,
    "lost": Phase.FAILED,
    "unknown": Phase.UNKNOWN,
}
_IMAGE_ERROR = re.compile(
    r"pull|image|manifest|repository|registry|not found|unauthorized", re.IGNORECASE
)
#: The docker driver refusing a ``cap_add`` outside the client's ``allow_caps`` (observed on
#: 1.6.3: "Failed to create container configuration for image …: driver does not allow the
#: following capabilities: net_admin") — about the container's config, not its image.
_CAPS_DENIED = re.compile(r"does not allow the following capabilities")
_SETUP_FAILURES = {
    "Driver Failure",
    "Setup Failure",
    "Failed Validation",
    "Failed Artifact Download",
    "Task hook failed",
}
#: Exit code of a container that never started (what containerd reports with ``StartError``).
NEVER_STARTED_EXIT = 128


@dataclass
class JobView:
    """What vkgate knows about one of its jobs: identity, job status, allocations, placement."""

    job_id: str
    namespace: str
    region: str
    ref: PodRef
    node: str
    containers: tuple[str, ...] = ()
    init_containers: tuple[str, ...] = ()
    sidecars: tuple[str, ...] = ()
    status: str = "pending"
    stop: bool = False
    #: Purged by this agent (``NomadTranslator.delete``): the job is gone from Nomad, its
    #: allocations are still stopping; the view stays until they have ended.
    purged: bool = False
    modify_index: int = 0
    #: The job's ``CreateIndex`` (0: not known yet): which job of this ID the view is of.
    create_index: int = 0
    #: Allocations created before this index are not runs of this workload: they are of an
    #: earlier job of the same ID (purged, or stopped and registered over), which the gateway
    #: counted as one restart when it ran the pod again (docs/design/nomad.md, "Run again").
    runs_from: int = 0
    allocs: dict[str, JSON] = field(default_factory=dict)
    #: Nomad's placement failure text, when the scheduler could not place the allocation.
    placement: str = ""
    #: The job's group network mode (``Meta["vkgate.network"]``, else ``host``).
    network_mode: str = "host"
    #: Task → imageID, for docker tasks pinned by digest (translators/nomad/images.py).
    image_ids: Mapping[str, str] = field(default_factory=dict)

    @property
    def own_address(self) -> bool:
        """True when each allocation has an address of its own (bridge / CNI networking)."""
        return self.network_mode != "host"

    @classmethod
    def from_job(cls, job: Mapping[str, Any], *, region: str = "") -> JobView:
        """From a full job or a job stub listed with ``meta=true``."""
        meta: Mapping[str, str] = job.get("Meta") or {}
        return cls(
            job_id=str(job["ID"]),
            namespace=str(job.get("Namespace") or "default"),
            region=region or str(job.get("Region") or ""),
            ref=PodRef(
                namespace=meta.get(META_NAMESPACE, ""),
                name=meta.get(META_NAME, ""),
                uid=meta.get(META_UID, ""),
            ),
            node=meta.get(META_NODE, ""),
            containers=_names(meta.get(META_CONTAINERS, "")),
            init_containers=_names(meta.get(META_INIT, "")),
            sidecars=_names(meta.get(META_SIDECARS, "")),
            network_mode=meta.get(META_NETWORK) or "host",
            image_ids=images.parse(meta.get(images.META_IMAGE_IDS, "")),
            status=str(job.get("Status") or "pending"),
            stop=bool(job.get("Stop")),
            modify_index=int(job.get("ModifyIndex") or 0),
            create_index=int(job.get("CreateIndex") or 0),
            runs_from=int(job.get("CreateIndex") or 0),
        )

    def update_job(self, job: Mapping[str, Any]) -> None:
        self.status = str(job.get("Status") or self.status)
        self.stop = self.purged or bool(job.get("Stop"))
        self.modify_index = int(job.get("ModifyIndex") or self.modify_index)
        if not self.create_index:
            self.create_index = int(job.get("CreateIndex") or 0)
            self.runs_from = max(self.runs_from, self.create_index)

    def runs_since(self, index: int) -> None:
        """This workload's runs start at ``index`` (its registration): forget allocations
        created before it."""
        self.runs_from = max(self.runs_from, index)
        for aid, alloc in list(self.allocs.items()):
            if not self.is_run(alloc):
                del self.allocs[aid]

    def is_run(self, alloc: Mapping[str, Any]) -> bool:
        """``alloc`` is a run of this workload, not of an earlier job of the same ID."""
        created = int(alloc.get("CreateIndex") or 0)
        return not (self.runs_from and created and created < self.runs_from)

    def newest(self) -> JSON | None:
        if not self.allocs:
            return None
        return max(self.allocs.values(), key=lambda a: int(a.get("CreateIndex") or 0))


def _names(value: str) -> tuple[str, ...]:
    return tuple(n for n in value.split(",") if n)


def parse_time(value: Any) -> _dt.datetime | None:
    """Nomad RFC3339 (nanoseconds, ``Z``) or unix-ns integers → aware UTC datetime; zero → None."""
    if value in (None, "", 0):
        return None
    if isinstance(value, int | float):
        return _dt.datetime.fromtimestamp(value / 1e9, _dt.UTC)
    text = str(value)
    if text.startswith("0001-01-01"):
        return None
    return timeparse.parse_time(text, naive="reject")


# --------------------------------------------------------------------------- containers


def _events(ts: Mapping[str, Any]) -> list[JSON]:
    return list(ts.get("Events") or [])


def _terminated_from(
    event: Mapping[str, Any],
    *,
    name: str,
    failed: bool,
    started: _dt.datetime | None,
    finished: _dt.datetime | None,
    cid: str,
) -> ContainerState:
    details: Mapping[str, str] = event.get("Details") or {}
    code = _int(details.get("exit_code"), default=1 if failed else 0)
    signal = _int(details.get("signal"), default=0)
    if code == 0 and signal > 0:
        code = 128 + signal
    oom = str(details.get("oom_killed", "")).lower() == "true"
    if oom:
        reason = "OOMKilled"
    elif code == 0 and not failed:
        reason = "Completed"
    else:
        reason = "Error"
    message = str(details.get("exit_message") or "")
    if oom and not message:
        message = str(event.get("DisplayMessage") or "")
    return ContainerState(
        name=name,
        state="terminated",
        reason=reason,
        message=message,
        exit_code=code,
        signal=signal or None,
        started_at=started,
        finished_at=finished or parse_time(event.get("Time")),
        container_id=cid,
    )


def _run_of(
    events: Sequence[Mapping[str, Any]], term_i: int
) -> tuple[_dt.datetime | None, _dt.datetime | None]:
    """(started, finished) of the run that the ``Terminated`` event at ``term_i`` ended: the
    ``Started`` event before it, and the event's own time (never the zero time)."""
    finished = parse_time(events[term_i].get("Time"))
    for i in range(term_i - 1, -1, -1):
        if events[i].get("Type") == "Started":
            return parse_time(events[i].get("Time")), finished
    return None, finished


def failure_reason(event: Mapping[str, Any], *, waiting: bool, repeated: bool = False) -> str:
    """The kubelet's reason for a task that could not start, from Nomad's failure event.

    ``Failed Validation`` (the task config did not parse) or a capability the client's docker
    plugin does not allow (``securityContext.capabilities.add``) → ``CreateContainerConfigError``;
    a ``Driver Failure`` about the image → ``ErrImagePull`` (``ImagePullBackOff`` once
    repeated); another driver failure → ``RunContainerError`` while retrying, ``StartError``
    once terminated; other setup/hook/artifact failures → ``CreateContainerError``.
    """
    kind = event.get("Type")
    if kind == "Failed Validation" or (
        kind == "Driver Failure" and _CAPS_DENIED.search(_message(event))
    ):
        return "CreateContainerConfigError"
    if kind == "Driver Failure" and _IMAGE_ERROR.search(_message(event)):
        return "ImagePullBackOff" if repeated else "ErrImagePull"
    if kind == "Driver Failure":
        return "RunContainerError" if waiting else "StartError"
    return "CreateContainerError"


def nomad_words(event: Mapping[str, Any]) -> str:
    """``<event type>: <Nomad's message>`` — how a failure is shown in the pod and its Event."""
    return f"{event.get('Type')}: {_message(event).strip()}"


def pod_words(ref: PodRef) -> str:
    """``name_namespace(uid)``: the pod in the kubelet's messages (its ``format.Pod``)."""
    return f"{ref.name}_{ref.namespace}({ref.uid})"


def backoff_message(event: Mapping[str, Any], container: str, pod: str) -> str:
    """The kubelet's CrashLoopBackOff message with the delay Nomad really applies (the
    ``Restarting`` event's ``StartDelay``, whole seconds): "back-off 10s restarting failed
    container=app pod=web_default(uid)" (docs/design/probes.md, "Restart backoff")."""
    details: Mapping[str, str] = event.get("Details") or {}
    ns = _int(event.get("StartDelay") or details.get("start_delay"), default=0)
    return f"back-off {go_duration(ns / 1e9)} restarting failed container={container} pod={pod}"


def _int(value: Any, *, default: int) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def _last(events: Sequence[Mapping[str, Any]], kind: str) -> tuple[int, JSON | None]:
    for i in range(len(events) - 1, -1, -1):
        if events[i].get("Type") == kind:
            return i, dict(events[i])
    return -1, None


def _message(event: Mapping[str, Any]) -> str:
    details: Mapping[str, str] = event.get("Details") or {}
    return str(
        details.get("driver_error")
        or details.get("validation_error")
        or details.get("setup_error")
        or details.get("download_error")
        or event.get("DisplayMessage")
        or event.get("Message")
        or ""
    )


def container_state(
    name: str,
    ts: Mapping[str, Any] | None,
    *,
    alloc_id: str,
    earlier_runs: int = 0,
    initializing: bool = False,
    previous: Mapping[str, Any] | None = None,
    pod: str = "",
) -> ContainerState:
    """One task's state as a Kubernetes container state.  ``previous`` is the same task's
    state in the allocation this one replaced (for ``lastState`` after a reschedule); ``pod``
    is the pod as the kubelet names it in messages (``pod_words``)."""
    if ts is None:
        return ContainerState(
            name=name, reason="PodInitializing" if initializing else "ContainerCreating"
        )
    cid = f"nomad://{alloc_id}/{name}"
    events = _events(ts)
    restarts = int(ts.get("Restarts") or 0) + earlier_runs
    started = parse_time(ts.get("StartedAt"))
    finished = parse_time(ts.get("FinishedAt"))
    failed = bool(ts.get("Failed"))
    state = ts.get("State") or "pending"
    term_i, term = _last(events, "Terminated")
    last: ContainerState | None = None
    if term is None and previous is not None:
        prev_events = _events(previous)
        prev_i, prev_term = _last(prev_events, "Terminated")
        if prev_term is not None:
            run_started, run_finished = _run_of(prev_events, prev_i)
            last = _terminated_from(
                prev_term,
                name=name,
                failed=bool(previous.get("Failed")),
                started=parse_time(previous.get("StartedAt")) or run_started,
                finished=parse_time(previous.get("FinishedAt")) or run_finished,
                cid=cid,
            )

    if state == "dead":
        prev_i, prev = _last(events[:term_i] if term_i >= 0 else [], "Terminated")
        if prev is not None:
            run_started, run_finished = _run_of(events, prev_i)
            last = _terminated_from(
                prev, name=name, failed=True, started=run_started, finished=run_finished, cid=cid
            )
        if term is None and started is None and not failed:
            # stopped before it ever ran (e.g. pod deleted while pending)
            return ContainerState(
                name=name,
                state="terminated",
                reason="Completed",
                exit_code=0,
                finished_at=finished,
                restart_count=restarts,
                container_id=cid,
            )
        if term is None and failed:
            # never started: not an exit code of the process, the reason Nomad gave
            failure = next((e for e in reversed(events) if e.get("Type") in _SETUP_FAILURES), None)
            return ContainerState(
                name=name,
                state="terminated",
                reason=failure_reason(failure, waiting=False) if failure else "StartError",
                message=nomad_words(failure) if failure else "the task failed before it started",
                exit_code=NEVER_STARTED_EXIT,
                started_at=finished,
                finished_at=finished,
                restart_count=restarts,
                container_id=cid,
                last_terminated=last,
            )
        run_started, run_finished = _run_of(events, term_i) if term_i >= 0 else (None, None)
        cs = _terminated_from(
            term or {},
            name=name,
            failed=failed,
            started=started or run_started,
            finished=finished or run_finished,
            cid=cid,
        )
        return replace(cs, restart_count=restarts, last_terminated=last)

    if term is not None:
        run_started, run_finished = _run_of(events, term_i)
        last = _terminated_from(
            term,
            name=name,
            failed=_int((term.get("Details") or {}).get("exit_code"), default=0) != 0,
            started=run_started,
            finished=run_finished,
            cid=cid,
        )

    if state == "running":
        return ContainerState(
            name=name,
            state="running",
            started_at=started,
            ready=True,
            restart_count=restarts,
            container_id=cid,
            last_terminated=last,
        )

    # pending: decide the waiting reason from the latest meaningful event
    latest = next(
        (
            e
            for e in reversed(events)
            if e.get("Type") in _SETUP_FAILURES or e.get("Type") in {"Restarting", "Started"}
        ),
        None,
    )
    reason, message = ("PodInitializing" if initializing else "ContainerCreating"), ""
    # the kubelet's order: ErrImagePull after the first failed pull, ImagePullBackOff after more
    repeated = sum(1 for e in events if e.get("Type") == "Driver Failure") > 1
    if latest is not None and latest.get("Type") == "Restarting":
        reason, message = "CrashLoopBackOff", backoff_message(latest, name, pod)
        if int(ts.get("Restarts") or 0) > 0:
            # Nomad counts a restart when it schedules it (its Restarting event), the kubelet
            # when it makes it: the run this wait leads to is not counted yet
            restarts -= 1
        cause = next(
            (
                e
                for e in reversed(events[: events.index(latest)])
                if e.get("Type") in _SETUP_FAILURES or e.get("Type") == "Terminated"
            ),
            None,
        )
        if cause is not None and cause.get("Type") in _SETUP_FAILURES:
            # Nomad retries a task that could not start: still that failure, backing off
            reason = failure_reason(cause, waiting=True, repeated=repeated)
            message = nomad_words(cause)
    elif latest is not None and latest.get("Type") in _SETUP_FAILURES:
        message = nomad_words(latest)
        reason = failure_reason(latest, waiting=True, repeated=repeated)
    return ContainerState(
        name=name,
        state="waiting",
        reason=reason,
        message=message,
        restart_count=restarts,
        container_id=cid if started else "",
        last_terminated=last,
    )


# --------------------------------------------------------------------------- pod


def pod_ip(alloc: Mapping[str, Any], host_ip: str, *, own_address: bool = False) -> str:
    """The pod's address: the allocation's own (``own_address``: bridge / CNI networking),
    else its client's (``host_ip``).

    Bridge or CNI networking gives the allocation an address of its own,
    ``NetworkStatus.Address``; only full allocations carry it (``GET /v1/allocation/:id`` and
    the event stream's payloads, which ``views.merge_alloc`` keeps when a later list stub lacks
    it; the translator fetches it when neither brought it).  Until it is known the pod has no
    address: the client's would name a place where the pod's ports do not answer.

    Host networking: the ports' ``HostIP`` / the group network's ``IP``, both the client's
    address, else ``host_ip``.  The ``status.podIP`` fieldRef placeholder names the client's
    address too (``literal.py``).
    """
    net = alloc.get("NetworkStatus") or {}
    if net.get("Address"):
        return str(net["Address"])
    if own_address:
        return ""
    shared = (alloc.get("AllocatedResources") or {}).get("Shared") or {}
    for port in shared.get("Ports") or []:
        if port.get("HostIP"):
            return str(port["HostIP"])
    for network in shared.get("Networks") or []:
        if network.get("IP"):
            return str(network["IP"])
    return host_ip


def on_host_network(alloc: Mapping[str, Any], *, own_address: bool = False) -> bool:
    """The pod's address is its client's (``pod_ip``'s host networking): no address of the
    allocation's own, and none expected (``own_address``).  Decided from the allocation as
    well as the job's mode: an allocation that has an address of its own is in its own
    network namespace, whatever the job's ``Meta`` says."""
    return not own_address and not (alloc.get("NetworkStatus") or {}).get("Address")


def host_ports(alloc: Mapping[str, Any]) -> tuple[int, ...]:
    """The ports Nomad reserved for the allocation on its client: the group network's ports
    (``AllocatedResources.Shared.Ports`` and the ``ReservedPorts`` / ``DynamicPorts`` of its
    ``Networks``; list stubs carry both), static and dynamic alike.  Task-level networks
    (deprecated since Nomad 0.12, in full allocations only) are not read: a state must not
    change between a stub and a full allocation."""
    shared = (alloc.get("AllocatedResources") or {}).get("Shared") or {}
    ports: set[int] = set()
    entries = [*(shared.get("Ports") or [])]
    for network in shared.get("Networks") or []:
        entries += [*(network.get("ReservedPorts") or []), *(network.get("DynamicPorts") or [])]
    for entry in entries:
        value = entry.get("Value") if isinstance(entry, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536:
            ports.add(value)
    return tuple(sorted(ports))


def needs_address(view: JobView) -> JSON | None:
    """The newest allocation when it runs with an address of its own that no payload brought
    (a backstop list returns stubs without ``NetworkStatus``), else None."""
    alloc = view.newest()
    if alloc is None or not view.own_address or alloc.get("ClientStatus") != "running":
        return None
    return None if (alloc.get("NetworkStatus") or {}).get("Address") else alloc


def _job_lives(view: JobView) -> bool:
    """The job will run again: not stopped, not ``dead`` (Nomad reschedules its allocations)."""
    return not view.stop and view.status != "dead"


def workload_state(view: JobView, *, node_ips: Mapping[str, str] | None = None) -> WorkloadState:
    """The pod's state as Nomad reports it (see the module docstring for the rules)."""
    alloc = view.newest()
    inits = view.init_containers
    mains = view.containers
    if alloc is None:
        unschedulable = bool(view.placement) and not view.stop
        return WorkloadState(
            ref=view.ref,
            backend_id=view.job_id,
            phase=Phase.PENDING,
            reason="Unschedulable" if unschedulable else "",
            message=f"Nomad could not place the job: {view.placement}" if unschedulable else "",
            placed=False,
            containers=tuple(
                container_state(n, None, alloc_id="", initializing=bool(inits)) for n in mains
            ),
            init_containers=tuple(container_state(n, None, alloc_id="") for n in inits),
            node_name=view.node,
        )
    alloc_id = str(alloc.get("ID", ""))
    older = sorted(
        (
            a
            for a in view.allocs.values()
            if int(a.get("CreateIndex") or 0) < int(alloc.get("CreateIndex") or 0)
        ),
        key=lambda a: int(a.get("CreateIndex") or 0),
    )
    earlier = len(older)
    before: Mapping[str, Any] = (older[-1].get("TaskStates") or {}) if older else {}
    states: Mapping[str, Any] = alloc.get("TaskStates") or {}
    if not mains:  # a job whose Meta does not list containers: every task is a container
        mains, inits = tuple(states), ()
    init_states = tuple(
        container_state(
            n,
            states.get(n),
            alloc_id=alloc_id,
            earlier_runs=earlier,
            previous=before.get(n),
            pod=pod_words(view.ref),
        )
        for n in inits
    )
    init_done = all(
        (
            s.state == "running"
            if n in view.sidecars
            else s.state == "terminated" and s.exit_code == 0
        )
        for s, n in zip(init_states, inits, strict=True)
    )
    main_states = tuple(
        container_state(
            n,
            states.get(n),
            alloc_id=alloc_id,
            earlier_runs=earlier,
            initializing=bool(inits) and not init_done,
            previous=before.get(n),
            pod=pod_words(view.ref),
        )
        for n in mains
    )
    client_status = str(alloc.get("ClientStatus") or "pending")
    phase = _PHASES.get(client_status, Phase.UNKNOWN)
    if phase is Phase.PENDING and any(
        parse_time((states.get(n) or {}).get("StartedAt")) for n in mains
    ):
        # Nomad reports a restarting allocation as pending; Kubernetes keeps such a pod Running
        phase = Phase.RUNNING
    reason = message = ""
    if phase is Phase.SUCCEEDED and any(
        c.state == "terminated" and c.exit_code != 0 for c in main_states
    ):
        # "complete" also means "stopped on purpose" (pod deleted): a container that did not
        # exit 0 makes the pod Failed, as the kubelet decides for deleted pods
        phase = Phase.FAILED
    failures = start_failures((*init_states, *main_states))
    if client_status == "lost":
        reason, message = "NodeLost", str(alloc.get("ClientDescription") or "Nomad lost the node")
    elif client_status == "failed" and failures:
        # Nomad's words for why a task never ran, not its summary ("Failed tasks")
        message = "; ".join(f"{c}: {m}" for c, m in failures)
    elif client_status == "failed" and alloc.get("ClientDescription"):
        message = str(alloc["ClientDescription"])
    if phase is Phase.FAILED and client_status in ("failed", "lost") and _job_lives(view):
        ran = any(parse_time((states.get(n) or {}).get("StartedAt")) for n in mains) or earlier
        phase = Phase.RUNNING if ran else Phase.PENDING
        what = "lost (its node went away)" if client_status == "lost" else "failed"
        message = f"Nomad allocation {alloc_id[:8]} {what}; Nomad is placing a replacement" + (
            f": {message}" if message else ""
        )
        reason = ""
        # the tasks of a lost allocation may still read "running": nothing serves until the
        # replacement runs
        main_states = tuple(replace(c, ready=False) for c in main_states)
    host_ip = (node_ips or {}).get(str(alloc.get("NodeID", "")), "")
    shares_host = on_host_network(alloc, own_address=view.own_address)
    return WorkloadState(
        ref=view.ref,
        backend_id=view.job_id,
        phase=phase,
        reason=reason,
        message=message,
        placed=True,
        pod_ip=pod_ip(alloc, host_ip, own_address=view.own_address),
        host_ip=host_ip,
        host_network=shares_host,
        host_ports=host_ports(alloc) if shares_host else (),
        started_at=parse_time(alloc.get("CreateTime")),
        containers=_with_image_ids(main_states, view.image_ids),
        init_containers=_with_image_ids(init_states, view.image_ids),
        node_name=view.node,
    )


def _with_image_ids(
    states: tuple[ContainerState, ...], ids: Mapping[str, str]
) -> tuple[ContainerState, ...]:
    """imageID once a container has run (the kubelet reports it from the running container)."""
    if not ids:
        return states
    return tuple(
        replace(c, image_id=ids.get(c.name, ""))
        if c.state in ("running", "terminated") and c.started_at is not None
        else c
        for c in states
    )


#: Container reasons that mean "Nomad could not start it" (see ``failure_reason``).
START_FAILURES = frozenset(
    {
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "StartError",
        "ErrImagePull",
        "ImagePullBackOff",
    }
)


def start_failures(states: Iterable[ContainerState]) -> list[tuple[str, str]]:
    """(container, Nomad's words) for every container Nomad could not start."""
    return [(c.name, c.message) for c in states if c.reason in START_FAILURES and c.message]
