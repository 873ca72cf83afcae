"""Container logs from ``/v1/client/fs/logs`` shaped like ``kubectl logs``.

Nomad keeps stdout and stderr in separate files and streams them as JSON frames
(``{"File", "Offset", "Data": <base64>}``, ``{}`` heartbeats, ``FileEvent`` notices).  This
module reads one or both, decodes the frames and applies the kubelet options:

=================  ==========================================================================
stream             ``All`` reads both types; ``Stdout``/``Stderr`` one
follow             ``follow=true``; Nomad never ends a follow stream by itself, so it ends
                   here when the task is ``dead`` (a watcher polls the allocation) — like
                   ``kubectl logs -f`` ending when the container exits
tail_lines=N       ``origin=end`` with a byte guess that widens until N lines are found; with
                   both streams the last N lines of stdout followed by stderr (Nomad keeps
                   no cross-stream order).  When following, the tail is read by absolute
                   offset instead (``origin=start`` offsets run over all of the task's
                   rotated files; their sizes come from ``/v1/client/fs/ls``) and the follow
                   continues at the exact byte after it: nothing repeats, nothing is lost
                   (unless Nomad deletes its oldest rotated file in that instant; without
                   ``read-fs`` the follow starts at the end: no repeats, a gap is possible)
limit_bytes        stop after N bytes
window             the byte range of one run (``translators.nomad.runs``): the current run,
                   or the one before for ``previous`` — chosen by the translator
timestamps         Nomad stores no per-line times (docs/kubelet.md, "Logs"): lines read from
                   the backlog carry ``backlog_time`` (a lower bound: the run's start, whole
                   seconds, no fraction); lines that arrive while following carry their
                   RFC3339Nano receive time
since              decided by the translator (all lines of the run, or a 400)
=================  ==========================================================================

Without ``follow``, stdout is returned before stderr.  With ``follow`` both are interleaved
as they arrive.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as _dt
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from translators.base import (
    BackendAuthError,
    BackendError,
    BackendNotFound,
    BackendRejected,
    LogOptions,
)
from translators.nomad.client import NomadClient
from translators.nomad.errors import error_for_transport
from translators.nomad.runs import Window

Now = Callable[[], _dt.datetime]
#: Bytes guessed per line when looking for the last N lines.
LINE_GUESS = 160
#: How long to keep reading after the task died, for the frames still in flight.
DRAIN_SECONDS = 0.5


def decode_frames(buffer: bytearray) -> list[dict[str, Any]]:
    """Pop every complete JSON frame from ``buffer`` (frames are concatenated objects)."""
    decoder = json.JSONDecoder()
    frames: list[dict[str, Any]] = []
    text = buffer.decode("utf-8", errors="replace")
    pos = 0
    consumed = 0
    while True:
        while pos < len(text) and text[pos] in " \r\n\t":
            pos += 1
        if pos >= len(text):
            consumed = len(text)
            break
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break
        if isinstance(obj, dict):
            frames.append(obj)
        pos = consumed = end
    del buffer[: len(text[:consumed].encode("utf-8"))]
    return frames


def frame_data(frame: dict[str, Any]) -> bytes:
    data = frame.get("Data")
    return base64.b64decode(data) if data else b""


def rfc3339nano(t: _dt.datetime) -> str:
    t = t.astimezone(_dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}000Z"


def rfc3339_seconds(t: _dt.datetime) -> str:
    """Whole seconds, no fraction: a time that does not pretend to be precise."""
    return t.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Stamper:
    """Prefixes every line of one stream with the time its first byte arrived (or ``fixed``)."""

    def __init__(self, now: Now) -> None:
        self._now = now
        self._at_line_start = True
        self.fixed: str | None = None

    def __call__(self, data: bytes) -> bytes:
        out = bytearray()
        for piece in data.splitlines(keepends=True):
            if self._at_line_start:
                stamp = self.fixed or rfc3339nano(self._now())
                out += stamp.encode() + b" "
            out += piece
            self._at_line_start = piece.endswith(b"\n")
        return bytes(out)


def last_lines(data: bytes, n: int) -> bytes:
    if n <= 0:
        return b""
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-n:])


@dataclass
class LogTarget:
    alloc_id: str
    task: str
    namespace: str
    region: str


class LogReader:
    """Reads one task's logs.  ``task_dead`` tells a follow when to stop."""

    def __init__(self, client: NomadClient, *, now: Now | None = None) -> None:
        self.client = client
        self.now = now or (lambda: _dt.datetime.now(_dt.UTC))

    def _params(
        self, target: LogTarget, kind: str, *, follow: bool, origin: str, offset: int
    ) -> dict[str, Any]:
        return {
            "task": target.task,
            "type": kind,
            "follow": follow,
            "origin": origin,
            "offset": offset,
        }

    async def _frames(
        self, target: LogTarget, kind: str, *, follow: bool, origin: str, offset: int
    ) -> AsyncIterator[bytes]:
        path = f"/client/fs/logs/{target.alloc_id}"
        try:
            async with self.client.stream(
                path,
                params=self._params(target, kind, follow=follow, origin=origin, offset=offset),
                namespace=target.namespace,
                region=target.region,
                read_timeout=max(30.0, self.client.config.timeout),
                logs=True,
            ) as resp:
                buffer = bytearray()
                async for chunk in resp.aiter_bytes():
                    buffer += chunk
                    for frame in decode_frames(buffer):
                        data = frame_data(frame)
                        if data:
                            yield data
        except BackendNotFound as exc:
            if "not started" in str(exc):
                raise BackendRejected(
                    f'container "{target.task}" is waiting to start', reason="ContainerNotStarted"
                ) from exc
            raise
        except BackendRejected as exc:
            if "unknown task" in str(exc):
                raise BackendNotFound(f'container "{target.task}" not found') from exc
            raise
        except httpx.HTTPError as exc:
            raise error_for_transport(exc, what=f"GET {path}") from exc

    async def _read_all(self, target: LogTarget, kind: str, *, origin: str, offset: int) -> bytes:
        out = bytearray()
        async for data in self._frames(target, kind, follow=False, origin=origin, offset=offset):
            out += data
        return bytes(out)

    async def _tail(self, target: LogTarget, kind: str, n: int) -> bytes:
        """The last ``n`` lines of one stream, widening the byte window as needed."""
        guess = max(1024, (n + 1) * LINE_GUESS)
        while True:
            data = await self._read_all(target, kind, origin="end", offset=guess)
            if len(data) < guess or data.count(b"\n") > n:
                return last_lines(data, n)
            guess *= 4

    async def log_size(self, target: LogTarget, kind: str) -> int:
        """Bytes Nomad holds for one stream of the task now, over all its rotated files
        (``<task>.<kind>.<n>`` in ``alloc/logs``)."""
        entries = await self.client.get(
            f"/client/fs/ls/{target.alloc_id}",
            params={"path": "alloc/logs"},
            namespace=target.namespace,
            region=target.region,
        )
        prefix = f"{target.task}.{kind}."
        return sum(
            int(e.get("Size") or 0)
            for e in entries or []
            if isinstance(e, dict)
            and not e.get("IsDir")
            and str(e.get("Name", "")).startswith(prefix)
            and str(e["Name"])[len(prefix) :].isdigit()
        )

    async def _tail_at(self, target: LogTarget, kind: str, n: int) -> tuple[bytes, tuple[str, int]]:
        """The last ``n`` lines of one stream and where a follow must continue: the absolute
        offset right after the bytes read (``origin=start``).  A token without ``read-fs``
        cannot list the log files: then the follow starts at the end of the file (lines
        written between the two requests are missed, none repeat)."""
        try:
            size = await self.log_size(target, kind)
        except BackendAuthError:
            return await self._tail(target, kind, n), ("end", 0)
        guess = max(1024, (n + 1) * LINE_GUESS)
        while True:
            start = max(0, size - guess)
            data = await self._read_all(target, kind, origin="start", offset=start)
            if start == 0 or data.count(b"\n") > n:
                return last_lines(data, n), ("start", start + len(data))
            guess *= 4

    async def _read_range(self, target: LogTarget, kind: str, start: int, end: int | None) -> bytes:
        data = await self._read_all(target, kind, origin="start", offset=start)
        return data if end is None else data[: max(0, end - start)]

    @staticmethod
    def _combine(
        kinds: list[str], tails: dict[str, bytes], tail_lines: int | None
    ) -> list[tuple[str, bytes]]:
        """The streams' data in order; with ``tail_lines`` the last N lines over both, each
        attributed back to its stream (newest stream last: Nomad keeps no cross-stream order)."""
        if tail_lines is None:
            return [(k, tails[k]) for k in kinds if tails[k]]
        combined = last_lines(b"".join(tails[k] for k in kinds), tail_lines)
        keep = len(combined.splitlines())
        out: dict[str, bytes] = {}
        for k in reversed(kinds):
            lines = tails[k].splitlines(keepends=True)
            take = lines[-keep:] if keep else []
            keep -= len(take)
            out[k] = b"".join(take)
        return [(k, out[k]) for k in kinds if out[k]]

    async def read(
        self,
        target: LogTarget,
        options: LogOptions,
        *,
        task_dead: Callable[[], Awaitable[bool]] | None = None,
        window: Window | None = None,
        backlog_time: _dt.datetime | None = None,
    ) -> AsyncIterator[bytes]:
        kinds = {"Stdout": ["stdout"], "Stderr": ["stderr"]}.get(
            options.stream, ["stdout", "stderr"]
        )
        remaining = options.limit_bytes
        stampers = {k: _Stamper(self.now) for k in kinds}
        if backlog_time is not None:
            for stamper in stampers.values():
                stamper.fixed = rfc3339_seconds(backlog_time)

        def shape(kind: str, data: bytes) -> bytes:
            return stampers[kind](data) if options.timestamps else data

        starts: dict[str, tuple[str, int]] = {k: ("start", 0) for k in kinds}
        initial: list[tuple[str, bytes]] = []
        if window is not None:
            # one run's bytes; a follow continues right after them (only an open run grows)
            got = {
                k: await self._read_range(target, k, window.start[k], window.end[k]) for k in kinds
            }
            starts = {k: ("start", window.start[k] + len(got[k])) for k in kinds}
            tails = got
            if options.tail_lines is not None:
                tails = {k: last_lines(got[k], options.tail_lines) for k in kinds}
            initial = self._combine(kinds, tails, options.tail_lines)
            follow = options.follow and all(window.end[k] is None for k in kinds)
        elif options.tail_lines is not None:
            follow = options.follow
            if options.follow:
                found = {k: await self._tail_at(target, k, options.tail_lines) for k in kinds}
                tails = {k: found[k][0] for k in kinds}
                starts = {k: found[k][1] for k in kinds}
            else:
                tails = {k: await self._tail(target, k, options.tail_lines) for k in kinds}
            initial = self._combine(kinds, tails, options.tail_lines)
        else:
            # the backlog first (stamped as backlog), then a follow from the byte after it
            follow = options.follow
            for k in kinds:
                data = await self._read_all(target, k, origin="start", offset=0)
                initial.append((k, data))
                starts[k] = ("start", len(data))

        for kind, data in initial:
            chunk = shape(kind, data)
            if remaining is not None:
                chunk = chunk[:remaining]
                remaining -= len(chunk)
            if chunk:
                yield chunk
            if remaining is not None and remaining <= 0:
                return
        if not follow:
            return
        for stamper in stampers.values():
            stamper.fixed = None  # from here on: lines as they arrive

        queue: asyncio.Queue[tuple[str, bytes] | BaseException | None] = asyncio.Queue()

        async def pump(kind: str) -> None:
            origin, offset = starts[kind]
            try:
                async for data in self._frames(
                    target, kind, follow=True, origin=origin, offset=offset
                ):
                    await queue.put((kind, data))
            except BackendError as exc:
                await queue.put(exc)
            finally:
                await queue.put(None)

        async def watch() -> None:
            if task_dead is None:
                return
            while not await task_dead():
                pass
            await asyncio.sleep(DRAIN_SECONDS)
            for _ in kinds:
                await queue.put(None)

        pumps = [asyncio.create_task(pump(k)) for k in kinds]
        watcher = asyncio.create_task(watch())
        open_streams = len(kinds)
        try:
            while open_streams:
                item = await queue.get()
                if item is None:
                    open_streams -= 1
                    continue
                if isinstance(item, BaseException):
                    raise item
                kind, data = item
                chunk = shape(kind, data)
                if remaining is not None:
                    chunk = chunk[:remaining]
                    remaining -= len(chunk)
                if chunk:
                    yield chunk
                if remaining is not None and remaining <= 0:
                    return
        finally:
            for t in (*pumps, watcher):
                t.cancel()
            for t in (*pumps, watcher):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
