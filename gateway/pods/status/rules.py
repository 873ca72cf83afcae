"""PodStatus: the ONE mapping from what a backend reports to what Kubernetes shows, and the diff
that decides whether (and what) to write.

Every status vkgate writes is built here, from the pod as the API server has it (``pod``) plus
one of: a ``WorkloadState`` (``from_workload``), "not submitted yet" (``pending``), "can never
run" (``rejected``), "the backend lost it" (``lost``) or "deleted and gone" (``deleted``).  All
of them go through ``_render``, which owns the rules
(docs/design/kubelet-contract.md, "Pod status"):

* **phase** — the kubelet's ``getPhase`` over init/regular container states and restartPolicy; a
  backend-reported terminal phase wins (then every unfinished container is marked terminated,
  as the kubelet does for terminal pods).  A terminal pod's status is never changed again.
* **conditions**, in order: PodScheduled, PodReadyToStartContainers, Initialized,
  ContainersReady, Ready (readiness gates honoured).  ``lastTransitionTime`` changes only when a
  condition's status flips.  Conditions owned by others (readiness-gate conditions,
  DisruptionTarget, …) are kept untouched, after ours.
* **containerStatuses / initContainerStatuses** in spec order with ``state`` (exactly one of
  waiting/running/terminated), ``lastState``, ``ready``, ``started``, ``restartCount``,
  ``image``, ``imageID``, ``containerID`` (``<backend>://<id>``).  A container that terminated
  under restartPolicy Never (or OnFailure with exit 0) never goes back to running/waiting (API
  validation rejects it).
* podIP(s) once known are kept; hostIP(s) = the backend's host or the node InternalIP;
  startTime = first time vkgate saw the pod; ``qosClass`` computed like Kubernetes if absent;
  every other field (nominatedNodeName, resize, resourceClaimStatuses, …) is carried over.

Writing: ``status_patch(old, new, uid)`` is the kubelet's method — a two-way *strategic merge
patch* of the status (``conditions`` merge on ``type``, ``podIPs``/``hostIPs`` on ``ip``, container
status lists are atomic) with ``metadata.uid`` as a precondition, or None when nothing changed.
Comparison is *semantic*: None/empty values are dropped first (the API server omits them), so an
unchanged status never causes a write.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from translators.base import ContainerState, Phase, WorkloadState
from vkgate_core.kubetypes import ContainerGroup, Pod, PodSpec, PodStatus, as_pod
from vkgate_core.quantity import parse_quantity

#: Each container list of the spec with the status list that reports on it.
_GROUP_STATUSES: tuple[
    tuple[ContainerGroup, Literal["initContainerStatuses", "containerStatuses"]], ...
] = (
    ("initContainers", "initContainerStatuses"),
    ("containers", "containerStatuses"),
)

TERMINAL = frozenset({"Succeeded", "Failed"})
OUR_CONDITIONS = (
    "PodScheduled",
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
)
MERGE_KEYS = {"conditions": "type", "podIPs": "ip", "hostIPs": "ip"}

JSON = dict[str, Any]


def ts(t: _dt.datetime) -> str:
    """metav1.Time: RFC 3339, second precision, UTC."""
    return t.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_terminal(pod: Pod) -> bool:
    return str((pod.get("status") or {}).get("phase", "")) in TERMINAL


def runs_again(pod: Pod) -> bool:
    """Whether the kubelet would run this pod's containers again after they vanished:
    Always, or OnFailure while some container has not exited 0 (docs/design/backend-faults.md)."""
    spec = pod.get("spec") or {}
    policy = str(spec.get("restartPolicy") or "Always")
    if policy == "Always":
        return True
    if policy != "OnFailure":
        return False
    done = {
        str(c.get("name"))
        for c in (pod.get("status") or {}).get("containerStatuses") or []
        if ((c.get("state") or {}).get("terminated") or {}).get("exitCode") == 0
    }
    return any(str(c.get("name")) not in done for c in spec.get("containers") or [])


def restart_counts(pod: Pod) -> dict[str, int]:
    """The pod's current restartCount per container (init and main)."""
    status = pod.get("status") or {}
    return {
        str(c.get("name")): int(c.get("restartCount") or 0)
        for c in (status.get("initContainerStatuses") or [])
        + (status.get("containerStatuses") or [])
    }


