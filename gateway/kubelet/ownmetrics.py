"""The gateway's own Prometheus metrics: a tiny registry and a plain-HTTP endpoint.

No client library: counters, gauges and histograms with labels are a few dozen lines, and the
text format is the one ``/metrics/resource`` already writes.  Components that live below the
kubelet package in the import layers (pods, node, kube) do not import this module; the app
registers *collectors* — callables run at scrape time that read their counters (e.g.
``KubeClient.stats``) — so the dependency stays one-way.

Served at ``/metrics`` on ``kubelet.metrics_address`` (default ``127.0.0.1:10255``, plain
HTTP, loopback by default because it is unauthenticated) and on the kubelet port behind
authentication (``nodes/metrics``).
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gateway.kubelet.metrics import go_float
from gateway.kubelet.server import Exchange, HttpServer, Request

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

LabelValues = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Sample:
    """One line of exposition from a collector."""

    name: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


def _fmt_labels(pairs: Iterable[tuple[str, str]]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    items = [f'{k}="{esc(str(v))}"' for k, v in pairs]
    return "{" + ",".join(items) + "}" if items else ""


class _Metric:
    kind = ""

    def __init__(self, name: str, help_: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.help = help_
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()

    def _key(self, labels: Sequence[str]) -> LabelValues:
        if len(labels) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {labels}")
        return tuple(str(v) for v in labels)

    def lines(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help_: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help_, labelnames)
        self._values: dict[LabelValues, float] = {}

    def inc(self, *labels: str, value: float = 1.0) -> None:
        if value < 0:
            raise ValueError("counters only go up")
        k = self._key(labels)
        with self._lock:
            self._values[k] = self._values.get(k, 0.0) + value

    def get(self, *labels: str) -> float:
        return self._values.get(self._key(labels), 0.0)

    def lines(self) -> list[str]:
        return [
            f"{self.name}{_fmt_labels(zip(self.labelnames, k, strict=True))} {go_float(v)}"
            for k, v in sorted(self._values.items())
        ]


class Gauge(Counter):
    kind = "gauge"

    def set(self, *labels: str, value: float) -> None:
        with self._lock:
            self._values[self._key(labels)] = value

    def inc(self, *labels: str, value: float = 1.0) -> None:
        k = self._key(labels)
        with self._lock:
            self._values[k] = self._values.get(k, 0.0) + value

    def dec(self, *labels: str, value: float = 1.0) -> None:
        self.inc(*labels, value=-value)


class Histogram(_Metric):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        super().__init__(name, help_, labelnames)
        self.buckets = tuple(sorted(buckets))
        self._counts: dict[LabelValues, list[int]] = {}
        self._sums: dict[LabelValues, float] = {}

    def observe(self, *labels: str, value: float) -> None:
        k = self._key(labels)
        with self._lock:
            counts = self._counts.setdefault(k, [0] * (len(self.buckets) + 1))
            counts[bisect.bisect_left(self.buckets, value)] += 1
            self._sums[k] = self._sums.get(k, 0.0) + value

    def lines(self) -> list[str]:
        out: list[str] = []
        for k in sorted(self._counts):
            base = list(zip(self.labelnames, k, strict=True))
            cum = 0
            for bound, n in zip((*self.buckets, float("inf")), self._counts[k], strict=True):
                cum += n
                le = "+Inf" if bound == float("inf") else go_float(bound)
                out.append(f"{self.name}_bucket{_fmt_labels([*base, ('le', le)])} {cum}")
            out.append(f"{self.name}_sum{_fmt_labels(base)} {go_float(self._sums[k])}")
            out.append(f"{self.name}_count{_fmt_labels(base)} {cum}")
        return out


Collector = Callable[[], Iterable[Sample]]


class Registry:
    """Metrics by name, plus scrape-time collectors declared with their help and type."""

    def __init__(self) -> None:
        self._metrics: dict[str, _Metric] = {}
        self._collectors: list[tuple[str, str, str, Collector]] = []

    def _add(self, metric: _Metric) -> _Metric:
        existing = self._metrics.get(metric.name)
        if existing is not None:
            if type(existing) is not type(metric) or existing.labelnames != metric.labelnames:
                raise ValueError(f"metric {metric.name} already registered differently")
            return existing
        self._metrics[metric.name] = metric
        return metric

    def counter(self, name: str, help_: str, labelnames: Sequence[str] = ()) -> Counter:
        m = self._add(Counter(name, help_, labelnames))
        assert isinstance(m, Counter)
        return m

    def gauge(self, name: str, help_: str, labelnames: Sequence[str] = ()) -> Gauge:
        m = self._add(Gauge(name, help_, labelnames))
        assert isinstance(m, Gauge)
        return m

    def histogram(
        self,
        name: str,
        help_: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> Histogram:
        m = self._add(Histogram(name, help_, labelnames, buckets))
        assert isinstance(m, Histogram)
        return m

    def add_collector(self, name: str, kind: str, help_: str, fn: Collector) -> None:
        """``fn()`` yields samples of metric ``name`` at every scrape."""
        self._collectors.append((name, kind, help_, fn))

    def render(self) -> str:
        out: list[str] = []
        for name in sorted(self._metrics):
            m = self._metrics[name]
            out += [f"# HELP {name} {m.help}", f"# TYPE {name} {m.kind}", *m.lines()]
        for name, kind, help_, fn in self._collectors:
            try:
                samples = list(fn())
            except Exception as exc:
                log.warning("metrics collector %s failed: %s", name, exc)
                continue
            out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
            out += [f"{s.name}{_fmt_labels(s.labels)} {go_float(s.value)}" for s in samples]
        return "\n".join(out) + "\n"


class GatewayMetrics:
    """The metrics the kubelet server itself records."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.requests = registry.counter(
            "vkgate_kubelet_requests_total",
            "Kubelet API requests by path class, method and status code",
            ("path", "method", "code"),
        )
        self.duration = registry.histogram(
            "vkgate_kubelet_request_duration_seconds",
            "Kubelet API request duration (streams: until they end)",
            ("path",),
        )
        self.auth = registry.counter(
            "vkgate_kubelet_auth_total",
            "Kubelet API authentication/authorization outcomes",
            ("result",),
        )
        self.exec_sessions = registry.gauge(
            "vkgate_kubelet_exec_sessions", "Exec/attach sessions in progress", ("protocol",)
        )
        self.log_bytes = registry.counter(
            "vkgate_kubelet_log_bytes_total", "Container log bytes streamed to clients"
        )


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
    (``ready()``: the Node is registered and the backend reachable) on ``address``."""

    def __init__(self, registry: Registry, address: str, *, ready: Readiness | None = None) -> None:
        host, _, port = address.rpartition(":")
        self.registry = registry
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
            await ex.send(200, self.registry.render(), content_type=CONTENT_TYPE)
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
