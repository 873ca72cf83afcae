"""One probe attempt: ``httpGet`` and ``tcpSocket`` straight to the pod's address (vkgate can
dial it where ``Features.routable_pod_ip``: host networking), ``exec`` through the translator's
``Executor``, ``grpc`` with a small HTTP/2 client of its own (gateway.probes.grpc).  Results and
failure messages follow the kubelet's (``pkg/probe/http``, ``pkg/probe/tcp``,
``pkg/probe/exec``, ``pkg/probe/grpc``): an HTTP status in [200, 400) succeeds; an exec succeeds
on exit code 0 and its output is the message; a grpc health check succeeds on ``SERVING``; a
timeout fails."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.probes import grpc as grpcmod
from gateway.probes import wire
from translators.base import Executor, PodRef

#: Output kept from an exec probe or an HTTP body (the kubelet keeps 10 KiB).
MAX_OUTPUT = 10 * 1024
#: The User-Agent the kubelet's probes send (``kube-probe/<major>.<minor>``).
USER_AGENT = wire.USER_AGENT


@dataclass(frozen=True, slots=True)
class Result:
    ok: bool
    #: Why it failed (the Unhealthy Event's text), or the exec output.
    output: str = ""


@dataclass(frozen=True, slots=True)
class Target:
    """Where one container's probes go."""

    ref: PodRef
    container: str
    pod_ip: str
    #: containerPort name → number, for named ports.
    ports: Mapping[str, int]


Runner = Callable[[str, Mapping[str, Any], Target, float], Awaitable[Result]]


def resolve_port(port: Any, target: Target) -> int | None:
    if isinstance(port, int):
        return port
    text = str(port)
    if text.isdigit():
        return int(text)
    return target.ports.get(text)


