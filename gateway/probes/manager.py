"""The prober: keeps one ``Worker`` per probe of each running container instance, and hands
their verdicts to the pod sync — it never writes status (docs/design/pod-sync.md, "The status
manager").

* ``sync(pod, state)`` is called by the pod controller before each sync of the pod, with the
  workload state the backend last reported: workers start for a container seen running (with
  a pod address), stop when it is no longer running, and start over for a new instance of it
  (another container id, start time or restart count).  A container with a readiness probe is
  reported unready there, synchronously, until its probe passes — so the status written by
  that same sync never says Ready before the probe did.
* A readiness verdict goes to ``set_readiness`` (the status manager's
  ``set_container_readiness``); when that changed something, the pod's key is queued and its
  sync writes the status.
* Every failed attempt is a Warning Event ``Unhealthy`` (``Readiness probe failed: <output>``
  on ``spec.containers{name}``), aggregated by the Event recorder as the kubelet's are.
* A container with a startup probe is not ``started`` (``set_started``) — nor ready, when it
  has no readiness probe — until that probe passes.
* A probe the node runs without (``skip``: the fields ``node.ignore_pod_fields`` covers where
  the backend cannot honour them, gateway.pods.resolve.features) gets no worker: the container is as
  if it did not declare it.  Asked once per pod (a pod's probes are immutable).
* A liveness or startup verdict of failure is handed to ``pre_kill`` (the container's preStop
  hook, as the kubelet's ``killContainer`` runs it), then to ``restart`` (None: an Event says
  the container would be restarted, and nothing else happens).
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from gateway.kube.events import EventRecorder
from gateway.probes.handlers import Handlers, Result, Target
from gateway.probes.spec import Kind, ProbeSpec, probes_of
from gateway.probes.worker import Worker
from translators.base import ContainerState, PodRef, WorkloadState
from vkgate_core.clock import Clock
from vkgate_core.kubetypes import Pod

log = logging.getLogger("gateway.probes")

#: (pod, container, why) → kill and restart that container.
Restart = Callable[[Pod, str, str], Awaitable[None]]

_Instance = tuple[str, str, int]


def _instance(cs: ContainerState) -> _Instance:
    started = cs.started_at.isoformat() if cs.started_at else ""
    return (cs.container_id, started, cs.restart_count)


class _Container:
    """The workers of one running container instance."""

    def __init__(self, instance: _Instance) -> None:
        self.instance = instance
        self.workers: dict[Kind, Worker] = {}

    def started(self) -> bool:
        startup = self.workers.get(Kind.STARTUP)
        return startup is None or startup.result is True

    def stop(self) -> None:
        for w in self.workers.values():
            w.stop()


class Prober:
    def __init__(
        self,
        handlers: Handlers,
        events: EventRecorder,
        *,
        clock: Clock,
        set_readiness: Callable[[str, str, bool], bool],
        queue: Callable[[str], None],
        restart: Restart | None = None,
        set_started: Callable[[str, str, bool], bool] = lambda uid, name, started: False,
        skip: Callable[[Pod], Collection[str]] = lambda pod: (),
        pre_kill: Callable[[Pod, str], Awaitable[None]] | None = None,
    ) -> None:
        self.handlers = handlers
        self.events = events
        self.clock = clock
        self.set_readiness = set_readiness
        self.queue = queue
        self.restart = restart
        self.set_started = set_started
        self.skip = skip
        #: uid → the ``spec.containers[c].<kind>Probe`` fields the node runs without.
        self._skipped: dict[str, frozenset[str]] = {}
        #: Runs before a kill (the container's preStop hook, ``gateway.probes.hooks``).
        self.pre_kill = pre_kill
        #: uid → container → its workers.
        self._pods: dict[str, dict[str, _Container]] = {}
        #: uid → the pod's latest object (Events are about it).
        self._objects: dict[str, Pod] = {}

    @property
    def workers(self) -> int:
        return sum(len(c.workers) for p in self._pods.values() for c in p.values())

    def sync(self, pod: Pod, state: WorkloadState | None) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        spec = pod.get("spec") or {}
        containers = [c for c in spec.get("containers") or [] if probes_of(c)]
        if not containers and uid not in self._pods:
            return
        skipped = self._skipped.get(uid)
        if skipped is None:
            skipped = self._skipped[uid] = frozenset(
                f.rsplit(".", 1)[0] for f in self.skip(pod) if ".lifecycle." not in f
            )
        if skipped:
            containers = [c for c in containers if self._probes(c, skipped)]
        self._objects[uid] = pod
        running = {c.name: c for c in (state.containers if state else ()) if c.state == "running"}
        pod_ip = (state.pod_ip if state else "") or str((pod.get("status") or {}).get("podIP", ""))
        mine = self._pods.setdefault(uid, {})
        for c in containers:
            name = str(c.get("name", ""))
            probes = self._probes(c, skipped)
            cs = running.get(name)
            have = mine.get(name)
            if have is not None and (cs is None or _instance(cs) != have.instance or not pod_ip):
                have.stop()
                del mine[name]
                have = None
            if have is None and cs is not None and pod_ip:
                have = self._start(pod, c, cs, pod_ip, probes)
                mine[name] = have
            started = have is not None and have.started()
            if Kind.STARTUP in probes:
                self.set_started(uid, name, started)
            if Kind.READINESS in probes:
                ready = have is not None and have.workers[Kind.READINESS].result is True
                self.set_readiness(uid, name, ready)
            elif Kind.STARTUP in probes:  # no readiness probe: ready once started
                self.set_readiness(uid, name, started)
        for name in set(mine) - {str(c.get("name", "")) for c in containers}:
            mine.pop(name).stop()

    @staticmethod
    def _probes(container: Mapping[str, Any], skipped: frozenset[str]) -> dict[Kind, ProbeSpec]:
        probes = probes_of(container)
        if skipped:
            name = container.get("name", "")
            probes = {
                k: p
                for k, p in probes.items()
                if f"spec.containers[{name}].{k.field}" not in skipped
            }
        return probes

    def forget(self, uid: str) -> None:
        for c in (self._pods.pop(uid, None) or {}).values():
            c.stop()
        self._objects.pop(uid, None)
        self._skipped.pop(uid, None)

    def stop(self) -> None:
        for uid in list(self._pods):
            self.forget(uid)

    def _start(
        self,
        pod: Pod,
        container: Mapping[str, Any],
        cs: ContainerState,
        pod_ip: str,
        probes: Mapping[Kind, Any],
    ) -> _Container:
        meta = pod.get("metadata") or {}
        ref = PodRef(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
        )
        name = str(container.get("name", ""))
        ports = {
            str(p["name"]): int(p["containerPort"])
            for p in container.get("ports") or []
            if p.get("name") and p.get("containerPort")
        }
        target = Target(ref=ref, container=name, pod_ip=pod_ip, ports=ports)
        age = 0.0
        if cs.started_at is not None:
            age = max(0.0, (self.clock.now() - cs.started_at) / _dt.timedelta(seconds=1))
        out = _Container(_instance(cs))
        for kind, spec in probes.items():
            w = Worker(
                spec,
                target,
                run=self.handlers.run,
                clock=self.clock,
                on_result=self._on_result,
                on_failure=self._on_failure,
                delay=max(0.0, spec.initial_delay - age),
                gate=(lambda: True) if kind is Kind.STARTUP else out.started,
            )
            out.workers[kind] = w
        for w in out.workers.values():
            w.start()
        return out

    async def _on_failure(self, w: Worker, res: Result) -> None:
        pod = self._objects.get(w.target.ref.uid)
        if pod is None:
            return
        await self.events.record(
            pod,
            type="Warning",
            reason="Unhealthy",
            message=f"{w.spec.kind.label} probe failed: {res.output}",
            field_path=f"spec.containers{{{w.target.container}}}",
        )

    async def _on_result(self, w: Worker, ok: bool) -> None:
        uid, name = w.target.ref.uid, w.target.container
        key = w.target.ref.key
        match w.spec.kind:
            case Kind.READINESS:
                if self.set_readiness(uid, name, ok):
                    self.queue(key)
            case Kind.STARTUP if ok:
                # readiness and liveness start now (the kubelet triggers readiness at once);
                # without a readiness probe the container is ready once started
                self.set_started(uid, name, True)
                if Kind.READINESS not in self._probes_of(w):
                    self.set_readiness(uid, name, True)
                self.queue(key)
            case Kind.LIVENESS | Kind.STARTUP if not ok:
                await self._failed(w)

    def _probes_of(self, w: Worker) -> dict[Kind, Any]:
        c = (self._pods.get(w.target.ref.uid) or {}).get(w.target.container)
        return dict(c.workers) if c is not None else {}

    async def _failed(self, w: Worker) -> None:
        pod = self._objects.get(w.target.ref.uid)
        if pod is None:
            return
        name = w.target.container
        why = f"Container {name} failed {w.spec.kind} probe"
        if (pod.get("spec") or {}).get("restartPolicy") != "Never":
            why += ", will be restarted"  # the kubelet's wording (shouldRestartOnFailure)
        await self.events.record(
            pod,
            type="Normal",
            reason="Killing",
            message=why,
            field_path=f"spec.containers{{{name}}}",
        )
        if self.pre_kill is not None:
            await self.pre_kill(pod, name)
        if self.restart is not None:
            await self.restart(pod, name, why)
        else:
            log.warning(
                "%s: %s (no restart: the backend cannot restart a container)", w.target.ref.key, why
            )