def carry_restarts(desired: JSON, pod: Pod, base: Mapping[str, int]) -> JSON:
    """A re-created workload counts restarts from 0 again; the pod keeps counting: add the
    runs before the re-create (``base``) and never let restartCount go down."""
    current = restart_counts(pod)
    for key in ("initContainerStatuses", "containerStatuses"):
        for c in desired.get(key) or []:
            name = str(c.get("name"))
            counted = int(c.get("restartCount") or 0) + base.get(name, 0)
            c["restartCount"] = max(counted, current.get(name, 0))
    return desired


# --------------------------------------------------------------------------- QoS


def qos_class(pod: Pod) -> str:
    """Kubernetes' ``GetPodQOS`` (cpu and memory of regular and init containers)."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req = res.get("requests") or {}
        lim = res.get("limits") or {}
        for name in ("cpu", "memory"):
            r, lv = req.get(name), lim.get(name)
            if (r is not None and parse_quantity(r) != 0) or lv is not None:
                any_set = True
            if lv is None or (r is not None and parse_quantity(r) != parse_quantity(lv)):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


# --------------------------------------------------------------------------- normalization


def normalize(value: Any) -> Any:
    """Drop None, "" and empty containers recursively: what the API server would omit."""
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            n = normalize(v)
            if n is None or (isinstance(n, str | dict | list) and not n):
                continue
            out[k] = n
        return out
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    return value


# --------------------------------------------------------------------------- container statuses


def _container_id(cid: str, backend: str) -> str:
    if not cid:
        return ""
    return cid if "://" in cid else f"{backend}://{cid}"


def _terminated(cs: ContainerState, backend: str) -> JSON:
    code = cs.exit_code if cs.exit_code is not None else 0
    t: JSON = {
        "exitCode": code,
        "reason": cs.reason or ("Completed" if code == 0 else "Error"),
        "message": cs.message,
        "startedAt": ts(cs.started_at) if cs.started_at else None,
        "finishedAt": ts(cs.finished_at) if cs.finished_at else None,
        "containerID": _container_id(cs.container_id, backend),
    }
    if cs.signal:
        t["signal"] = cs.signal
    return t


def _container_status(
    spec_c: Mapping[str, Any],
    cs: ContainerState | None,
    *,
    backend: str,
    waiting: tuple[str, str],
) -> JSON:
    name = str(spec_c.get("name", ""))
    out: JSON = {
        "name": name,
        "image": str(spec_c.get("image", "")) or (cs.image if cs else ""),
        "imageID": cs.image_id if cs else "",
        "ready": False,
        "started": False,
        "restartCount": cs.restart_count if cs else 0,
        "lastState": {},
    }
    if cs is None or cs.state not in ("running", "terminated"):
        reason = (cs.reason if cs and cs.reason else "") or waiting[0]
        message = (cs.message if cs and cs.message else "") or (waiting[1] if not cs else "")
        out["state"] = {"waiting": {"reason": reason, "message": message}}
    elif cs.state == "running":
        out["state"] = {"running": {"startedAt": ts(cs.started_at) if cs.started_at else None}}
        out["ready"] = bool(cs.ready)
        out["started"] = True
    else:
        out["state"] = {"terminated": _terminated(cs, backend)}
    if cs is not None:
        out["containerID"] = _container_id(cs.container_id, backend)
        if cs.last_terminated is not None:
            out["lastState"] = {"terminated": _terminated(cs.last_terminated, backend)}
    return out


def _state_of(status: Mapping[str, Any]) -> str:
    state = status.get("state") or {}
    for k in ("running", "terminated", "waiting"):
        if state.get(k) is not None:
            return k
    return "waiting"


def _exit_code(status: Mapping[str, Any]) -> int | None:
    term = (status.get("state") or {}).get("terminated")
    return None if term is None else int(term.get("exitCode", 0))


def _keep_terminated(
    new: list[JSON], prev: Sequence[Mapping[str, Any]], restart_policy: str
) -> list[JSON]:
    """A container that terminated for good stays terminated (API validation)."""
    before = {str(c.get("name")): c for c in prev}
    out = []
    for cs in new:
        old = before.get(cs["name"])
        if old is not None and _state_of(old) == "terminated" and _state_of(cs) != "terminated":
            code = _exit_code(old)
            if restart_policy == "Never" or (restart_policy == "OnFailure" and code == 0):
                out.append({**dict(old), "ready": False, "started": False})
                continue
        out.append(cs)
    return out


def _unknown_terminated(cs: JSON, *, now: _dt.datetime, message: str) -> JSON:
    """A container whose fate is unknown in a terminal pod (kubelet: ContainerStatusUnknown)."""
    if _state_of(cs) == "terminated":
        return cs
    running = (cs.get("state") or {}).get("running") or {}
    out = dict(cs)
    out["ready"] = False
    out["started"] = False
    out["state"] = {
        "terminated": {
            "exitCode": 137,
            "reason": "ContainerStatusUnknown",
            "message": message,
            "startedAt": running.get("startedAt"),
            "finishedAt": ts(now),
            "containerID": cs.get("containerID"),
        }
    }
    return out


# --------------------------------------------------------------------------- phase


def _is_sidecar(spec_c: Mapping[str, Any]) -> bool:
    return spec_c.get("restartPolicy") == "Always"


def compute_phase(
    spec: Mapping[str, Any], init_statuses: Sequence[JSON], statuses: Sequence[JSON]
) -> str:
    """The kubelet's ``getPhase`` (pod not terminal)."""
    policy = str(spec.get("restartPolicy") or "Always")
    by_name = {s["name"]: s for s in (*init_statuses, *statuses)}
    pending_init = 0
    failed_init = 0
    for c in spec.get("initContainers") or []:
        s = by_name.get(c.get("name"))
        state = _state_of(s) if s else "waiting"
        code = _exit_code(s) if s else None
        last = ((s or {}).get("lastState") or {}).get("terminated")
        if _is_sidecar(c):
            if state != "running":
                pending_init += 1
            continue
        if state == "terminated" and code == 0:
            continue
        if state == "terminated" or (last and int(last.get("exitCode", 0)) != 0):
            failed_init += 1
        else:
            pending_init += 1
    if failed_init and policy == "Never":
        return "Failed"
    if pending_init or failed_init:
        return "Pending"
    running = waiting = stopped = succeeded = 0
    for c in spec.get("containers") or []:
        s = by_name.get(c.get("name"))
        state = _state_of(s) if s else "waiting"
        if state == "running":
            running += 1
        elif state == "terminated":
            stopped += 1
            succeeded += _exit_code(s or {}) == 0
        elif ((s or {}).get("lastState") or {}).get("terminated"):
            stopped += 1
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped:
        if policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        return "Failed" if policy == "Never" else "Running"
    return "Pending"


