"""Exec and attach sessions: the Kubernetes stream protocols on top of SPDY or WebSocket.

One exec is: negotiate the stream protocol, upgrade the connection, collect the client's
streams (SPDY: one stream per ``streamType`` header, all within the creation timeout;
WebSocket: numbered channels in one connection), start the translator's ``ExecSession``, then
pump stdin → backend, backend output → stdout/stderr, resize JSON → ``resize()``, and finally
report the result on the error stream the way client-go decodes it:

* ``v4``/``v5`` (and ``v4.base64``): a ``metav1.Status`` JSON — ``{"status":"Success"}`` or
  ``Failure`` with reason ``NonZeroExitCode`` and a cause ``{"reason":"ExitCode","message":"7"}``
  (kubectl exits with that code);
* older protocols: the error text, nothing on success.

With a TTY there is no stderr stream (a terminal has one output); backend bytes tagged stderr
go to stdout then, as a pty would merge them.  A backend failure after the upgrade becomes a
Status on the error stream — the client always gets an answer, never a hang.  When the client
disconnects, the backend exec is cancelled.

``upgrade_spdy`` (the ``X-Stream-Protocol-Version`` negotiation and the 101) is shared with
port-forward (``gateway.kubelet.api.portforward``), which speaks ``portforward.k8s.io`` on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.kubelet.server import Exchange, HttpError, Request
from gateway.kubelet.streams import spdy, websocket
from translators.base import ExecSession, TranslatorError

log = logging.getLogger(__name__)

STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
STREAM_TYPES = {
    "stdin": STDIN,
    "stdout": STDOUT,
    "stderr": STDERR,
    "error": ERROR,
    "resize": RESIZE,
}

#: SPDY stream protocols we speak, preferred first (v5 = v4 + close signal, WebSocket only).
SPDY_PROTOCOLS = (
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
)
#: Protocols whose error stream carries a Status JSON (older ones carry plain error text).
JSON_STATUS = {"v5.channel.k8s.io", "v4.channel.k8s.io", "v4.base64.channel.k8s.io"}
#: Protocols with a resize stream.
RESIZE_PROTOCOLS = {
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v4.base64.channel.k8s.io",
}

STREAM_CREATION_TIMEOUT = 30.0
#: The kubelet's --streaming-connection-idle-timeout default (4 h); clients ping meanwhile.
IDLE_TIMEOUT = 4 * 3600.0
#: How long we wait for the client to hang up after the final status before closing.
LINGER = 5.0

_TRUE = {"1", "true", "True", "TRUE", "t", "T", "yes"}


# --------------------------------------------------------------------------- options


@dataclass(frozen=True, slots=True)
class ExecOptions:
    command: tuple[str, ...]
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool


def parse_exec_options(query: Mapping[str, list[str]], *, need_command: bool) -> ExecOptions:
    """``input``/``output``/``error``/``tty`` = ``1`` (as the API server sends them),
    ``command`` repeated.  ``tty`` with ``error`` is accepted and stderr ignored."""

    def flag(name: str) -> bool:
        values = query.get(name) or []
        return bool(values) and values[0] in _TRUE

    tty = flag("tty")
    opts = ExecOptions(
        command=tuple(query.get("command") or ()),
        stdin=flag("input"),
        stdout=flag("output"),
        stderr=flag("error") and not tty,
        tty=tty,
    )
    if not (opts.stdin or opts.stdout or flag("error")):
        raise HttpError(400, "you must specify at least 1 of stdin, stdout, stderr")
    if need_command and not opts.command:
        raise HttpError(400, "you must specify at least one command for the container")
    return opts


# --------------------------------------------------------------------------- status


def success_status() -> dict[str, Any]:
    return {"metadata": {}, "status": "Success"}


def _byte_exit_code(code: int) -> int:
    if 0 <= code <= 255:
        return code
    if -127 <= code < 0:  # killed by signal -code
        return 128 - code
    return 255


def exit_status(code: int, command: tuple[str, ...] = ()) -> dict[str, Any]:
    rc = _byte_exit_code(code)
    cmd = " ".join(command)
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            f"command terminated with non-zero exit code: error executing command [{cmd}], "
            f"exit code {rc}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(rc)}]},
    }


def failure_status(
    message: str, *, reason: str = "InternalError", code: int = 500
) -> dict[str, Any]:
    return {
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def status_bytes(protocol: str, status: Mapping[str, Any]) -> bytes:
    """What goes on the error stream for ``status`` under ``protocol`` (may be empty)."""
    if protocol in JSON_STATUS:
        return json.dumps(status).encode()
    if status.get("status") == "Success":
        return b""
    return str(status.get("message", "error")).encode()


# --------------------------------------------------------------------------- channels


class Channels(Protocol):
    """What an exec needs from its transport, whichever it is."""

    protocol: str
    gone: asyncio.Event

    def has(self, channel: int) -> bool: ...

    async def read(self, channel: int) -> bytes:
        """Next bytes from the client on ``channel``; ``b""`` at its end."""
        ...

    async def write(self, channel: int, data: bytes) -> None: ...

    async def close_channel(self, channel: int) -> None: ...

    async def close(self) -> None: ...


class SpdyChannels:
    """Kubernetes streams over a SPDY session: one SPDY stream per ``streamtype``."""

    def __init__(self, session: spdy.SpdySession, protocol: str) -> None:
        self.session = session
        self.protocol = protocol
        self.gone = session.closed
        self._streams: dict[int, spdy.SpdyStream] = {}
        self._runner = asyncio.create_task(session.run())

    async def collect(self, expected: set[int], limit_s: float) -> None:
        """Wait until the client created every expected stream (raises ``TimeoutError``)."""
        async with asyncio.timeout(limit_s):
            while not expected <= self._streams.keys():
                st = await self.session.accept()
                if st is None:
                    raise ConnectionResetError("client closed before creating its streams")
                kind = st.header("streamtype")
                ch = STREAM_TYPES.get(kind)
                if ch is None:
                    log.info("exec: ignoring unexpected SPDY stream type %r", kind)
                    await st.reset(spdy.RstStatus.REFUSED_STREAM)
                    continue
                self._streams[ch] = st

    def has(self, channel: int) -> bool:
        return channel in self._streams

    async def read(self, channel: int) -> bytes:
        return await self._streams[channel].read()

    async def write(self, channel: int, data: bytes) -> None:
        await self._streams[channel].write(data)

    async def close_channel(self, channel: int) -> None:
        st = self._streams.get(channel)
        if st is not None:
            await st.close()

    async def close(self) -> None:
        await self.session.goaway()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.session.closed.wait(), LINGER)
        await self.session.close()
        self._runner.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._runner


# --------------------------------------------------------------------------- the session


async def _pump_stdin(ch: Channels, session: ExecSession) -> None:
    try:
        while data := await ch.read(STDIN):
            await session.write_stdin(data)
    except (ConnectionError, TranslatorError) as exc:
        log.debug("exec: stdin ended: %s", exc)
    with contextlib.suppress(Exception):
        await session.close_stdin()


async def _pump_resize(ch: Channels, session: ExecSession) -> None:
    decoder = json.JSONDecoder()
    buf = ""
    while data := await ch.read(RESIZE):
        buf += data.decode(errors="replace")
        while buf.strip():
            try:
                obj, end = decoder.raw_decode(buf.lstrip())
            except ValueError:
                break  # incomplete object: wait for more
            buf = buf.lstrip()[end:]
            if isinstance(obj, dict):
                with contextlib.suppress(Exception):
                    await session.resize(int(obj.get("Width", 0)), int(obj.get("Height", 0)))


async def _pump_output(ch: Channels, session: ExecSession, *, tty: bool) -> None:
    async for stream, data in session.output():
        target = STDOUT if stream == 1 or tty else STDERR
        if not ch.has(target):
            target = STDOUT if ch.has(STDOUT) else -1
        if target >= 0 and data:
            await ch.write(target, data)


async def write_status(ch: Channels, status: Mapping[str, Any]) -> None:
    if ch.has(ERROR):
        data = status_bytes(ch.protocol, status)
        with contextlib.suppress(ConnectionError):
            if data:
                await ch.write(ERROR, data)
            await ch.close_channel(ERROR)


async def run_session(ch: Channels, session: ExecSession, opts: ExecOptions) -> int | None:
    """Pump one exec to its end; report its status; return the exit code (None if the
    client left first, in which case the backend exec is cancelled)."""
    helpers: list[asyncio.Task[None]] = []
    if opts.stdin and ch.has(STDIN):
        helpers.append(asyncio.create_task(_pump_stdin(ch, session)))
    if opts.tty and ch.has(RESIZE):
        helpers.append(asyncio.create_task(_pump_resize(ch, session)))
    output = asyncio.create_task(_pump_output(ch, session, tty=opts.tty))
    gone = asyncio.create_task(ch.gone.wait())
    code: int | None = None
    doing = "executing command in" if opts.command else "attaching to"
    failure = "exec ended without an exit code" if opts.command else "attach ended unexpectedly"
    try:
        done, _ = await asyncio.wait({output, gone}, return_when=asyncio.FIRST_COMPLETED)
        if output in done and output.exception() is None:
            waiter = asyncio.create_task(session.wait())
            pending: set[asyncio.Task[Any]] = {waiter, gone}
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if waiter in done:
                try:
                    code = waiter.result()
                except TranslatorError as exc:  # e.g. the command could not be started
                    failure = f"error {doing} container: {exc}"
            else:
                waiter.cancel()
        elif output in done:
            log.info("exec: output ended with %r", output.exception())
    finally:
        for t in (*helpers, output, gone):
            t.cancel()
        for t in (*helpers, output, gone):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
    if code is None:
        with contextlib.suppress(Exception):
            await session.cancel()
        if not ch.gone.is_set():
            await write_status(ch, failure_status(failure))
        return None
    for c in (STDOUT, STDERR):
        with contextlib.suppress(ConnectionError):
            await ch.close_channel(c)
    await write_status(ch, success_status() if code == 0 else exit_status(code, opts.command))
    return code


# --------------------------------------------------------------------------- the upgrade

Starter = Callable[[], Awaitable[ExecSession]]


async def serve(
    req: Request,
    ex: Exchange,
    opts: ExecOptions,
    start: Starter,
    *,
    creation_timeout: float = STREAM_CREATION_TIMEOUT,
    idle_timeout: float = IDLE_TIMEOUT,
) -> int | None:
    """Upgrade ``req`` (SPDY/3.1 or WebSocket), run the exec, close.  Returns the exit code."""
    if req.upgrade == "spdy/3.1":
        ch: Channels = await _upgrade_spdy(req, ex, opts, creation_timeout, idle_timeout)
    elif req.upgrade == "websocket":
        ch = await websocket.upgrade(
            req,
            ex,
            readable={STDIN} if opts.stdin else set(),
            writable={c for c, on in ((STDOUT, opts.stdout), (STDERR, opts.stderr)) if on},
            resize=opts.tty,
            idle_timeout=idle_timeout,
        )
    else:
        raise HttpError(400, "Upgrade request required (SPDY/3.1 or websocket)")
    try:
        if ch.gone.is_set():
            return None
        try:
            session = await start()
        except TranslatorError as exc:
            what = "exec" if opts.command else "attach"
            await write_status(ch, failure_status(f"{what} failed: {exc}"))
            return None
        return await run_session(ch, session, opts)
    finally:
        await ch.close()


async def upgrade_spdy(
    req: Request, ex: Exchange, protocols: Sequence[str], *, idle_timeout: float | None
) -> tuple[spdy.SpdySession, str]:
    """Negotiate one of ``protocols`` (the client's ``X-Stream-Protocol-Version`` values, in
    its order of preference, as ``httpstream.Handshake``), answer ``101`` and return the SPDY
    session on the socket (not yet running) and the protocol.  No match: ``403`` listing ours
    in ``X-Accepted-Stream-Protocol-Versions``, before any upgrade."""
    offered = req.header_values("x-stream-protocol-version")
    if not offered:
        raise HttpError(400, "unable to upgrade: X-Stream-Protocol-Version is required")
    protocol = next((p for p in offered if p in protocols), "")
    if not protocol:
        raise HttpError(
            403,
            f"unable to upgrade: unable to negotiate protocol: client supports {offered}, "
            f"server accepts {list(protocols)}",
            headers=[("x-accepted-stream-protocol-versions", p) for p in protocols],
        )
    reader, writer, trailing = await ex.upgrade(
        [
            ("connection", "Upgrade"),
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", protocol),
        ]
    )
    session = spdy.SpdySession(reader, writer, initial_data=trailing, idle_timeout=idle_timeout)
    return session, protocol


async def _upgrade_spdy(
    req: Request, ex: Exchange, opts: ExecOptions, creation_timeout: float, idle_timeout: float
) -> SpdyChannels:
    session, protocol = await upgrade_spdy(req, ex, SPDY_PROTOCOLS, idle_timeout=idle_timeout)
    ch = SpdyChannels(session, protocol)
    expected = {ERROR}
    if opts.stdin:
        expected.add(STDIN)
    if opts.stdout:
        expected.add(STDOUT)
    if opts.stderr:
        expected.add(STDERR)
    if opts.tty and protocol in RESIZE_PROTOCOLS:
        expected.add(RESIZE)
    try:
        await ch.collect(expected, creation_timeout)
    except (TimeoutError, ConnectionError) as exc:
        log.info("exec: client did not create its streams: %s", exc or "timed out")
        await ch.close()
        raise ConnectionResetError("streams not created") from exc
    return ch
