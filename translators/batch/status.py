"""Batch task JSON → ``WorkloadState`` (what the backend reports; PodStatus rules live in the
gateway).

A pod is one main task plus one task per init container, recognised by ``displayName``
(``spec.parse_display_name``).  Per task (docs/design/batch.md, "Task to pod status"):

===========================  ==========  =========================================================
task                         phase       container state
===========================  ==========  =========================================================
active, retryCount 0         Pending     waiting ``Queued`` (no slot/node yet)
active, retryCount > 0       Running     waiting ``CrashLoopBackOff``, lastState from the last exit
preparing                    Pending     waiting ``ContainerCreating``
running                      Running     running since ``executionInfo.startTime``
completed, result success    Succeeded   terminated 0 ``Completed``
completed, failure + exit    Failed      terminated <exit> ``Error`` (``DeadlineExceeded`` for the
                                         wall-clock limit), message = failureInfo.message
completed, no exit code      Failed      terminated 1 ``ContainerCannotRun``, or ``ErrImagePull``
                                         when failureInfo says the image could not be pulled
===========================  ==========  =========================================================

``restartCount`` = ``retryCount``; ``hostIP``/``podIP`` = the compute node's IP (containers use the
host network: ``host_network``, with no ``host_ports`` — Batch reserves none); ``startTime`` = the first ``executionInfo.startTime``, else ``creationTime``;
``containerID`` = ``batch://<job>/<task>``.  While init tasks have not all succeeded the main
container waits with ``PodInitializing``; a failed init task fails the pod.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from translators.base import JSON, ContainerState, Phase, PodRef, WorkloadState
from translators.batch.spec import TaskName, parse_display_name
from vkgate_core import timeparse

#: failureInfo codes (lower case) that mean the image could not be pulled or is invalid.
IMAGE_CODES = frozenset(
    {"containerinvalidimage", "containerpullimagefailed", "containerimagepullfailed"}
)


def parse_time(value: object) -> _dt.datetime | None:
    """Batch timestamps (ISO 8601, up to 7 fractional digits, ``Z``) as aware UTC datetimes."""
    return timeparse.parse_time(value)


@dataclass
class PodTasks:
    """The tasks of one pod, found by displayName."""

    ref: PodRef
    main: JSON | None = None
    main_name: TaskName | None = None
    inits: dict[int, tuple[TaskName, JSON]] = field(default_factory=dict)

    def task_ids(self) -> list[str]:
        ids = [str(self.inits[i][1]["id"]) for i in sorted(self.inits)]
        return ids + ([str(self.main["id"])] if self.main else [])


def group_tasks(tasks: Iterable[JSON]) -> dict[str, PodTasks]:
    """Tasks by pod UID; tasks whose displayName is not vkgate's are ignored."""
    out: dict[str, PodTasks] = {}
    for task in tasks:
        name = parse_display_name(str(task.get("displayName", "")))
        if name is None:
            continue
        group = out.setdefault(name.uid, PodTasks(ref=PodRef(name.namespace, name.name, name.uid)))
        if name.role == "init":
            group.inits[name.index] = (name, task)
        else:
            group.main, group.main_name = task, name
    return out


def _exec(task: JSON) -> JSON:
    info: JSON = task.get("executionInfo") or {}
    return info


def _failure(task: JSON) -> JSON:
    info: JSON = _exec(task).get("failureInfo") or {}
    return info


def _last_exit(task: JSON, name: str, cid: str, *, running: bool) -> ContainerState | None:
    """The previous attempt.  While the task runs again, startTime/endTime describe the new
    attempt, so only the exit code and the retry time are known."""
    ei = _exec(task)
    if ei.get("exitCode") is None:
        return None
    code = int(ei["exitCode"])
    return ContainerState(
        name=name,
        state="terminated",
        exit_code=code,
        reason="Completed" if code == 0 else "Error",
        started_at=None if running else parse_time(ei.get("startTime")),
        finished_at=parse_time(ei.get("lastRetryTime") if running else ei.get("endTime")),
        container_id=cid,
    )


def container_state(task: JSON, name: str, *, job_id: str) -> ContainerState:
    """One task as a Kubernetes container state."""
    state = str(task.get("state", "")).lower()
    ei = _exec(task)
    retries = int(ei.get("retryCount") or 0)
    cid = f"batch://{job_id}/{task.get('id', '')}"
    if state == "active":
        if retries:
            return ContainerState(
                name=name,
                state="waiting",
                reason="CrashLoopBackOff",
                message=f"Azure Batch retries the task (retry {retries})",
                restart_count=retries,
                container_id=cid,
                last_terminated=_last_exit(task, name, cid, running=False),
            )
        return ContainerState(
            name=name,
            state="waiting",
            reason="Queued",
            message=f"queued in Azure Batch job {job_id}, waiting for a free task slot",
        )
    if state == "preparing":
        return ContainerState(
            name=name,
            state="waiting",
            reason="ContainerCreating",
            message="Azure Batch is preparing the compute node",
            container_id=cid,
        )
    if state == "running":
        return ContainerState(
            name=name,
            state="running",
            started_at=parse_time(ei.get("startTime")),
            ready=True,
            restart_count=retries,
            container_id=cid,
            last_terminated=_last_exit(task, name, cid, running=True) if retries else None,
        )
    if state == "completed":
        return _completed(task, name, cid, retries)
    return ContainerState(
        name=name,
        state="waiting",
        reason="ContainerCreating",
        message=f"unknown Azure Batch task state {state!r}",
        container_id=cid,
    )


