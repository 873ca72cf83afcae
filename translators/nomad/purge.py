"""Deleting a pod on Nomad: purge its job, then wait for its allocations to end.

Internal to the package: ``NomadTranslator.delete`` is ``Purges.delete``.

Delete purges the job (``DELETE /v1/job/:id?purge=true``): Nomad stops its allocations as a
stop would — SIGTERM, SIGKILL after the task's ``KillTimeout`` (from
``terminationGracePeriodSeconds``) — and the job is gone in one request and one evaluation.
Its view stays until every allocation has ended (their events, or a list of them under the
job's ID), so the gateway sees the containers terminate before the pod's final delete, as the
kubelet's do (docs/design/nomad.md, "Delete").  Then the job's Variable is deleted
(``variables.VariableStore``) and the view forgotten.  Nomad has no per-request grace, so when
the delete's grace is shorter a background task sends SIGKILL to the allocations once it has
passed (``/v1/client/allocation/:id/signal``).

While the event stream is connected, the wait for a placed job's end uses the stream alone
(``STREAMED_STOP_WAIT`` at a time, then a look at the view); a blocking query on the job's
allocations only while the stream is down or for a job never placed, and at most half the
node's connections at once (docs/design/nomad.md, "Connections").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from translators.base import BackendError, BackendNotFound, PodRef
from translators.nomad.client import NomadClient
from translators.nomad.config import NomadConfig
from translators.nomad.listing import Listing
from translators.nomad.runs import Runs
from translators.nomad.status import JobView
from translators.nomad.variables import VariableStore
from translators.nomad.views import TERMINAL, JobBook, Key, merge_alloc, view_key
from vkgate_core.clock import Clock

log = logging.getLogger(__name__)

JSON = dict[str, Any]

#: Pod uids whose purge the translator remembers (``Purges.purged``).
PURGED_MEMORY = 20_000
#: how long a stop's purge waits at a time for the connected event stream to show a placed
#: job's allocations ended before it looks again (the view, not Nomad: a resync after a failed
#: event batch refreshes it); a blocking query only while the stream is down or for a job
#: never placed.  Before, it asked Nomad after 10 s: 0.66 queries per pod at a 5,000-pod mass
#: delete, each holding one of the node's connections.
STREAMED_STOP_WAIT = 30.0


def all_ended(view: JobView) -> bool:
    return bool(view.allocs) and all(
        a.get("ClientStatus") in TERMINAL for a in view.allocs.values()
    )


class Purges:
    """The purges of one translator: what it is purging, what it purged, who waits."""

    def __init__(
        self,
        client: NomadClient,
        config: NomadConfig,
        *,
        clock: Clock,
        book: JobBook,
        listing: Listing,
        variables: VariableStore,
        runs: Runs,
        live: Callable[[], bool],
        push_end: Callable[[JobView], None],
    ) -> None:
        self.client = client
        self.config = config
        #: Purge deadlines and the stream waits' sleeps.
        self.clock = clock
        self.book = book
        self.listing = listing
        self.variables = variables
        self.runs = runs
        #: True while the translator's change stream is connected (``StreamHealth``).
        self._live = live
        #: Reports an end read from Nomad, not seen on the stream, to the change feeds.
        self._push_end = push_end
        #: The background waits for purged jobs' allocations to end (``finish_when_ended``).
        self.pending: dict[Key, asyncio.Task[None]] = {}
        #: Jobs whose purge this process has sent and not yet seen answered.
        self.stopping: set[Key] = set()
        #: Pod uids whose job this process purged (the last ``PURGED_MEMORY``): a later delete
        #: of the same pod is done at once, with no job read.
        self.purged: dict[str, None] = {}
        #: the same purges by job: a late allocation event of a purged job is not a job to
        #: look up (``NomadTranslator._view_for``; one 404 read per pod at a mass delete before)
        self.purged_jobs: dict[Key, None] = {}
        #: Blocking queries waiting for stopped jobs at once: at most half the connections
        #: (docs/design/nomad.md, "Connections"), so a mass delete without the event stream
        #: queues its waits here instead of taking every connection from creates and lists.
        self._stop_waits = asyncio.Semaphore(max(1, config.max_connections // 2))
        #: Stopped jobs waiting for their allocations to end, woken by the event stream.
        self._stop_waiters: dict[Key, asyncio.Event] = {}

    def background(self) -> list[asyncio.Task[None]]:
        """The waits running in the background (the translator cancels them on close)."""
        return list(self.pending.values())

    async def delete(self, ref: PodRef, *, grace_seconds: int) -> None:
        """Purge the pod's job at once (``DELETE /v1/job/:id?purge=true``): Nomad stops its
        allocations as a plain stop would (SIGTERM, SIGKILL after the task's ``KillTimeout``)
        and the job is gone in one request and one evaluation.  The view is kept until every
        allocation has ended, so the pod's containers terminate before its final delete, as the
        kubelet's do (docs/design/nomad.md, "Delete").  A later delete of the same pod only
        looks: it never waits for the end, the change stream reports it."""
        if ref.uid in self.purged:
            return  # finished already
        view = await self.listing.locate(ref)
        if view is None:
            return
        key = view_key(view)
        unknown = False  # the allocations could not be read: the background wait asks again
        if not view.purged:
            # marked before the request: its job-deregister evaluation may reach the stream
            # consumer before the answer reaches us, and is not news (``NomadTranslator._gone``)
            self.stopping.add(key)
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
                self.stopping.discard(key)
            view.stop = view.purged = True
            if not (view.allocs and self._live()):
                # no stream to report them, or none seen yet: Nomad's word (a purged job's
                # allocations are still listed under its ID until they are collected)
                try:
                    await self.listing.read_allocs(view)
                except BackendError as exc:
                    log.info("nomad: allocations of purged job %s: %s", view.job_id, exc)
                    unknown = True
        if not unknown and (not view.allocs or all_ended(view)):
            waiter = self._stop_waiters.get(key)
            if waiter is not None:
                waiter.set()  # the background wait ends without a request
            await self._finish(view)
            return
        if key not in self.pending or self.pending[key].done():
            self.pending[key] = asyncio.create_task(
                self._finish_when_ended(view, grace=max(0, grace_seconds))
            )

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
        self.purged[view.ref.uid] = None
        self.purged_jobs[key] = None
        if len(self.purged) > PURGED_MEMORY:
            del self.purged[next(iter(self.purged))]
        if len(self.purged_jobs) > PURGED_MEMORY:
            del self.purged_jobs[next(iter(self.purged_jobs))]
        self.runs.forget(list(view.allocs))
        await self.variables.delete(view.job_id, namespace=view.namespace, region=view.region)

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
                streamed = self._live() and bool(view.allocs)
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
                            await self.listing.read_allocs(view)
                        if all_ended(view):
                            self._push_end(view)  # the stream has not said so yet
                            break
                        await self._kill(view, list(view.allocs.values()))
                    continue
                if self._live() and await self._stop_streamed(view, wait):
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

    def wake(self, views: Sequence[JobView]) -> None:
        """Wake the stop waits (``_stop_streamed``) of the views whose allocations all ended."""
        for view in views:
            waiter = self._stop_waiters.get(view_key(view))
            if waiter is not None and all_ended(view):
                waiter.set()

    async def _stop_streamed(self, view: JobView, wait: float) -> bool:
        """Wait at most ``wait`` s for the event stream to show every allocation of the stopped
        job ended (``wake``, from the translator's events and resyncs); False when it did not
        (the caller then asks Nomad once, as without a stream: a missed event cannot hold a
        purge up)."""
        if all_ended(view):
            return True
        waiter = self._stop_waiters.setdefault(view_key(view), asyncio.Event())
        waiter.clear()
        woken = asyncio.ensure_future(waiter.wait())
        timer = asyncio.ensure_future(self.clock.sleep(wait))
        try:
            await asyncio.wait({woken, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            timer.cancel()
        return all_ended(view)
