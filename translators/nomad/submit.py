"""Submitting a pod to Nomad: render its job, write its Variable, register the job.

Internal to the package: ``NomadTranslator``'s ``create``, ``update`` and ``render_spec`` are
``Submitter``'s.  The job itself comes from ``jobs.py`` (the template context, the template,
the checks on what it rendered); this module owns the requests:

* ``create`` writes the job's Variable (``variables.VariableStore``: the pod's files and Secret
  env values) and then registers the job only if no job of that ID exists (``EnforceIndex`` with
  index 0): one request for a new pod, where a read first cost two.  A conflict is the register
  race — the job already there is this pod's when its ``Meta`` names the pod's UID and this node
  (a retry, or a registration whose answer was lost), and is taken as it is; a stopped one is
  registered again over; anyone else's is refused (docs/design/nomad.md, "Requests per pod").
* ``update`` writes changed file contents to the Variable (rewritten in the running task) and
  re-registers the job for a changed image; any other change needs a re-create
  (``job_changes``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from translators.base import BackendConflict, ResolvedPod, WorkloadState
from translators.nomad.client import NomadClient
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import (
    META_UID,
    context,
    finish_job,
    is_owned,
    sealed,
    template_for,
)
from translators.nomad.listing import Listing
from translators.nomad.nodes import Nodes
from translators.nomad.purge import Purges
from translators.nomad.status import JobView
from translators.nomad.variables import VariableStore
from translators.nomad.views import JobBook

if TYPE_CHECKING:
    from translators.render.engine import Renderer

JSON = dict[str, Any]


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


class Submitter:
    """Renders and registers the jobs of one translator's pods."""

    def __init__(
        self,
        client: NomadClient,
        config: NomadConfig,
        *,
        settings: Mapping[str, Any],
        renderer: Renderer,
        node_name: str,
        book: JobBook,
        nodes: Nodes,
        listing: Listing,
        variables: VariableStore,
        purges: Purges,
        state: Callable[[JobView], WorkloadState],
    ) -> None:
        self.client = client
        self.config = config
        self.settings = settings
        self.renderer = renderer
        self.node_name = node_name
        self.book = book
        self.nodes = nodes
        self.listing = listing
        self.variables = variables
        self.purges = purges
        #: A view as the WorkloadState the translator reports.
        self._state = state

    async def render(self, pod: ResolvedPod) -> tuple[JSON, dict[str, str]]:
        """The job, checked against the node's policy (``jobs.finish_job``), and the items of
        its Nomad Variable — vkgate's (``jobs.backend_info``), never the template's copy."""
        factor = await self.nodes.mhz_per_core()
        name = template_for(pod, renderer=self.renderer, cfg=self.config)
        ctx = context(pod, cfg=self.config, settings=self.settings, factor=factor)
        out = await self.renderer.arender(name, sealed(ctx))
        info = ctx["backend_info"]
        spec = finish_job(out, pod, info=info, template=name, cfg=self.config)
        return spec, dict(info["variable"]["items"])

    def render_spec(self, pod: ResolvedPod) -> JSON:
        """What ``create`` would send (offline: F from the settings, else the last measured
        value, else 1000 MHz per core): the ``POST /v1/jobs`` body and, under ``"Variable"``,
        the job's Nomad Variable written before it — the pod's files and Secret env values,
        which the job itself never carries (docs/design/secrets.md).  A pod without any has
        no ``"Variable"``."""
        factor = self.nodes.offline_mhz_per_core()
        name = template_for(pod, renderer=self.renderer, cfg=self.config)
        ctx = context(pod, cfg=self.config, settings=self.settings, factor=factor)
        info = ctx["backend_info"]
        spec = finish_job(
            self.renderer.render(name, sealed(ctx)), pod, info=info, template=name, cfg=self.config
        )
        items = dict(info["variable"]["items"])
        if not items:
            return spec
        return {**spec, "Variable": {"Path": info["variable"]["path"], "Items": items}}

    async def create(self, pod: ResolvedPod) -> WorkloadState:
        self.purges.purged.pop(pod.uid, None)  # run again (a lost workload): its new job is live
        spec, items = await self.render(pod)
        job = spec["Job"]
        jid, ns = str(job["ID"]), str(job.get("Namespace") or "default")
        region = str(job.get("Region") or self.config.region)
        self.purges.purged_jobs.pop((region, ns, jid), None)
        await self.variables.write(jid, items, namespace=ns, region=region)
        self.variables.registering(jid, items, namespace=ns, region=region)
        # Registered only if no job of that ID exists (EnforceIndex with index 0): one request
        # for a new pod, where a read first cost two.  The Variable is written before: the
        # ID holds the pod's UID, so a job already there is this pod's, its files the same
        # (docs/design/nomad.md, "Requests per pod").
        # What the book holds before the call is of an earlier job of this ID, if any (a
        # create runs a pod that has no workload): out of the book while the call is on its
        # way, so the event stream's report of this registration makes a view of its own and
        # never lends it the earlier job's allocations (after a Nomad that lost its state,
        # the indexes cannot tell them apart; docs/design/nomad.md, "Run again").  A view the
        # stream makes meanwhile is of this registration (JobBook.registered).
        before = self.book.views.pop((region, ns, jid), None)
        try:
            reply = await self.client.call(
                "POST",
                "/jobs",
                body={**spec, "EnforceIndex": True, "JobModifyIndex": 0},
                namespace=ns,
                region=region,
            )
        except BackendConflict:
            existing = await self.listing.get_job(jid, namespace=ns, region=region)
            if existing is not None and not existing.get("Stop"):
                if (existing.get("Meta") or {}).get(META_UID) != pod.uid or not is_owned(
                    existing.get("Meta"), self.node_name
                ):
                    if before is not None:
                        self.book.views.setdefault((region, ns, jid), before)
                    raise BackendConflict(
                        f"nomad job {jid!r} exists and belongs to another pod or owner"
                    ) from None
                if before is not None and before.create_index == existing.get("CreateIndex"):
                    self.book.views.setdefault((region, ns, jid), before)  # the same job
                view = self.book.merge_job(existing, region=region)
                assert view is not None
                return self._state(view)
            # stopped (or purged meanwhile): registered again over it
            reply = await self.client.call("POST", "/jobs", body=spec, namespace=ns, region=region)
        except BaseException:
            if before is not None:  # nothing registered: the book's view stands
                self.book.views.setdefault((region, ns, jid), before)
            raise
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
            state = replace(state, events=(("Warning", "NomadWarning", warnings, ""),))
        return state

    async def update(self, pod: ResolvedPod, current: WorkloadState) -> bool:
        """Changed ConfigMap/Secret/downward API file contents (and Secret env values) go to the
        job's Variable: the running task's files are rewritten in place (``ChangeMode: noop``,
        the kubelet's eventual file update; env changes with the next restart).  A changed
        image re-registers the job (Nomad replaces the allocation); any other change (env,
        resources, ports, …) needs a re-create, so say so."""
        spec, items = await self.render(pod)
        job = spec["Job"]
        ns, region = str(job.get("Namespace") or "default"), str(job.get("Region") or "")
        existing = await self.listing.get_job(job["ID"], namespace=ns, region=region)
        if existing is None:
            return False
        await self.variables.write(str(job["ID"]), items, namespace=ns, region=region)
        changed = job_changes(existing, job)
        if not changed:
            return True
        if changed <= {"image", "files"}:
            await self.client.call("POST", "/jobs", body=spec, namespace=ns, region=region)
            return True
        return False