# --------------------------------------------------------------------------- conditions


def _cond(ctype: str, ok: bool, reason: str = "", message: str = "") -> JSON:
    return {
        "type": ctype,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
    }


def _conditions(
    pod: Pod,
    *,
    phase: str,
    placed: bool,
    init_statuses: Sequence[JSON],
    statuses: Sequence[JSON],
    prev: Sequence[Mapping[str, Any]],
    now: _dt.datetime,
) -> list[JSON]:
    spec = pod.get("spec") or {}
    terminal = phase in TERMINAL
    by_name = {s["name"]: s for s in (*init_statuses, *statuses)}

    incomplete = []
    for c in spec.get("initContainers") or []:
        s = by_name.get(c.get("name")) or {}
        if _is_sidecar(c):
            if not (_state_of(s) == "running" and s.get("started")) and not terminal:
                incomplete.append(c.get("name"))
        elif not (_state_of(s) == "terminated" and _exit_code(s) == 0):
            incomplete.append(c.get("name"))
    if incomplete and not (terminal and phase == "Succeeded"):
        initialized = _cond(
            "Initialized",
            False,
            "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(map(str, incomplete))}]",
        )
    else:
        initialized = _cond("Initialized", True)

    if terminal:
        why = "PodCompleted" if phase == "Succeeded" else "PodFailed"
        containers_ready = _cond("ContainersReady", False, why)
    else:
        unready = [
            c.get("name")
            for c in (
                *[c for c in spec.get("initContainers") or [] if _is_sidecar(c)],
                *(spec.get("containers") or []),
            )
            if not (by_name.get(c.get("name")) or {}).get("ready")
        ]
        if unready:
            containers_ready = _cond(
                "ContainersReady",
                False,
                "ContainersNotReady",
                f"containers with unready status: [{' '.join(map(str, unready))}]",
            )
        else:
            containers_ready = _cond("ContainersReady", True)

    if containers_ready["status"] != "True":
        ready = {**containers_ready, "type": "Ready"}
    else:
        ready = _cond("Ready", True)
        existing = {str(c.get("type")): c for c in prev}
        for gate in spec.get("readinessGates") or []:
            ctype = str(gate.get("conditionType", ""))
            cond = existing.get(ctype)
            if cond is None:
                ready = _cond(
                    "Ready",
                    False,
                    "ReadinessGatesNotReady",
                    f'corresponding condition of pod readiness gate "{ctype}" does not exist.',
                )
                break
            if cond.get("status") != "True":
                ready = _cond(
                    "Ready",
                    False,
                    "ReadinessGatesNotReady",
                    f'the status of pod readiness gate "{ctype}" is not "True", '
                    f"but {cond.get('status')}",
                )
                break

    ours = [
        _cond("PodScheduled", True),
        _cond("PodReadyToStartContainers", placed and not terminal),
        initialized,
        containers_ready,
        ready,
    ]
    old = {str(c.get("type")): c for c in prev}
    for cond in ours:
        before = old.get(cond["type"])
        if before is not None and before.get("status") == cond["status"]:
            cond["lastTransitionTime"] = before.get("lastTransitionTime") or ts(now)
            if cond["type"] == "PodScheduled":  # the scheduler's, when it wrote one: keep
                cond["reason"] = before.get("reason", "")
                cond["message"] = before.get("message", "")
        else:
            cond["lastTransitionTime"] = ts(now)
        cond["lastProbeTime"] = None
    others = [dict(c) for c in prev if str(c.get("type")) not in OUR_CONDITIONS]
    return ours + others


