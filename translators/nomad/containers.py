"""The kubelet API on one Nomad task: logs, exec, restart and kill of a pod's container.

Internal to the package: ``NomadTranslator`` holds one ``Containers`` and its ``logs``,
``exec``, ``restart_container`` and ``kill_container`` (the ``LogReader``, ``Executor``,
``Restarter`` and ``Killer`` capabilities) are these methods.  Each finds the pod's current
allocation first (``current_alloc``: the newest of its job's, read from Nomad); the protocols
themselves live in ``logs.py`` (``/v1/client/fs/logs``) and ``exec.py`` (the exec WebSocket).

``kubectl logs --previous`` needs to know where each run of a task starts in its log files,
which Nomad does not record: when a run ends, its log sizes are noted in the background
(``record_run_ends``, ``runs.py``), so a status change is never held up by the extra call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import Any

from translators.base import (
    BackendError,
    BackendNotFound,
    BackendRejected,
    LogOptions,
    PodRef,
)
from translators.nomad.client import NomadClient
from translators.nomad.exec import ClientAgents, NomadExecSession
from translators.nomad.listing import Listing
from translators.nomad.logs import LogReader, LogTarget
from translators.nomad.runs import Runs, last_terminated
from translators.nomad.status import JobView, parse_time
from translators.nomad.views import TERMINAL
from vkgate_core.clock import Clock

log = logging.getLogger(__name__)

JSON = dict[str, Any]


class Containers:
    """Logs, exec, restart and kill on the tasks of this node's jobs."""

    def __init__(self, client: NomadClient, *, clock: Clock, listing: Listing, runs: Runs) -> None:
        self.client = client
        #: Log timestamps and the SIGKILL waits of ``kill``.
        self.clock = clock
        self.listing = listing
        #: Where each run of a task starts in its log files (``runs.py``).
        self.runs = runs
        #: Log sizes being read for runs that just ended (``record_run_ends``).
        self._sizing: dict[tuple[str, str], asyncio.Task[None]] = {}
        #: SIGKILLs waiting for a killed container's grace period (``kill``).
        self._killers: set[asyncio.Task[None]] = set()
        #: NodeID → the client agent's HTTP address, for exec straight to it (``exec.py``).
        self._client_agents = ClientAgents(client, monotonic=clock.monotonic)

    def background(self) -> list[asyncio.Task[None]]:
        """The tasks running in the background (the translator cancels them on close)."""
        return [*self._sizing.values(), *self._killers]

    async def current_alloc(self, ref: PodRef, container: str) -> tuple[JobView, JSON]:
        view = await self.listing.locate(ref)
        if view is None:
            raise BackendNotFound(f"pod {ref.key} has no Nomad job")
        if container not in (*view.containers, *view.init_containers) and view.containers:
            raise BackendNotFound(f'container "{container}" not found in pod {ref.key}')
        await self.listing.read_allocs(view)
        alloc = view.newest()
        if alloc is None:
            raise BackendRejected(
                f'container "{container}" in pod {ref.key} is waiting to start: not placed yet',
                reason="ContainerNotStarted",
            )
        return view, alloc

    async def running_alloc(self, ref: PodRef, container: str, *, to: str) -> tuple[JobView, JSON]:
        """``current_alloc``, refused with ``ContainerNotRunning`` unless the allocation runs
        (what the kubelet answers for exec, restart or kill of a stopped container)."""
        view, alloc = await self.current_alloc(ref, container)
        if alloc.get("ClientStatus") != "running":
            raise BackendRejected(
                f"cannot {to} a container that is not running (pod {ref.key}, "
                f"allocation {alloc.get('ClientStatus')})",
                reason="ContainerNotRunning",
            )
        return view, alloc

    async def record_run_ends(self, views: Sequence[JobView]) -> None:
        """Note where each run that just ended stops in its log files (``runs.py``), in the
        background: a status change is never held up by the extra call.  Not for a stopped
        job (a deleted pod): it runs no more, so no run follows whose ``--previous`` this would
        bound, and at a mass delete the calls were one or two per pod."""
        for view in views:
            if view.stop:
                continue
            for alloc in view.allocs.values():
                for task in self.runs.needs(alloc):
                    key = (str(alloc["ID"]), task)
                    if key in self._sizing:
                        continue
                    ts = (alloc.get("TaskStates") or {})[task]
                    target = LogTarget(key[0], task, view.namespace, view.region)
                    job = asyncio.create_task(self._record_sizes(target, last_terminated(ts)))
                    self._sizing[key] = job
                    job.add_done_callback(partial(self._sized, key))

    def _sized(self, key: tuple[str, str], _task: asyncio.Task[None]) -> None:
        self._sizing.pop(key, None)

    async def _record_sizes(self, target: LogTarget, terminated: int | None) -> None:
        reader = LogReader(self.client, now=self.clock.now)
        try:
            sizes = (
                await reader.log_size(target, "stdout"),
                await reader.log_size(target, "stderr"),
            )
        except BackendError as exc:
            log.debug("nomad: no log sizes for %s/%s: %s", target.alloc_id, target.task, exc)
            if terminated is not None:
                self.runs.unknown.add((target.alloc_id, target.task, terminated))
            return
        if terminated is not None:
            self.runs.record(target.alloc_id, target.task, terminated, sizes)

    async def logs(self, ref: PodRef, container: str, options: LogOptions) -> AsyncIterator[bytes]:
        view, alloc = await self.current_alloc(ref, container)
        alloc_id = str(alloc["ID"])
        ts = (alloc.get("TaskStates") or {}).get(container) or {}
        window = self.runs.window(alloc_id, container, ts, previous=options.previous)
        lower = None if window is None else window.started_at
        if window is None:  # no earlier run in this allocation: the one it replaced
            full = await self.client.get(
                f"/allocation/{alloc_id}", namespace=view.namespace, region=view.region
            )
            previous = (full or {}).get("PreviousAllocation")
            if not previous:
                raise BackendRejected(
                    f'previous terminated container "{container}" in pod "{ref.name}" not found',
                    reason="NoPreviousContainer",
                )
            alloc_id = str(previous)
            before = await self.client.get(
                f"/allocation/{alloc_id}", namespace=view.namespace, region=view.region
            )
            lower = parse_time((before or {}).get("CreateTime"))
        else:
            lower = lower or parse_time(alloc.get("CreateTime"))
        if options.since is not None and (lower is None or options.since > lower):
            raise BackendRejected(
                "the nomad backend cannot honour sinceSeconds/sinceTime (--since/--since-time)"
                f" here: Nomad stores no per-line times, and the lines of this container run"
                f" are only known to be newer than {lower.isoformat() if lower else 'its start'};"
                " omit the flag or pick a time at or before that",
                reason="SinceNotSupported",
            )
        target = LogTarget(alloc_id, container, view.namespace, view.region)
        index = 0

        async def task_dead() -> bool:
            nonlocal index
            try:
                reply = await self.client.blocking_get(
                    f"/allocation/{alloc_id}",
                    index=index,
                    wait=10.0,
                    namespace=view.namespace,
                    region=view.region,
                )
            except BackendNotFound:
                return True
            except BackendError:
                await self.clock.sleep(1.0)
                return False
            index = reply.index
            ts = ((reply.data or {}).get("TaskStates") or {}).get(container) or {}
            return ts.get("State") == "dead" or (reply.data or {}).get("ClientStatus") in TERMINAL

        reader = LogReader(self.client, now=self.clock.now)
        async for chunk in reader.read(
            target,
            options,
            task_dead=task_dead,
            window=window if window and not window.whole and alloc_id == alloc["ID"] else None,
            backlog_time=lower,
        ):
            yield chunk

    async def exec(
        self, ref: PodRef, container: str, command: Sequence[str], *, tty: bool, stdin: bool
    ) -> NomadExecSession:
        view, alloc = await self.running_alloc(ref, container, to="exec in")
        session = await NomadExecSession.open(
            self.client,
            alloc_id=str(alloc["ID"]),
            task=container,
            command=command,
            tty=tty,
            namespace=view.namespace,
            region=view.region,
            node_id=str(alloc.get("NodeID") or ""),
            agents=self._client_agents,
        )
        if not stdin:
            await session.close_stdin()
        return session

    async def restart(self, ref: PodRef, container: str) -> None:
        """``POST /v1/client/allocation/:id/restart`` with the task; Nomad kills the task (its
        kill timeout) and starts it again, counting the restart in the task's ``Restarts``
        (restartCount) without its restart policy's delay."""
        view, alloc = await self.running_alloc(ref, container, to="restart")
        await self.client.call(
            "POST",
            f"/client/allocation/{alloc['ID']}/restart",
            body={"TaskName": container},
            namespace=view.namespace,
            region=view.region,
        )

    async def kill(self, ref: PodRef, container: str, *, grace_seconds: int) -> None:
        """``POST /v1/client/allocation/:id/signal`` SIGTERM to the task, SIGKILL after
        ``grace_seconds`` if it still runs (in the background).  The task's restart policy
        then decides — a ``restartPolicy: Never`` pod's (``Attempts: 0``) keeps it dead."""
        view, alloc = await self.running_alloc(ref, container, to="kill")
        alloc_id, ns, region = str(alloc["ID"]), view.namespace, view.region
        await self.client.call(
            "POST",
            f"/client/allocation/{alloc_id}/signal",
            body={"Task": container, "Signal": "SIGTERM"},
            namespace=ns,
            region=region,
        )

        async def kill_later() -> None:
            await self.clock.sleep(max(0, grace_seconds))
            try:
                await self.client.call(
                    "POST",
                    f"/client/allocation/{alloc_id}/signal",
                    body={"Task": container, "Signal": "SIGKILL"},
                    namespace=ns,
                    region=region,
                )
            except BackendError as exc:  # "Task not running": it ended within the grace
                log.info("nomad: SIGKILL to %s/%s: %s", alloc.get("ID"), container, exc)

        task = asyncio.create_task(kill_later(), name=f"nomad-kill-{ref.key}/{container}")
        self._killers.add(task)
        task.add_done_callback(self._killers.discard)
