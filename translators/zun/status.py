"""Zun container / capsule JSON → ``WorkloadState`` (pure functions, golden-tested).

docs/design/zun.md, "Zun to pod status", is the table this module implements.  A few decisions the
table leaves open:

* **Exit codes** come from ``status_detail`` (``Exited(3) 2 mins ago``, ``Restarting (3) …``).  A ``Stopped``
  container whose detail has no parsable code is reported as exit code 1 with reason
  ``Unknown`` and the raw detail as message: a false "Succeeded" would be worse than a visible
  failure (the old provider always reported 0).
* **Image problems** (``Error`` with an image-not-found ``status_reason``) become
  ``waiting{ErrImagePull}`` with the reason as message, and the pod phase ``Failed``: Zun
  does not retry a pull by itself.
* **Restarts** are not reported by Zun; the translator counts the ``Restarting`` transitions
  and ``started_at`` changes it observes (``RestartTracker``) and passes the count in.
  ``Restarting`` maps to ``waiting{CrashLoopBackOff}`` with the last exit code in
  ``last_terminated``.
* **startedAt**: Zun's API does not return ``started_at`` (its container view,
  ``containers_view._basic_keys``, leaves it out; see docs/backends/zun.md), so the stable
  ``created_at`` stands in when it is absent.  For the same reason restarts are, against a real
  Zun, counted from ``Restarting`` transitions only.
* **hostIP**: Zun's ``host`` is an admin-only *hostname*; it is used only when it is an IP
  address, else left empty (the gateway then reports the node's InternalIP).
* **podIP**: the first IPv4 address of ``addresses`` (the old provider took the last).  It is
  the container's (capsule's) own Neutron port, in a network namespace of its own: never
  ``host_network``, so ``kubectl port-forward`` reaches any of its ports, as a kubelet's does.
* Capsule containers are matched to pod container names **by index** (Zun renames them); the
  names come from the capsule's annotations (≥1.38) or labels.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from translators.base import (
    OWNER_KEY,
    OWNER_VALUE,
    ContainerState,
    Phase,
    PodRef,
    WorkloadState,
)
from translators.zun.spec import (
    LABEL_CONTAINERS,
    LABEL_INIT,
    LABEL_NAME,
    LABEL_NAMESPACE,
    LABEL_NODE,
    LABEL_SIDECARS,
    LABEL_UID,
)
from vkgate_core import timeparse

_EXITED = re.compile(r"(?:Exited|Restarting)\s*\(\s*(-?\d+)\s*\)", re.IGNORECASE)
_IMAGE_PROBLEM = re.compile(
    r"image\b.*\b(not found|could not be found|not exist|does not exist)"
    r"|pull access denied|manifest (for .* )?unknown|ImageNotFound|repository does not exist",
    re.IGNORECASE,
)
_TASK_MESSAGES = {
    "image_pulling": "pulling image",
    "container_creating": "creating container",
    "container_starting": "starting container",
    "network_attaching": "attaching network",
}

PENDING_STATUSES = frozenset({"Creating", "Created"})
RUNNING_STATUSES = frozenset({"Running", "Paused", "Restarting", "Rebuilding"})
FAILED_STATUSES = frozenset({"Error", "Dead"})
GONE_STATUSES = frozenset({"Deleting", "Deleted"})


def parse_time(value: Any) -> _dt.datetime | None:
    """Zun timestamps: ``2018-01-12 09:37:25+00:00``, ``2019-05-18 21:02:12`` (UTC), ISO."""
    t = timeparse.parse_time(value) if isinstance(value, str) else None
    return t.replace(microsecond=0) if t is not None else None


def exit_code(status_detail: Any) -> int | None:
    m = _EXITED.search(str(status_detail or ""))
    return int(m.group(1)) if m else None


def is_image_problem(reason: Any) -> bool:
    return bool(_IMAGE_PROBLEM.search(str(reason or "")))


def pod_ip(addresses: Any) -> str:
    """The first IPv4 address (any network), else the first address at all."""
    first_any = ""
    if not isinstance(addresses, Mapping):
        return ""
    for entries in addresses.values():
        for entry in entries or []:
            addr = str((entry or {}).get("addr") or "")
            if not addr:
                continue
            first_any = first_any or addr
            version = (entry or {}).get("version")
            if version == 4 or (version is None and "." in addr):
                return addr
    return first_any


def host_ip(host: Any) -> str:
    try:
        return str(ipaddress.ip_address(str(host or "")))
    except ValueError:
        return ""


def ref_from_labels(labels: Any) -> PodRef | None:
    if not isinstance(labels, Mapping):
        return None
    ns, name, uid = labels.get(LABEL_NAMESPACE), labels.get(LABEL_NAME), labels.get(LABEL_UID)
    if not (ns and name and uid):
        return None
    return PodRef(namespace=str(ns), name=str(name), uid=str(uid))


def owned_by(labels: Any, node_name: str) -> bool:
    """vkgate's ownership marker and this node: the list filter (never touch others')."""
    return (
        isinstance(labels, Mapping)
        and labels.get(OWNER_KEY) == OWNER_VALUE
        and labels.get(LABEL_NODE) == node_name
        and ref_from_labels(labels) is not None
    )


# --------------------------------------------------------------------------- containers


def container_state(
    c: Mapping[str, Any],
    *,
    name: str,
    restart_count: int = 0,
    previous: ContainerState | None = None,
) -> ContainerState:
    """One Zun container → ``ContainerState`` (docs/design/zun.md, "Zun to pod status")."""
    status = str(c.get("status") or "Unknown")
    detail = str(c.get("status_detail") or "").strip()
    reason_text = str(c.get("status_reason") or "").strip()
    started = parse_time(c.get("started_at")) or parse_time(c.get("created_at"))
    updated = parse_time(c.get("updated_at"))
    code = exit_code(detail)
    base = ContainerState(
        name=name,
        restart_count=restart_count,
        image=str(c.get("image") or ""),
        container_id=f"zun://{c.get('uuid')}" if c.get("uuid") else "",
    )
    if status in PENDING_STATUSES:
        task = str(c.get("task_state") or "")
        return replace(
            base,
            state="waiting",
            reason="ContainerCreating",
            message=_TASK_MESSAGES.get(task, task.replace("_", " ")),
        )
    if status == "Running":
        return replace(base, state="running", started_at=started, ready=True)
    if status == "Paused":
        return replace(base, state="running", started_at=started, ready=False)
    if status in {"Restarting", "Rebuilding"}:
        last = None
        if code is not None:
            last = ContainerState(
                name=name,
                state="terminated",
                exit_code=code,
                reason="Completed" if code == 0 else "Error",
                started_at=started,
                finished_at=updated,
                container_id=base.container_id,
            )
        message = "back-off restarting failed container"
        if code is not None:
            message += f" (last exit code {code})"
        return replace(
            base,
            state="waiting",
            reason="CrashLoopBackOff",
            message=message,
            last_terminated=last,
        )
    if status == "Stopped":
        if code is None:
            return replace(
                base,
                state="terminated",
                exit_code=1,
                reason="Unknown",
                message=f"Zun reported no exit code (status_detail: {detail!r})",
                started_at=started,
                finished_at=updated,
            )
        return replace(
            base,
            state="terminated",
            exit_code=code,
            reason="Completed" if code == 0 else "Error",
            started_at=started,
            finished_at=updated,
        )
    if status in FAILED_STATUSES:
        if is_image_problem(reason_text):
            return replace(base, state="waiting", reason="ErrImagePull", message=reason_text)
        return replace(
            base,
            state="terminated",
            exit_code=code if code is not None else 1,
            reason="Error",
            message=reason_text or detail,
            started_at=started,
            finished_at=updated,
        )
    if status in GONE_STATUSES:
        return replace(
            base,
            state="terminated",
            exit_code=code if code is not None else 137,
            reason="Terminated",
            message=reason_text,
            started_at=started,
            finished_at=updated,
        )
    # Unknown (or a status this code does not know): keep what was last seen.
    if previous is not None:
        return replace(previous, restart_count=max(previous.restart_count, restart_count))
    return replace(base, state="waiting", reason="Unknown", message=f"Zun status {status}")


def _container_phase(status: str, state: ContainerState) -> Phase:
    if status in PENDING_STATUSES:
        return Phase.PENDING
    if status in RUNNING_STATUSES:
        return Phase.RUNNING
    if status in FAILED_STATUSES:
        return Phase.FAILED
    if status == "Stopped" or status in GONE_STATUSES:
        return Phase.SUCCEEDED if state.exit_code == 0 else Phase.FAILED
    return Phase.UNKNOWN


def _pod_reason(status: str, c: Mapping[str, Any], state: ContainerState) -> tuple[str, str]:
    if status in FAILED_STATUSES:
        reason = "ErrImagePull" if state.reason == "ErrImagePull" else "ProviderFailed"
        return reason, str(c.get("status_reason") or c.get("status_detail") or "")
    return "", ""


def _placed(obj: Mapping[str, Any]) -> bool:
    return str(obj.get("status") or "") != "Creating" or bool(
        obj.get("host") or obj.get("addresses")
    )


def container_workload(
    c: Mapping[str, Any],
    *,
    restart_count: int = 0,
    previous: WorkloadState | None = None,
) -> WorkloadState | None:
    """A standalone Zun container → ``WorkloadState`` (None when it has no vkgate labels)."""
    labels = c.get("labels") or {}
    ref = ref_from_labels(labels)
    if ref is None:
        return None
    status = str(c.get("status") or "Unknown")
    prev_c = previous.containers[0] if previous and previous.containers else None
    name = prev_c.name if prev_c else ref.name
    names = str(labels.get(LABEL_CONTAINERS) or "")
    if names:
        name = names.split(",", maxsplit=1)[0]
    state = container_state(c, name=name, restart_count=restart_count, previous=prev_c)
    phase = _container_phase(status, state)
    if phase is Phase.UNKNOWN and previous is not None and status != "Unknown":
        phase = previous.phase
    reason, message = _pod_reason(status, c, state)
    return WorkloadState(
        ref=ref,
        backend_id=f"container/{c.get('uuid')}",
        phase=phase,
        reason=reason,
        message=message,
        placed=_placed(c),
        pod_ip=pod_ip(c.get("addresses")),
        host_ip=host_ip(c.get("host")),
        host_network=False,  # its own address (module docstring, "podIP")
        started_at=parse_time(c.get("created_at")),
        containers=(state,),
        node_name=str(labels.get(LABEL_NODE) or ""),
    )


# --------------------------------------------------------------------------- capsules


@dataclass(frozen=True)
class CapsuleNames:
    """Pod container names of a capsule, in Zun's order."""

    containers: tuple[str, ...] = ()
    sidecars: tuple[str, ...] = ()
    init: tuple[str, ...] = ()
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, capsule: Mapping[str, Any]) -> CapsuleNames:
        meta: dict[str, Any] = {}
        for source in (capsule.get("labels"), capsule.get("annotations")):
            if isinstance(source, Mapping):
                meta.update(source)

        def split(key: str) -> tuple[str, ...]:
            return tuple(n for n in str(meta.get(key) or "").split(",") if n)

        return cls(split(LABEL_CONTAINERS), split(LABEL_SIDECARS), split(LABEL_INIT))