class Handlers:
    """Runs probe and hook actions; each attempt on its own connection, as the kubelet's."""

    def __init__(self, *, executor: Executor | None, allow_host: bool = False) -> None:
        """``allow_host``: ``probes.allow_host`` — an httpGet/tcpSocket ``host`` other than the
        pod's address is dialled (default: the attempt fails without a connection)."""
        self.executor = executor
        self.allow_host = allow_host

    async def aclose(self) -> None:
        """Nothing held between attempts (each opens and closes its own connection)."""

    async def run(
        self, handler: str, action: Mapping[str, Any], target: Target, limit: float
    ) -> Result:
        match handler:
            case "httpGet":
                return await self.http_get(action, target, limit)
            case "tcpSocket":
                return await self.tcp_socket(action, target, limit)
            case "exec":
                return await self.exec(action.get("command") or [], target, limit)
            case "grpc":
                return await self.grpc(action, target, limit)
        return Result(False, f"{handler} probes are not run by vkgate")

    async def http_get(self, action: Mapping[str, Any], target: Target, limit: float) -> Result:
        """One ``GET`` over its own connection (``Connection: close``), the status line read.

        Plain asyncio streams, not an HTTP client: at 100 probes a second an httpx request
        cost ~1.3 ms of CPU, this ~0.5 ms (bench/probes.py, docs/design/probes.md,
        "Cost").  A redirect is not followed: a 3xx is a success, as it is for the kubelet
        unless the redirect's target fails.  The request's bytes are ``gateway.probes.wire``'s:
        one that must not be sent (a CR/LF from the pod, a host other than the pod's) fails
        the attempt before any connection.  A failure says what went wrong — the status code,
        a refused connection, a timeout — never bytes of the reply (docs/design/probes.md,
        "What a probe may send, and where")."""
        port = resolve_port(action.get("port"), target)
        if port is None:
            return Result(False, f"unknown port {action.get('port')!r}")
        host, refused = self._destination("httpGet", action, target)
        if refused is not None:
            return refused
        try:
            request = wire.request(action, host=host, port=port)
        except wire.Refused as exc:
            return Result(False, f"httpGet.{exc}: the request was not sent")
        scheme = str(action.get("scheme") or "HTTP").lower()
        where = wire.host_port(host, port)
        url = f"{scheme}://{where}{wire.request_target(str(action.get('path') or '/'))}"
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(limit):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=_insecure_tls() if scheme == "https" else None
                )
                writer.write(request)
                await writer.drain()
                try:
                    line = await reader.readline()
                except ValueError:  # a first line past the stream's limit: not HTTP
                    line = b"-"
        except TimeoutError:
            return Result(
                False,
                f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while '
                "awaiting headers)",
            )
        except ssl.SSLError as exc:
            return Result(False, f'Get "{url}": TLS error ({exc.reason or "unknown"})')
        except OSError as exc:
            return Result(False, f'Get "{url}": {exc.strerror or exc}')
        finally:
            if writer is not None:
                writer.close()
        if not line:
            return Result(False, f'Get "{url}": EOF')
        parts = line.split(None, 2)
        if (
            len(parts) < 2
            or not parts[0].startswith(b"HTTP/")
            or len(parts[1]) != 3
            or not parts[1].isdigit()
        ):
            # Go quotes the line it could not parse; the target's bytes stay out of Events
            return Result(
                False,
                f'Get "{url}": net/http: HTTP/1.x transport connection broken: '
                "malformed HTTP response",
            )
        code = int(parts[1])
        if 200 <= code < 400:
            return Result(True)
        return Result(False, f"HTTP probe failed with statuscode: {code}")

    def _destination(
        self, handler: str, action: Mapping[str, Any], target: Target
    ) -> tuple[str, Result | None]:
        """The host to dial — the action's ``host``, else the pod's address — or why not: a
        ``host`` other than the pod's address when the node does not allow it
        (``probes.allow_host``; admission refuses such a pod first:
        gateway.pods.resolve.admission)."""
        asked = str(action.get("host") or "")
        if not asked or asked == target.pod_ip:
            return target.pod_ip, None
        if wire.host_error(asked) is not None:
            return asked, Result(False, f"{handler}.host: not an IP address or a DNS name")
        if not self.allow_host:
            return asked, Result(
                False,
                f"{handler}.host: not the pod's address, and this node does not let probes "
                "dial other hosts (probes.allow_host): not dialled",
            )
        return asked, None

    async def tcp_socket(self, action: Mapping[str, Any], target: Target, limit: float) -> Result:
        port = resolve_port(action.get("port"), target)
        if port is None:
            return Result(False, f"unknown port {action.get('port')!r}")
        host, refused = self._destination("tcpSocket", action, target)
        if refused is not None:
            return refused
        where = wire.host_port(host, port)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), limit)
        except TimeoutError:
            return Result(False, f"dial tcp {where}: i/o timeout")
        except OSError as exc:
            return Result(False, f"dial tcp {where}: connect: {exc.strerror or exc}")
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return Result(True)

    async def grpc(self, action: Mapping[str, Any], target: Target, limit: float) -> Result:
        """``grpc.health.v1.Health/Check`` on the pod's address and ``port`` (the API has no
        ``host`` field: the kubelet dials the pod IP), ``service`` as given (empty: the
        server's overall health); ``SERVING`` succeeds (gateway.probes.grpc)."""
        port = resolve_port(action.get("port"), target)
        if port is None:
            return Result(False, f"unknown port {action.get('port')!r}")
        ok, message = await grpcmod.check(
            target.pod_ip,
            port,
            str(action.get("service") or ""),
            limit,
            user_agent=USER_AGENT,
        )
        return Result(ok, message)

    async def exec(self, command: Sequence[str], target: Target, limit: float) -> Result:
        if self.executor is None:
            return Result(False, "exec probes need a backend that runs commands in containers")
        cmd = [str(c) for c in command]

        async def run() -> Result:
            assert self.executor is not None
            session = await self.executor.exec(
                target.ref, target.container, cmd, tty=False, stdin=False
            )
            out = bytearray()
            try:
                async for _, data in session.output():
                    if len(out) < MAX_OUTPUT:
                        out += data[: MAX_OUTPUT - len(out)]
                code = await session.wait()
            except BaseException:
                with contextlib.suppress(Exception):
                    await session.cancel()
                raise
            text = out.decode(errors="replace")
            if code == 0:
                return Result(True, text)
            return Result(False, text or f"command {cmd!r} exited with {code}")

        try:
            return await asyncio.wait_for(run(), limit)
        except TimeoutError:
            return Result(False, f"command timed out: {cmd!r} timed out after {limit:g}s")
        except Exception as exc:  # the backend could not run it: a failed attempt
            return Result(False, f"exec {cmd!r}: {exc}")


@functools.cache
def _insecure_tls() -> ssl.SSLContext:
    """The kubelet does not verify an HTTPS probe's certificate."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
