"""``GET /containerLogs/{ns}/{pod}/{container}``: validate the options, stream the bytes.

Query parameters (``PodLogOptions`` as the API server forwards them,
docs/design/kubelet-contract.md, "Log parameters"): ``follow``, ``previous``, ``timestamps``
(booleans), ``tailLines`` ≥ 0 (legacy ``tail``, ``all``), ``limitBytes`` ≥ 1, ``sinceSeconds`` ≥ 1
**or** ``sinceTime`` (RFC 3339; both → 400), ``stream`` = ``All``/``Stdout``/``Stderr`` (not
together with ``tailLines``).  Bad values are a 400 naming the parameter.

Streaming: the first chunk is fetched *before* the 200 goes out, so "no such container" or an
option the backend cannot honour is still a proper 404/400.  Then each chunk is written and
the socket drained before the next is pulled (back-pressure: a slow client slows the backend
read, never our memory).  A follow has no server timeout; it ends when the backend stream
ends (container finished) or the client goes away, whichever comes first — the backend
iterator is closed either way.  ``limitBytes`` is enforced here too, so a backend that
ignores it cannot overrun it.

Internal to ``gateway.kubelet.api``: ``routes`` calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import logging
from collections.abc import AsyncIterator, Mapping

from gateway.kubelet.server import Exchange, HttpError
from translators.base import LogOptions
from vkgate_core.timeparse import parse_rfc3339

log = logging.getLogger(__name__)

_BOOL = {
    "1": True,
    "t": True,
    "true": True,
    "yes": True,
    "0": False,
    "f": False,
    "false": False,
    "no": False,
    "": False,
}
STREAMS = ("All", "Stdout", "Stderr")


def _bool(query: Mapping[str, list[str]], name: str) -> bool:
    values = query.get(name)
    if not values:
        return False
    v = values[0].strip().lower()
    if v not in _BOOL:
        raise HttpError(400, f"invalid {name}={values[0]!r}: expected true or false")
    return _BOOL[v]


def _int(query: Mapping[str, list[str]], name: str, minimum: int) -> int | None:
    values = query.get(name)
    if not values:
        return None
    try:
        n = int(values[0])
    except ValueError:
        raise HttpError(400, f"invalid {name}={values[0]!r}: expected an integer") from None
    if n < minimum:
        raise HttpError(400, f"invalid {name}={n}: must be >= {minimum}")
    return n


def parse_log_options(query: Mapping[str, list[str]], *, now: _dt.datetime) -> LogOptions:
    """``PodLogOptions`` from a query string; ``HttpError(400)`` on any bad value."""
    q = dict(query)
    tail = q["tail"][0] if q.get("tail") else None
    if tail is not None:  # legacy spelling
        if tail == "all":
            q.pop("tailLines", None)
        else:
            q["tailLines"] = [tail]
    tail_lines = _int(q, "tailLines", 0)
    limit_bytes = _int(q, "limitBytes", 1)
    since_seconds = _int(q, "sinceSeconds", 1)
    since_time_raw = q["sinceTime"][0] if q.get("sinceTime") else None
    if since_seconds is not None and since_time_raw is not None:
        raise HttpError(400, "at most one of sinceSeconds or sinceTime may be specified")
    since: _dt.datetime | None = None
    if since_seconds is not None:
        since = now - _dt.timedelta(seconds=since_seconds)
    elif since_time_raw is not None:
        try:
            since = parse_rfc3339(since_time_raw, naive="reject")
        except ValueError:
            raise HttpError(
                400, f"invalid sinceTime={since_time_raw!r}: expected RFC 3339"
            ) from None
    stream = (q.get("stream") or ["All"])[0] or "All"
    if stream not in STREAMS:
        raise HttpError(400, f"invalid stream={stream!r}: expected All, Stdout or Stderr")
    if stream != "All" and tail_lines is not None:
        raise HttpError(400, "tailLines is not supported when stream is Stdout or Stderr")
    return LogOptions(
        follow=_bool(q, "follow"),
        tail_lines=tail_lines,
        since=since,
        timestamps=_bool(q, "timestamps"),
        limit_bytes=limit_bytes,
        previous=_bool(q, "previous"),
        stream=stream,
    )


async def stream_logs(
    ex: Exchange,
    chunks: AsyncIterator[bytes],
    first: bytes | asyncio.Future[bytes] | None,
    options: LogOptions,
) -> int:
    """Write ``first`` (a chunk, or the pending fetch of it) and the rest of ``chunks`` as a
    chunked 200; returns the bytes sent."""
    budget = options.limit_bytes
    sent = 0
    await ex.start(200, content_type="text/plain; charset=utf-8")

    async def pump() -> None:
        nonlocal sent
        try:
            pending = await first if isinstance(first, asyncio.Future) else first
        except StopAsyncIteration:
            return
        while True:
            if pending is not None:
                data = pending if budget is None else pending[: budget - sent]
                await ex.write(data)
                sent += len(data)
                if budget is not None and sent >= budget:
                    return
            try:
                pending = await chunks.__anext__()
            except StopAsyncIteration:
                return

    task = asyncio.create_task(pump())
    gone = asyncio.create_task(ex.client_gone.wait())
    try:
        done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # re-raise backend errors mid-stream
            await ex.end()
        else:
            log.debug("logs: client went away after %d bytes", sent)
    finally:
        for t in (task, gone):
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
    return sent