def _completed(task: JSON, name: str, cid: str, retries: int) -> ContainerState:
    ei = _exec(task)
    fi = _failure(task)
    result = str(ei.get("result", "")).lower()
    exit_code = ei.get("exitCode")
    started = parse_time(ei.get("startTime"))
    finished = parse_time(ei.get("endTime")) or parse_time(task.get("stateTransitionTime"))
    code = str(fi.get("code", ""))
    message = str(fi.get("message", ""))
    container_error = str((ei.get("containerInfo") or {}).get("error", "") or "")
    success = result == "success" or (not result and exit_code == 0 and not fi)
    if success:
        return ContainerState(
            name=name,
            state="terminated",
            exit_code=int(exit_code or 0),
            reason="Completed",
            started_at=started,
            finished_at=finished,
            restart_count=retries,
            container_id=cid,
        )
    if code.lower() in ("taskended", "taskterminated"):  # terminate_task (az batch task stop)
        return ContainerState(
            name=name,
            state="terminated",
            exit_code=int(exit_code) if exit_code is not None else 137,
            reason="Terminated",
            message=message or "the task was terminated",
            started_at=started,
            finished_at=finished,
            restart_count=retries,
            container_id=cid,
        )
    if exit_code is not None:
        reason = "DeadlineExceeded" if "wallclock" in code.lower() else "Error"
        return ContainerState(
            name=name,
            state="terminated",
            exit_code=int(exit_code),
            reason=reason,
            message=message or container_error,
            started_at=started,
            finished_at=finished,
            restart_count=retries,
            container_id=cid,
        )
    image = code.lower() in IMAGE_CODES or "image" in code.lower()
    parts: list[str] = []
    for text in (
        message,
        container_error,
        *(str(d.get("value", "")) for d in fi.get("details") or [] if isinstance(d, dict)),
    ):
        if not text or any(text in p for p in parts):
            continue
        parts = [p for p in parts if p not in text] + [text]
    detail = "; ".join(parts) or "the task could not be started"
    return ContainerState(
        name=name,
        state="terminated",
        exit_code=1,
        reason="ErrImagePull" if image else "ContainerCannotRun",
        message=f"{code}: {detail}" if code else detail,
        started_at=started,
        finished_at=finished,
        restart_count=retries,
        container_id=cid,
    )


def _is_failed(task: JSON) -> bool:
    if str(task.get("state", "")).lower() != "completed":
        return False
    return container_state(task, "x", job_id="").reason != "Completed"


def workload_state(
    group: PodTasks, *, job_id: str, node_name: str, ip_of: Callable[[str], str]
) -> WorkloadState:
    """The pod-level view of one pod's tasks."""
    inits = [(n, t) for _, (n, t) in sorted(group.inits.items())]
    init_states = tuple(container_state(t, n.container, job_id=job_id) for n, t in inits)
    inits_done = all(s.state == "terminated" and s.exit_code == 0 for s in init_states)
    init_failed = any(_is_failed(t) for _, t in inits)

    main = group.main
    containers: tuple[ContainerState, ...] = ()
    if main is not None and group.main_name is not None:
        cs = container_state(main, group.main_name.container, job_id=job_id)
        if (
            not inits_done
            and cs.state == "waiting"
            and cs.reason in ("Queued", "ContainerCreating")
        ):
            cs = ContainerState(
                name=cs.name,
                state="waiting",
                reason="PodInitializing",
                message="waiting for init container tasks (dependsOn)",
            )
        containers = (cs,)

    message = ""
    reason = ""
    if init_failed:
        phase = Phase.FAILED
        failed = next(t for _, t in inits if _is_failed(t))
        fi = _failure(failed)
        message = (
            f"init container task failed: {fi.get('code', '')} {fi.get('message', '')}".strip()
        )
    elif not containers:
        phase = Phase.PENDING
    else:
        cs = containers[0]
        if cs.state == "terminated":
            phase = Phase.SUCCEEDED if cs.reason == "Completed" else Phase.FAILED
            if cs.reason == "DeadlineExceeded":
                reason, message = "DeadlineExceeded", "the task exceeded its maxWallClockTime"
        elif cs.state == "running" or cs.reason == "CrashLoopBackOff":
            phase = Phase.RUNNING
        else:
            phase = Phase.PENDING

    tasks = [t for _, t in inits] + ([main] if main is not None else [])
    placed = any(
        str(t.get("state", "")).lower() in ("preparing", "running", "completed")
        or bool((t.get("nodeInfo") or {}).get("nodeId"))
        for t in tasks
    )
    node_id = ""
    for t in reversed(tasks):
        node_id = str((t.get("nodeInfo") or {}).get("nodeId", "") or "")
        if node_id:
            break
    host_ip = ip_of(node_id) if node_id else ""
    starts = [parse_time(_exec(t).get("startTime")) for t in tasks]
    started = min((s for s in starts if s is not None), default=None)
    if started is None and tasks:
        started = parse_time(tasks[0].get("creationTime"))
    base = (
        str(main["id"])
        if main is not None
        else (str(inits[0][1]["id"]).rsplit("-i", 1)[0] if inits else "")
    )
    return WorkloadState(
        ref=group.ref,
        backend_id=f"batch://{job_id}/{base}",
        phase=phase,
        reason=reason,
        message=message,
        placed=placed,
        pod_ip=host_ip,
        host_ip=host_ip,
        host_network=True,
        started_at=started,
        containers=containers,
        init_containers=init_states,
        node_name=node_name,
    )
