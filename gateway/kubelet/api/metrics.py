"""``/metrics/resource``: what metrics-server scrapes, in the kubelet's exact names and shape.

Names, types and labels follow the kubelet's resource-metrics endpoint
(docs/design/kubelet-contract.md, "Resource metrics"): ``node_cpu_usage_seconds_total``,
``node_memory_working_set_bytes``,
``container_{cpu_usage_seconds_total,memory_working_set_bytes,start_time_seconds}`` (labels
``namespace``, ``pod``, ``container``), ``pod_{cpu_usage_seconds_total, memory_working_set_bytes}``
(``namespace``, ``pod``), ``resource_scrape_error`` and the deprecated ``scrape_error``.  Usage
samples carry the backend's millisecond timestamp, start times do not.  Numbers are printed as Go's
``strconv.FormatFloat(v, 'g', -1, 64)`` does.

Label order: the kubelet prints labels sorted (``container, namespace, pod``); we print
``namespace, pod, container``.  metrics-server finds labels by name, so both work for it, but
the upstream virtual-kubelet conformance suite reads the *second* label as the pod name
(docs/design/upstream-e2e.md), which only this order satisfies.

Unknown means absent: a value the backend did not report is omitted, never written as 0 —
metrics-server would drop a pod with a zero container anyway, and a fake zero is a lie on
``kubectl top``.  A pod's value is the sum of its containers only when every container
reported it.  The node's value is the backend's; for a backend that has none (a virtual node
*is* its pods) it is the sum over pods when every pod's value is known.  When the backend
fails, only ``resource_scrape_error 1`` is served.

Internal to ``gateway.kubelet.api``: ``routes`` and ``stats`` use it.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Iterable, Sequence

from translators.base import ContainerUsage, NodeUsage, PodUsage

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_META: tuple[tuple[str, str, str], ...] = (
    ("container_cpu_usage_seconds_total", "counter",
     "[STABLE] Cumulative cpu time consumed by the container in core-seconds"),
    ("container_memory_working_set_bytes", "gauge",
     "[STABLE] Current working set of the container in bytes"),
    ("container_start_time_seconds", "gauge",
     "[STABLE] Start time of the container since unix epoch in seconds"),
    ("node_cpu_usage_seconds_total", "counter",
     "[STABLE] Cumulative cpu time consumed by the node in core-seconds"),
    ("node_memory_working_set_bytes", "gauge",
     "[STABLE] Current working set of the node in bytes"),
    ("pod_cpu_usage_seconds_total", "counter",
     "[STABLE] Cumulative cpu time consumed by the pod in core-seconds"),
    ("pod_memory_working_set_bytes", "gauge",
     "[STABLE] Current working set of the pod in bytes"),
    ("resource_scrape_error", "gauge",
     "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise"),
    ("scrape_error", "gauge",
     "[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container "
     "metrics, 0 otherwise"),
)  # fmt: skip


def go_float(v: float) -> str:
    """Format like Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` (Prometheus' client does)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == 0:
        return "0"
    sign, digits, exp = decimal.Decimal(repr(float(v))).normalize().as_tuple()
    assert isinstance(exp, int)
    ds = "".join(map(str, digits))
    point = len(ds) + exp  # decimal point position relative to the digit string
    x = point - 1
    neg = "-" if sign else ""
    if x < -4 or x >= 6:  # Go: %e when the exponent is < -4 or >= 6 (shortest precision)
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{neg}{mant}e{'+' if x >= 0 else '-'}{abs(x):02d}"
    if point <= 0:
        return f"{neg}0.{'0' * -point}{ds}"
    if point >= len(ds):
        return f"{neg}{ds}{'0' * (point - len(ds))}"
    return f"{neg}{ds[:point]}.{ds[point:]}"


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in pairs) + "}" if pairs else ""


def _sum(values: Iterable[float | int | None]) -> float | None:
    total = 0.0
    any_ = False
    for v in values:
        if v is None:
            return None
        total += v
        any_ = True
    return total if any_ else None


def pod_cpu(p: PodUsage) -> float | None:
    return _sum(c.cpu_core_seconds for c in p.containers)


def pod_memory(p: PodUsage) -> float | None:
    return _sum(c.memory_working_set_bytes for c in p.containers)


def node_cpu(u: NodeUsage) -> float | None:
    if u.cpu_core_seconds is not None:
        return u.cpu_core_seconds
    return _sum(pod_cpu(p) for p in u.pods)


def node_memory(u: NodeUsage) -> float | None:
    if u.memory_working_set_bytes is not None:
        return float(u.memory_working_set_bytes)
    return _sum(pod_memory(p) for p in u.pods)


def render(usage: NodeUsage | None) -> str:
    """The exposition text; ``usage=None`` means the backend could not be read."""
    samples: dict[str, list[str]] = {name: [] for name, _, _ in _META}
    if usage is not None:
        ts = f" {int(usage.time.timestamp() * 1000)}"

        def add(name: str, labels: Sequence[tuple[str, str]], v: float | None, stamp: str) -> None:
            if v is not None:
                samples[name].append(f"{name}{_labels(labels)} {go_float(v)}{stamp}")

        for p in sorted(usage.pods, key=lambda p: (p.ref.namespace, p.ref.name)):
            pl = (("namespace", p.ref.namespace), ("pod", p.ref.name))
            for c in sorted(p.containers, key=lambda c: c.name):
                cl = (*pl, ("container", c.name))
                add("container_cpu_usage_seconds_total", cl, c.cpu_core_seconds, ts)
                add("container_memory_working_set_bytes", cl, _f(c.memory_working_set_bytes), ts)
                add("container_start_time_seconds", cl, _start(c), "")
            add("pod_cpu_usage_seconds_total", pl, pod_cpu(p), ts)
            add("pod_memory_working_set_bytes", pl, pod_memory(p), ts)
        add("node_cpu_usage_seconds_total", (), node_cpu(usage), ts)
        add("node_memory_working_set_bytes", (), node_memory(usage), ts)
    err = "0" if usage is not None else "1"
    samples["resource_scrape_error"].append(f"resource_scrape_error {err}")
    samples["scrape_error"].append(f"scrape_error {err}")
    out: list[str] = []
    for name, kind, help_ in _META:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        out += samples[name]
    return "\n".join(out) + "\n"


def _f(v: int | None) -> float | None:
    return None if v is None else float(v)


def _start(c: ContainerUsage) -> float | None:
    return None if c.started_at is None else c.started_at.timestamp()
