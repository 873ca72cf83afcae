"""Where a pod's job goes: per-pod ``vkgate.io/nomad-*`` annotations and the namespace mapping.

Nomad namespace: ``namespace_from_pod`` (``mapped_namespace``) pins a mapped pod, its
``vkgate.io/nomad-namespace`` annotation may only repeat that; an unmapped pod's annotation may
name any allowed namespace; else ``namespace``.  Region, datacenters, priority and node pool
annotations are each behind the allow-list of ``config.py`` (whose docstring says why), and a
value outside it refuses the pod naming the annotation.

Pure functions over the settings; ``jobs.backend_info`` applies them, and the translator's
lookup of a pod's job (``listing.py``) tries the mapped namespace first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from translators.base import TranslationError
from translators.nomad.config import NomadConfig

ANNOTATION = "vkgate.io/nomad-"


def mapped_namespace(pod_namespace: str, cfg: NomadConfig) -> str | None:
    """The Nomad namespace ``namespace_from_pod`` pins the pod to (None: not mapped).

    Raises ``TranslationError`` (field ``metadata.namespace``) when the mapping names a
    namespace outside the allow-list; a ``"table"`` value always passed that check at start-up.
    """
    if cfg.namespace_from_pod == "same":
        mapped: str | None = pod_namespace
    elif cfg.namespace_from_pod == "table":
        mapped = cfg.namespace_map.get(pod_namespace)
    else:
        return None
    if mapped is not None and mapped not in cfg.all_namespaces:
        raise TranslationError(
            f"Nomad namespace {mapped!r} (from the pod's namespace {pod_namespace!r}, "
            f"backend.nomad.namespace_from_pod = {cfg.namespace_from_pod!r}) is not allowed "
            f"(allowed: {', '.join(cfg.all_namespaces)}; add it to backend.nomad.namespaces)",
            field="metadata.namespace",
        )
    return mapped


def overrides(
    annotations: Mapping[str, str], cfg: NomadConfig, *, pod_namespace: str = ""
) -> dict[str, Any]:
    """Per-pod ``vkgate.io/nomad-*`` annotations and the namespace mapping, validated against
    the allow-lists.  Namespace: the mapping (``mapped_namespace``) pins a mapped pod, and its
    annotation may only repeat that value; an unmapped pod's annotation picks any allowed
    namespace; else ``namespace``."""
    mapped = mapped_namespace(pod_namespace, cfg)
    out: dict[str, Any] = {
        "namespace": cfg.namespace if mapped is None else mapped,
        "region": cfg.region,
        "datacenters": list(cfg.datacenters),
        "priority": cfg.priority,
        "node_pool": cfg.node_pool,
    }

    def field(name: str) -> str:
        return f"metadata.annotations[{ANNOTATION}{name}]"

    if (v := annotations.get(ANNOTATION + "namespace")) is not None:
        if mapped is not None and v != mapped:
            raise TranslationError(
                f"Nomad namespace {v!r} is not allowed: the pod's namespace {pod_namespace!r} "
                f"maps to {mapped!r} (backend.nomad.namespace_from_pod = "
                f"{cfg.namespace_from_pod!r}), and a mapped pod cannot pick another one",
                field=field("namespace"),
            )
        if v not in cfg.all_namespaces:
            raise TranslationError(
                f"Nomad namespace {v!r} is not allowed (allowed: {', '.join(cfg.all_namespaces)};"
                " add it to backend.nomad.namespaces)",
                field=field("namespace"),
            )
        out["namespace"] = v
    if (v := annotations.get(ANNOTATION + "region")) is not None:
        if v not in cfg.all_regions:
            raise TranslationError(
                f"Nomad region {v!r} is not allowed (add it to backend.nomad.regions)",
                field=field("region"),
            )
        out["region"] = v
    if (v := annotations.get(ANNOTATION + "datacenters")) is not None:
        dcs = [d.strip() for d in v.split(",") if d.strip()]
        if not dcs:
            raise TranslationError("expected a comma-separated list", field=field("datacenters"))
        denied = [d for d in dcs if not cfg.datacenter_allowed(d)]
        if denied:
            raise TranslationError(
                f"Nomad datacenters {', '.join(map(repr, denied))} are not allowed (allowed: "
                f"{', '.join((*cfg.datacenters, *cfg.allowed_datacenters))}; add them to "
                "backend.nomad.allowed_datacenters)",
                field=field("datacenters"),
            )
        out["datacenters"] = dcs
    if (v := annotations.get(ANNOTATION + "priority")) is not None:
        if not v.strip().isdigit() or not 1 <= int(v) <= 100:
            raise TranslationError(f"expected 1..100, got {v!r}", field=field("priority"))
        if int(v) > cfg.pod_max_priority:
            raise TranslationError(
                f"Nomad priority {int(v)} is not allowed (at most {cfg.pod_max_priority}; "
                "raise backend.nomad.max_priority)",
                field=field("priority"),
            )
        out["priority"] = int(v)
    if (v := annotations.get(ANNOTATION + "node-pool")) is not None:
        if v.strip() not in cfg.all_node_pools:
            raise TranslationError(
                f"Nomad node pool {v.strip()!r} is not allowed (allowed: "
                f"{', '.join(cfg.all_node_pools)}; add it to backend.nomad.node_pools)",
                field=field("node-pool"),
            )
        out["node_pool"] = v.strip()
    return out
