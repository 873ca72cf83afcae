"""``kubectl attach``: the backend's own attach, or the container's output from the attach point.

A backend that can join a container's running main process implements ``Attacher`` and gets
every attach as it comes.  None of the built-in backends can (Nomad, Zun and Batch offer no way
into a running task's stdin), so for a backend without ``Attacher`` but with ``LogReader``:

* **without stdin** (``kubectl attach``, ``-t`` or not) an attach is what the kubelet shows a
  client that only reads: the main process's output from the moment of the attach until the
  container ends.  vkgate reads it as ``kubectl logs -f --tail=0`` would — one follow per
  requested stream, stdout to the stdout stream and stderr to the stderr stream (with a TTY,
  one follow of both to stdout, as a terminal merges them) — and, once the container ended,
  sends Success as the kubelet does for an attach (an attach has no exit code).  How live the
  output is, is the backend's ``logs -f`` (docs/kubelet.md, "Logs").
* **with stdin** (``-i``) the request is refused before the upgrade with ``501``: the message
  names the backend, says its main process cannot receive input, and points to ``kubectl exec
  -i`` (a new process that reads stdin) and to ``kubectl attach`` without ``-i``.

A backend with neither capability gets a ``501`` saying so.

Internal to ``gateway.kubelet.api``: ``routes`` calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from gateway.kubelet.server import HttpError
from gateway.kubelet.streams import STDERR, STDOUT, ExecOptions
from translators.base import (
    Attacher,
    ExecSession,
    LogOptions,
    LogReader,
    PodRef,
    Translator,
    TranslatorError,
)

log = logging.getLogger(__name__)

Starter = Callable[[], Awaitable[ExecSession]]


class LogAttachSession:
    """An ``ExecSession`` whose output is the container's log from now on (``--tail=0``
    follows), one per ``(log stream, channel)``; ``wait()`` is 0 once every follow ended,
    or raises the first backend error."""

    def __init__(
        self, reader: LogReader, ref: PodRef, container: str, follows: tuple[tuple[str, int], ...]
    ) -> None:
        self._reader = reader
        self._ref = ref
        self._container = container
        self._queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue(maxsize=64)
        self._result: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._result.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._open = len(follows)
        self._tasks = [asyncio.create_task(self._follow(s, ch)) for s, ch in follows]

    async def _follow(self, stream: str, channel: int) -> None:
        options = LogOptions(follow=True, tail_lines=0, stream=stream)
        chunks = self._reader.logs(self._ref, self._container, options)
        try:
            async for data in chunks:
                if data:
                    await self._queue.put((channel, data))
        except Exception as exc:  # the backend's read failed: the attach ends with it
            if not isinstance(exc, TranslatorError):
                log.warning("attach %s/%s: reading the log failed", self._ref.key, stream)
                exc = TranslatorError(f"reading the container's output failed: {exc}")
            if not self._result.done():
                self._result.set_exception(exc)
        finally:
            close = getattr(chunks, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
        await self._queue.put(None)  # not when cancelled: nobody reads then

    async def output(self) -> AsyncIterator[tuple[int, bytes]]:
        while self._open:
            item = await self._queue.get()
            if item is None:
                self._open -= 1
                continue
            yield item
        if not self._result.done():
            self._result.set_result(0)

    async def wait(self) -> int:
        return await asyncio.shield(self._result)

    async def write_stdin(self, data: bytes) -> None:
        return None  # never asked for: an attach with stdin is refused (module docstring)

    async def close_stdin(self) -> None:
        return None

    async def resize(self, width: int, height: int) -> None:
        return None  # the output is read, not a terminal: a size changes nothing

    async def cancel(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if not self._result.done():
            self._result.cancel()


def follows(opts: ExecOptions) -> tuple[tuple[str, int], ...]:
    """Which log streams an attach reads, and where each goes."""
    if opts.tty:
        return (("All", STDOUT),)
    wanted = (("Stdout", STDOUT), opts.stdout), (("Stderr", STDERR), opts.stderr)
    return tuple(pair for pair, on in wanted if on)


def refusal(translator: Translator, *, stdin: bool) -> str:
    """Why an attach (with stdin or not) cannot work on this backend; "" when it can."""
    if isinstance(translator, Attacher):
        return ""
    kind = translator.kind
    if not isinstance(translator, LogReader):
        return (
            f"attach is not supported by the {kind} backend: it can neither join the "
            "container's running process nor read its output; use kubectl exec"
        )
    if stdin:
        return (
            f"attach with stdin (-i) is not supported by the {kind} backend: it cannot deliver "
            "input to the container's main process. Use kubectl exec -i to run a command that "
            "reads stdin, or kubectl attach without -i to follow the main process's output"
        )
    return ""


def starter(translator: Translator, ref: PodRef, container: str, opts: ExecOptions) -> Starter:
    """How this attach starts; ``HttpError`` (before any upgrade) when it cannot."""
    reason = refusal(translator, stdin=opts.stdin)
    if reason:
        raise HttpError(501, reason)
    if isinstance(translator, Attacher):
        attacher = translator

        async def join() -> ExecSession:
            return await attacher.attach(ref, container, tty=opts.tty, stdin=opts.stdin)

        return join
    assert isinstance(translator, LogReader)  # refusal() said so
    reader = translator
    streams = follows(opts)

    async def from_logs() -> ExecSession:
        return LogAttachSession(reader, ref, container, streams)

    return from_logs
