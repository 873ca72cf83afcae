"""The kubelet API's paths, after authentication and authorization.

Paths and errors: docs/design/kubelet-contract.md, "Kubelet API".

Each handler finds the pod in the pod controller's cache (``PodLookup``), checks the
container exists, and calls the translator capability it needs — detected with
``isinstance`` on the ``translators.base`` Protocols (attach and port-forward: what each falls
back to is in ``gateway.kubelet.api.attach`` and ``gateway.kubelet.api.portforward``).  A backend
without the capability gets a clear ``501`` naming the backend, before any upgrade, so kubectl
prints the reason instead of hanging.  Backend errors map once, here: not found → 404,
rejected → 400, unavailable or throttled → 503, anything else → 500.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import inspect
import logging
import shlex
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from gateway.kubelet import streams
from gateway.kubelet.api import attach as attach_mod
from gateway.kubelet.api import logs as logs_mod
from gateway.kubelet.api import metrics as metrics_mod
from gateway.kubelet.api import portforward
from gateway.kubelet.api import stats as stats_mod
from gateway.kubelet.server import Exchange, HttpError, Request
from gateway.metrics import CONTENT_TYPE as OWN_CONTENT_TYPE
from gateway.metrics import Metrics
from translators.base import (
    BackendNotFound,
    BackendRejected,
    BackendThrottled,
    BackendUnavailable,
    Executor,
    LogReader,
    MetricsSource,
    NodeUsage,
    PodRef,
    Translator,
    TranslatorError,
    UnsupportedError,
    WorkloadState,
)
from vkgate_core.clock import Clock
from vkgate_core.kubetypes import Pod

log = logging.getLogger(__name__)

#: How long the first log chunk may take before the 200 goes out anyway (follow on a quiet log).
FIRST_CHUNK_WAIT = 1.0


class PodLookup(Protocol):
    """Read access to the pods bound to this node (the pod controller's cache)."""

    def get_pod(self, namespace: str, name: str) -> Pod | None: ...

    def pods(self) -> list[Pod]: ...

    def finished(self, uid: str) -> bool:
        """True once the agent sent the pod's final delete (its cached copy may lag)."""
        ...

    def workload(self, uid: str) -> WorkloadState | None:
        """The latest state the backend reported for the pod's workload; None while none is
        known (port-forward then reaches only the pod's declared ports)."""
        ...


def backend_http_error(exc: TranslatorError) -> HttpError:
    """The one mapping from translator errors to kubelet API statuses."""
    if isinstance(exc, BackendNotFound):
        return HttpError(404, str(exc))
    if isinstance(exc, BackendRejected | UnsupportedError):
        return HttpError(400, str(exc))
    if isinstance(exc, BackendThrottled):
        extra = [("retry-after", str(int(exc.retry_after)))] if exc.retry_after else []
        return HttpError(503, f"backend busy: {exc}", headers=extra)
    if isinstance(exc, BackendUnavailable):
        return HttpError(503, f"backend unavailable: {exc}")
    return HttpError(500, f"backend error: {exc}")


def _containers(pod: Pod) -> list[str]:
    spec = pod.get("spec") or {}
    every = (
        (spec.get("initContainers") or [])
        + (spec.get("containers") or [])
        + (spec.get("ephemeralContainers") or [])
    )
    return [str(c.get("name")) for c in every if c.get("name")]


def _never_ran(pod: Pod, container: str) -> str:
    """Why an ephemeral container never ran (its status: terminated with no container ID, as
    the pod controller reports one the backend cannot run: gateway.pods.status.ephemeral), or ""."""
    for cs in (pod.get("status") or {}).get("ephemeralContainerStatuses") or []:
        if cs.get("name") == container and not cs.get("containerID"):
            done = (cs.get("state") or {}).get("terminated") or {}
            if done:
                return str(done.get("message") or done.get("reason") or "")
    return ""


Handler = Callable[[Request, Exchange, list[str]], Awaitable[None]]


class KubeletAPI:
    """Routes and handlers; ``handle`` is called with an already authorized request."""

    def __init__(
        self,
        *,
        node_name: str,
        pods: PodLookup,
        translator: Translator,
        clock: Clock,
        started: _dt.datetime,
        metrics: Metrics | None = None,
        config: dict[str, Any] | None = None,
        creation_timeout: float = streams.STREAM_CREATION_TIMEOUT,
        idle_timeout: float = streams.IDLE_TIMEOUT,
    ) -> None:
        self.node_name = node_name
        self.pods = pods
        self.translator = translator
        self.clock = clock
        self.started = started
        self.metrics = metrics
        self.config = config or {}
        self.creation_timeout = creation_timeout
        self.idle_timeout = idle_timeout
        self.kind = translator.kind
        self._routes: dict[str, tuple[frozenset[str], Handler]] = {
            "containerLogs": (frozenset({"GET", "HEAD"}), self.container_logs),
            "exec": (frozenset({"GET", "POST"}), self.exec),
            "attach": (frozenset({"GET", "POST"}), self.attach),
            "portForward": (frozenset({"GET", "POST"}), self.port_forward),
            "run": (frozenset({"POST"}), self.run),
            "pods": (frozenset({"GET", "HEAD"}), self.pod_list),
            "runningpods": (frozenset({"GET", "HEAD"}), self.running_pods),
            "stats": (frozenset({"GET", "HEAD"}), self.stats),
            "metrics": (frozenset({"GET", "HEAD"}), self.metrics_routes),
            "healthz": (frozenset({"GET", "HEAD"}), self.healthz),
            "configz": (frozenset({"GET", "HEAD"}), self.configz),
            "spec": (frozenset({"GET", "HEAD"}), self.spec),
        }

    async def handle(self, req: Request, ex: Exchange) -> None:
        parts = [p for p in req.path.split("/") if p]
        route = self._routes.get(parts[0]) if parts else None
        if route is None:
            raise HttpError(404, f"{req.path}: no such kubelet endpoint")
        methods, handler = route
        if req.method not in methods:
            raise HttpError(
                405,
                f"method {req.method} not allowed on {req.path}",
                headers=[("allow", ", ".join(sorted(methods)))],
            )
        await handler(req, ex, parts[1:])

    # -- lookups ---------------------------------------------------------------------

    async def _pod(self, namespace: str, name: str, uid: str = "") -> Pod:
        found = self.pods.get_pod(namespace, name)
        pod: Pod | None = await found if inspect.isawaitable(found) else found
        if pod is None:
            raise HttpError(404, f'pod "{namespace}/{name}" not found on node {self.node_name}')
        if uid and (pod.get("metadata") or {}).get("uid") != uid:
            raise HttpError(404, f'pod "{namespace}/{name}" with UID {uid} not found')
        return pod

    async def _target(self, args: list[str], what: str) -> tuple[PodRef, str]:
        """(pod ref, container) from ``ns/pod/container`` or ``ns/pod/uid/container``."""
        if len(args) == 3:
            ns, name, container = args
            uid = ""
        elif len(args) == 4:
            ns, name, uid, container = args
        else:
            raise HttpError(400, f"expected /{what}/<namespace>/<pod>/<container>")
        pod = await self._pod(ns, name, uid)
        names = _containers(pod)
        if container not in names:
            raise HttpError(
                404,
                f'container "{container}" not found in pod "{ns}/{name}" '
                f"(containers: {', '.join(names) or 'none'})",
            )
        never = _never_ran(pod, container)
        if never:
            raise HttpError(400, f'container "{container}" of pod "{ns}/{name}" never ran: {never}')
        meta = pod.get("metadata") or {}
        return PodRef(ns, name, str(meta.get("uid", ""))), container

    # -- logs ------------------------------------------------------------------------

    async def container_logs(self, req: Request, ex: Exchange, args: list[str]) -> None:
        if len(args) != 3:
            raise HttpError(400, "expected /containerLogs/<namespace>/<pod>/<container>")
        options = logs_mod.parse_log_options(req.query, now=self.clock.now())
        ref, container = await self._target(args, "containerLogs")
        if not isinstance(self.translator, LogReader):
            raise HttpError(501, f"container logs are not supported by the {self.kind} backend")
        chunks = aiter(self.translator.logs(ref, container, options))
        first = asyncio.ensure_future(anext(chunks))
        done, _ = await asyncio.wait({first}, timeout=FIRST_CHUNK_WAIT)
        if done:
            try:
                first.result()
            except StopAsyncIteration:
                await ex.send(200, b"")
                return
            except TranslatorError as exc:
                raise backend_http_error(exc) from exc
        try:
            sent = await logs_mod.stream_logs(ex, chunks, first, options)
        finally:
            if not first.done():
                first.cancel()
        if self.metrics is not None:
            self.metrics.log_bytes.inc(sent)

    # -- exec / attach / port-forward / run -------------------------------------------

    async def exec(self, req: Request, ex: Exchange, args: list[str]) -> None:
        opts = streams.parse_exec_options(req.query, need_command=True)
        ref, container = await self._target(args, "exec")
        translator = self.translator
        if not isinstance(translator, Executor):
            raise HttpError(501, f"exec is not supported by the {self.kind} backend")

        async def start() -> Any:
            return await translator.exec(
                ref, container, opts.command, tty=opts.tty, stdin=opts.stdin
            )

        await self._stream(req, ex, opts, start)

    async def attach(self, req: Request, ex: Exchange, args: list[str]) -> None:
        opts = streams.parse_exec_options(req.query, need_command=False)
        ref, container = await self._target(args, "attach")
        start = attach_mod.starter(self.translator, ref, container, opts)
        await self._stream(req, ex, opts, start)

    async def _stream(
        self,
        req: Request,
        ex: Exchange,
        opts: streams.ExecOptions,
        start: Callable[[], Awaitable[Any]],
    ) -> None:
        proto = req.upgrade or "none"
        if self.metrics is not None:
            self.metrics.exec_sessions.labels(proto).inc()
        try:
            await streams.serve(
                req,
                ex,
                opts,
                start,
                creation_timeout=self.creation_timeout,
                idle_timeout=self.idle_timeout,
            )
        finally:
            if self.metrics is not None:
                self.metrics.exec_sessions.labels(proto).dec()

    async def port_forward(self, req: Request, ex: Exchange, args: list[str]) -> None:
        if len(args) not in (2, 3):
            raise HttpError(400, "expected /portForward/<namespace>/<pod>[/<uid>]")
        pod = await self._pod(args[0], args[1], args[2] if len(args) == 3 else "")
        ref = PodRef(args[0], args[1], str((pod.get("metadata") or {}).get("uid", "")))
        state = self.pods.workload(ref.uid)
        forwarding = portforward.Forwarding(
            ref, portforward.opener(self.translator, pod, ref, state), self.metrics
        )
        await portforward.serve(
            req,
            ex,
            forwarding,
            creation_timeout=self.creation_timeout,
            idle_timeout=self.idle_timeout,
        )

    async def run(self, req: Request, ex: Exchange, args: list[str]) -> None:
        ref, container = await self._target(args, "run")
        cmd = req.query.get("command") or shlex.split(req.param("cmd") or "")
        if not cmd:
            raise HttpError(400, "expected a command: ?cmd=... or repeated ?command=")
        if not isinstance(self.translator, Executor):
            raise HttpError(501, f"run is not supported by the {self.kind} backend")
        try:
            session = await self.translator.exec(ref, container, cmd, tty=False, stdin=False)
            output = bytearray()
            async for _stream, data in session.output():
                output += data
            code = await session.wait()
        except TranslatorError as exc:
            raise backend_http_error(exc) from exc
        if code != 0:
            msg = f"command terminated with exit code {code}\n".encode()
            await ex.send(500, bytes(output) + msg)
            return
        await ex.send(200, bytes(output))

    # -- pods ------------------------------------------------------------------------

    def _node_pods(self) -> list[Pod]:
        return [
            p for p in self.pods.pods() if (p.get("spec") or {}).get("nodeName") == self.node_name
        ]

    async def pod_list(self, req: Request, ex: Exchange, args: list[str]) -> None:
        if args:
            raise HttpError(404, f"{req.path}: no such kubelet endpoint")
        await ex.send_json(
            200,
            {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": self._node_pods()},
        )

    async def running_pods(self, req: Request, ex: Exchange, args: list[str]) -> None:
        items = []
        for p in self._node_pods():
            if self.pods.finished(str((p.get("metadata") or {}).get("uid", ""))):
                continue  # deleted by us; the watch has not told the cache yet
            status = p.get("status") or {}
            running = [
                c
                for c in status.get("containerStatuses") or []
                if "running" in (c.get("state") or {})
            ]
            if not running:
                continue
            meta = p.get("metadata") or {}
            items.append(
                {
                    "metadata": {
                        "name": meta.get("name"),
                        "namespace": meta.get("namespace"),
                        "uid": meta.get("uid"),
                        "creationTimestamp": None,
                    },
                    "spec": {
                        "containers": [
                            {"name": c.get("name"), "image": c.get("image"), "resources": {}}
                            for c in running
                        ]
                    },
                    "status": {},
                }
            )
        await ex.send_json(
            200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        )

    # -- stats / metrics -------------------------------------------------------------

    async def _usage(self) -> NodeUsage | None:
        if not isinstance(self.translator, MetricsSource):
            return None
        return await self.translator.usage()

    async def stats(self, req: Request, ex: Exchange, args: list[str]) -> None:
        if args not in (["summary"], ["summary", ""]):
            raise HttpError(404, f"{req.path}: only /stats/summary is served")
        try:
            usage = await self._usage()
        except TranslatorError as exc:
            raise backend_http_error(exc) from exc
        if usage is None:
            body = stats_mod.empty_summary(
                node_name=self.node_name, node_start=self.started, now=self.clock.now()
            )
        else:
            body = stats_mod.summary(usage, node_name=self.node_name, node_start=self.started)
        await ex.send_json(200, body)

    async def metrics_routes(self, req: Request, ex: Exchange, args: list[str]) -> None:
        if args == ["resource"]:
            usage: NodeUsage | None
            try:
                usage = await self._usage()
                if usage is None:  # no metrics capability: nothing known, nothing failed
                    usage = NodeUsage(time=self.clock.now(), pods=())
            except TranslatorError as exc:
                log.warning("metrics/resource: backend usage failed: %s", exc)
                usage = None
            await ex.send(200, metrics_mod.render(usage), content_type=metrics_mod.CONTENT_TYPE)
        elif not args and self.metrics is not None:
            await ex.send(200, self.metrics.render(), content_type=OWN_CONTENT_TYPE)
        else:
            raise HttpError(404, f"{req.path}: not served by vkgate (try /metrics/resource)")

    # -- small ones ------------------------------------------------------------------

    async def healthz(self, req: Request, ex: Exchange, args: list[str]) -> None:
        await ex.send(200, "ok")

    async def configz(self, req: Request, ex: Exchange, args: list[str]) -> None:
        await ex.send_json(200, {"kubeletconfig": self.config})

    async def spec(self, req: Request, ex: Exchange, args: list[str]) -> None:
        try:
            cap = await self.translator.capacity()
        except TranslatorError as exc:
            raise backend_http_error(exc) from exc
        await ex.send_json(
            200,
            {
                "num_cores": max(1, cap.cpu_millis // 1000),
                "memory_capacity": cap.memory_bytes,
                "machine_id": self.node_name,
            },
        )