# --------------------------------------------------------------------------- rendering


def _ips(value: str, fallback: Sequence[Mapping[str, Any]] | None) -> list[JSON]:
    if value:
        return [{"ip": value}]
    return [dict(x) for x in fallback or []]


@dataclass(frozen=True)
class _Draft:
    """What a builder decided, handed to ``_render`` (which adds what the pod already shows):
    the phase and container statuses, the pod's reason and message, and where it runs."""

    phase: str
    init_statuses: list[JSON]
    statuses: list[JSON]
    #: The backend's host or the node InternalIP ("": keep the pod's).
    host_ip: str
    now: _dt.datetime
    reason: str = ""
    message: str = ""
    #: The backend placed the workload (PodReadyToStartContainers).
    placed: bool = False
    #: "": keep the pod's.
    pod_ip: str = ""


def _render(pod: Pod, draft: _Draft) -> JSON:
    prev: Mapping[str, Any] = pod.get("status") or {}
    spec = pod.get("spec") or {}
    policy = str(spec.get("restartPolicy") or "Always")
    statuses = _keep_terminated(draft.statuses, prev.get("containerStatuses") or [], policy)
    init_statuses = _keep_terminated(
        draft.init_statuses, prev.get("initContainerStatuses") or [], "Never"
    )
    out: JSON = {k: v for k, v in prev.items()}
    out["phase"] = draft.phase
    out["reason"] = draft.reason
    out["message"] = draft.message
    out["conditions"] = _conditions(
        pod,
        phase=draft.phase,
        placed=draft.placed,
        init_statuses=init_statuses,
        statuses=statuses,
        prev=prev.get("conditions") or [],
        now=draft.now,
    )
    out["initContainerStatuses"] = init_statuses
    out["containerStatuses"] = statuses
    pod_ip = draft.pod_ip or str(prev.get("podIP") or "")
    out["podIP"] = pod_ip
    out["podIPs"] = _ips(pod_ip, prev.get("podIPs"))
    host_ip = draft.host_ip or str(prev.get("hostIP") or "")
    out["hostIP"] = host_ip
    out["hostIPs"] = _ips(host_ip, prev.get("hostIPs"))
    out["startTime"] = prev.get("startTime") or ts(draft.now)
    out["qosClass"] = prev.get("qosClass") or qos_class(pod)
    return normalize(out)  # type: ignore[no-any-return]


