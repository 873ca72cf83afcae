"""``BatchTranslator``: one virtual node = one Azure Batch job on one pool.

Glue only; each rule lives in its module: settings (``settings``), SDK calls, retries and the
error mapping (``client``), pod → task JSON (``spec`` + ``templates/batch/task.j2``), burst
submission (``submit``), task → ``WorkloadState`` (``status``), capacity and host IPs
(``capacity``), logs (``logs``).

State kept here, per node object (several virtual nodes per process are several objects):

* whether the job is known to exist (created on first use, ``onAllTasksComplete: noaction``);
* the last task list, so the reconcile can be **incremental**: one ``list_tasks`` per call with
  ``$select`` of the status fields and, between periodic full lists, ``$filter=state ne 'completed'
  or stateTransitionTime ge <watermark - 5 min>`` — completed tasks are listed once, not every
  interval.  A non-completed task missing from a filtered answer was deleted and is dropped.

Not implemented on purpose: ``Executor`` (Batch offers no exec into a task; the kubelet API answers
501), ``MetricsSource`` (no per-task usage), ``Notifier`` (no change feed; the gateway's periodic
``list`` is the only source).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from translators.render.engine import Renderer

import asyncio
import contextlib
import datetime as _dt
import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx

from translators.base import (
    JSON,
    OWNER_KEY,
    OWNER_VALUE,
    BackendConflict,
    BackendError,
    BackendNotFound,
    BackendRejected,
    BackendUnavailable,
    Capacity,
    Features,
    LogOptions,
    NodeInfo,
    PodRef,
    ResolvedPod,
    TranslatorContext,
    UnsupportedError,
    WorkloadState,
)
from translators.batch.capacity import NodeCache, capacity_from_pool
from translators.batch.client import BatchApi
from translators.batch.logs import TaskLogReader
from translators.batch.settings import BatchSettings, parse_settings
from translators.batch.spec import TaskBuilder, base_task_id, init_task_id, parse_display_name
from translators.batch.status import group_tasks, parse_time, workload_state
from translators.batch.submit import CollectionSubmitter
from vkgate_core.clock import Clock, SystemClock

log = logging.getLogger(__name__)

WATERMARK_MARGIN = _dt.timedelta(minutes=5)


def _iso(when: _dt.datetime) -> str:
    return when.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class BatchTranslator:
    kind = "batch"
    features = Features(
        volume_kinds=frozenset({"configMap", "secret", "emptyDir", "projected", "downwardAPI"}),
        pod_features=frozenset({"initContainers"}),
        updatable_fields=frozenset({"metadata.labels", "metadata.annotations"}),
        max_containers=1,
    )

    def __init__(
        self,
        ctx: TranslatorContext | None = None,
        *,
        http_client: httpx.AsyncClient | None = None,
        credential: Any = None,
        environ: Mapping[str, str] | None = None,
        **settings: Any,
    ) -> None:
        table: dict[str, Any] = dict(ctx.settings) if ctx else {}
        table.update(settings)
        self.node_name = ctx.node_name if ctx else str(table.pop("node_name", "vkgate"))
        self.settings: BatchSettings = parse_settings(
            table, node_name=self.node_name, environ=os.environ if environ is None else environ
        )
        self.renderer: Renderer
        if ctx is not None and ctx.renderer is not None:
            self.renderer = ctx.renderer
        else:
            from translators.render.engine import Renderer

            self.renderer = Renderer()
        #: Sleeps (retries, submit linger, log polls), deadlines and ``ocp-date`` stamps.
        self.clock: Clock = ctx.clock if ctx is not None else SystemClock()
        self._sleep = self.clock.sleep
        self._mono = self.clock.monotonic
        self._now = self.clock.now
        s = self.settings
        self.job_id = s.job_id
        self.api = BatchApi(
            s, http_client=http_client, credential=credential, sleep=self._sleep, now=self._now
        )
        self.nodes = NodeCache(
            self.api,
            s.pool_id,
            node_ttl=s.node_refresh_seconds,
            pool_ttl=s.capacity_refresh_seconds,
            monotonic=self._mono,
        )
        self.builder = TaskBuilder(s, self.renderer)
        self.submitter = CollectionSubmitter(
            self._send_collection,
            max_tasks=s.max_collection_tasks,
            max_bytes=s.max_collection_bytes,
            linger=s.submit_linger,
            sleep=self._sleep,
        )
        self.log_reader = TaskLogReader(
            self.api, s.job_id, sleep=self._sleep, poll_seconds=s.log_poll_seconds
        )
        self._job_ready = False
        self._job_deps = True
        self._job_lock = asyncio.Lock()
        self._tasks: dict[str, JSON] = {}
        self._watermark: _dt.datetime | None = None
        self._last_full = -1e18
        self._images: dict[str, str] = {}

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self._ensure_job()
            await self.nodes.refresh_pool()
        except BackendError as exc:  # ping reports it; creates retry ensure_job
            log.warning("Azure Batch not ready at start: %s", exc)

    async def close(self) -> None:
        await self.api.close()

    async def ping(self) -> None:
        pool = await self.nodes.refresh_pool(force=True)
        if pool.state and pool.state != "active":
            raise BackendUnavailable(f"Azure Batch pool {pool.id} is {pool.state}")

    async def capacity(self) -> Capacity:
        pool = await self.nodes.refresh_pool()
        try:
            nodes: Sequence[JSON] | None = list((await self.nodes.refresh_nodes()).values())
        except BackendError as exc:
            log.warning("listing Batch nodes failed, using pool counts: %s", exc)
            nodes = None
        return capacity_from_pool(
            pool, nodes, sizes=self.settings.vm_sizes, overrides=self.settings.capacity
        )

    async def node_info(self) -> NodeInfo:
        s = self.settings
        return NodeInfo(
            hostname=self.node_name,
            os="linux",
            kernel_version="",
            os_image=f"Azure Batch pool {s.pool_id}",
            runtime_version=f"azure-batch://{self.api.api_version}",
            labels={"vkgate.io/batch-pool": s.pool_id, "vkgate.io/batch-job": s.job_id},
        )

    # -- job -------------------------------------------------------------------------------

    async def _ensure_job(self) -> None:
        if self._job_ready:
            return
        async with self._job_lock:
            if self._job_ready:
                return
            s = self.settings
            try:
                job = await self.api.get_job(s.job_id)
            except BackendNotFound:
                body = await self.renderer.arender(
                    s.job_template,
                    {
                        "job": {"id": s.job_id, "pool_id": s.pool_id, "node_name": self.node_name},
                        "owner": {"key": OWNER_KEY, "value": OWNER_VALUE},
                        "settings": s.template_view(),
                    },
                )
                try:
                    await self.api.create_job(body)
                    log.info("created Azure Batch job %s on pool %s", s.job_id, s.pool_id)
                except BackendConflict:
                    pass  # created concurrently: fine
                job = {"state": "active", "poolInfo": {"poolId": s.pool_id}}
                job["usesTaskDependencies"] = bool(body.get("usesTaskDependencies"))
            state = str(job.get("state", "active")).lower()
            if state not in ("active", "enabling"):
                raise BackendRejected(
                    f"Azure Batch job {s.job_id} is {state}: vkgate cannot add tasks to it "
                    f"(delete it or set [backend.batch] job_id)",
                    reason="JobNotActive",
                )
            pool = (job.get("poolInfo") or {}).get("poolId")
            if pool and pool != s.pool_id:
                log.warning("Batch job %s runs on pool %s, not %s", s.job_id, pool, s.pool_id)
            self._job_deps = bool(job.get("usesTaskDependencies", True))
            self._job_ready = True

    # -- create ----------------------------------------------------------------------------

    async def _send_collection(self, tasks: list[JSON]) -> list[JSON]:
        return await self.api.add_collection(self.job_id, tasks)

    def render_spec(self, pod: ResolvedPod) -> JSON:
        """The add-task-collection body ``create`` would send (offline: settings only)."""
        return {"value": self.builder.build(pod, pool=self.nodes.pool)}

    async def create(self, pod: ResolvedPod) -> WorkloadState:
        with self.submitter.reserve() as slot:  # before any await: bursts share calls
            if self.nodes.pool is None:
                with contextlib.suppress(BackendError):  # requiredSlots falls back to settings
                    await self.nodes.refresh_pool()
            tasks = await asyncio.to_thread(self.builder.build, pod, pool=self.nodes.pool)
            await self._ensure_job()
            if len(tasks) > 1 and not self._job_deps:
                raise UnsupportedError(
                    f"Azure Batch job {self.job_id} was created without usesTaskDependencies, "
                    f"which init containers need",
                    reason="Unsupported",
                    field="spec.initContainers",
                )
            results = await slot.submit(tasks)
        if any(
            isinstance(r, BackendNotFound) and "JobNotFound" in str(r) for r in results.values()
        ):
            self._job_ready = False  # deleted behind our back: recreate once
            await self._ensure_job()
            results = await self.submitter.submit(tasks)
        adopted = False
        for task in tasks:
            r = results[str(task["id"])]
            if isinstance(r, BackendError):
                raise r
            status = str(r.get("status", "")).lower()
            if status == "success":
                continue
            err = r.get("error") or {}
            code = str(err.get("code", ""))
            msg = str(
                (err.get("message") or {}).get("value", "")
                if isinstance(err.get("message"), dict)
                else err.get("message", "")
            )
            if code == "TaskExists":
                adopted = True
                continue
            if status == "servererror":
                raise BackendUnavailable(
                    f"Azure Batch could not add task {task['id']}: {code}: {msg}"
                )
            raise BackendRejected(
                f"Azure Batch rejected task {task['id']}: {code}: {msg}", reason=code or "Rejected"
            )
        self._images[pod.uid] = pod.containers[0].image
        if adopted:
            log.info("adopted existing Batch tasks of pod %s", pod.key)
            fetched = []
            for task in tasks:
                try:
                    fetched.append(await self.api.get_task(self.job_id, str(task["id"])))
                except BackendNotFound:
                    continue
            for t in fetched:
                self._tasks[str(t["id"])] = t
            source = fetched
        else:
            now = _iso(self._now())
            source = [
                {
                    "id": t["id"],
                    "displayName": t.get("displayName", ""),
                    "state": "active",
                    "creationTime": now,
                }
                for t in tasks
            ]
        group = group_tasks(source).get(pod.uid)
        if group is None:  # adopted tasks vanished between the add and the get
            raise BackendUnavailable(f"Azure Batch tasks of pod {pod.key} disappeared")
        return workload_state(
            group, job_id=self.job_id, node_name=self.node_name, ip_of=self.nodes.ip_of
        )

    async def update(self, pod: ResolvedPod, current: WorkloadState) -> bool:
        old = self._images.get(pod.uid)
        return old is None or not pod.containers or old == pod.containers[0].image

    # -- delete ----------------------------------------------------------------------------

    def _cached_ids(self, uid: str) -> list[str]:
        group = group_tasks(self._tasks.values()).get(uid)
        return group.task_ids() if group else []

    async def delete(self, ref: PodRef, *, grace_seconds: int) -> None:
        """Batch has no grace period: deleting a task terminates it.  404 = already gone."""
        base = base_task_id(self.settings.task_id_prefix, ref.namespace, ref.name, ref.uid)
        ids = self._cached_ids(ref.uid)
        if base not in ids:
            ids.append(base)
        for tid in sorted(ids, key=lambda i: i != base):  # the main task first
            await self.api.delete_task(self.job_id, tid)
            self._tasks.pop(tid, None)
        if not any(t != base for t in ids):  # nothing cached: probe for init tasks
            index = 0
            while await self.api.delete_task(self.job_id, init_task_id(base, index)):
                index += 1
        self._images.pop(ref.uid, None)

    # -- list ------------------------------------------------------------------------------

    async def list(self) -> Sequence[WorkloadState]:
        try:
            await self._ensure_job()
        except BackendNotFound:
            return []
        full = self._watermark is None or self._mono() - self._last_full >= (
            self.settings.full_relist_seconds
        )
        flt = None
        if not full and self._watermark is not None:
            since = _iso(self._watermark - WATERMARK_MARGIN)
            flt = f"state ne 'completed' or stateTransitionTime ge datetime'{since}'"
        try:
            tasks = await self.api.list_tasks(self.job_id, filter=flt)
        except BackendNotFound:
            self._job_ready = False
            self._tasks.clear()
            return []
        if full:
            self._tasks = {str(t["id"]): t for t in tasks}
            self._last_full = self._mono()
        else:
            seen = {str(t["id"]) for t in tasks}
            for tid in [k for k, t in self._tasks.items() if k not in seen]:
                if str(self._tasks[tid].get("state", "")).lower() != "completed":
                    del self._tasks[tid]  # deleted outside vkgate
            self._tasks.update({str(t["id"]): t for t in tasks})
        for t in tasks:
            when = parse_time(t.get("stateTransitionTime"))
            if when is not None and (self._watermark is None or when > self._watermark):
                self._watermark = when
        if self._watermark is None:
            self._watermark = self._now()
        node_ids = {
            str((t.get("nodeInfo") or {}).get("nodeId", ""))
            for t in self._tasks.values()
            if (t.get("nodeInfo") or {}).get("nodeId")
        }
        known = set(self.nodes.nodes or {})
        if node_ids and not node_ids <= known and self.nodes.stale():
            try:
                await self.nodes.refresh_nodes(force=True)
            except BackendError as exc:
                log.warning("listing Batch nodes for host IPs failed: %s", exc)
        return [
            workload_state(g, job_id=self.job_id, node_name=self.node_name, ip_of=self.nodes.ip_of)
            for g in group_tasks(self._tasks.values()).values()
        ]

    # -- logs ------------------------------------------------------------------------------

    async def _task_for(self, ref: PodRef, container: str) -> str:
        base = base_task_id(self.settings.task_id_prefix, ref.namespace, ref.name, ref.uid)
        candidates = [t for t in self._tasks.values() if str(t.get("id", "")).startswith(base)]
        if not any(str(t.get("id")) == base for t in candidates):
            try:
                candidates.append(await self.api.get_task(self.job_id, base))
            except BackendNotFound:
                raise BackendNotFound(f"pod {ref.key} has no Azure Batch task") from None
            index = 0
            while True:
                try:
                    candidates.append(
                        await self.api.get_task(self.job_id, init_task_id(base, index))
                    )
                except BackendNotFound:
                    break
                index += 1
        for t in candidates:
            name = parse_display_name(str(t.get("displayName", "")))
            if name is not None and name.uid == ref.uid and name.container == container:
                return str(t["id"])
        raise BackendNotFound(f'container "{container}" is not valid for pod "{ref.name}"')

    async def logs(self, ref: PodRef, container: str, options: LogOptions) -> AsyncIterator[bytes]:
        task_id = await self._task_for(ref, container)

        async def completed() -> bool:
            try:
                task = await self.api.get_task(self.job_id, task_id)
            except BackendNotFound:
                return True
            return str(task.get("state", "")).lower() == "completed"

        waiting = f'container "{container}" in pod "{ref.name}" is waiting to start'
        async for chunk in self.log_reader.read(
            task_id, options, waiting_message=waiting, completed=completed
        ):
            yield chunk
