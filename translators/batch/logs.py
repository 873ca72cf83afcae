"""Container logs from a task's ``stdout.txt`` / ``stderr.txt``.

Batch keeps a container task's output in two files on the compute node and serves byte ranges of
them (``ocp-range``), so logs are read, never streamed:

* sizes come from the file properties (``HEAD``); ``tailLines`` reads backwards in 64 KiB ranges
  until it has seen enough newlines; ``limitBytes`` ends the last range early;
* ``stream=All`` is stdout followed by stderr (Batch keeps no timestamps to interleave them);
  ``tailLines`` applies to that concatenation;
* ``follow`` polls the growing files from the last offset every ``log_poll_seconds`` until the
  task is completed, then drains what is left;
* ``previous``, ``timestamps`` and ``sinceTime``/``sinceSeconds`` have no Batch equivalent and are
  rejected with a clear message (400) instead of being silently ignored;
* before the task runs the files do not exist: the caller gets the kubelet's
  ``container "x" in pod "p" is waiting to start`` answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from translators.base import BackendNotFound, BackendRejected, LogOptions

CHUNK = 64 * 1024
READ_MAX = 4 * 1024 * 1024
FILES = {"Stdout": ("stdout.txt",), "Stderr": ("stderr.txt",), "All": ("stdout.txt", "stderr.txt")}


@dataclass
class _File:
    path: str
    size: int
    offset: int = 0


def check_options(options: LogOptions) -> tuple[str, ...]:
    """Reject what Batch cannot honour; return the files to read, in order."""
    if options.previous:
        raise BackendRejected(
            "previous container logs are not available: Azure Batch keeps only the last "
            "attempt's stdout.txt/stderr.txt",
            reason="BadRequest",
        )
    if options.timestamps:
        raise BackendRejected(
            "timestamps are not available: Azure Batch task files carry no per-line times",
            reason="BadRequest",
        )
    if options.since is not None:
        raise BackendRejected(
            "sinceTime/sinceSeconds are not available: Azure Batch task files carry no "
            "per-line times",
            reason="BadRequest",
        )
    if options.stream not in FILES:
        raise BackendRejected(f"unknown log stream {options.stream!r}", reason="BadRequest")
    return FILES[options.stream]


class TaskLogReader:
    """Read (and follow) one task's output files through a ``BatchApi``-like object."""

    def __init__(
        self,
        api: object,
        job_id: str,
        *,
        sleep: Callable[[float], Awaitable[None]],
        poll_seconds: float,
    ) -> None:
        self._api = api
        self._job = job_id
        self._sleep = sleep
        self._poll = poll_seconds

    async def _size(self, task_id: str, path: str) -> int:
        size: int = await self._api.file_size(self._job, task_id, path)  # type: ignore[attr-defined]
        return size

    async def _read(self, task_id: str, path: str, start: int, end: int) -> bytes:
        data: bytes = await self._api.read_file(self._job, task_id, path, start, end)  # type: ignore[attr-defined]
        return data

    async def _tail_start(self, task_id: str, f: _File, lines: int) -> tuple[int, int]:
        """Offset where the last ``lines`` lines of ``f`` begin, and how many lines were found."""
        if lines <= 0 or f.size == 0:
            return f.size, 0
        found = 0
        pos = f.size
        while pos > 0:
            start = max(0, pos - CHUNK)
            data = await self._read(task_id, f.path, start, pos - 1)
            for i in range(len(data) - 1, -1, -1):
                if data[i] == 0x0A and start + i != f.size - 1:
                    found += 1
                    if found == lines:
                        return start + i + 1, found
            pos = start
        return 0, found + 1  # the first line has no newline before it

    async def read(
        self,
        task_id: str,
        options: LogOptions,
        *,
        waiting_message: str,
        completed: Callable[[], Awaitable[bool]],
    ) -> AsyncIterator[bytes]:
        paths = check_options(options)
        files: list[_File] = []
        for path in paths:
            try:
                files.append(_File(path, await self._size(task_id, path)))
            except BackendNotFound:
                files.append(_File(path, -1))
        if all(f.size < 0 for f in files):
            raise BackendRejected(waiting_message, reason="ContainerWaiting")
        for f in files:
            f.size = max(f.size, 0)

        if options.tail_lines is not None:
            wanted = options.tail_lines
            for f in reversed(files):
                if wanted <= 0:
                    f.offset = f.size
                    continue
                f.offset, found = await self._tail_start(task_id, f, wanted)
                wanted -= found
        budget = options.limit_bytes

        async def drain(f: _File) -> AsyncIterator[bytes]:
            nonlocal budget
            while f.offset < f.size and (budget is None or budget > 0):
                end = min(f.size, f.offset + READ_MAX)
                if budget is not None:
                    end = min(end, f.offset + budget)
                data = await self._read(task_id, f.path, f.offset, end - 1)
                if not data:
                    return
                f.offset += len(data)
                if budget is not None:
                    budget -= len(data)
                yield data

        for f in files:
            async for chunk in drain(f):
                yield chunk
        if not options.follow:
            return
        while budget is None or budget > 0:
            done = await completed()
            for f in files:
                try:
                    f.size = max(f.size, await self._size(task_id, f.path))
                except BackendNotFound:
                    continue
                async for chunk in drain(f):
                    yield chunk
            if done:
                return
            await self._sleep(self._poll)
