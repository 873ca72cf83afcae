"""The plain-HTTP endpoint for the gateway's own metrics and probes.

Metrics themselves live in ``gateway.metrics`` (``prometheus_client``).  This server answers
``/metrics``, ``/healthz`` (liveness) and ``/readyz`` (readiness) on ``kubelet.metrics_address``
(default ``127.0.0.1:10255``, plain HTTP, loopback by default because it is unauthenticated;
deploy/ binds it to the pod IP for Prometheus and the kubelet's probes).  ``/metrics`` is also
served on the kubelet port behind authentication (``nodes/metrics``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gateway.kubelet.server import Exchange, HttpServer, Request
from gateway.metrics import CONTENT_TYPE, Exposition

log = logging.getLogger(__name__)


def path_class(path: str) -> str:
    """A bounded label for a request path (never pod names)."""
    first = path.lstrip("/").split("/", 1)[0]
    known = {
        "containerLogs",
        "exec",
        "attach",
        "portForward",
        "run",
        "pods",
        "runningpods",
        "stats",
        "metrics",
        "healthz",
        "configz",
        "spec",
    }
    if first == "metrics" and path.rstrip("/") == "/metrics/resource":
        return "metrics/resource"
    return first if first in known else "other"


#: Readiness check: None when ready, else the reason it is not.
Readiness = Callable[[], "str | None"]


class MetricsServer:
    """Plain-HTTP ``/metrics``, ``/healthz`` (liveness: the event loop answers) and ``/readyz``
    (``ready()``: the Node is registered, the backend reachable and the start-up gate open,
    docs/design/startup.md) on ``address``."""

    def __init__(
        self, metrics: Exposition, address: str, *, ready: Readiness | None = None
    ) -> None:
        host, _, port = address.rpartition(":")
        self.metrics = metrics
        self.ready = ready
        self._http = HttpServer(
            self._handle, host=host.strip("[]") or "127.0.0.1", port=int(port), name="metrics"
        )

    @property
    def port(self) -> int:
        return self._http.port

    async def start(self) -> None:
        await self._http.start()

    async def stop(self) -> None:
        await self._http.stop()

    async def _handle(self, req: Request, ex: Exchange) -> None:
        if req.method not in ("GET", "HEAD"):
            await ex.fail(405, f"method {req.method} not allowed")
        elif req.path == "/metrics":
            await ex.send(200, self.metrics.render(), content_type=CONTENT_TYPE)
        elif req.path == "/healthz":
            await ex.send(200, "ok")
        elif req.path == "/readyz":
            reason = self.ready() if self.ready is not None else None
            if reason is None:
                await ex.send(200, "ok")
            else:
                await ex.send(503, f"not ready: {reason}\n")
        else:
            await ex.fail(404, f"{req.path} not found (try /metrics)")
