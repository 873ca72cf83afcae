"""vkgate's own Prometheus metrics, on ``prometheus_client`` (docs/design/metrics.md).

One ``Metrics`` per virtual node (its own ``CollectorRegistry``, never the global one), so
several virtual nodes in one process — and tests — do not share counters; a multi-node process
serves them merged with a ``node`` label (``NodeMetrics``).  Three ways in:

* **direct** — the kubelet server, the pod workers and the backend proxy below observe into
  the metric objects here;
* **scrape-time collectors** — components that keep plain counters (``KubeClient.stats``,
  ``Reflector.counts``, Lease failures, the work queue's length) are read when Prometheus
  scrapes, so the controller layers need no metrics code on their hot paths;
* **``InstrumentedTranslator``** — wraps the backend: every call is counted by
  backend/operation/outcome and timed; ``TranslationError``/``UnsupportedError`` are also
  counted as translation failures by reason.  Translators stay free of gateway imports.

This module sits outside the layer contract (like ``vkgate_core.clock``): every layer may use it.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: The text exposition format's content type (``prometheus_client.CONTENT_TYPE_LATEST``).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Translator methods that are backend calls (coroutines); streams (logs, exec) are not timed.
BACKEND_OPERATIONS = frozenset(
    {"ping", "capacity", "node_info", "create", "update", "delete", "list", "usage"}
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vkgate")
    except PackageNotFoundError:
        return "0+unknown"


@dataclass(eq=False)  # the registry keys collectors by identity
class _FnCollector(Collector):
    """Samples computed at scrape time by ``fn`` (a mapping labels-tuple → value)."""

    name: str
    documentation: str
    labels: tuple[str, ...]
    fn: Callable[[], Mapping[tuple[str, ...], float]]
    kind: str = "counter"

    def collect(self) -> Iterator[Metric]:
        family: CounterMetricFamily | GaugeMetricFamily
        if self.kind == "counter":
            family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        else:
            family = GaugeMetricFamily(self.name, self.documentation, labels=self.labels)
        try:
            values = dict(self.fn())
        except Exception:  # a component mid-shutdown must not break the scrape
            values = {}
        for labels, value in sorted(values.items()):
            family.add_metric(list(labels), float(value))
        yield family

    def describe(self) -> Iterable[Metric]:
        return []


class Exposition:
    """A registry served at ``/metrics``: its own collectors plus scrape-time ``collect``."""

    def __init__(self, *, process: bool = True) -> None:
        self.registry = CollectorRegistry()
        if process:
            ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, RSS…
            PlatformCollector(registry=self.registry)  # python_info

    def collect(self, *args: Any, **kwargs: Any) -> None:
        """Expose ``fn()`` (labels-tuple → value) as a metric at every scrape; arguments as
        ``_FnCollector`` (name, documentation, labels, fn, kind="counter")."""
        self.registry.register(_FnCollector(*args, **kwargs))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class Metrics(Exposition):
    """One virtual node's metrics (a single-node process exposes them as they are)."""

    def __init__(self, *, backend: str = "", process: bool = True) -> None:
        super().__init__(process=process)
        r = self.registry
        self.backend = backend
        Info("vkgate_build", "vkgate build information", registry=r).info(
            {"version": _version(), "python": platform.python_version(), "backend": backend}
        )
        self.backend_calls = Counter(
            "vkgate_backend_calls",
            "Backend calls by backend, operation and outcome (ok or the error class)",
            ("backend", "operation", "outcome"),
            registry=r,
        )
        self.backend_latency = Histogram(
            "vkgate_backend_call_duration_seconds",
            "Backend call latency by backend and operation",
            ("backend", "operation"),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.translation_failures = Counter(
            "vkgate_translation_failures",
            "Pods that could not be translated, by reason (render, schema, or the "
            "unsupported-feature reason)",
            ("reason",),
            registry=r,
        )
        self.pod_sync = Histogram(
            "vkgate_pod_sync_duration_seconds",
            "Time one pod sync (or cleanup) took, by result",
            ("result",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # kubelet API server
        self.kubelet_requests = Counter(
            "vkgate_kubelet_requests",
            "Kubelet API requests by path class, method and status code",
            ("path", "method", "code"),
            registry=r,
        )
        self.kubelet_duration = Histogram(
            "vkgate_kubelet_request_duration_seconds",
            "Kubelet API request duration (streams: until they end)",
            ("path",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.kubelet_auth = Counter(
            "vkgate_kubelet_auth",
            "Kubelet API authentication/authorization outcomes",
            ("result",),
            registry=r,
        )
        self.exec_sessions = Gauge(
            "vkgate_kubelet_exec_sessions",
            "Exec/attach sessions in progress",
            ("protocol",),
            registry=r,
        )
        self.log_bytes = Counter(
            "vkgate_kubelet_log_bytes", "Container log bytes streamed to clients", registry=r
        )
        self.portforward_connections = Gauge(
            "vkgate_kubelet_portforward_connections",
            "Port-forward connections to pods in progress",
            registry=r,
        )

    def observe_backend(self, operation: str, outcome: str, seconds: float) -> None:
        self.backend_calls.labels(self.backend, operation, outcome).inc()
        self.backend_latency.labels(self.backend, operation).observe(seconds)

    def translation_failed(self, exc: BaseException) -> None:
        from translators.base import TranslationError, UnsupportedError

        if isinstance(exc, UnsupportedError):
            reason = exc.reason
        elif isinstance(exc, TranslationError):
            reason = "schema" if exc.field else "render"
        else:
            return
        self.translation_failures.labels(reason).inc()


@dataclass(eq=False)
class _NodeLabelled(Collector):
    """Every node's samples, merged family by family, each with a ``node`` label."""

    nodes: Mapping[str, Metrics]

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for node, metrics in self.nodes.items():
            for family in metrics.registry.collect():
                out = merged.get(family.name)
                if out is None:
                    out = merged[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                for sample in family.samples:
                    labels = {"node": node, **sample.labels}
                    out.add_sample(sample.name, labels, sample.value, sample.timestamp)
        yield from merged.values()

    def describe(self) -> Iterable[Metric]:
        return []


class NodeMetrics(Exposition):
    """The ``/metrics`` of a process serving several virtual nodes (docs/design/multinode.md):
    the process collectors once, every node's ``Metrics`` with a ``node`` label, and whatever
    is process-wide (the shared API client's counters) through ``collect`` without one."""

    def __init__(self, nodes: Mapping[str, Metrics]) -> None:
        super().__init__(process=True)
        self.nodes = dict(nodes)
        self.registry.register(_NodeLabelled(self.nodes))


class InstrumentedTranslator:
    """The translator, with every backend call counted and timed (``Metrics.observe_backend``).

    Attribute reads and writes go to the wrapped translator, so optional capabilities stay
    detectable exactly as before (``hasattr``/runtime Protocol checks see the real object's
    attributes) and tests may still poke the real object through the proxy.
    """

    def __init__(self, inner: Any, metrics: Metrics) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_metrics", metrics)

    @property
    def wrapped(self) -> Any:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in BACKEND_OPERATIONS or not callable(attr):
            return attr
        metrics: Metrics = self._metrics

        async def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            outcome = "ok"
            try:
                return await attr(*args, **kwargs)
            except Exception as exc:
                outcome = type(exc).__name__
                metrics.translation_failed(exc)
                raise
            finally:
                metrics.observe_backend(name, outcome, time.perf_counter() - start)

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)
