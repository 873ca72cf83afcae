"""``NomadTranslator``: one Kubernetes virtual node backed by a Nomad cluster.

The one public face of the Nomad backend (the ``Translator`` Protocol and its optional
capabilities, translators/base.py).  One pod is one Nomad job (``jobs.py``); its state is the
job plus its allocations (``status.py``).  The translator keeps one in-memory view per owned
job (``views.JobBook``), fed from three sources that all merge *monotonically* (an allocation
or job is only replaced by one with an equal or newer ``ModifyIndex``, so a slow list can never
roll back what the event stream already reported):

* ``create`` — the job it just registered;
* ``list()`` — the backstop: one job list (``meta=true``, filtered to vkgate's owner marker
  and this node) and ONE allocation list for all pods (``task_states=true``), per watched
  namespace/region;
* ``changes()`` — the push path (``notifier.ChangeFeed``): ``/v1/event/stream`` (Job,
  Allocation, Evaluation topics), resynced with a list after every reconnect, plus a blocking
  query on ``/v1/allocations`` that catches whatever the stream skipped.

Each job of the backend is a small collaborator the translator holds and wires together here
(composition: each is internal to the package and knows the others only as constructor
arguments):

==================  ===========================================================================
``_nodes``          capacity, node info, the MHz factor, client addresses (``nodes.py``)
``_listing``        the backstop list, one job, a pod's job, addresses (``listing.py``)
``_variables``      the jobs' Nomad Variables: the pod's files and Secret env (``variables.py``)
``_submit``         render + write the Variable + register, the register race (``submit.py``)
``_purges``         delete: purge, wait for the allocations' end, SIGKILL (``purge.py``)
``_containers``     logs, exec, restart, kill of one container (``containers.py``)
``metrics``         ``usage()`` from allocation stats (``metrics.py``)
==================  ===========================================================================

What stays here is what ties them to the change feed: the merge of a batch of events and of a
resync into the book, and the jobs deleted by someone else (``_gone``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from translators.render.engine import Renderer

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx

from translators import securitycontext
from translators.base import (
    BackendError,
    Capacity,
    Features,
    LogOptions,
    NodeInfo,
    NodeUsage,
    PodRef,
    ResolvedPod,
    TranslatorContext,
    Vanished,
    WorkloadState,
)
from translators.nomad.access import AccessCheck
from translators.nomad.client import NomadClient, Sleep
from translators.nomad.config import NomadConfig
from translators.nomad.containers import Containers
from translators.nomad.exec import NomadExecSession
from translators.nomad.listing import Listing
from translators.nomad.literal import POD_IP_SENTINEL
from translators.nomad.metrics import NomadMetrics
from translators.nomad.nodes import Nodes
from translators.nomad.notifier import ChangeFeed
from translators.nomad.placements import blocked_placements
from translators.nomad.purge import Purges
from translators.nomad.runs import Runs
from translators.nomad.status import JobView, workload_state
from translators.nomad.submit import Submitter
from translators.nomad.variables import VariableStore
from translators.nomad.views import JobBook, Key, view_key
from vkgate_core.clock import Clock, SystemClock
from vkgate_core.retry import NO_RETRY

log = logging.getLogger(__name__)

JSON = dict[str, Any]


class NomadTranslator:
    kind = "nomad"
    features = Features(
        # persistentVolumeClaim: a host or CSI volume request (claims.py)
        volume_kinds=frozenset(
            {"configMap", "secret", "projected", "downwardAPI", "emptyDir", "persistentVolumeClaim"}
        ),
        # hostPort: a group ReservedPorts entry (network.py; docs/design/nomad.md, "Pod to job
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
        # (variables.py): a rotated service-account token reaches it.
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
        #: Where each run of a task starts in its log files (``runs.py``): noted by
        #: ``_containers``, forgotten by ``_purges``.
        self._runs = Runs()
        self._nodes = Nodes(
            self.client, self.config, clock=self.clock, metrics=self.metrics, book=self.book
        )
        self._listing = Listing(
            self.client, self.config, book=self.book, nodes=self._nodes, node_name=self.node_name
        )
        self._variables = VariableStore(self.client)
        self._containers = Containers(
            self.client, clock=self.clock, listing=self._listing, runs=self._runs
        )
        self._purges = Purges(
            self.client,
            self.config,
            clock=self.clock,
            book=self.book,
            listing=self._listing,
            variables=self._variables,
            runs=self._runs,
            # looked up at each call, not bound here: the translator's StreamHealth (as it is
            # then, replaced or not) is the one answer
            live=lambda: self.change_stream_live(),  # noqa: PLW0108
            push_end=self._push_end,
        )
        self._submit = Submitter(
            self.client,
            self.config,
            settings=self.settings,
            renderer=self.renderer,
            node_name=self.node_name,
            book=self.book,
            nodes=self._nodes,
            listing=self._listing,
            variables=self._variables,
            purges=self._purges,
            state=self._state,
        )
        self._closed = asyncio.Event()
        self._feeds: list[ChangeFeed] = []

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        self._closed.set()
        background = [*self._purges.background(), *self._containers.background()]
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._purges.pending.clear()
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

    # -- node side (nodes.py) ---------------------------------------------------------------

    async def capacity(self) -> Capacity:
        """Free capacity of the eligible clients (``nodes.Nodes.capacity``); the first call
        lists this node's jobs first, to leave them out of what other jobs hold."""
        return await self._nodes.capacity(list_own=self._listing.list_unlisted)

    async def node_info(self) -> NodeInfo:
        return await self._nodes.node_info()

    async def mhz_per_core(self) -> float:
        return await self._nodes.mhz_per_core()

    # -- views ------------------------------------------------------------------------------

    def _state(self, view: JobView) -> WorkloadState:
        return workload_state(view, node_ips=self._nodes.ips)

    async def _resync(
        self, region: str, ns_param: str, placement: bool = True
    ) -> tuple[list[JobView], int]:
        """The backstop list of one scope plus node IPs and, with ``placement``, the placement
        reasons of unplaced jobs: fresh views."""
        views, index = await self._listing.refresh(region, ns_param)
        # after a reconnect the stream resumes at the newest index known, so an end that
        # fell in between is found by this list
        self._purges.wake(views)
        await self._listing.fill_node_ips(views)
        await self._containers.record_run_ends(views)
        if placement:
            await blocked_placements(self.client, views)
        return views, index

    async def list(self) -> Sequence[WorkloadState]:
        views: list[JobView] = []
        for region, ns_param in self._listing.scopes():
            found, _ = await self._listing.refresh(region, ns_param)
            views.extend(found)
        await self._listing.fill_node_ips(views)
        await self._containers.record_run_ends(views)
        if not self.change_stream_live():
            # with the stream connected, a failed placement arrives as an Evaluation event;
            # asking every unplaced job's evaluations at every list cost up to 2.7 requests
            # per pod in a 5,000-pod burst (docs/benchmarks.md)
            await blocked_placements(self.client, views)
        return [self._state(v) for v in views]

    # -- create / update / delete (submit.py, purge.py) -------------------------------------

    def render_spec(self, pod: ResolvedPod) -> JSON:
        """What ``create`` would send (``submit.Submitter.render_spec``)."""
        return self._submit.render_spec(pod)

    async def create(self, pod: ResolvedPod) -> WorkloadState:
        return await self._submit.create(pod)

    async def update(self, pod: ResolvedPod, current: WorkloadState) -> bool:
        """New file contents go to the job's Variable, a new image re-registers the job, any
        other change needs a re-create (``submit.Submitter.update``)."""
        return await self._submit.update(pod, current)

    async def delete(self, ref: PodRef, *, grace_seconds: int) -> None:
        """Purge the pod's job; its view stays until every allocation has ended
        (``purge.Purges.delete``; docs/design/nomad.md, "Delete")."""
        await self._purges.delete(ref, grace_seconds=grace_seconds)

    def _push_end(self, view: JobView) -> None:
        """An end found by reading Nomad, not on the stream: to the pods' controller now."""
        for feed in self._feeds:
            feed.push([view])

    # -- notifier ---------------------------------------------------------------------------

    def changes(self) -> AsyncIterator[WorkloadState | Vanished]:
        """Notifier: event stream + blocking-list backstop per scope (``notifier.py``)."""
        feed = ChangeFeed(
            self.client,
            self.config,
            scopes=self._listing.scopes(),
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
            self._nodes.own_jobs_changed()  # ``nodes.Nodes.held``
        self._purges.wake(touched)
        await self._listing.fill_node_ips(touched)
        await self._containers.record_run_ends(touched)
        return touched, await self._gone(deleted)

    async def _gone(self, deregistered: Sequence[JobView]) -> Sequence[JobView]:
        """Of the jobs a deregistration was seen for, those that no longer exist and that this
        agent is not stopping or purging itself: one ``GET /job/:job_id`` each (a stop leaves
        the job listed; a purge removes it)."""
        gone: dict[Key, JobView] = {}
        for view in deregistered:
            key = view_key(view)
            if view.stop or key in self._purges.stopping:
                # this agent's own stop or purge; a job stopped (by anyone) is being purged
                # by this agent, whose delete of the pod stopped it or will
                continue
            if key in self.book.views:
                try:
                    job = await self._listing.get_job(
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
        if key in self._purges.purged_jobs:
            return None  # purged here: its allocations' last events still arrive
        job = await self._listing.get_job(jid, namespace=ns, region=region)
        if job is None:
            return None
        return self.book.merge_job(job, region=region)

    # -- logs / exec (containers.py) --------------------------------------------------------

    def logs(self, ref: PodRef, container: str, options: LogOptions) -> AsyncIterator[bytes]:
        """LogReader: the container's log lines (``containers.Containers.logs``)."""
        return self._containers.logs(ref, container, options)

    async def exec(
        self, ref: PodRef, container: str, command: Sequence[str], *, tty: bool, stdin: bool
    ) -> NomadExecSession:
        return await self._containers.exec(ref, container, command, tty=tty, stdin=stdin)

    async def restart_container(self, ref: PodRef, container: str) -> None:
        """Restarter: Nomad restarts the task, counting it in ``Restarts``
        (``containers.Containers.restart``)."""
        await self._containers.restart(ref, container)

    async def kill_container(self, ref: PodRef, container: str, *, grace_seconds: int) -> None:
        """Killer: SIGTERM to the task, SIGKILL after ``grace_seconds`` if it still runs
        (``containers.Containers.kill``)."""
        await self._containers.kill(ref, container, grace_seconds=grace_seconds)

    # -- metrics ----------------------------------------------------------------------------

    async def usage(self) -> NodeUsage:
        """MetricsSource: CPU and memory of every running pod from Nomad's allocation stats
        (``metrics.py``).  The views are kept current by the notifier and the backstop list;
        before any listing happened (no views yet) one listing fills them."""
        if not self.book.views:
            for region, ns_param in self._listing.scopes():
                await self._listing.refresh(region, ns_param)
        return await self.metrics.usage(list(self.book.views.values()))
