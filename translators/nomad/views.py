"""``JobBook``: the translator's in-memory view of the Nomad jobs it owns.

One ``JobView`` per owned job (key: region, namespace, job ID), fed from three sources — the
job ``create`` just registered, the backstop list, the event stream — that all merge
*monotonically*: an allocation or job is only replaced by one with an equal or newer
``ModifyIndex``, so a slow list can never roll back what the event stream already reported.
Jobs of other owners are remembered as *foreign* so the event path does not fetch them again.

Pure bookkeeping, no I/O: the one place that needs Nomad (fetching the job of an allocation
event whose job is unknown) is a callback the caller passes in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from translators.nomad.jobs import is_owned
from translators.nomad.placements import placement_text
from translators.nomad.status import JobView

JSON = dict[str, Any]
Key = tuple[str, str, str]  # (region, namespace, job id)
#: Allocation client statuses that are final.
TERMINAL = frozenset({"complete", "failed", "lost"})
#: Fetches (and merges) the view of a job an event mentions: (job id, namespace, region).
ViewFor = Callable[[str, str, str], Awaitable[JobView | None]]


def view_key(view: JobView) -> Key:
    return (view.region, view.namespace, view.job_id)


def merge_alloc(view: JobView, alloc: Mapping[str, Any]) -> bool:
    """Merge an allocation (stub or full) into the view; False when ours is newer."""
    if not view.is_run(alloc):
        return False  # of an earlier job of this ID (docs/design/nomad.md, "Run again")
    aid = str(alloc.get("ID", ""))
    old = view.allocs.get(aid)
    if old is not None and int(old.get("ModifyIndex") or 0) > int(alloc.get("ModifyIndex") or 0):
        return False
    merged = dict(old or {})
    merged.update(alloc)
    view.allocs[aid] = merged
    return True


class JobBook:
    """The views of one node's jobs plus the set of foreign job keys seen."""

    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        self.views: dict[Key, JobView] = {}
        self.foreign: set[Key] = set()

    def merge_job(self, job: Mapping[str, Any], *, region: str) -> JobView | None:
        """Upsert the view of an owned job; None (and remembered) for anyone else's job."""
        ns = str(job.get("Namespace") or "default")
        key = (region, ns, str(job["ID"]))
        if not is_owned(job.get("Meta"), self.node_name):
            if len(self.foreign) > 10_000:
                self.foreign.clear()
            self.foreign.add(key)
            return None
        view = self.views.get(key)
        created = int(job.get("CreateIndex") or 0)
        if view is not None and created and view.create_index:
            if created < view.create_index:
                return view  # a late report of an earlier job of this ID
            if created > view.create_index:
                view = None  # a later job of this ID (the earlier one was purged): its own view
        if view is None:
            view = JobView.from_job(job, region=region)
            # the scope's region, as the key has it ("" = the agent's own): a view found under
            # its key is removed under the same key (``view_key``), not under the job's
            # "global" while the book holds it under ""
            view.region = region
            self.views[key] = view
        elif int(job.get("ModifyIndex") or 0) >= view.modify_index:
            view.update_job(job)
        return view

    def registered(
        self, job: Mapping[str, Any], *, region: str, before: JobView | None = None
    ) -> JobView:
        """The view of a job this agent has just registered (``job``: the submitted job with
        the reply's ``JobModifyIndex`` as ``ModifyIndex``; ``before``: the view the book held
        under its key when the register call was sent).

        The event stream may have merged this very registration before the reply was handled —
        its Job event, and the evaluation that could not place it, whose placement reason no
        second event repeats: a view made since the call was sent, at least as new as the
        reply, is kept.  Any other view is of an earlier job of the same ID (a stopped or
        purged one; after a state loss Nomad's indexes start again, so only ``before`` tells
        an old view from a new one) and is replaced."""
        key = (region, str(job.get("Namespace") or "default"), str(job["ID"]))
        index = int(job.get("ModifyIndex") or 0)
        seen = self.views.get(key)
        if seen is not None and seen is not before and index > 0 and seen.modify_index >= index:
            seen.runs_since(index)
            return seen
        self.views.pop(key, None)
        view = self.merge_job(job, region=region)
        if view is None:
            raise ValueError(f"nomad job {job['ID']!r} is not this node's to register")
        view.runs_since(index)
        return view

    def apply_listing(
        self, region: str, ns_param: str, jobs: Sequence[JSON], allocs: Sequence[JSON], index: int
    ) -> list[JobView]:
        """Merge one scope's job list and allocation list; forget the scope's jobs purged by
        others (this agent's purged jobs stay while their allocations stop)."""
        seen: dict[Key, JobView] = {}
        for job in jobs:
            view = self.merge_job(job, region=region)
            if view is not None:
                seen[view_key(view)] = view
        by_job: dict[tuple[str, str], list[JSON]] = {}
        for a in allocs:
            by_job.setdefault(
                (str(a.get("Namespace") or "default"), str(a.get("JobID"))), []
            ).append(a)
        for key, view in list(self.views.items()):
            in_scope = key[0] == region and (ns_param == "*" or key[1] == ns_param)
            if not in_scope or key in seen:
                continue
            if view.purged:
                # purged by this agent, its allocations still stopping: they are listed under
                # its ID until they end (the translator forgets the view then)
                seen[key] = view
            elif view.modify_index <= index:
                # purged by someone else; not one registered after the listing
                del self.views[key]
        for key, view in seen.items():
            for a in by_job.get((key[1], key[2]), []):
                merge_alloc(view, a)
        return list(seen.values())

    async def apply_events(
        self, events: Sequence[JSON], *, region: str, view_for: ViewFor
    ) -> tuple[list[JobView], list[JobView]]:
        """Merge a batch of Job/Allocation/Evaluation events; returns the views they changed
        and the views of jobs a deregistration was seen for: a ``job-deregister`` evaluation
        (Nomad 1.6.3 sends no event when a purge deletes the job itself, only that
        evaluation) or a deleted Job payload (dropped from the book here)."""
        touched: dict[Key, JobView] = {}
        deleted: dict[Key, JobView] = {}
        for ev in events:
            topic = ev.get("Topic")
            payload = ev.get("Payload") or {}
            if topic == "Job" and payload.get("Job"):
                job = payload["Job"]
                key = (region, str(job.get("Namespace") or "default"), str(job.get("ID")))
                if payload.get("Deleted"):
                    gone = self.views.get(key)
                    if gone is not None and gone.purged:
                        continue  # this agent's purge: kept until its allocations end
                    # a deletion older than the view is of an earlier job of the same ID
                    if gone is not None and int(job.get("ModifyIndex") or 0) >= gone.modify_index:
                        del self.views[key]
                        deleted[key] = gone
                        touched.pop(key, None)
                    continue
                view = self.merge_job(job, region=region)
                if view is not None:
                    touched[key] = view
            elif topic == "Allocation" and payload.get("Allocation"):
                alloc = payload["Allocation"]
                view = await view_for(
                    str(alloc.get("JobID")), str(alloc.get("Namespace") or "default"), region
                )
                if view is not None and merge_alloc(view, alloc):
                    view.placement = ""
                    touched[view_key(view)] = view
            elif topic == "Evaluation" and payload.get("Evaluation"):
                ev_obj = payload["Evaluation"]
                key = (region, str(ev_obj.get("Namespace") or "default"), str(ev_obj.get("JobID")))
                view = self.views.get(key)
                if view is not None and ev_obj.get("TriggeredBy") == "job-deregister":
                    deleted[key] = view
                if view is not None:
                    text = placement_text(ev_obj)
                    if text and not view.allocs:
                        view.placement = text
                        touched[key] = view
        return list(touched.values()), list(deleted.values())
