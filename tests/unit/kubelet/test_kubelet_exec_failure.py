"""An exec whose backend fails after the upgrade — the command could not be started, so there
is no exit code — must end with a Failure status naming the backend's reason on the error
stream (kubectl prints it and exits 1), never with the Success status of exit code 0."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.kubelet.streams import ERROR, STDERR, STDOUT, ExecOptions, run_session
from translators.base import BackendRejected


class Channels:
    """In-memory transport: what the exec wrote, per channel, and which were closed."""

    def __init__(self, protocol: str = "v4.channel.k8s.io") -> None:
        self.protocol = protocol
        self.gone = asyncio.Event()
        self.written: dict[int, bytes] = {}
        self.closed: set[int] = set()

    def has(self, channel: int) -> bool:
        return channel in (STDOUT, STDERR, ERROR)

    async def read(self, channel: int) -> bytes:
        await asyncio.Event().wait()
        return b""

    async def write(self, channel: int, data: bytes) -> None:
        self.written[channel] = self.written.get(channel, b"") + data

    async def close_channel(self, channel: int) -> None:
        self.closed.add(channel)

    async def close(self) -> None:
        pass


class FailingSession:
    """Output ends, then ``wait()`` raises: Nomad closed the exec socket with an error."""

    def __init__(self, error: Exception, output: list[tuple[int, bytes]]) -> None:
        self.error, self.items, self.cancelled = error, output, False

    async def write_stdin(self, data: bytes) -> None:
        pass

    async def close_stdin(self) -> None:
        pass

    async def resize(self, width: int, height: int) -> None:
        pass

    async def output(self) -> AsyncIterator[tuple[int, bytes]]:
        for item in self.items:
            yield item

    async def wait(self) -> int:
        raise self.error

    async def cancel(self) -> None:
        self.cancelled = True


OPTS = ExecOptions(command=("/no/such/binary",), stdin=False, stdout=True, stderr=True, tty=False)
REASON = "nomad exec: failed to start command: fork/exec /no/such/binary: no such file"


async def test_backend_failure_after_upgrade_is_a_failure_status() -> None:
    ch = Channels()
    session = FailingSession(BackendRejected(REASON, reason="ExecFailed"), [(1, b"early\n")])
    code = await run_session(ch, session, OPTS)
    assert code is None
    assert ch.written[STDOUT] == b"early\n"
    status: dict[str, Any] = json.loads(ch.written[ERROR])
    assert status["status"] == "Failure"
    assert status["reason"] == "InternalError"
    assert status["message"] == f"error executing command in container: {REASON}"
    assert ERROR in ch.closed


@pytest.mark.parametrize("protocol", ["v2.channel.k8s.io", "channel.k8s.io"])
async def test_old_protocols_get_the_reason_as_text(protocol: str) -> None:
    ch = Channels(protocol)
    await run_session(ch, FailingSession(BackendRejected(REASON), []), OPTS)
    assert ch.written[ERROR] == f"error executing command in container: {REASON}".encode()
