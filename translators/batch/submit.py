"""Burst submission through add-task-collection.

Every ``create`` of the translator takes a reservation first (``reserve()``, before its first
``await``), renders its tasks (init tasks + main task of one pod) and hands them to one
``CollectionSubmitter``.  Creates that arrive together — the pod workers run concurrently — are
coalesced: the flusher waits while reserved creates are still rendering (or until a full chunk is
queued), lets the event loop settle (plus ``linger`` seconds), then packs everything queued into
chunks that respect the service limits (≤ ``max_tasks`` tasks, serialized body ≤
``max_bytes``) and sends one add-task-collection call per chunk.  So 250 pods created at once cost
3 calls, not 250.  How many creates arrive together is bounded by the gateway's pod workers
(``[pods] workers``); raise it for bursty Batch nodes.

If the service still answers ``413 RequestBodyTooLarge`` (its exact byte limit is not documented
beyond "1 MB") the chunk is split in halves and retried; a single task that is too large on its
own fails with ``BackendRejected(reason="RequestBodyTooLarge")``.  Results are per task: the
service's ``{status, taskId, error}`` entry, or the ``BackendError`` that failed its chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from translators.base import JSON, BackendError, BackendRejected, BackendUnavailable

Send = Callable[[list[JSON]], Awaitable[list[JSON]]]
Result = JSON | BackendError

_ENVELOPE = len(b'{"value": []}')


def task_bytes(task: JSON) -> int:
    """Serialized size of one task inside the collection body (with its separator)."""
    return len(json.dumps(task).encode()) + 2


def plan_chunks(tasks: Sequence[JSON], *, max_tasks: int, max_bytes: int) -> list[list[JSON]]:
    """Greedy packing in order: each chunk ≤ max_tasks tasks and ≤ max_bytes serialized."""
    chunks: list[list[JSON]] = []
    current: list[JSON] = []
    size = _ENVELOPE
    for task in tasks:
        n = task_bytes(task)
        if current and (len(current) >= max_tasks or size + n > max_bytes):
            chunks.append(current)
            current, size = [], _ENVELOPE
        current.append(task)
        size += n
    if current:
        chunks.append(current)
    return chunks


class Reservation:
    """A create that will submit soon; the flusher waits for it (see ``reserve``)."""

    def __init__(self, owner: CollectionSubmitter) -> None:
        self._owner = owner
        self._open = True

    def release(self) -> None:
        if self._open:
            self._open = False
            self._owner._building -= 1
            self._owner._changed.set()

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def submit(self, tasks: list[JSON]) -> dict[str, Result]:
        return await self._owner.submit(tasks, reservation=self)


@dataclass
class _Pending:
    tasks: list[JSON]
    future: asyncio.Future[dict[str, Result]]


class CollectionSubmitter:
    def __init__(
        self,
        send: Send,
        *,
        max_tasks: int,
        max_bytes: int,
        linger: float,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self._send = send
        self.max_tasks = max_tasks
        self.max_bytes = max_bytes
        self.linger = linger
        self._sleep = sleep
        self._queue: list[_Pending] = []
        self._flusher: asyncio.Task[None] | None = None
        self._building = 0
        self._changed = asyncio.Event()
        #: Longest real wait for reserved creates before sending what is queued.
        self.max_wait = 2.0

    def reserve(self) -> Reservation:
        """Announce a create that is about to render; call before its first ``await``."""
        self._building += 1
        return Reservation(self)

    async def submit(
        self, tasks: list[JSON], *, reservation: Reservation | None = None
    ) -> dict[str, Result]:
        """Queue one pod's tasks; resolves with a result per task id once they were sent."""
        future: asyncio.Future[dict[str, Result]] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(list(tasks), future))
        if reservation is not None:
            reservation.release()
        self._changed.set()
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await future

    def _queued_tasks(self) -> int:
        return sum(len(p.tasks) for p in self._queue)

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait
        while self._queued_tasks() < self.max_tasks:  # a full chunk goes at once
            seen = len(self._queue)
            for _ in range(3):
                await asyncio.sleep(0)
            if self.linger > 0:
                await self._sleep(self.linger)
            if self._building > 0 and loop.time() < deadline:
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), deadline - loop.time())
                continue
            if len(self._queue) == seen:
                break
        if self._building > 0 and self._queued_tasks() >= self.max_tasks:
            # More creates are rendering: send one full chunk now, the rest joins them.
            batch: list[_Pending] = []
            count = 0
            while self._queue and (
                not batch or count + len(self._queue[0].tasks) <= self.max_tasks
            ):
                count += len(self._queue[0].tasks)
                batch.append(self._queue.pop(0))
        else:
            batch, self._queue = self._queue, []
        self._flusher = asyncio.create_task(self._flush()) if self._queue else None
        results: dict[str, Result] = {}
        try:
            tasks = [t for p in batch for t in p.tasks]
            for chunk in plan_chunks(tasks, max_tasks=self.max_tasks, max_bytes=self.max_bytes):
                await self._send_chunk(chunk, results)
        except BaseException as exc:  # cancelled or a bug: never leave a create hanging
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(
                        exc if isinstance(exc, Exception) else BackendUnavailable("cancelled")
                    )
            raise
        for p in batch:
            if not p.future.done():
                p.future.set_result({str(t["id"]): results[str(t["id"])] for t in p.tasks})

    async def _send_chunk(self, chunk: list[JSON], results: dict[str, Result]) -> None:
        try:
            values = await self._send(chunk)
        except BackendRejected as exc:
            if exc.reason != "RequestBodyTooLarge":
                for t in chunk:
                    results[str(t["id"])] = exc
                return
            if len(chunk) == 1:
                results[str(chunk[0]["id"])] = BackendRejected(
                    f"task {chunk[0]['id']} is too large for Azure Batch on its own "
                    f"({task_bytes(chunk[0])} bytes serialized)",
                    status=413,
                    reason="RequestBodyTooLarge",
                )
                return
            mid = len(chunk) // 2
            await self._send_chunk(chunk[:mid], results)
            await self._send_chunk(chunk[mid:], results)
            return
        except BackendError as exc:
            for t in chunk:
                results[str(t["id"])] = exc
            return
        by_id = {str(v.get("taskId", "")).lower(): v for v in values}
        for t in chunk:
            tid = str(t["id"])
            results[tid] = by_id.get(tid.lower()) or BackendUnavailable(
                f"Azure Batch returned no result for task {tid}"
            )