def _named(items: Sequence[Mapping[str, Any]], names: Sequence[str], fallback: str) -> list[str]:
    return [names[i] if i < len(names) else f"{fallback}-{i}" for i in range(len(items))]


def capsule_workload(
    cap: Mapping[str, Any],
    *,
    restart_counts: Mapping[str, int] | None = None,
    previous: WorkloadState | None = None,
) -> WorkloadState | None:
    """A Zun capsule → ``WorkloadState``; its containers are mapped to pod names by index."""
    labels = cap.get("labels") or {}
    ref = ref_from_labels(labels)
    if ref is None:
        return None
    counts = restart_counts or {}
    names = CapsuleNames.of(cap)
    raw_main = [c for c in cap.get("containers") or [] if isinstance(c, Mapping)]
    raw_init = [c for c in cap.get("init_containers") or [] if isinstance(c, Mapping)]
    main_names = _named(raw_main, [*names.containers, *names.sidecars], "container")
    init_names = _named(raw_init, names.init, "init")
    prev = {
        s.name: s
        for s in (
            *(previous.containers if previous else ()),
            *(previous.init_containers if previous else ()),
        )
    }

    def state(c: Mapping[str, Any], n: str) -> ContainerState:
        return container_state(
            c, name=n, restart_count=counts.get(str(c.get("uuid")), 0), previous=prev.get(n)
        )

    inits = [state(c, n) for c, n in zip(raw_init, init_names, strict=True)]
    mains = [state(c, n) for c, n in zip(raw_main, main_names, strict=True)]
    sidecar_set = set(names.sidecars)
    init_states = tuple(inits) + tuple(s for s in mains if s.name in sidecar_set)
    main_states = tuple(s for s in mains if s.name not in sidecar_set)

    status = str(cap.get("status") or "Unknown")
    init_done = all(s.state == "terminated" and s.exit_code == 0 for s in inits)
    init_failed = any(
        (s.state == "terminated" and s.exit_code != 0) or s.reason == "ErrImagePull" for s in inits
    )
    if not init_done and not init_failed:
        main_states = tuple(
            replace(s, reason="PodInitializing", message="")
            if s.state == "waiting" and s.reason == "ContainerCreating"
            else s
            for s in main_states
        )
    reason = message = ""
    if status in FAILED_STATUSES or init_failed:
        phase = Phase.FAILED
        image = next((s for s in (*inits, *mains) if s.reason == "ErrImagePull"), None)
        reason = "ErrImagePull" if image else "ProviderFailed"
        failed_init = next((s for s in inits if s.state == "terminated" and s.exit_code != 0), None)
        fallback = (
            f"init container {failed_init.name} exited with code {failed_init.exit_code}"
            if failed_init
            else ""
        )
        message = str(cap.get("status_reason") or (image.message if image else "") or fallback)
    elif status in GONE_STATUSES or (
        main_states and all(s.state == "terminated" for s in main_states)
    ):
        terminated = [s for s in main_states if s.state == "terminated"]
        ok = terminated and all(s.exit_code == 0 for s in terminated)
        phase = Phase.SUCCEEDED if ok and len(terminated) == len(main_states) else Phase.FAILED
    elif any(s.state == "running" for s in main_states) or any(
        s.reason == "CrashLoopBackOff" for s in main_states
    ):
        phase = Phase.RUNNING
    elif status == "Unknown":
        phase = previous.phase if previous else Phase.UNKNOWN
    else:
        phase = Phase.PENDING
    if any(s.reason == "ErrImagePull" for s in main_states) and phase is not Phase.FAILED:
        phase = Phase.FAILED
        reason = "ErrImagePull"
        message = next(s.message for s in main_states if s.reason == "ErrImagePull")
    return WorkloadState(
        ref=ref,
        backend_id=f"capsule/{cap.get('uuid')}",
        phase=phase,
        reason=reason,
        message=message,
        placed=_placed(cap),
        pod_ip=pod_ip(cap.get("addresses")),
        host_ip=host_ip(cap.get("host")),
        host_network=False,  # its own address (module docstring, "podIP")
        started_at=parse_time(cap.get("created_at")),
        containers=main_states,
        init_containers=init_states,
        node_name=str(labels.get(LABEL_NODE) or ""),
    )


# --------------------------------------------------------------------------- restarts


@dataclass
class _Seen:
    status: str
    started_at: str
    count: int = 0


class RestartTracker:
    """Counts restarts Zun does not report: entries into ``Restarting`` and new
    ``started_at`` values of a running container.  Per translator instance (lost on restart)."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}

    def observe(self, c: Mapping[str, Any]) -> int:
        uuid = str(c.get("uuid") or "")
        status = str(c.get("status") or "")
        started = str(c.get("started_at") or "")
        seen = self._seen.get(uuid)
        if seen is None:
            self._seen[uuid] = _Seen(status, started)
            return 0
        if (status == "Restarting" and seen.status != "Restarting") or (
            status == "Running"
            and seen.status == "Running"
            and started
            and seen.started_at
            and started != seen.started_at
        ):
            seen.count += 1
        seen.status = status
        if started:
            seen.started_at = started
        return seen.count

    def forget(self, keep: set[str]) -> None:
        for uuid in list(self._seen):
            if uuid not in keep:
                del self._seen[uuid]