def _spec_containers(pod: Pod, group: ContainerGroup) -> list[Mapping[str, Any]]:
    return list((pod.get("spec") or {}).get(group) or [])


def _waiting_statuses(
    pod: Pod, waiting: Mapping[str, tuple[str, str]]
) -> tuple[list[JSON], list[JSON]]:
    spec = pod.get("spec") or {}
    default = ("PodInitializing", "") if spec.get("initContainers") else ("ContainerCreating", "")
    init_statuses = [
        _container_status(
            c, None, backend="", waiting=waiting.get(str(c.get("name")), ("PodInitializing", ""))
        )
        for c in _spec_containers(pod, "initContainers")
    ]
    statuses = [
        _container_status(c, None, backend="", waiting=waiting.get(str(c.get("name")), default))
        for c in _spec_containers(pod, "containers")
    ]
    return init_statuses, statuses


def from_workload(
    pod: Pod,
    state: WorkloadState,
    *,
    now: _dt.datetime,
    host_ip: str,
    backend: str,
) -> JSON:
    """PodStatus for a workload the backend reports (the normal path)."""
    if is_terminal(pod):
        return dict(pod.get("status") or {})
    spec = pod.get("spec") or {}
    by_name = {c.name: c for c in (*state.init_containers, *state.containers)}
    waiting = ("PodInitializing", "") if spec.get("initContainers") else ("ContainerCreating", "")
    init_statuses = [
        _container_status(
            c, by_name.get(str(c.get("name"))), backend=backend, waiting=("PodInitializing", "")
        )
        for c in _spec_containers(pod, "initContainers")
    ]
    statuses = [
        _container_status(c, by_name.get(str(c.get("name"))), backend=backend, waiting=waiting)
        for c in _spec_containers(pod, "containers")
    ]
    phase = compute_phase(spec, init_statuses, statuses)
    if state.phase in (Phase.FAILED, Phase.SUCCEEDED) and phase not in TERMINAL:
        # The backend says the workload is over (deadline, eviction, …): believe it, and close
        # every container that is not terminated yet, as the kubelet does for terminal pods.
        phase = str(state.phase)
        note = state.message or f"the {backend} backend reports the workload {phase.lower()}"
        statuses = [_unknown_terminated(s, now=now, message=note) for s in statuses]
        init_statuses = [_unknown_terminated(s, now=now, message=note) for s in init_statuses]
    return _render(
        pod,
        _Draft(
            phase=phase,
            reason=state.reason,
            message=state.message,
            init_statuses=init_statuses,
            statuses=statuses,
            placed=state.placed,
            pod_ip=state.pod_ip,
            host_ip=state.host_ip or host_ip,
            now=now,
        ),
    )


def pending(
    pod: Pod,
    *,
    now: _dt.datetime,
    host_ip: str,
    reason: str = "",
    message: str = "",
    waiting: Mapping[str, tuple[str, str]] | None = None,
) -> JSON:
    """Not (yet) submitted: Pending, containers waiting (``waiting`` overrides per container,
    e.g. ``{"app": ("CreateContainerConfigError", 'configmap "x" not found')}``)."""
    if is_terminal(pod):
        return dict(pod.get("status") or {})
    init_statuses, statuses = _waiting_statuses(pod, waiting or {})
    return _render(
        pod,
        _Draft(
            phase="Pending",
            reason=reason,
            message=message,
            init_statuses=init_statuses,
            statuses=statuses,
            host_ip=host_ip,
            now=now,
        ),
    )


def all_waiting(pod: Pod, reason: str, message: str) -> dict[str, tuple[str, str]]:
    """Every container waiting with ``reason`` — what ``kubectl get pods`` shows as STATUS
    (a container's waiting reason wins over the pod's reason there)."""
    names = [
        str(c.get("name"))
        for c in (*_spec_containers(pod, "initContainers"), *_spec_containers(pod, "containers"))
    ]
    return {n: (reason, message) for n in names}


