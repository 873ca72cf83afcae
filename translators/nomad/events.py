"""Nomad's event stream (``/v1/event/stream``) as an endless async iterator of event batches.

The stream is ndjson: one ``{"Index": n, "Events": [...]}`` object per line (several lines
may share an index, one per topic), and ``{}`` heartbeats every ten seconds.  This module
owns the connection, read by a task of its own into a bounded backlog so that a consumer
busy with a list never leaves it unread (Nomad drops a subscriber that falls behind: see
docs/design/nomad.md, "Event stream"): it reconnects after a drop, the server's end of the
stream (Nomad closes a subscriber that fell behind; a line cut there is not read), a line that
is not JSON, or
silence longer than ``idle_timeout``, resuming at the **newest index known**: the last batch's,
or the newest ``X-Nomad-Index`` any answer carried when that is newer.  Lines end at "\n"
only (``vkgate_core.ndjson``: not at the Unicode line breaks JSON strings may carry raw).
Resuming at an index replays the events of that index, which is harmless because consumers
apply allocation/job payloads idempotently (newer ``ModifyIndex`` wins); resuming one past it
could lose the other lines of the same index.  Whatever lies between the last batch and the
resume point (and whatever left Nomad's buffer) is not replayed: after every *re*connect the
iterator yields ``None``, telling the consumer to resync with a list, taken after the new
subscription began.  Resuming at the last batch instead put a dropped subscriber at the oldest
batch Nomad held, which is where the next batch drops it (docs/design/nomad.md, "Event stream").

Reconnect delays come from the same backoff tuple as the HTTP retries, through an injectable
``sleep`` (tests never wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx

from translators.base import BackendError
from translators.nomad.client import NomadClient, Sleep
from vkgate_core import ndjson

log = logging.getLogger(__name__)

TOPICS = ("Job", "Allocation", "Evaluation")

#: What the reader task hands the consumer: a batch, ``None`` (resync) or its own failure.
Backlog = asyncio.Queue[list[dict[str, Any]] | Exception | None]


class EventStream:
    """Yields lists of events (``None`` after a reconnect = resync needed).  Never ends."""

    def __init__(
        self,
        client: NomadClient,
        *,
        namespace: str,
        region: str = "",
        topics: Sequence[str] = TOPICS,
        index: int = 0,
        idle_timeout: float = 35.0,
        backoff: Sequence[float] = (0.2, 0.5, 1.0, 2.0, 4.0),
        sleep: Sleep | None = None,
        max_backlog: int = 10_000,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.region = region
        self.topics = list(topics)
        #: Resume point: the Index of the last batch received.
        self.index = index
        self.idle_timeout = idle_timeout
        self.backoff = tuple(backoff) or (1.0,)
        self._sleep = sleep if sleep is not None else client._sleep
        #: Batches read but not yet handled by the consumer, at most (then one resync).
        self.max_backlog = max_backlog
        #: Times the backlog overflowed (for tests and metrics).
        self.overflows = 0
        #: A resync (``None``) is in the backlog, not yet taken by the consumer.
        self._resync_queued = False
        #: Number of successful connections (for tests and metrics).
        self.connections = 0
        #: True while connected (the agent then relies on the stream to see stops).
        self.live = False
        #: Set when a connection starts or ends and at every line received (heartbeats
        #: included, every 10 s from Nomad): what the notifier's backstop waits on.
        self.activity = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[list[dict[str, Any]] | None]:
        """Batches as read by a reader task that drains the connection whatever the consumer
        is doing: a consumer that awaits a list (the resync after a reconnect takes seconds
        at thousands of jobs) or a read must not leave Nomad's side of the stream unread,
        since Nomad drops a subscriber ``event_buffer_size`` index batches behind
        (docs/design/nomad.md, "Event stream")."""
        backlog: Backlog = asyncio.Queue()
        reader = asyncio.create_task(self._read(backlog))
        try:
            while True:
                item = await backlog.get()
                if isinstance(item, Exception):
                    raise item
                if item is None:
                    self._resync_queued = False  # begun: a later reconnect needs its own
                yield item
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def _read(self, backlog: Backlog) -> None:
        try:
            await self._connect_forever(backlog)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # handed to the consumer, which raises it
            backlog.put_nowait(exc)

    def _put(
        self,
        backlog: Backlog,
        item: list[dict[str, Any]] | None,
    ) -> None:
        if item is None and self._resync_queued:
            # a resync the consumer has not begun yet lists after this reconnect too: in a
            # burst Nomad dropped the stream four times in two seconds, and each queued resync
            # (two full lists) put the consumer further behind
            return
        if item is not None and backlog.qsize() >= self.max_backlog:
            # the consumer is far behind: its unread batches are dropped for one resync,
            # which lists what they would have told (the stream itself stays connected)
            log.warning(
                "nomad event stream: %d batches not yet handled; dropping them for a resync",
                backlog.qsize(),
            )
            while not backlog.empty():
                backlog.get_nowait()
            self.overflows += 1
            self._resync_queued = True
            backlog.put_nowait(None)
        if item is None:
            self._resync_queued = True
        backlog.put_nowait(item)

    async def _connect_forever(self, backlog: Backlog) -> None:
        failures = 0
        while True:
            params: dict[str, Any] = {"topic": self.topics}
            if self.connections:
                # a reconnect: resume at the newest index known.  Nomad starts a subscriber
                # at the oldest batch it still holds when the index asked for is older, which
                # after a drop is exactly event_buffer_size batches behind — dropped again at
                # the next batch (seven times in eleven seconds in a 5,000-pod run).  What lies
                # between is in the resync that follows every reconnect, listed after the
                # new subscription began (docs/design/nomad.md, "Event stream").
                self.index = max(self.index, self.client.newest_index(self.region))
            if self.index:
                params["index"] = self.index
            try:
                async with self.client.stream(
                    "/event/stream",
                    params=params,
                    namespace=self.namespace,
                    region=self.region,
                    read_timeout=self.idle_timeout,
                ) as resp:
                    self.connections += 1
                    self.live = True
                    self.activity.set()
                    if self.connections > 1:
                        self._put(backlog, None)
                    lines = ndjson.lines(resp.aiter_bytes())  # "\n" only: docstring there
                    while True:
                        try:
                            # asyncio.timeout, not wait_for: 3.11's wait_for loses a
                            # cancel that meets a line already read (the reader outlived its
                            # consumer), and it costs a task per line
                            async with asyncio.timeout(self.idle_timeout):
                                line = await anext(lines)
                        except StopAsyncIteration:
                            # Nomad closes a subscriber that fell behind its event buffer
                            log.info("nomad event stream ended, resuming at %d", self.index)
                            break
                        except TimeoutError:
                            log.info(
                                "nomad event stream silent for %ss, reconnecting", self.idle_timeout
                            )
                            break
                        self.activity.set()
                        if not line.strip():
                            continue
                        try:
                            batch = json.loads(line)
                        except ValueError:
                            log.info(
                                "nomad event stream: a line that is not JSON, reconnecting at %d",
                                self.index,
                            )
                            break
                        failures = 0
                        if not isinstance(batch, dict) or not batch:
                            continue  # heartbeat
                        self.index = int(batch.get("Index") or self.index)
                        events = batch.get("Events") or []
                        if events:
                            self._put(backlog, list(events))
            except httpx.HTTPError as exc:
                log.info("nomad event stream dropped (%s); resuming at %d", exc, self.index)
            except BackendError as exc:
                log.warning("nomad event stream: %s", exc)
            finally:
                self.live = False
                self.activity.set()
            delay = self.backoff[min(failures, len(self.backoff) - 1)]
            failures += 1
            await self._sleep(delay)
