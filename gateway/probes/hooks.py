"""Container lifecycle hooks, as the kubelet runs them (``pkg/kubelet/lifecycle/handlers.go``,
``pkg/kubelet/kuberuntime/kuberuntime_container.go``: ``startContainer``, ``killContainer``,
``executePreStopHook``); docs/design/probes.md, "Lifecycle hooks".

* **postStart** runs once per container *instance* (container id, start time, restart
  count), as soon as the backend reports it running.  Until the handler returns, the
  container is reported waiting (``ContainerCreating``) and not ready — the kubelet's sync
  blocks in ``startContainer`` and its status says the same (``set_starting``, an input of
  the status manager).  A failure — or ``POST_START_LIMIT`` without an answer — is a Warning
  Event ``FailedPostStartHook`` with the handler's message, then the kubelet's
  ``killContainer(…, "FailedPostStartHook")``: a ``Killing`` Event, the container's preStop,
  and a restart through the translator's ``Restarter``.
* **preStop** runs when the pod is deleted (``start_pre_stop``: every running container's
  hook at once, bounded by the grace period left; the pod sync waits for ``pre_stop`` to say
  ``done`` before it asks the backend to stop, with what remains) and before a container is
  killed for a failed liveness/startup probe or postStart hook (``run_pre_stop``).  A failure
  is a Warning Event ``FailedPreStopHook``; the stop goes on.

Handlers: ``exec`` through the translator's ``Executor``, ``httpGet`` to the pod's address,
``sleep``; ``tcpSocket`` is accepted by the API server for backward compatibility only and
fails at run time, as it does in the kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from gateway.kube.events import EventRecorder
from gateway.probes.handlers import Handlers, Result, Target
from gateway.probes.hookspec import Hook, PreStop, grace_of, hook_of, pre_stop_containers
from translators.base import ContainerState, PodRef, WorkloadState
from vkgate_core.clock import Clock
from vkgate_core.kubetypes import Pod
from vkgate_core.timeparse import parse_rfc3339

log = logging.getLogger("gateway.probes.hooks")

#: The kubelet puts no bound on a postStart hook (its sync blocks until it returns); vkgate
#: runs it over a backend connection that can hang, so it gives up after this long and treats
#: it as failed (the container is restarted) rather than keep it waiting for ever.
POST_START_LIMIT = 300.0
#: (pod, container, why) → kill and restart that container (the prober's ``Restart``).
Restart = Callable[[Pod, str, str], Awaitable[None]]


_Instance = tuple[str, str, int]


def _instance(cs: ContainerState) -> _Instance:
    started = cs.started_at.isoformat() if cs.started_at else ""
    return (cs.container_id, started, cs.restart_count)


def _ref(pod: Pod) -> PodRef:
    meta = pod.get("metadata") or {}
    return PodRef(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
    )


def _target(pod: Pod, container: Mapping[str, Any], pod_ip: str) -> Target:
    ports = {
        str(p["name"]): int(p["containerPort"])
        for p in container.get("ports") or []
        if p.get("name") and p.get("containerPort")
    }
    return Target(
        ref=_ref(pod), container=str(container.get("name", "")), pod_ip=pod_ip, ports=ports
    )


def _pod_ip(pod: Pod, state: WorkloadState | None) -> str:
    return (state.pod_ip if state else "") or str((pod.get("status") or {}).get("podIP", ""))


def _shown_running(pod: Pod, cs: ContainerState) -> bool:
    """The pod's status already shows container instance ``cs`` running (same restart count,
    same start to the second)."""
    for shown in (pod.get("status") or {}).get("containerStatuses") or []:
        if shown.get("name") != cs.name or cs.started_at is None:
            continue
        at = ((shown.get("state") or {}).get("running") or {}).get("startedAt")
        if not at or int(shown.get("restartCount") or 0) != cs.restart_count:
            return False
        with contextlib.suppress(ValueError):
            return abs((parse_rfc3339(str(at)) - cs.started_at).total_seconds()) < 1
    return False


def _container(pod: Pod, name: str) -> Mapping[str, Any] | None:
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") == name:
            return dict(c)
    return None


class Hooks:
    """Runs the lifecycle hooks of one node's pods (one asyncio task per running hook)."""

    def __init__(
        self,
        handlers: Handlers,
        events: EventRecorder,
        *,
        clock: Clock,
        set_starting: Callable[[str, str, bool], bool],
        queue: Callable[[str], None],
        restart: Restart | None = None,
        post_start_limit: float = POST_START_LIMIT,
        skip: Callable[[Pod], Collection[str]] = lambda pod: (),
    ) -> None:
        """``skip``: the ``spec.containers[c].lifecycle.<hook>`` fields the node runs without
        (``node.ignore_pod_fields`` where the backend cannot run them: gateway.pods.resolve.features),
        asked once per pod (a pod's hooks are immutable)."""
        self.handlers = handlers
        self.events = events
        self.clock = clock
        self.set_starting = set_starting
        self.queue = queue
        self.restart = restart
        self.post_start_limit = post_start_limit
        self.skip = skip
        #: uid → the hook fields the node runs without.
        self._skipped: dict[str, frozenset[str]] = {}
        #: uid → container → (the instance its postStart ran or runs for, the task or None).
        self._post: dict[str, dict[str, tuple[_Instance, asyncio.Task[None] | None]]] = {}
        #: uid → the preStop hooks of the pod's deletion (one task; done: they all returned).
        self._pre: dict[str, asyncio.Task[None]] = {}
        #: uid → the pod's latest object (Events are about it).
        self._objects: dict[str, Pod] = {}

    # -- handlers -------------------------------------------------------------------------

    async def run(self, hook: Hook, target: Target, limit: float) -> Result:
        """One run of ``hook``; a failure's output is the kubelet's message for it."""
        ref = target.ref
        where = f'for Container "{target.container}" in Pod "{ref.name}_{ref.namespace}({ref.uid})"'
        match hook.handler:
            case "exec":
                command = [str(c) for c in hook.action.get("command") or []]
                res = await self.handlers.exec(command, target, limit)
                if res.ok:
                    return res
                return Result(
                    False,
                    f"Exec lifecycle hook ([{' '.join(command)}]) {where} failed - error: "
                    f"{_exec_error(res.output, limit)}, message: {res.output!r}",
                )
            case "httpGet":
                res = await self.handlers.http_get(hook.action, target, limit)
                if res.ok:
                    return res
                path = str(hook.action.get("path") or "")
                return Result(
                    False, f"HTTP lifecycle hook ({path}) {where} failed - error: {res.output}"
                )
            case "sleep":
                seconds = float(hook.action.get("seconds") or 0)
                await self.clock.sleep(max(0.0, min(seconds, limit)))
                return Result(True)
        return Result(False, f"Cannot run handler: invalid handler: {hook.handler} {where}")

    # -- postStart ------------------------------------------------------------------------

    def sync(self, pod: Pod, state: WorkloadState | None) -> None:
        """Start the postStart hook of each newly running container instance; report it
        ``starting`` (waiting, not ready) until it returns.  Called before each pod sync."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        spec = pod.get("spec") or {}
        hooked = {
            str(c.get("name", "")): c
            for c in spec.get("containers") or []
            if hook_of(c, "postStart") is not None
        }
        if not hooked and uid not in self._post:
            return
        skipped = self._skips(pod)
        hooked = {
            n: c
            for n, c in hooked.items()
            if f"spec.containers[{n}].lifecycle.postStart" not in skipped
        }
        self._objects[uid] = pod
        mine = self._post.setdefault(uid, {})
        running = {c.name: c for c in (state.containers if state else ()) if c.state == "running"}
        for name, container in hooked.items():
            cs = running.get(name)
            have = mine.get(name)
            if cs is None:
                continue  # keeps the last instance: it must not run again for the same one
            instance = _instance(cs)
            if have is not None and have[0] == instance:
                continue
            if have is not None and have[1] is not None:
                have[1].cancel()
            if _shown_running(pod, cs):
                # the pod already says this instance runs: its hook passed under an earlier
                # vkgate (a restart, a fail-over), as the kubelet does not run it again either
                mine[name] = (instance, None)
                self.set_starting(uid, name, False)
                continue
            if meta.get("deletionTimestamp"):
                mine[name] = (instance, None)  # the kubelet starts no container of a pod going away
                self.set_starting(uid, name, False)
                continue
            self.set_starting(uid, name, True)
            hook = hook_of(container, "postStart")
            assert hook is not None
            task = asyncio.create_task(
                self._post_start(uid, name, hook, _target(pod, container, _pod_ip(pod, state))),
                name=f"postStart-{meta.get('namespace')}/{meta.get('name')}/{name}",
            )
            mine[name] = (instance, task)

    async def _post_start(self, uid: str, name: str, hook: Hook, target: Target) -> None:
        try:
            res = await self.run(hook, target, self.post_start_limit)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in one hook must not stop the others
            log.exception("postStart of %s/%s failed", target.ref.key, name)
            res = Result(False, f"PostStart handler: {exc}")
        pod = self._objects.get(uid)
        entry = (self._post.get(uid) or {}).get(name)
        if entry is not None:
            self._post[uid][name] = (entry[0], None)
        if res.ok or pod is None:
            if self.set_starting(uid, name, False):
                self.queue(target.ref.key)
            return
        fp = f"spec.containers{{{name}}}"
        await self.events.record(
            pod, type="Warning", reason="FailedPostStartHook", message=res.output, field_path=fp
        )
        if (self._objects.get(uid) or {}).get("metadata", {}).get("deletionTimestamp"):
            return  # the pod is being stopped anyway: no kill, no restart
        # killContainer(pod, id, name, "FailedPostStartHook", …): Killing, preStop, stop; the
        # container stays "starting" (not running, not ready) until its next instance
        await self.events.record(
            pod, type="Normal", reason="Killing", message="FailedPostStartHook", field_path=fp
        )
        await self.run_pre_stop(pod, name, grace_of(pod))
        if self.restart is not None:
            await self.restart(pod, name, f"Container {name} failed its postStart hook")
        else:
            log.warning(
                "%s: postStart of %s failed (the backend cannot restart it)", target.ref.key, name
            )

    # -- preStop --------------------------------------------------------------------------

    def pre_stop(self, uid: str) -> PreStop:
        task = self._pre.get(uid)
        if task is None:
            return PreStop.NONE
        return PreStop.DONE if task.done() else PreStop.RUNNING

    def start_pre_stop(self, pod: Pod, state: WorkloadState | None, grace: float) -> None:
        """The pod is being deleted: run the preStop hook of each running container (at once,
        each bounded by ``grace``); the pod is queued when they are all done."""
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        if uid in self._pre:
            return
        self._objects[uid] = pod
        names = pre_stop_containers(pod, state)
        ip = _pod_ip(pod, state)

        async def all_hooks() -> None:
            await asyncio.gather(
                *(self._pre_stop_one(pod, n, grace, ip) for n in names), return_exceptions=True
            )
            self.queue(_ref(pod).key)

        self._pre[uid] = asyncio.create_task(all_hooks(), name=f"preStop-{_ref(pod).key}")

    async def run_pre_stop(self, pod: Pod, name: str, grace: float) -> float:
        """A container is about to be killed (not a deletion): its preStop hook, bounded by
        ``grace``; returns the seconds it took."""
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        state_ip = str((pod.get("status") or {}).get("podIP", ""))
        self._objects.setdefault(uid, pod)
        return await self._pre_stop_one(pod, name, grace, state_ip)

    def _skips(self, pod: Pod) -> frozenset[str]:
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        found = self._skipped.get(uid)
        if found is None:
            found = self._skipped[uid] = frozenset(self.skip(pod))
        return found

    async def _pre_stop_one(self, pod: Pod, name: str, grace: float, pod_ip: str) -> float:
        container = _container(pod, name)
        if f"spec.containers[{name}].lifecycle.preStop" in self._skips(pod):
            return 0.0  # the node runs this pod without it
        hook = hook_of(container, "preStop") if container is not None else None
        if container is None or hook is None or grace <= 0:
            return 0.0
        start = self.clock.monotonic()
        try:
            res = await self.run(hook, _target(pod, container, pod_ip), grace)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("preStop of %s failed", name)
            res = Result(False, f"PreStop handler: {exc}")
        took = self.clock.monotonic() - start
        if not res.ok:
            await self.events.record(
                pod,
                type="Warning",
                reason="FailedPreStopHook",
                message=res.output,
                field_path=f"spec.containers{{{name}}}",
            )
        return took

    # -- bookkeeping ----------------------------------------------------------------------

    def forget(self, uid: str) -> None:
        for _, task in (self._post.pop(uid, None) or {}).values():
            if task is not None:
                task.cancel()
        pre = self._pre.pop(uid, None)
        if pre is not None:
            pre.cancel()
        self._objects.pop(uid, None)
        self._skipped.pop(uid, None)

    def stop(self) -> None:
        for uid in list({*self._post, *self._pre}):
            self.forget(uid)

    @property
    def running(self) -> int:
        """Hook tasks not finished (tests, metrics)."""
        post = sum(1 for p in self._post.values() for _, t in p.values() if t and not t.done())
        return post + sum(1 for t in self._pre.values() if not t.done())


def _exec_error(output: str, limit: float) -> str:
    if output.startswith("command timed out"):
        return f"command timed out after {limit:g}s"
    if output.startswith("exec ["):
        return output  # the backend could not run it
    return "command terminated with non-zero exit code"
