"""A TCP connection to a pod's port as a ``translators.base.PortStream``: where ``kubectl
port-forward`` goes when the backend has no tunnel of its own and its pod addresses are
routable from vkgate (``Features.routable_pod_ip``).

Failures say what Go's ``net`` package says, since that is the text a kubelet puts on the
error stream after ``error forwarding port 8080 to pod …:`` (kubectl prints it after ``an
error occurred forwarding 8080 -> 8080:``): ``dial tcp 10.0.0.5:8080: connect: connection
refused``, ``dial tcp 10.0.0.5:8080: i/o timeout``, ``read tcp 10.0.0.1:40000->10.0.0.5:8080:
read: connection reset by peer``.  They are raised as ``BackendUnavailable``.

Internal to ``gateway.kubelet.api``: ``portforward`` uses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from translators.base import BackendUnavailable

#: How long a connect may take (Go's ``net.Dial`` has no limit of its own; the kernel's SYN
#: retries run for about two minutes — too long for a client watching a terminal).
DIAL_TIMEOUT = 10.0
#: The largest read from the pod in one go (one SPDY DATA frame is at most 32 KiB).
READ_SIZE = 64 * 1024


def _reason(exc: OSError) -> str:
    """``connection refused``: the errno's text in lower case, as Go prints a syscall error."""
    if exc.errno is not None:
        return os.strerror(exc.errno).lower()
    return str(exc) or type(exc).__name__


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class TcpPortStream:
    """One connected socket; ``close_write`` sends FIN and keeps reading."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        local = writer.get_extra_info("sockname") or ("?", 0)
        peer = writer.get_extra_info("peername") or ("?", 0)
        self.local = _hostport(str(local[0]), int(local[1]))
        self.remote = _hostport(str(peer[0]), int(peer[1]))

    def _error(self, op: str, exc: OSError) -> BackendUnavailable:
        return BackendUnavailable(f"{op} tcp {self.local}->{self.remote}: {op}: {_reason(exc)}")

    async def read(self) -> bytes:
        try:
            return await self._reader.read(READ_SIZE)
        except OSError as exc:
            raise self._error("read", exc) from exc

    async def write(self, data: bytes) -> None:
        try:
            self._writer.write(data)
            await self._writer.drain()
        except OSError as exc:
            raise self._error("write", exc) from exc

    async def close_write(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            if self._writer.can_write_eof() and not self._writer.is_closing():
                self._writer.write_eof()

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


async def dial(host: str, port: int, *, within: float = DIAL_TIMEOUT) -> TcpPortStream:
    """Connect to ``host:port`` within ``within`` seconds."""
    where = _hostport(host, port)
    try:
        async with asyncio.timeout(within):
            reader, writer = await asyncio.open_connection(host, port)
    except TimeoutError as exc:
        raise BackendUnavailable(f"dial tcp {where}: i/o timeout") from exc
    except OSError as exc:
        raise BackendUnavailable(f"dial tcp {where}: connect: {_reason(exc)}") from exc
    return TcpPortStream(reader, writer)