def rejected(pod: Pod, *, now: _dt.datetime, host_ip: str, reason: str, message: str) -> JSON:
    """The pod can never run here (unsupported feature/volume, create refused under
    restartPolicy Never): Failed, containers never started (waiting with the reason)."""
    if is_terminal(pod):
        return dict(pod.get("status") or {})
    init_statuses, statuses = _waiting_statuses(pod, all_waiting(pod, reason, message))
    return _render(
        pod,
        _Draft(
            phase="Failed",
            reason=reason,
            message=message,
            init_statuses=init_statuses,
            statuses=statuses,
            host_ip=host_ip,
            now=now,
        ),
    )


def _all_terminated(pod: Pod, *, now: _dt.datetime, message: str) -> tuple[list[JSON], list[JSON]]:
    prev: PodStatus = pod.get("status") or {}
    spec: PodSpec = pod.get("spec") or {}
    out = []
    for group, key in _GROUP_STATUSES:
        known = {str(s.get("name")): dict(s) for s in prev.get(key) or []}
        lst = []
        for c in spec.get(group) or []:
            name = str(c.get("name"))
            cs = known.get(name) or {
                "name": name,
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
            lst.append(_unknown_terminated(cs, now=now, message=message))
        out.append(lst)
    return out[0], out[1]


def lost_message(backend: str) -> str:
    """Why a pod whose workload vanished is Failed (its status message and Event)."""
    return (
        f"the {backend} backend no longer knows this pod's workload (it was lost or removed "
        "outside vkgate); restartPolicy Never: it is not run again"
    )


def lost(
    pod: Pod,
    *,
    now: _dt.datetime,
    host_ip: str,
    backend: str,
    reason: str = "NotFound",
    message: str = "",
) -> JSON:
    """The workload vanished from the backend while the pod ran (or the pod is ended for
    ``reason``, e.g. DeadlineExceeded, with ``message``): Failed, containers terminated with
    exit code 137 and the same message."""
    if is_terminal(pod):
        return dict(pod.get("status") or {})
    msg = message or lost_message(backend)
    init_statuses, statuses = _all_terminated(pod, now=now, message=msg)
    return _render(
        pod,
        _Draft(
            phase="Failed",
            reason=reason,
            message=msg,
            init_statuses=init_statuses,
            statuses=statuses,
            host_ip=host_ip,
            now=now,
        ),
    )


def deleted(
    pod: Pod,
    state: WorkloadState | None,
    *,
    now: _dt.datetime,
    host_ip: str,
    backend: str,
) -> JSON:
    """Terminal status of a pod being deleted whose workload stopped (``state`` all terminated)
    or is gone (None): Succeeded if every container exited 0, else Failed."""
    if is_terminal(pod):
        return dict(pod.get("status") or {})
    if state is not None:
        base = from_workload(pod, state, now=now, host_ip=host_ip, backend=backend)
        pod = as_pod({**pod, "status": base})
    msg = "The container could not be located when the pod was deleted.  The container used to be Running"
    init_statuses, statuses = _all_terminated(pod, now=now, message=msg)
    ok = bool(statuses) and all(_exit_code(s) == 0 for s in statuses)
    return _render(
        pod,
        _Draft(
            phase="Succeeded" if ok else "Failed",
            init_statuses=init_statuses,
            statuses=statuses,
            host_ip=host_ip,
            now=now,
        ),
    )


# --------------------------------------------------------------------------- events from transitions


def transition_events(
    old: Mapping[str, Any], new: Mapping[str, Any]
) -> list[tuple[str, str, str, str]]:
    """Events a kubelet would emit for the change old → new: (type, reason, message, fieldPath)."""
    events: list[tuple[str, str, str, str]] = []
    for key, group in (
        ("initContainerStatuses", "initContainers"),
        ("containerStatuses", "containers"),
    ):
        before = {str(s.get("name")): s for s in old.get(key) or []}
        for s in new.get(key) or []:
            name = str(s.get("name"))
            fp = f"spec.{group}{{{name}}}"
            b = before.get(name) or {}
            now_state, old_state = _state_of(s), _state_of(b) if b else ""
            restarts = int(s.get("restartCount", 0))
            old_restarts = int(b.get("restartCount", 0)) if b else 0
            if now_state == "running" and (old_state != "running" or restarts > old_restarts):
                # (no per-container "Created": the pod-level Created event names the workload)
                events.append(("Normal", "Started", f"Started container {name}", fp))
            waiting = (s.get("state") or {}).get("waiting") or {}
            old_waiting = (b.get("state") or {}).get("waiting") or {}
            backing_off = waiting.get("reason") == "CrashLoopBackOff"
            was_backing_off = old_waiting.get("reason") == "CrashLoopBackOff"
            last = (s.get("lastState") or {}).get("terminated") or {}
            # the kubelet's BackOff: once per back-off period (a new CrashLoopBackOff wait,
            # whatever the exit code), or for a failed run's restart seen without its wait
            if (backing_off and (not was_backing_off or restarts != old_restarts)) or (
                restarts > old_restarts
                and not (was_backing_off or backing_off)
                and int(last.get("exitCode", 0)) != 0
            ):
                events.append(
                    (
                        "Warning",
                        "BackOff",
                        f"Back-off restarting failed container {name} (exit code {last.get('exitCode')})",
                        fp,
                    )
                )
            if now_state == "terminated" and old_state != "terminated":
                term = (s.get("state") or {}).get("terminated") or {}
                code = int(term.get("exitCode", 0))
                if term.get("reason") in _START_FAILURES:
                    # never ran: no exit to report, the backend's reason (as the kubelet's
                    # "Error: failed to start container …")
                    msg = term.get("message") or term["reason"]
                    events.append(("Warning", "Failed", f"Error: {msg}", fp))
                elif code != 0 and term.get("reason") != "ContainerStatusUnknown":
                    detail = f": {term['message']}" if term.get("message") else ""
                    events.append(
                        (
                            "Warning",
                            "Failed",
                            f"Container {name} exited with code {code} ({term.get('reason', 'Error')}){detail}",
                            fp,
                        )
                    )
            if waiting.get("reason") in _WAITING_FAILURES and waiting.get(
                "reason"
            ) != old_waiting.get("reason"):
                msg = waiting.get("message") or waiting["reason"]
                events.append(("Warning", "Failed", f"Error: {msg}", fp))
    return events


_WAITING_FAILURES = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "CreateContainerError",
        "CreateContainerConfigError",
        "RunContainerError",
    }
)
#: Terminated reasons of a container that never ran (the backend could not start it).
_START_FAILURES = frozenset(
    {"StartError", "CreateContainerError", "CreateContainerConfigError", "ErrImagePull"}
)


