"""What the Nomad translator reads into its job book: the backstop list, one job, one pod's job.

Internal to the package: ``NomadTranslator`` holds one ``Listing`` and hands it to the pieces
that need a view (submit, purge, containers).  Every read merges into the one ``views.JobBook``
(monotonically: a slower read never rolls back what the event stream reported):

* ``refresh`` — the backstop list of one (region, namespace) scope: one job list (``meta=true``,
  filtered to vkgate's owner marker and this node) and ONE allocation list for all its pods
  (``task_states=true``);
* ``get_job``, ``read_allocs`` — one job, one job's allocations;
* ``locate`` — a pod's job: from the views (by its computed ID, else by a scan), else by its
  computed ID in each scope;
* ``fill_node_ips`` — what a view's ``WorkloadState`` needs beyond its allocation stubs: the
  client's address (``nodes.Nodes``) and, with bridge or CNI networking, the allocation's own
  address (one ``GET /v1/allocation/:id`` until one carries it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from translators.base import (
    OWNER_KEY,
    OWNER_VALUE,
    BackendError,
    BackendNotFound,
    PodRef,
    TranslationError,
)
from translators.nomad.client import NomadClient
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import META_NODE, META_UID, job_id
from translators.nomad.nodes import Nodes
from translators.nomad.overrides import mapped_namespace
from translators.nomad.status import JobView, needs_address
from translators.nomad.views import JobBook, merge_alloc

JSON = dict[str, Any]


class Listing:
    """Reads of this node's jobs and allocations, merged into the job book."""

    def __init__(
        self,
        client: NomadClient,
        config: NomadConfig,
        *,
        book: JobBook,
        nodes: Nodes,
        node_name: str,
    ) -> None:
        self.client = client
        self.config = config
        self.book = book
        self.nodes = nodes
        self.node_name = node_name
        #: (region, namespace param) scopes listed at least once: the job book knows their jobs.
        self.listed: set[tuple[str, str]] = set()
        #: (allocation, ModifyIndex) fetched whole for its own address (``fill_addresses``).
        self._address_fetched: set[tuple[str, int]] = set()

    def scopes(self) -> list[tuple[str, str]]:
        """(region, namespace query value) pairs that cover every job vkgate may own."""
        ns = self.config.all_namespaces
        ns_param = ns[0] if len(ns) == 1 else "*"
        return [(region, ns_param) for region in self.config.all_regions]

    def _owner_filter(self) -> str:
        return (
            f'Meta["{OWNER_KEY}"] == "{OWNER_VALUE}" and Meta["{META_NODE}"] == "{self.node_name}"'
        )

    async def refresh(self, region: str, ns_param: str) -> tuple[list[JobView], int]:
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
        self.listed.add((region, ns_param))
        return views, allocs_reply.index

    async def list_unlisted(self) -> None:
        """List every scope not listed yet, so the job book knows all of this node's jobs."""
        for region, ns_param in self.scopes():
            if (region, ns_param) not in self.listed:
                await self.refresh(region, ns_param)

    async def fill_node_ips(self, views: Sequence[JobView]) -> None:
        """The client addresses of the views' allocations (the clients read again when one is
        unknown) and the allocations' own addresses (``fill_addresses``)."""
        unknown = {
            str(a.get("NodeID"))
            for v in views
            for a in v.allocs.values()
            if a.get("NodeID") and str(a.get("NodeID")) not in self.nodes.ips
        }
        if unknown:
            with contextlib.suppress(BackendError):
                await self.nodes.read()
        await self.fill_addresses(views)

    async def fill_addresses(self, views: Sequence[JobView]) -> None:
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

    async def get_job(self, jid: str, *, namespace: str, region: str) -> JSON | None:
        try:
            job: JSON = await self.client.get(f"/job/{jid}", namespace=namespace, region=region)
            return job
        except BackendNotFound:
            return None

    async def read_allocs(self, view: JobView) -> Sequence[JSON]:
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

    async def locate(self, ref: PodRef) -> JobView | None:
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
                job = await self.get_job(jid, namespace=ns, region=region)
                if job is None:
                    continue
                if (job.get("Meta") or {}).get(META_UID) != ref.uid:
                    continue
                found = self.book.merge_job(job, region=region)
                if found is not None:
                    await self.read_allocs(found)
                    return found
        return None
