"""``ChangeFeed``: the Nomad translator's push path (``Notifier.changes()``).

Per watched (region, namespace) scope: an initial list, then two loops side by side —
``/v1/event/stream`` (Job, Allocation, Evaluation topics; ``events.EventStream`` owns the
connection and asks for a resync after every reconnect) and the backstop.  While the stream
is down the backstop is a blocking query on ``/v1/allocations`` that resyncs whenever Nomad's
index moves; while it is connected the stream reports every change (Nomad closes a subscriber
that falls behind rather than skip its events, and every reconnect resyncs), so the backstop
only resyncs every ``backstop_live_interval`` (docs/design/nomad.md, "Change feed at rest").
A scope that fails for any reason restarts with backoff, so a bug or an unexpected answer never
silently ends the notifier.  Every changed view becomes a ``WorkloadState``; identical states
are not yielded twice; a job deleted on the stream whose state was yielded becomes
``Vanished``.

The feed knows the translator only through the callables it is built with (list a scope,
apply events, map a view), so the bookkeeping stays in ``views.JobBook`` and the I/O in the
translator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from translators.base import BackendError, Vanished, WorkloadState
from translators.nomad.client import NomadClient, Sleep
from translators.nomad.config import NomadConfig
from translators.nomad.events import EventStream
from translators.nomad.status import JobView

log = logging.getLogger(__name__)

#: List one scope and bring its views up to date: (region, namespace param, ask placement
#: reasons of unplaced jobs) → (views, index).
Resync = Callable[[str, str, bool], Awaitable[tuple[list[JobView], int]]]
#: Apply a batch of events of one region: (events, region) → (changed views, deleted views).
ApplyEvents = Callable[
    [Sequence[dict[str, Any]], str], Awaitable[tuple[Sequence[JobView], Sequence[JobView]]]
]


class ChangeFeed:
    def __init__(
        self,
        client: NomadClient,
        config: NomadConfig,
        *,
        scopes: Sequence[tuple[str, str]],
        resync: Resync,
        apply_events: ApplyEvents,
        state: Callable[[JobView], WorkloadState],
        sleep: Sleep,
        monotonic: Callable[[], float],
        closed: asyncio.Event,
    ) -> None:
        self.client = client
        self.config = config
        self.scopes = list(scopes)
        self._resync = resync
        self._apply_events = apply_events
        self._state = state
        self._sleep = sleep
        self._monotonic = monotonic
        self._closed = closed
        #: Scope → the translator clock's time of its last resync.
        self._resynced: dict[tuple[str, str], float] = {}
        #: Background stream/backstop tasks; the translator cancels them on close() so none
        #: outlives the HTTP client (a consumer may drop the generator without closing it).
        self.tasks: set[asyncio.Task[None]] = set()
        #: The event stream of each scope while its loop runs (``live()``).
        self.streams: dict[tuple[str, str], EventStream] = {}
        #: The ``emit`` of each running ``changes()``: what ``push`` reaches.
        self._emitters: list[Callable[[Sequence[JobView]], None]] = []

    def push(self, views: Sequence[JobView]) -> None:
        """Report views the translator learned of outside the stream (a read of a purged job's
        allocations at the end of its grace period, while the stream lags behind): the pod
        finishes now, not when the stream catches up or at its deadline."""
        for emit in self._emitters:
            emit(views)

    def live(self) -> bool:
        """True while every scope's event stream is connected: the stream then reports a
        stopping job's end, and the agent need not re-list for it every second."""
        return len(self.streams) == len(self.scopes) and all(s.live for s in self.streams.values())

    async def changes(self) -> AsyncIterator[WorkloadState | Vanished]:
        queue: asyncio.Queue[WorkloadState | Vanished] = asyncio.Queue()
        last: dict[str, WorkloadState] = {}

        #: uid → (region, namespace) of the job whose state was yielded
        where: dict[str, tuple[str, str]] = {}

        def emit(views: Sequence[JobView]) -> None:
            for view in views:
                state = self._state(view)
                if last.get(view.ref.uid) != state:
                    last[view.ref.uid] = state
                    where[view.ref.uid] = (view.region, view.namespace)
                    queue.put_nowait(state)

        def vanish(views: Sequence[JobView]) -> None:
            for view in views:
                where.pop(view.ref.uid, None)
                if last.pop(view.ref.uid, None) is not None:
                    queue.put_nowait(Vanished(view.ref))

        async def resync(region: str, ns_param: str, placement: bool = True) -> int:
            views, index = await self._resync(region, ns_param, placement)
            self._resynced[(region, ns_param)] = self._monotonic()
            emit(views)
            # a yielded job of this scope the list no longer has is gone (e.g. a Nomad that
            # lost its state came back while the stream reconnected)
            listed = {v.ref.uid for v in views}
            for uid, (r, ns) in list(where.items()):
                if r == region and ns_param in ("*", ns) and uid not in listed:
                    del where[uid]
                    state = last.pop(uid, None)
                    if state is not None:
                        queue.put_nowait(Vanished(state.ref))
            return index

        async def stream(region: str, ns_param: str, start_index: int) -> None:
            events = EventStream(
                self.client,
                namespace=ns_param,
                region=region,
                index=start_index,
                idle_timeout=self.config.stream_idle_timeout,
                backoff=self.config.retry_backoff,
                sleep=self._sleep,
            )
            self.streams[(region, ns_param)] = events
            try:
                async for batch in events:
                    try:
                        if batch is None:
                            await resync(region, ns_param)
                            continue
                        changed, deleted = await self._apply_events(batch, region)
                        emit(changed)
                        vanish(deleted)
                    except BackendError as exc:
                        # the batch is lost: the backstop resyncs at the stream's next line
                        log.info("nomad: handling events failed, resync due: %s", exc)
                        self._resynced[(region, ns_param)] = float("-inf")
            finally:
                if self.streams.get((region, ns_param)) is events:
                    del self.streams[(region, ns_param)]

        async def backstop(region: str, ns_param: str, index: int) -> None:
            first = self.streams.get((region, ns_param))
            if first is not None and not first.connections:
                await first.activity.wait()  # the stream's first connect (or failure) decides
            while True:
                events = self.streams.get((region, ns_param))
                if events is not None and events.live:
                    # the stream's own lines (a heartbeat every 10 s) wake the check; time is
                    # the translator clock's
                    since = self._monotonic() - self._resynced.get((region, ns_param), 0.0)
                    if since < self.config.backstop_live_interval:
                        events.activity.clear()
                        await events.activity.wait()
                        continue
                    try:
                        # the stream carries placement reasons (Evaluation events)
                        await resync(region, ns_param, False)
                    except BackendError as exc:
                        log.info("nomad backstop list failed: %s", exc)
                        self._resynced[(region, ns_param)] = self._monotonic()
                    continue
                try:
                    reply = await self.client.blocking_get(
                        "/allocations",
                        index=index,
                        wait=self.config.blocking_wait,
                        params={"task_states": False},
                        namespace=ns_param,
                        region=region,
                    )
                    index = reply.index if reply.index >= index else 0
                    await resync(region, ns_param)
                    await self._sleep(self.config.backstop_interval)
                except BackendError as exc:
                    log.info("nomad backstop list failed: %s", exc)
                    await self._sleep(
                        self.config.retry_backoff[-1] if self.config.retry_backoff else 1.0
                    )

        async def scope(region: str, ns_param: str) -> None:
            """Initial list, then stream + backstop; restarted (with backoff) on any failure,
            so a bug or an unexpected answer never silently ends the notifier."""
            steps = self.config.retry_backoff or (1.0,)
            failures = 0
            while True:
                try:
                    index = await resync(region, ns_param)
                    failures = 0
                    await asyncio.gather(
                        stream(region, ns_param, index), backstop(region, ns_param, index)
                    )
                except asyncio.CancelledError:
                    raise
                except BackendError as exc:
                    log.info("nomad notifier (%s/%s): %s", region or "-", ns_param, exc)
                except Exception:
                    log.exception("nomad notifier (%s/%s) failed; restarting", region, ns_param)
                await self._sleep(steps[min(failures, len(steps) - 1)])
                failures += 1

        tasks = [asyncio.create_task(scope(r, n)) for r, n in self.scopes]
        self.tasks.update(tasks)
        self._emitters.append(emit)
        try:
            while not self._closed.is_set():
                yield await queue.get()
        finally:
            self._emitters.remove(emit)
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