# --------------------------------------------------------------------------- patch


def _diff_map(old: Mapping[str, Any], new: Mapping[str, Any], *, top: bool = False) -> JSON:
    patch: JSON = {}
    for k, v in new.items():
        if k not in old:
            patch[k] = v
            if top and k in MERGE_KEYS:
                patch[f"$setElementOrder/{k}"] = [{MERGE_KEYS[k]: i.get(MERGE_KEYS[k])} for i in v]
        elif old[k] != v:
            o = old[k]
            if isinstance(v, Mapping) and isinstance(o, Mapping):
                patch[k] = _diff_map(o, v)
            elif top and k in MERGE_KEYS and isinstance(v, list) and isinstance(o, list):
                patch.update(_diff_list(k, o, v, MERGE_KEYS[k]))
            else:
                patch[k] = v
    for k in old:
        if k not in new:
            patch[k] = None
    return patch


def _diff_list(
    name: str, old: Iterable[Mapping[str, Any]], new: list[Mapping[str, Any]], key: str
) -> JSON:
    old_by = {i.get(key): i for i in old}
    new_keys = [i.get(key) for i in new]
    items: list[JSON] = []
    for item in new:
        before = old_by.get(item.get(key))
        if before is None:
            items.append(dict(item))
        elif before != item:
            sub = _diff_map(before, item)
            sub[key] = item.get(key)
            items.append(sub)
    for k in old_by:
        if k not in new_keys:
            items.append({key: k, "$patch": "delete"})
    out: JSON = {}
    if items or list(old_by) != new_keys:
        out[f"$setElementOrder/{name}"] = [{key: k} for k in new_keys]
    if items:
        out[name] = items
    return out


def status_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any], uid: str) -> JSON | None:
    """The strategic merge patch old → new for ``pods/<name>/status``, or None if unchanged."""
    diff = _diff_map(normalize(old or {}), normalize(new), top=True)
    if not diff:
        return None
    return {"metadata": {"uid": uid}, "status": diff}
