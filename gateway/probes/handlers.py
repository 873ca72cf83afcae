"""One probe attempt: ``httpGet`` and ``tcpSocket`` straight to the pod's address (vkgate can
dial it where ``Features.routable_pod_ip``: host networking), ``exec`` through the translator's
``Executor``.  Results and failure messages follow the kubelet's (``pkg/probe/http``,
``pkg/probe/tcp``, ``pkg/probe/exec``): an HTTP status in [200, 400) succeeds; an exec succeeds
on exit code 0 and its output is the message; a timeout fails."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from translators.base import Executor, PodRef

#: Output kept from an exec probe or an HTTP body (the kubelet keeps 10 KiB).
MAX_OUTPUT = 10 * 1024
#: The User-Agent the kubelet's HTTP probes send (``kube-probe/<major>.<minor>``).
USER_AGENT = "kube-probe/1.31"


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
    """Runs probe and hook actions; one shared HTTP client (no keep-alive, as the kubelet)."""

    def __init__(self, *, executor: Executor | None, client: httpx.AsyncClient | None = None):
        self.executor = executor
        self.client = client or httpx.AsyncClient(
            verify=False,  # the kubelet skips TLS verification for HTTPS probes
            follow_redirects=True,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    async def aclose(self) -> None:
        await self.client.aclose()

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
        return Result(False, f"{handler} probes are not run by vkgate")

    async def http_get(self, action: Mapping[str, Any], target: Target, limit: float) -> Result:
        port = resolve_port(action.get("port"), target)
        if port is None:
            return Result(False, f"unknown port {action.get('port')!r}")
        scheme = str(action.get("scheme") or "HTTP").lower()
        host = str(action.get("host") or target.pod_ip)
        path = str(action.get("path") or "/")
        if not path.startswith("/"):
            path = "/" + path
        url = f"{scheme}://{_host_port(host, port)}{path}"
        headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
        for h in action.get("httpHeaders") or []:
            headers[str(h.get("name", ""))] = str(h.get("value", ""))
        try:
            resp = await self.client.get(url, headers=headers, timeout=limit)
        except httpx.TimeoutException:
            return Result(
                False,
                f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while '
                "awaiting headers)",
            )
        except httpx.HTTPError as exc:
            return Result(False, f'Get "{url}": {exc or type(exc).__name__}')
        body = resp.content[:MAX_OUTPUT].decode(errors="replace")
        if 200 <= resp.status_code < 400:
            return Result(True, body)
        return Result(False, f"HTTP probe failed with statuscode: {resp.status_code}")

    async def tcp_socket(self, action: Mapping[str, Any], target: Target, limit: float) -> Result:
        port = resolve_port(action.get("port"), target)
        if port is None:
            return Result(False, f"unknown port {action.get('port')!r}")
        host = str(action.get("host") or target.pod_ip)
        where = _host_port(host, port)
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


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
