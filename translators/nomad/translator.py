"""``NomadTranslator``: one Kubernetes virtual node backed by a Nomad cluster.

One pod is one Nomad job (see ``jobs.py``); its state is the job plus its allocations (see
``status.py``).  The translator keeps one in-memory view per owned job (``views.JobBook``),
fed from three sources that all merge *monotonically* (an allocation or job is only replaced
by one with an equal or newer ``ModifyIndex``, so a slow list can never roll back what the
event stream already reported):

* ``create`` — the job it just registered;
* ``list()`` — the backstop: one job list (``meta=true``, filtered to vkgate's owner marker
  and this node) and ONE allocation list for all pods (``task_states=true``), per watched
  namespace/region;
* ``changes()`` — the push path (``notifier.ChangeFeed``): ``/v1/event/stream`` (Job,
  Allocation, Evaluation topics), resynced with a list after every reconnect, plus a blocking
  query on ``/v1/allocations`` that catches whatever the stream skipped.

``usage()`` (MetricsSource) reads allocation stats for the same views (``metrics.py``).

Delete purges the job (``DELETE /v1/job/:id?purge=true``): Nomad stops its allocations as a
stop would — SIGTERM, SIGKILL after the task's ``KillTimeout`` (from
``terminationGracePeriodSeconds``) — and the job is gone in one request.  Its view stays until
every allocation has ended (their events, or a list of them under the job's ID), so the gateway
sees the containers terminate before the pod's final delete.  Nomad has no per-request grace,
so when the delete's grace is shorter a background task sends SIGKILL to the allocations once
it has passed (``/v1/client/allocation/:id/signal``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from translators.render.engine import Renderer

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from functools import partial
from typing import Any

import httpx

from translators import securitycontext
from translators.base import (
    OWNER_KEY,
    OWNER_VALUE,
    BackendAuthError,
    BackendConflict,
    BackendError,
    BackendNotFound,
    BackendRejected,
    Capacity,
    Features,
    LogOptions,
    NodeInfo,
    NodeUsage,
    PodRef,
    ResolvedPod,
    TranslationError,
    TranslatorContext,
    Vanished,
    WorkloadState,
)
from translators.nomad import capacity as cap
from translators.nomad.access import AccessCheck
from translators.nomad.client import NomadClient, Sleep
from translators.nomad.config import NomadConfig
from translators.nomad.exec import ClientAgents, NomadExecSession
from translators.nomad.jobs import (
    META_NODE,
    META_UID,
    context,
    finish_job,
    is_owned,
    job_id,
    mapped_namespace,
    template_for,
    variable_path,
)
from translators.nomad.literal import POD_IP_SENTINEL
from translators.nomad.logs import LogReader, LogTarget
from translators.nomad.metrics import NomadMetrics
from translators.nomad.notifier import ChangeFeed
from translators.nomad.runs import Runs, last_terminated
from translators.nomad.status import (
    JobView,
    needs_address,
    parse_time,
    placement_from,
    workload_state,
)
from translators.nomad.views import JobBook, Key, merge_alloc, view_key
from vkgate_core.clock import Clock, SystemClock
from vkgate_core.retry import NO_RETRY

log = logging.getLogger(__name__)

JSON = dict[str, Any]
TERMINAL = frozenset({"complete", "failed", "lost"})
#: Up to this many eligible clients, the capacity's allocation list is filtered to them by
#: Nomad; beyond, the filter would only grow the URL (the client side filters anyway).
MAX_NODE_CLAUSES = 32


#: While this node's own jobs change (a burst of its pods), seconds a list of the other jobs'
#: allocations is used before the next (docs/design/nomad.md, "Capacity"): each of its own
#: allocations moves the allocation index, and each list is every other job's allocation on
#: the eligible clients.
HELD_MAX_AGE = 60.0


@dataclasses.dataclass(frozen=True)
class HeldList:
    """An answer of the other-jobs allocation list and what it was asked under."""

    index: int  # the allocation table's X-Nomad-Index
    clients: tuple[str, ...]  # the eligible client IDs
    at: float  # when it was listed (the translator's monotonic clock)
    ours: frozenset[tuple[str, str]]  # (namespace, job ID) of this node's own jobs then
    #: (namespace, job ID, NodeID, what it holds) of each allocation of a job that was not
    #: this node's when listed
    others: tuple[tuple[str, str, str, cap.Held], ...]

    def held(self, ours: frozenset[tuple[str, str]]) -> dict[str, cap.Held]:
        """NodeID → what the listed allocations hold, leaving out jobs that are this node's
        now (one registered while the list was answered is not another job's)."""
        return cap.per_node(
            (node, held)
            for namespace, job, node, held in self.others
            if (namespace, job) not in ours
        )


def job_changes(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> set[str]:
    """What differs between a registered job and a freshly rendered one, per task: "image",
    "files" (template contents), "other" (config, env, resources, tasks added/removed)."""

    def tasks(job: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        return {
            str(t.get("Name")): t for g in job.get("TaskGroups") or [] for t in g.get("Tasks") or []
        }

    def files(task: Mapping[str, Any]) -> list[tuple[Any, Any]]:
        return [(f.get("DestPath"), f.get("EmbeddedTmpl")) for f in task.get("Templates") or []]

    have, want = tasks(current), tasks(wanted)
    if set(have) != set(want):
        return {"other"}
    out: set[str] = set()
    for name, w in want.items():
        h = have[name]
        hc, wc = dict(h.get("Config") or {}), dict(w.get("Config") or {})
        if hc.pop("image", None) != wc.pop("image", None):
            out.add("image")
        if hc != wc or (h.get("Env") or {}) != (w.get("Env") or {}):
            out.add("other")
        hr, wr = h.get("Resources") or {}, w.get("Resources") or {}
        if any(hr.get(k) != v for k, v in wr.items() if k != "Devices"):
            out.add("other")
        if files(h) != files(w):
            out.add("files")
    return out


#: Pod uids whose purge the translator remembers (``NomadTranslator._purged``).
PURGED_MEMORY = 20_000
#: how long a stop's purge waits at a time for the connected event stream to show a placed
#: job's allocations ended before it looks again (the view, not Nomad: a resync after a failed
#: event batch refreshes it); a blocking query only while the stream is down or for a job
#: never placed.  Before, it asked Nomad after 10 s: 0.66 queries per pod at a 5,000-pod mass
#: delete, each holding one of the node's connections.
STREAMED_STOP_WAIT = 30.0


class NomadTranslator:
    kind = "nomad"
    features = Features(
        # persistentVolumeClaim: a host or CSI volume request (claims.py)
        volume_kinds=frozenset(
            {"configMap", "secret", "projected", "downwardAPI", "emptyDir", "persistentVolumeClaim"}
        ),
        # hostPort: a group ReservedPorts entry (jobs.py; docs/design/nomad.md, "Pod to job
        # mapping").  Declared so that admission lets through what the translator maps.
        pod_features=frozenset({"initContainers", "sidecars", "hostPort"}),
        updatable_fields=frozenset(
            {"metadata.labels", "metadata.annotations", "spec.containers[*].image"}
        ),
        # Becomes ${attr.unique.network.ip-address} (host networking: the client node's
        # address) where the job is rendered; see translators/nomad/literal.py.
        pod_ip_placeholder=POD_IP_SENTINEL,
        # A pod's podIP is its client's address and its tasks listen there (host
        # networking): kubectl port-forward dials podIP:port (gateway/kubelet/portforward.py).
        routable_pod_ip=True,
        # The docker driver's user, readonly_rootfs, cap_add/cap_drop, security_opt (jobs.py
        # checks each rendered task carries them; docs/backends/nomad.md, "securityContext").
        security_context=securitycontext.DOCKER,
        # File contents are items of the job's Variable, re-rendered in the running task
        # (jobs.py): a rotated service-account token reaches it.
        updates_files_in_place=True,
    )

    def __init__(
        self,
        ctx: TranslatorContext | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        environ: Mapping[str, str] | None = None,
        renderer: Any = None,
        **settings: Any,
    ) -> None:
        table: dict[str, Any] = dict(ctx.settings) if ctx else {}
        table.update(settings)
        self.settings = table
        self.config = NomadConfig.from_settings(table, environ)
        self.features = dataclasses.replace(
            self.features, max_kill_timeout=int(self.config.max_kill_timeout)
        )
        if self.config.relax_security_context:
            self.features = dataclasses.replace(
                self.features,
                relaxed_security_context=frozenset(self.config.relax_security_context),
            )
        self.node_name = ctx.node_name if ctx else "vkgate"
        if renderer is None:
            renderer = ctx.renderer if ctx and ctx.renderer is not None else None
        if renderer is None:
            from translators.render.engine import Renderer

            renderer = Renderer()
        self.renderer: Renderer = renderer
        #: Sleeps (retries, reconnects), purge deadlines and metrics timestamps.
        self.clock: Clock = ctx.clock if ctx is not None else SystemClock()
        self._sleep: Sleep = self.clock.sleep
        self.client = NomadClient(self.config, transport=transport, sleep=self._sleep)
        self.access = AccessCheck(self.client)
        # a scrape takes at most half the connections: creates and lists keep the rest
        # (docs/design/nomad.md, "Connections")
        self.metrics = NomadMetrics(
            self.client,
            clock=self.clock,
            concurrency=min(
                self.config.stats_concurrency, max(1, self.config.max_connections // 2)
            ),
        )
        self.book = JobBook(self.node_name)
        self._runs = Runs()
        #: SIGKILLs waiting for a killed container's grace period (``kill_container``).
        self._killers: set[asyncio.Task[None]] = set()
        self._sizing: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._node_ips: dict[str, str] = {}
        #: NodeID → the client agent's HTTP address, for exec straight to it (``exec.py``).
        self._client_agents = ClientAgents(self.client, monotonic=self.clock.monotonic)
        #: (allocation, ModifyIndex) fetched whole for its own address (``_fill_addresses``).
        self._address_fetched: set[tuple[str, int]] = set()
        #: (region, namespace param) scopes listed at least once: the job book knows their jobs.
        self._listed: set[tuple[str, str]] = set()
        self._factor: float | None = None
        #: The last other-jobs allocation list: reused while a one-stub probe shows the same
        #: allocation index (``_held``).
        self._held_last: HeldList | None = None
        #: when an event last changed one of this node's jobs or allocations (``_held``)
        self._own_changed_at = float("-inf")
        self._purges: dict[Key, asyncio.Task[None]] = {}
        #: Jobs whose purge this process has sent and not yet seen answered.
        self._stopping: set[Key] = set()
        #: Pod uids whose job this process purged (the last ``PURGED_MEMORY``): a later delete
        #: of the same pod is done at once, with no job read.
        self._purged: dict[str, None] = {}
        #: the same purges by job: a late allocation event of a purged job is not a job to
        #: look up (``_view_for``; one 404 read per pod at a mass delete before)
        self._purged_jobs: dict[Key, None] = {}
        #: Blocking queries waiting for stopped jobs at once: at most half the connections
        #: (docs/design/nomad.md, "Connections"), so a mass delete without the event stream
        #: queues its waits here instead of taking every connection from creates and lists.
        self._stop_waits = asyncio.Semaphore(max(1, self.config.max_connections // 2))
        #: (region, namespace, job ID) → digest of the Variable items last written.
        self._variables: dict[Key, str] = {}
        #: Jobs this process registered without a Variable: their purge deletes none.
        self._no_variable: set[Key] = set()
        #: Stopped jobs waiting for their allocations to end, woken by the event stream.
        self._stop_waiters: dict[Key, asyncio.Event] = {}
        self._closed = asyncio.Event()
        self._feeds: list[ChangeFeed] = []

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        self._closed.set()
        background = [*self._purges.values(), *self._sizing.values(), *self._killers]
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._purges.clear()
        feed_tasks = [t for feed in self._feeds for t in feed.tasks if not t.done()]
        for task in feed_tasks:
            task.cancel()
        for task in feed_tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.client.aclose()

    async def ping(self) -> None:
        """Health of the node: a leader, a healthy agent, and a token that may list, read and
        submit jobs (``access.py``).  Not retried here: the health loop is the retry."""
        leader = await self.client.get("/status/leader", retry=NO_RETRY)
        if not leader:
            raise BackendError("nomad has no leader")
        await self.client.get("/agent/health", retry=NO_RETRY)
        await self.access.check()

    # -- node side ----------------------------------------------------------------------------

    async def _nodes(self) -> list[JSON]:
        nodes = await self.client.get("/nodes", params={"resources": True}, namespace="")
        nodes = list(nodes or [])
        self._node_ips.update(cap.node_addresses(nodes))
        self.metrics.node_versions.update(
            {str(n["ID"]): str(n.get("Version") or "") for n in nodes if n.get("ID")}
        )
        self._factor = cap.mhz_per_core(nodes, self.config)
        return nodes

    async def capacity(self) -> Capacity:
        """Free capacity of the eligible clients (``capacity.py``): ``/v1/nodes?resources=true``
        and what other jobs hold (``_held``: a one-stub probe, and the allocation list of
        every namespace only when the probe shows a change)."""
        nodes = await self._nodes()
        return cap.capacity(nodes, self.config, held=await self._held(nodes))

    async def _held(self, nodes: Sequence[JSON]) -> dict[str, cap.Held]:
        """NodeID → what the allocations of jobs this node does not own hold on the eligible
        clients: ``GET /v1/allocations?namespace=*&resources=true`` with the non-terminal
        filter (one request; per-node ``/v1/node/:id/allocations`` would be one request per
        client, each returning whole allocations with their jobs).  Own jobs are those in the
        job book, so the first call lists the scopes if no listing has yet.

        The list is what the node's status loop costs at rest (5,000 allocations decoded every
        10 s), so a probe of one stub (``per_page=1``) comes first: its ``X-Nomad-Index`` is
        the allocation table's, and while it and the eligible clients are those of the last
        list, that list's answer still holds.  While this node's own jobs or their allocations
        change (its job book, or an event on one of them since the list), a list younger than
        ``HELD_MAX_AGE`` holds without a probe: each own allocation moves the index, so in a
        burst of its pods the probe would call for a list every time.  Own jobs are left out of
        the answer when it is used, so one registered while the list was answered is not
        counted as another's (docs/design/nomad.md, "Capacity")."""
        ids = tuple(
            sorted(str(n["ID"]) for n in nodes if n.get("ID") and cap.eligible(n, self.config))
        )
        if not ids:
            return {}
        for region, ns_param in self._scopes():
            if (region, ns_param) not in self._listed:
                await self._refresh(region, ns_param)
        ours = frozenset((k[1], k[2]) for k in self.book.views)
        last = self._held_last
        now = self.clock.monotonic()
        try:
            if last is not None and last.clients == ids:
                busy = last.ours != ours or self._own_changed_at >= last.at
                if busy and now - last.at < HELD_MAX_AGE:
                    return last.held(ours)
                probe = await self.client.call(
                    "GET",
                    "/allocations",
                    params={"per_page": 1, "task_states": False},
                    namespace="*",
                )
                if probe.index and probe.index == last.index:
                    return last.held(ours)
            where = cap.HELD_FILTER
            if len(ids) <= MAX_NODE_CLAUSES:
                where += " and (" + " or ".join(f'NodeID == "{i}"' for i in ids) + ")"
            reply = await self.client.call(
                "GET",
                "/allocations",
                params={"resources": True, "task_states": False, "filter": where},
                namespace="*",
            )
        except BackendAuthError as exc:
            log.warning("nomad: other jobs' allocations unreadable, not subtracted: %s", exc)
            return {}
        eligible = set(ids)
        others: list[tuple[str, str, str, cap.Held]] = []
        for a in reply.data or []:
            node = str(a.get("NodeID") or "")
            key = (str(a.get("Namespace") or "default"), str(a.get("JobID")))
            if node in eligible and key not in ours and cap.holds_resources(a):
                others.append((*key, node, cap.held_by(a)))
        self._held_last = HeldList(reply.index, ids, now, ours, tuple(others))
        return self._held_last.held(ours)

    async def node_info(self) -> NodeInfo:
        nodes = await self._nodes()
        detail = None
        chosen = next((n for n in nodes if cap.eligible(n, self.config)), None)
        if chosen is not None:
            with contextlib.suppress(BackendError):
                detail = await self.client.get(f"/node/{chosen['ID']}", namespace="")
        return cap.node_info(nodes, detail, self.config)

    async def mhz_per_core(self) -> float:
        if self.config.mhz_per_core > 0:
            return self.config.mhz_per_core
        if self._factor is None:
            await self._nodes()
        return self._factor or cap.DEFAULT_MHZ_PER_CORE

    # -- views --------------------------------------------------------------------------------

    def _state(self, view: JobView) -> WorkloadState:
        return workload_state(view, node_ips=self._node_ips)

    async def _fill_node_ips(self, views: Sequence[JobView]) -> None:
        unknown = {
            str(a.get("NodeID"))
            for v in views
            for a in v.allocs.values()
            if a.get("NodeID") and str(a.get("NodeID")) not in self._node_ips
        }
        if unknown:
            with contextlib.suppress(BackendError):
                await self._nodes()
        await self._fill_addresses(views)

    async def _fill_addresses(self, views: Sequence[JobView]) -> None:
        """The allocation's own address (bridge / CNI) where only a stub was seen: one
        ``GET /v1/allocation/:id`` per running allocation, until one carries it
        (``status.pod_ip``)."""
        for view in views:
            alloc = needs_address(view)
            if alloc is None:
                continue
            seen = (str(alloc.get("ID")), int(alloc.get("ModifyIndex") or 0))
            if seen in self._address_fetched:
                continue
            with contextlib.suppress(BackendError):
                full = await self.client.get(
                    f"/allocation/{seen[0]}", namespace=view.namespace, region=view.region
                )
                if isinstance(full, dict):
                    full.pop("Job", None)
                    merge_alloc(view, full)
                    if len(self._address_fetched) > 10_000:
                        self._address_fetched.clear()
                    self._address_fetched.add(seen)

    def _scopes(self) -> list[tuple[str, str]]:
        """(region, namespace query value) pairs that cover every job vkgate may own."""
        ns = self.config.all_namespaces
        ns_param = ns[0] if len(ns) == 1 else "*"
        return [(region, ns_param) for region in self.config.all_regions]

    def _owner_filter(self) -> str:
        return (
            f'Meta["{OWNER_KEY}"] == "{OWNER_VALUE}" and Meta["{META_NODE}"] == "{self.node_name}"'
        )

    async def _refresh(self, region: str, ns_param: str) -> tuple[list[JobView], int]:
        """The backstop list for one scope: owned jobs + one allocation list; returns views."""
        jobs_reply = await self.client.call(
            "GET",
            "/jobs",
            params={"meta": True, "filter": self._owner_filter()},
            namespace=ns_param,
            region=region,
        )
        allocs_reply = await self.client.call(
            "GET",
            "/allocations",
            params={"task_states": True, "resources": True}
            | (
                {"filter": f'JobID matches "^{self.config.job_prefix}"'}
                if self.config.job_prefix
                else {}
            ),
            namespace=ns_param,
            region=region,
        )
        views = self.book.apply_listing(
            region, ns_param, jobs_reply.data or [], allocs_reply.data or [], jobs_reply.index
        )
        self._listed.add((region, ns_param))
        return views, allocs_reply.index

    async def _resync(
        self, region: str, ns_param: str, placement: bool = True
    ) -> tuple[list[JobView], int]:
        """The backstop list of one scope plus node IPs and, with ``placement``, the placement
        reasons of unplaced jobs: fresh views."""
        views, index = await self._refresh(region, ns_param)
        # after a reconnect the stream resumes at the newest index known, so an end that
        # fell in between is found by this list
        self._wake_stopped(views)
        await self._fill_node_ips(views)
        await self._record_run_ends(views)
        if placement:
            await self._placements(views)
        return views, index

    async def _placements(self, views: Sequence[JobView]) -> None:
        """Nomad's reasons for the unplaced jobs without a known one: the blocked evaluations
        of their namespace, one list per namespace (a blocked evaluation carries the
        ``FailedTGAllocs`` of the placement that failed).  Asking each unplaced job's
        evaluations instead cost 0.96 requests per pod in a 5,000-pod burst, since most jobs
        of a burst wait unplaced in Nomad's queue at a resync (docs/design/nomad.md,
        "Change feed at rest")."""
        unplaced: dict[tuple[str, str], list[JobView]] = {}
        for view in views:
            if not view.allocs and not view.stop and not view.placement:
                unplaced.setdefault((view.region, view.namespace), []).append(view)
        for (region, namespace), group in unplaced.items():
            try:
                evals = await self.client.get(
                    "/evaluations",
                    params={"status": "blocked"},
                    namespace=namespace,
                    region=region,
                )
            except BackendError as exc:
                log.info("nomad: blocked evaluations of %s: %s", namespace, exc)
                continue
            by_job: dict[str, list[JSON]] = {}
            for ev in evals or []:
                by_job.setdefault(str(ev.get("JobID")), []).append(ev)
            for view in group:
                view.placement = placement_from(by_job.get(view.job_id, [])) or view.placement

    async def list(self) -> Sequence[WorkloadState]:
        views: list[JobView] = []
        for region, ns_param in self._scopes():
            found, _ = await self._refresh(region, ns_param)
            views.extend(found)
        await self._fill_node_ips(views)
        await self._record_run_ends(views)
        if not self.change_stream_live():
            # with the stream connected, a failed placement arrives as an Evaluation event;
            # asking every unplaced job's evaluations at every list cost up to 2.7 requests
            # per pod in a 5,000-pod burst (docs/benchmarks.md)
            await self._placements(views)
        return [self._state(v) for v in views]

    # -- create / update / delete ----------------------------------------------------------

    async def _render(self, pod: ResolvedPod) -> tuple[JSON, dict[str, str]]:
        """The job and the items of its Nomad Variable (``jobs.backend_info``)."""
        factor = await self.mhz_per_core()
        name = template_for(pod, renderer=self.renderer, cfg=self.config)
        ctx = context(pod, cfg=self.config, settings=self.settings, factor=factor)
        out = await self.renderer.arender(name, ctx)
        spec = finish_job(
            out,
            pod,
            info=ctx["backend_info"],
            template=name,
            relaxed=self.config.relax_security_context,
        )
        return spec, dict(ctx["backend_info"]["variable"]["items"])

    async def _write_variable(
        self, jid: str, items: Mapping[str, str], *, namespace: str, region: str
    ) -> None:
        """Write the job's Variable (the pod's files and Secret env values) when its items
        differ from what this process last wrote; a task's templates re-render from it
        (docs/design/secrets.md).  Nomad refuses a Variable without items, so none is written
        then."""
        key = (region, namespace, jid)
        digest = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()
        if not items or self._variables.get(key) == digest:
            return
        path = variable_path(jid)
        self._no_variable.discard(key)
        await self.client.call(
            "PUT",
            f"/var/nomad/jobs/{jid}",
            body={"Namespace": namespace, "Path": path, "Items": dict(items)},
            namespace=namespace,
            region=region,
        )
        self._variables[key] = digest

    async def _delete_variable(self, jid: str, *, namespace: str, region: str) -> None:
        """Remove the purged job's Variable (none: 404, done).  A failure is logged, not
        raised: the job is gone already, and a delete must not hang on its leftovers."""
        self._variables.pop((region, namespace, jid), None)
        if (region, namespace, jid) in self._no_variable:
            self._no_variable.discard((region, namespace, jid))
            return  # registered here without one: nothing to delete
        try:
            await self.client.call(
                "DELETE", f"/var/nomad/jobs/{jid}", namespace=namespace, region=region
            )
        except BackendNotFound:
            pass
        except BackendError as exc:
            log.warning("nomad: removing the Variable of job %s failed: %s", jid, exc)

    def render_spec(self, pod: ResolvedPod) -> JSON:
        """What ``create`` would send (offline: F from the settings, else the last measured
        value, else 1000 MHz per core): the ``POST /v1/jobs`` body and, under ``"Variable"``,
        the job's Nomad Variable written before it — the pod's files and Secret env values,
        which the job itself never carries (docs/design/secrets.md).  A pod without any has
        no ``"Variable"``."""
        factor = self.config.mhz_per_core or self._factor or cap.DEFAULT_MHZ_PER_CORE
        name = template_for(pod, renderer=self.renderer, cfg=self.config)
        ctx = context(pod, cfg=self.config, settings=self.settings, factor=factor)
        spec = finish_job(
            self.renderer.render(name, ctx),
            pod,
            info=ctx["backend_info"],
            template=name,
            relaxed=self.config.relax_security_context,
        )
        items = dict(ctx["backend_info"]["variable"]["items"])
        if not items:
            return spec
        path = variable_path(str(spec["Job"]["ID"]))
        return {**spec, "Variable": {"Path": path, "Items": items}}

    async def _get_job(self, jid: str, *, namespace: str, region: str) -> JSON | None:
        try:
            job: JSON = await self.client.get(f"/job/{jid}", namespace=namespace, region=region)
            return job
        except BackendNotFound:
            return None

    async def create(self, pod: ResolvedPod) -> WorkloadState:
        self._purged.pop(pod.uid, None)  # run again (a lost workload): its new job is live
        spec, items = await self._render(pod)
        job = spec["Job"]
        jid, ns = str(job["ID"]), str(job.get("Namespace") or "default")
        region = str(job.get("Region") or self.config.region)
        self._purged_jobs.pop((region, ns, jid), None)
        await self._write_variable(jid, items, namespace=ns, region=region)
        if not items and (region, ns, jid) not in self._variables:
            self._no_variable.add((region, ns, jid))
        # Registered only if no job of that ID exists (EnforceIndex with index 0): one request
        # for a new pod, where a read first cost two.  The Variable is written before: the
        # ID holds the pod's UID, so a job already there is this pod's, its files the same
        # (docs/design/nomad.md, "Requests per pod").
        # What the book holds before the call: a view the event stream makes during it is of
        # this registration (JobBook.registered)
        before = self.book.views.get((region, ns, jid))
        try:
            reply = await self.client.call(
                "POST",
                "/jobs",
                body={**spec, "EnforceIndex": True, "JobModifyIndex": 0},
                namespace=ns,
                region=region,
            )
        except BackendConflict:
            existing = await self._get_job(jid, namespace=ns, region=region)
            if existing is not None and not existing.get("Stop"):
                if (existing.get("Meta") or {}).get(META_UID) != pod.uid or not is_owned(
                    existing.get("Meta"), self.node_name
                ):
                    raise BackendConflict(
                        f"nomad job {jid!r} exists and belongs to another pod or owner"
                    ) from None
                view = self.book.merge_job(existing, region=region)
                assert view is not None
                return self._state(view)
            # stopped (or purged meanwhile): registered again over it
            reply = await self.client.call("POST", "/jobs", body=spec, namespace=ns, region=region)
        data = reply.data or {}
        job_stub = {
            **job,
            "Status": "pending",
            "Stop": False,
            "ModifyIndex": data.get("JobModifyIndex", 0),
        }
        view = self.book.registered(job_stub, region=region, before=before)
        state = self._state(view)
        warnings = str(data.get("Warnings") or "").strip()
        if warnings:
            from dataclasses import replace

            state = replace(state, events=(("Warning", "NomadWarning", warnings, ""),))
        return state

    async def update(self, pod: ResolvedPod, current: WorkloadState) -> bool:
        """Changed ConfigMap/Secret/downward API file contents (and Secret env values) go to the
        job's Variable: the running task's files are rewritten in place (``ChangeMode: noop``,
        the kubelet's eventual file update; env changes with the next restart).  A changed
        image re-registers the job (Nomad replaces the allocation); any other change (env,
        resources, ports, …) needs a re-create, so say so."""
        spec, items = await self._render(pod)
        job = spec["Job"]
        ns, region = str(job.get("Namespace") or "default"), str(job.get("Region") or "")
        existing = await self._get_job(job["ID"], namespace=ns, region=region)
        if existing is None:
            return False
        await self._write_variable(str(job["ID"]), items, namespace=ns, region=region)
        changed = job_changes(existing, job)
        if not changed:
            return True
        if changed <= {"image", "files"}:
            await self.client.call("POST", "/jobs", body=spec, namespace=ns, region=region)
            return True
        return False

    async def _locate(self, ref: PodRef) -> JobView | None:
        """The owned job of a pod: from the views (by its computed ID, else by a scan), else
        by its computed ID in each scope."""
        jid = job_id(ref.namespace, ref.name, ref.uid, prefix=self.config.job_prefix)
        try:  # the mapped namespace first: with namespace_from_pod that is where the job is
            mapped = mapped_namespace(ref.namespace, self.config)
        except TranslationError:
            mapped = None
        first = (mapped,) if mapped else ()
        for region in self.config.all_regions:
            for ns in dict.fromkeys((*first, *self.config.all_namespaces)):
                known = self.book.views.get((region, ns, jid))
                if known is not None and known.ref.uid == ref.uid:
                    return known
        for view in self.book.views.values():
            if view.ref.uid == ref.uid:
                return view
        for region in self.config.all_regions:
            for ns in dict.fromkeys((*first, *self.config.all_namespaces)):
                job = await self._get_job(jid, namespace=ns, region=region)
                if job is None:
                    continue
                if (job.get("Meta") or {}).get(META_UID) != ref.uid:
                    continue
                found = self.book.merge_job(job, region=region)
                if found is not None:
                    await self._read_allocs(found)
                    return found
        return None

    async def delete(self, ref: PodRef, *, grace_seconds: int) -> None:
        """Purge the pod's job at once (``DELETE /v1/job/:id?purge=true``): Nomad stops its
        allocations as a plain stop would (SIGTERM, SIGKILL after the task's ``KillTimeout``)
        and the job is gone in one request and one evaluation.  The view is kept until every
        allocation has ended, so the pod's containers terminate before its final delete, as the
        kubelet's do (docs/design/nomad.md, "Delete").  A later delete of the same pod only
        looks: it never waits for the end, the change stream reports it."""
        if ref.uid in self._purged:
            return  # finished already
        view = await self._locate(ref)
        if view is None:
            return
        key = view_key(view)
        unknown = False  # the allocations could not be read: the background wait asks again
        if not view.purged:
            # marked before the request: its job-deregister evaluation may reach the stream
            # consumer before the answer reaches us, and is not news (``_gone``)
            self._stopping.add(key)
            try:
                await self.client.call(
                    "DELETE",
                    f"/job/{view.job_id}",
                    params={"purge": True},
                    namespace=view.namespace,
                    region=view.region,
                )
            except BackendNotFound:
                pass  # purged already (by anyone): its allocations, if any, still end
            finally:
                self._stopping.discard(key)
            view.stop = view.purged = True
            if not (view.allocs and self.change_stream_live()):
                # no stream to report them, or none seen yet: Nomad's word (a purged job's
                # allocations are still listed under its ID until they are collected)
                try:
                    await self._read_allocs(view)
                except BackendError as exc:
                    log.info("nomad: allocations of purged job %s: %s", view.job_id, exc)
                    unknown = True
        if not unknown and (not view.allocs or self._all_ended(view)):
            waiter = self._stop_waiters.get(key)
            if waiter is not None:
                waiter.set()  # the background wait ends without a request
            await self._finish(view)
            return
        if key not in self._purges or self._purges[key].done():
            self._purges[key] = asyncio.create_task(
                self._finish_when_ended(view, grace=max(0, grace_seconds))
            )

    async def _read_allocs(self, view: JobView) -> Sequence[JSON]:
        """The job's allocations as Nomad lists them now, merged into its view."""
        allocs: Sequence[JSON] = (
            await self.client.get(
                f"/job/{view.job_id}/allocations", namespace=view.namespace, region=view.region
            )
            or ()
        )
        for a in allocs:
            merge_alloc(view, a)
        return allocs

    async def _kill(self, view: JobView, allocs: Sequence[JSON]) -> None:
        for a in allocs:
            if a.get("ClientStatus") in TERMINAL:
                continue
            try:
                await self.client.call(
                    "POST",
                    f"/client/allocation/{a['ID']}/signal",
                    body={"Signal": "SIGKILL"},
                    namespace=view.namespace,
                    region=view.region,
                )
            except BackendError as exc:  # e.g. "Task not running": it ended meanwhile
                log.info("nomad: SIGKILL to allocation %s: %s", a.get("ID"), exc)

    async def _finish(self, view: JobView) -> None:
        """The purged job's allocations have ended: remove its Variable, forget its view."""
        key = view_key(view)
        if self.book.views.get(key) is not view:
            return  # finished already (the stream's end and the pod's final delete both ask)
        self.book.views.pop(key, None)
        self._purged[view.ref.uid] = None
        self._purged_jobs[key] = None
        if len(self._purged) > PURGED_MEMORY:
            del self._purged[next(iter(self._purged))]
        if len(self._purged_jobs) > PURGED_MEMORY:
            del self._purged_jobs[next(iter(self._purged_jobs))]
        self._runs.forget(list(view.allocs))
        await self._delete_variable(view.job_id, namespace=view.namespace, region=view.region)

    async def _finish_when_ended(self, view: JobView, *, grace: float) -> None:
        """Wait (the event stream, else blocking queries) until every allocation of the purged
        job ended, then ``_finish`` it.

        Nomad kills with the task's ``KillTimeout``; when the delete's grace is shorter, the
        still-running allocations get SIGKILL once it has passed.
        """
        start = self.clock.monotonic()
        deadline = start + self.config.purge_timeout
        killed = False
        index = 0
        key = view_key(view)
        try:
            while self.clock.monotonic() < deadline:
                if self.book.views.get(key) is not view:
                    return  # finished by the pod's own delete
                remaining = start + grace - self.clock.monotonic()
                # a placed job's allocations are followed by the connected stream: no query
                # while it stays connected (docs/design/nomad.md, "Requests per pod")
                streamed = self.change_stream_live() and bool(view.allocs)
                wait = STREAMED_STOP_WAIT if streamed else min(10.0, self.config.blocking_wait)
                if not killed:
                    wait = max(0.5, min(wait, remaining))
                if streamed:
                    if await self._stop_streamed(view, wait):
                        break  # the event stream showed every allocation ended: no request
                    if not killed and self.clock.monotonic() >= start + grace:
                        # the grace is over and the stream has not shown the end: Nomad's word
                        # on which allocations still run (a lagging stream's view would have
                        # them signalled after they ended)
                        killed = True
                        async with self._stop_waits:
                            await self._read_allocs(view)
                        if self._all_ended(view):
                            self._push_end(view)  # the stream has not said so yet
                            break
                        await self._kill(view, list(view.allocs.values()))
                    continue
                if self.change_stream_live() and await self._stop_streamed(view, wait):
                    break
                async with self._stop_waits:
                    reply = await self.client.blocking_get(
                        f"/job/{view.job_id}/allocations",
                        index=index,
                        wait=wait,
                        namespace=view.namespace,
                        region=view.region,
                    )
                allocs = reply.data or []
                for a in allocs:
                    merge_alloc(view, a)
                if all(a.get("ClientStatus") in TERMINAL for a in allocs):
                    self._push_end(view)  # the end, before the view is forgotten
                    break
                index = reply.index if reply.index > index else 0
                if not killed and self.clock.monotonic() >= start + grace:
                    killed = True
                    await self._kill(view, allocs)
            await self._finish(view)
        except BackendError as exc:
            # the view stays (purged, listed with its allocations): the pod's next delete
            # — the controller's recheck at its deadline — waits again
            log.warning("nomad: waiting for the end of purged job %s failed: %s", view.job_id, exc)
        finally:
            self._stop_waiters.pop(key, None)

    def _wake_stopped(self, views: Sequence[JobView]) -> None:
        """Wake the stop waits (``_stop_streamed``) of the views whose allocations all ended."""
        for view in views:
            waiter = self._stop_waiters.get(view_key(view))
            if waiter is not None and self._all_ended(view):
                waiter.set()

    def _push_end(self, view: JobView) -> None:
        """An end found by reading Nomad, not on the stream: to the pods' controller now."""
        for feed in self._feeds:
            feed.push([view])

    @staticmethod
    def _all_ended(view: JobView) -> bool:
        return bool(view.allocs) and all(
            a.get("ClientStatus") in TERMINAL for a in view.allocs.values()
        )

    async def _stop_streamed(self, view: JobView, wait: float) -> bool:
        """Wait at most ``wait`` s for the event stream to show every allocation of the stopped
        job ended (``_apply_events`` wakes it); False when it did not (the caller then asks
        Nomad once, as without a stream: a missed event cannot hold a purge up)."""
        if self._all_ended(view):
            return True
        waiter = self._stop_waiters.setdefault(view_key(view), asyncio.Event())
        waiter.clear()
        woken = asyncio.ensure_future(waiter.wait())
        timer = asyncio.ensure_future(self._sleep(wait))
        try:
            await asyncio.wait({woken, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            timer.cancel()
        return self._all_ended(view)

    # -- notifier ---------------------------------------------------------------------------

    def changes(self) -> AsyncIterator[WorkloadState | Vanished]:
        """Notifier: event stream + blocking-list backstop per scope (``notifier.py``)."""
        feed = ChangeFeed(
            self.client,
            self.config,
            scopes=self._scopes(),
            resync=self._resync,
            apply_events=self._apply_events,
            state=self._state,
            sleep=self._sleep,
            monotonic=self.clock.monotonic,
            closed=self._closed,
        )
        self._feeds.append(feed)
        return feed.changes()

    def backend_requests(self) -> Mapping[tuple[str, str], int]:
        """BackendRequests: the client's requests by (method, endpoint table path)."""
        return self.client.requests

    def change_stream_live(self) -> bool:
        """StreamHealth: True while a feed's event streams are all connected (a stopped job's
        allocations then arrive as events; docs/design/pod-sync.md, "Waiting for a stop")."""
        return any(feed.live() for feed in self._feeds)

    async def _apply_events(
        self, events: Sequence[JSON], region: str
    ) -> tuple[Sequence[JobView], Sequence[JobView]]:
        """Merge a batch of events: (changed views, views of jobs deleted by someone else)."""
        touched, deleted = await self.book.apply_events(
            events, region=region, view_for=self._view_for
        )
        if touched or deleted:
            self._own_changed_at = self.clock.monotonic()  # ``_held``
        self._wake_stopped(touched)
        await self._fill_node_ips(touched)
        await self._record_run_ends(touched)
        return touched, await self._gone(deleted)

    async def _gone(self, deregistered: Sequence[JobView]) -> Sequence[JobView]:
        """Of the jobs a deregistration was seen for, those that no longer exist and that this
        agent is not stopping or purging itself: one ``GET /job/:job_id`` each (a stop leaves
        the job listed; a purge removes it)."""
        gone: dict[Key, JobView] = {}
        for view in deregistered:
            key = view_key(view)
            if view.stop or key in self._stopping:
                # this agent's own stop or purge; a job stopped (by anyone) is being purged
                # by this agent, whose delete of the pod stopped it or will
                continue
            if key in self.book.views:
                try:
                    job = await self._get_job(
                        view.job_id, namespace=view.namespace, region=view.region
                    )
                except BackendError as exc:
                    log.info("nomad: is job %s still there? %s", view.job_id, exc)
                    continue  # the next list will tell
                if job is not None:
                    self.book.merge_job(job, region=view.region)
                    continue
                self.book.views.pop(key, None)
            gone[key] = view
        return tuple(gone.values())

    async def _view_for(self, jid: str, ns: str, region: str) -> JobView | None:
        key = (region, ns, jid)
        if key in self.book.foreign or not jid.startswith(self.config.job_prefix):
            return None
        if ns not in self.config.all_namespaces:
            # the "*" stream carries every namespace's events; vkgate owns no job outside the
            # allow-list and may not be allowed to read one (a 403 would drop the whole batch)
            return None
        view = self.book.views.get(key)
        if view is not None:
            return view
        if key in self._purged_jobs:
            return None  # purged here: its allocations' last events still arrive
        job = await self._get_job(jid, namespace=ns, region=region)
        if job is None:
            return None
        return self.book.merge_job(job, region=region)

    # -- logs / exec ------------------------------------------------------------------------

    async def _current_alloc(self, ref: PodRef, container: str) -> tuple[JobView, JSON]:
        view = await self._locate(ref)
        if view is None:
            raise BackendNotFound(f"pod {ref.key} has no Nomad job")
        if container not in (*view.containers, *view.init_containers) and view.containers:
            raise BackendNotFound(f'container "{container}" not found in pod {ref.key}')
        await self._read_allocs(view)
        alloc = view.newest()
        if alloc is None:
            raise BackendRejected(
                f'container "{container}" in pod {ref.key} is waiting to start: not placed yet',
                reason="ContainerNotStarted",
            )
        return view, alloc

    async def _record_run_ends(self, views: Sequence[JobView]) -> None:
        """Note where each run that just ended stops in its log files (``runs.py``), in the
        background: a status change is never held up by the extra call.  Not for a stopped
        job (a deleted pod): it runs no more, so no run follows whose ``--previous`` this would
        bound, and at a mass delete the calls were one or two per pod."""
        for view in views:
            if view.stop:
                continue
            for alloc in view.allocs.values():
                for task in self._runs.needs(alloc):
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
                self._runs.unknown.add((target.alloc_id, target.task, terminated))
            return
        if terminated is not None:
            self._runs.record(target.alloc_id, target.task, terminated, sizes)

    async def logs(self, ref: PodRef, container: str, options: LogOptions) -> AsyncIterator[bytes]:
        view, alloc = await self._current_alloc(ref, container)
        alloc_id = str(alloc["ID"])
        ts = (alloc.get("TaskStates") or {}).get(container) or {}
        window = self._runs.window(alloc_id, container, ts, previous=options.previous)
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
                await self._sleep(1.0)
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
        view, alloc = await self._current_alloc(ref, container)
        if alloc.get("ClientStatus") != "running":
            raise BackendRejected(
                f"cannot exec in a container that is not running (pod {ref.key}, "
                f"allocation {alloc.get('ClientStatus')})",
                reason="ContainerNotRunning",
            )
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

    async def restart_container(self, ref: PodRef, container: str) -> None:
        """Restarter: ``POST /v1/client/allocation/:id/restart`` with the task; Nomad kills
        the task (its kill timeout) and starts it again, counting the restart in the task's
        ``Restarts`` (restartCount) without its restart policy's delay."""
        view, alloc = await self._current_alloc(ref, container)
        if alloc.get("ClientStatus") != "running":
            raise BackendRejected(
                f"cannot restart a container that is not running (pod {ref.key}, "
                f"allocation {alloc.get('ClientStatus')})",
                reason="ContainerNotRunning",
            )
        await self.client.call(
            "POST",
            f"/client/allocation/{alloc['ID']}/restart",
            body={"TaskName": container},
            namespace=view.namespace,
            region=view.region,
        )

    async def kill_container(self, ref: PodRef, container: str, *, grace_seconds: int) -> None:
        """Killer: ``POST /v1/client/allocation/:id/signal`` SIGTERM to the task, SIGKILL after
        ``grace_seconds`` if it still runs (in the background).  The task's restart policy
        then decides — a ``restartPolicy: Never`` pod's (``Attempts: 0``) keeps it dead."""
        view, alloc = await self._current_alloc(ref, container)
        if alloc.get("ClientStatus") != "running":
            raise BackendRejected(
                f"cannot kill a container that is not running (pod {ref.key}, "
                f"allocation {alloc.get('ClientStatus')})",
                reason="ContainerNotRunning",
            )
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

    # -- metrics ----------------------------------------------------------------------------

    async def usage(self) -> NodeUsage:
        """MetricsSource: CPU and memory of every running pod from Nomad's allocation stats
        (``metrics.py``).  The views are kept current by the notifier and the backstop list;
        before any listing happened (no views yet) one listing fills them."""
        if not self.book.views:
            for region, ns_param in self._scopes():
                await self._refresh(region, ns_param)
        return await self.metrics.usage(list(self.book.views.values()))
