"""The status manager: the one writer of PodStatus.

Like the kubelet's status manager (``pkg/kubelet/status/status_manager.go``), it alone writes
pod status; everything else hands it *inputs* (docs/design/pod-sync.md, "The status manager"):

* ``set_status(pod, source)`` — what a sync decided (a ``plan.StatusSource``: the workload's
  state, "not created", "rejected", …);
* ``workload_recreated(pod)`` — the backend lost a workload that runs again: restart counts
  carry over;
* ``set_container_readiness(uid, container, ready)`` — a container's readiness as a probe sees
  it (a container a probe calls unready is unready whatever the backend says);
* ``set_container_started(uid, container, started)`` — a container whose startup probe has
  not passed is not ``started`` (nor ready), whatever the backend says.

The status is rendered from the latest of these at write time (``gateway.pods.status.rules`` holds
the rules), diffed against what the API server has — or against our own last write while its
watch echo may still be on its way (``ECHO_WINDOW``) — and written as a strategic-merge patch
only when it changed, with the Events a kubelet emits for the transition (Started, BackOff,
Failed).  The latest status wins: the first status of a workload that has not started when its
create returns is held ``FIRST_STATUS_DELAY``, so a workload that starts at once is written
once, as Running (docs/design/kubelet-contract.md, "Status writes").

Writes happen in the pod's sync (one worker per pod), so two writes of one pod never race.

Internal to ``gateway.pods.status``, which exports its public names.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gateway.kube.client import KubeClient
from gateway.kube.errors import Conflict, Invalid, NotFound
from gateway.kube.events import EventRecorder
from gateway.pods.memory import uid_of
from gateway.pods.plan import (
    Deleted,
    DeleteFailed,
    Ended,
    FromWorkload,
    NotCreated,
    Rejected,
    StatusSource,
)
from gateway.pods.status import ephemeral
from gateway.pods.status import rules as st
from translators.base import Phase, WorkloadState
from vkgate_core.clock import Clock
from vkgate_core.kubetypes import Pod, as_pod

log = logging.getLogger("gateway.pods.status.manager")

#: How long our own status write shadows the (possibly lagging) cached pod.
ECHO_WINDOW = 15.0
#: How long a freshly created workload that has not started yet waits for its first status write.
FIRST_STATUS_DELAY = 0.5


class Write(enum.Enum):
    """What ``set_status`` did."""

    WRITTEN = "written"
    #: Nothing changed: no write.
    UNCHANGED = "unchanged"
    #: The pod is gone (or replaced under its name): nothing to write to.
    GONE = "gone"
    #: Held back: the latest status wins (``FIRST_STATUS_DELAY``); set it again later.
    HELD = "held"
    #: Someone else changed the pod meanwhile: decide again from its newer version.
    CONFLICT = "conflict"
    #: The API server refused the status (a Warning Event says why); try again later.
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class _Written:
    rv: str
    status: dict[str, Any]
    at: float


class EchoMemory:
    """Our last status write per pod uid, for ``ECHO_WINDOW`` seconds: the base of the next
    diff while the cache may not have seen it, and how the watch echo of it is recognized."""

    def __init__(self, window: float = ECHO_WINDOW) -> None:
        self.window = window
        self._written: dict[str, _Written] = {}

    def remember(self, uid: str, rv: str, status: dict[str, Any], *, at: float) -> None:
        """Our write of ``uid`` (resourceVersion ``rv``): entries past the window are dropped.

        An entry is only read within the window; an echo that arrived before our write's
        answer never matches, so without this every pod's last status stayed here.  Entries
        are in write order (re-inserted on each write), so the old ones are at the front."""
        written = self._written
        written.pop(uid, None)
        while written:
            first = next(iter(written))
            if at - written[first].at < self.window:
                break
            del written[first]
        written[uid] = _Written(rv, status, at)

    def base(self, uid: str, now: float) -> dict[str, Any] | None:
        """Our last write of ``uid`` if it is within the window."""
        w = self._written.get(uid)
        return w.status if w is not None and now - w.at < self.window else None

    def is_echo(self, uid: str, rv: str) -> bool:
        """Whether ``rv`` is our own write of ``uid`` (consumed: an echo is seen once)."""
        w = self._written.get(uid)
        if w is not None and w.rv == rv:
            del self._written[uid]
            return True
        return False

    def forget(self, uid: str) -> None:
        self._written.pop(uid, None)

    def uids(self) -> list[str]:
        """The pods remembered, oldest write first."""
        return list(self._written)

    def __len__(self) -> int:
        return len(self._written)


class StatusManager:
    """Owns every PodStatus write of one node: its inputs, its echo memory and its counters."""

    def __init__(
        self,
        kube: KubeClient,
        events: EventRecorder,
        *,
        clock: Clock,
        backend: str,
        host_ip: Callable[[], str] = lambda: "127.0.0.1",
        ephemeral_containers: bool = False,
    ) -> None:
        self.kube = kube
        self.events = events
        self.clock = clock
        self.backend = backend
        self.host_ip = host_ip
        #: The backend runs ephemeral containers (else their statuses say why not:
        #: gateway.pods.status.ephemeral).
        self.ephemeral_containers = ephemeral_containers
        self.echo = EchoMemory()
        #: uid → container → its runs before the workload was re-created (restartCount base).
        self._restart_base: dict[str, dict[str, int]] = {}
        #: uid → container → readiness as a probe sees it.
        self._readiness: dict[str, dict[str, bool]] = {}
        #: uid → container → started as its startup probe sees it.
        self._started: dict[str, dict[str, bool]] = {}
        #: uid → containers whose postStart hook has not returned (gateway.probes.hooks).
        self._starting: dict[str, set[str]] = {}
        #: status writes per pod key (the happy path should need <= 3).
        self.writes: Counter[str] = Counter()
        self.stats: Counter[str] = Counter()

    # -- inputs ----------------------------------------------------------------------------

    async def set_status(self, pod: Pod, source: StatusSource, *, first: bool = False) -> Write:
        """Make the pod's status the one ``source`` describes (with the other inputs); writes
        when it differs from what the API server has."""
        if first and isinstance(source, FromWorkload) and not _started(source.state):
            return Write.HELD
        desired = self.render(pod, source)
        if desired is None:
            return Write.UNCHANGED
        return await self._write(pod, desired)

    def workload_recreated(self, pod: Pod) -> None:
        """The pod's workload is created again: each container's restartCount goes on from one
        more than the pod shows now."""
        self._restart_base[uid_of(pod)] = {n: c + 1 for n, c in st.restart_counts(pod).items()}

    def set_container_readiness(self, uid: str, container: str, ready: bool) -> bool:
        """A probe's verdict on ``container`` of pod ``uid``; True when it changed (then the
        caller queues the pod, whose sync writes the status)."""
        current = self._readiness.setdefault(uid, {})
        if current.get(container) == ready:
            return False
        current[container] = ready
        return True

    def set_container_started(self, uid: str, container: str, started: bool) -> bool:
        """A startup probe's verdict on ``container`` of pod ``uid``; True when it changed."""
        current = self._started.setdefault(uid, {})
        if current.get(container) == started:
            return False
        current[container] = started
        return True

    def set_container_starting(self, uid: str, container: str, starting: bool) -> bool:
        """``container`` of pod ``uid`` runs but its postStart hook has not returned: it is
        reported waiting (``ContainerCreating``) and not ready, as the kubelet whose sync
        blocks on the hook reports it.  True when it changed."""
        current = self._starting.setdefault(uid, set())
        if (container in current) == starting:
            return False
        if starting:
            current.add(container)
        else:
            current.discard(container)
        return True

    def is_own_echo(self, pod: Pod) -> bool:
        """Whether this watch event is the echo of our own status write (nothing new)."""
        rv = str((pod.get("metadata") or {}).get("resourceVersion", ""))
        return self.echo.is_echo(uid_of(pod), rv)

    def forget(self, key: str, uid: str) -> None:
        """The pod is gone from the API and its workload deleted."""
        self.echo.forget(uid)
        self._restart_base.pop(uid, None)
        self._readiness.pop(uid, None)
        self._started.pop(uid, None)
        self._starting.pop(uid, None)
        self.writes.pop(key, None)

    # -- rendering ---------------------------------------------------------------------------

    def render(self, pod: Pod, source: StatusSource) -> dict[str, Any] | None:
        """The status ``source`` describes for ``pod`` now; None: nothing to write."""
        now, host_ip, backend = self.clock.now(), self.host_ip(), self.backend
        match source:
            case FromWorkload(state=state):
                desired = st.from_workload(
                    pod, self._with_readiness(state), now=now, host_ip=host_ip, backend=backend
                )
                desired = ephemeral.with_statuses(
                    desired, pod, supported=self.ephemeral_containers, backend=backend, now=now
                )
                desired = self._with_started(desired, state.ref.uid)
                return st.carry_restarts(desired, pod, self._restart_base.get(uid_of(pod), {}))
            case NotCreated(reason=reason, message=message, waiting=waiting):
                return st.pending(
                    pod, now=now, host_ip=host_ip, reason=reason, message=message, waiting=waiting
                )
            case Rejected(reason=reason, message=message):
                return st.rejected(pod, now=now, host_ip=host_ip, reason=reason, message=message)
            case Ended(reason=reason, message=message):
                return st.lost(
                    pod, now=now, host_ip=host_ip, backend=backend, reason=reason, message=message
                )
            case Deleted(state=state):
                return st.deleted(pod, state, now=now, host_ip=host_ip, backend=backend)
            case DeleteFailed(message=message):
                if st.is_terminal(pod):
                    return None  # a final status stays final
                base = self._base(pod)
                return {**base, "reason": "ProviderDeleteFailed", "message": message}
        raise AssertionError(source)  # pragma: no cover

    def _with_started(self, desired: dict[str, Any], uid: str) -> dict[str, Any]:
        """A running container whose startup probe has not passed: ``started`` false."""
        waiting = {n for n, ok in (self._started.get(uid) or {}).items() if not ok}
        statuses = desired.get("containerStatuses")
        if not waiting or not statuses:
            return desired
        return {
            **desired,
            "containerStatuses": [
                {**s, "started": False} if s.get("name") in waiting and s.get("started") else s
                for s in statuses
            ],
        }

    def _with_readiness(self, state: WorkloadState) -> WorkloadState:
        starting = self._starting.get(state.ref.uid)
        if starting:
            state = replace(
                state,
                containers=tuple(
                    replace(
                        c,
                        state="waiting",
                        reason="ContainerCreating",
                        message="",
                        started_at=None,
                        ready=False,
                    )
                    if c.name in starting and c.state == "running"
                    else c
                    for c in state.containers
                ),
            )
        probed = self._readiness.get(state.ref.uid)
        if not probed:
            return state
        return replace(
            state,
            containers=tuple(
                replace(c, ready=c.ready and probed.get(c.name, True)) for c in state.containers
            ),
            init_containers=tuple(
                replace(c, ready=c.ready and probed.get(c.name, True))
                for c in state.init_containers
            ),
        )

    # -- writing -----------------------------------------------------------------------------

    def _path(self, pod: Pod) -> str:
        meta = pod.get("metadata") or {}
        return f"/api/v1/namespaces/{meta.get('namespace')}/pods/{meta.get('name')}"

    def _base(self, pod: Pod) -> Mapping[str, Any]:
        """What the API server has: the cached status, or our own write while its echo may
        still be on its way."""
        mine = self.echo.base(uid_of(pod), self.clock.monotonic())
        return mine if mine is not None else (pod.get("status") or {})

    async def _write(self, pod: Pod, desired: Mapping[str, Any]) -> Write:
        uid = uid_of(pod)
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        base = self._base(pod)
        patch = st.status_patch(base, desired, uid)
        if patch is None:
            return Write.UNCHANGED
        transitions = st.transition_events(base, desired)
        if meta.get("deletionTimestamp"):
            # containers stopped because the pod is being deleted: "Killing" said it; an exit
            # code from that stop (143, 137) is not a failure to warn about
            transitions = [t for t in transitions if t[1] != "Failed"]
        try:
            resp = await self.kube.patch(f"{self._path(pod)}/status", patch, patch_type="strategic")
        except NotFound:
            return Write.GONE
        except Conflict:
            # UID precondition failed or a write race: re-read and decide again.
            return Write.CONFLICT if await self._exists(pod) else Write.GONE
        except Invalid as exc:
            log.error("status of %s rejected by the API server: %s (patch %s)", key, exc, patch)
            await self.events.record(
                pod,
                type="Warning",
                reason="StatusUpdateFailed",
                message=f"status update rejected: {exc.message}",
            )
            return Write.REJECTED
        self.echo.remember(
            uid,
            str((resp.get("metadata") or {}).get("resourceVersion", "")),
            st.normalize(resp.get("status") or {}),
            at=self.clock.monotonic(),
        )
        self.writes[key] += 1
        self.stats["status_writes"] += 1
        log.info(
            "pod %s status: %s (status write #%d)", key, desired.get("phase"), self.writes[key]
        )
        for etype, reason, message, fp in transitions:
            await self.events.record(pod, type=etype, reason=reason, message=message, field_path=fp)
        return Write.WRITTEN

    async def _exists(self, pod: Pod) -> bool:
        """Whether the pod (this uid) is still in the API server."""
        try:
            fresh = as_pod(await self.kube.get(self._path(pod)))
        except NotFound:
            return False
        return uid_of(fresh) == uid_of(pod)


def _started(state: WorkloadState) -> bool:
    return state.phase != Phase.PENDING or any(c.state == "running" for c in state.containers)
