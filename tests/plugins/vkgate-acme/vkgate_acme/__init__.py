"""The ``acme`` backend: a third-party vkgate backend in its own distribution.

It imports one vkgate module, the public backend API ``translators.api`` (the spec, the data
types, the settings coercer, the template renderer; docs/backend-authors.md), and ships its own
templates and output schema.  Workloads run in memory (the lifecycle of vkgate's simulated
backend, reused through subclassing); what ``create`` submitted is written to
``<record_dir>/<pod uid>.json`` so tests can compare it with ``vkgate render``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from translators.api import (
    JSON,
    BackendSpec,
    Features,
    Renderer,
    ResolvedPod,
    Setting,
    SimulatedTranslator,
    Translator,
    TranslatorContext,
    WorkloadState,
    coerce,
    pod_context,
    report,
    unknown_keys,
)

KIND = "acme"
TEMPLATES = Path(__file__).resolve().parent / "templates"
DEFAULT_TEMPLATE = "acme/workload.j2"
#: ``[backend.acme]`` key → conventional environment variable.
ENV_KEYS = {"region": "ACME_REGION"}
DEFAULTS: dict[str, Any] = {"region": "eu-1", "slots": 4, "record_dir": ""}

SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "required": ["name", "region", "slots", "containers"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "region": {"type": "string"},
        "slots": {"type": "integer", "minimum": 1},
        "team": {"type": "string"},
        "containers": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "image"],
                "properties": {"image": {"type": "string", "minLength": 1}},
            },
        },
    },
}
FEATURES = Features(
    volume_kinds=frozenset({"configMap", "secret", "emptyDir"}),
    pod_features=frozenset({"initContainers"}),
)


def parse(table: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    unknown_keys(f"backend.{KIND}", table, DEFAULTS)
    raw = {k: environ[v] for k, v in ENV_KEYS.items() if environ.get(v)} | dict(table)
    return {
        "region": coerce("backend.acme.region", "str", raw.get("region", DEFAULTS["region"])),
        "slots": coerce("backend.acme.slots", "int", raw.get("slots", DEFAULTS["slots"]), lo=1),
        "record_dir": coerce(
            "backend.acme.record_dir", "str", raw.get("record_dir", DEFAULTS["record_dir"])
        ),
    }


def settings(table: Mapping[str, Any], environ: Mapping[str, str], node_name: str) -> list[Setting]:
    values = parse(table, environ)
    return report(f"backend.{KIND}", values, table=table, environ_keys=ENV_KEYS, environ=environ)


class AcmeRenderer:
    """``Renderable``: the body ``create`` submits, from settings alone."""

    features = FEATURES

    def __init__(self, ctx: TranslatorContext) -> None:
        self.values = parse(ctx.settings, {})
        self.renderer: Renderer = ctx.renderer if ctx.renderer is not None else Renderer()
        self.table = dict(ctx.settings)

    def render_spec(self, pod: ResolvedPod) -> JSON:
        name = (
            pod.template or self.renderer.select(pod, backend=KIND, default=DEFAULT_TEMPLATE).name
        )
        info = {"name": f"acme-{pod.namespace}-{pod.name}", **self.values}
        context = pod_context(pod, backend=KIND, settings=self.table, extra=info)
        spec: JSON = self.renderer.render(name, context)
        return spec


class AcmeTranslator(SimulatedTranslator):
    """Lifecycle in memory; every create renders and records the acme request body."""

    kind = KIND
    features = FEATURES

    def __init__(self, ctx: TranslatorContext) -> None:
        super().__init__(replace(ctx, settings={}))  # its node and clock; no simulated settings
        self.body = AcmeRenderer(ctx)
        self.record_dir = (
            Path(self.body.values["record_dir"]) if self.body.values["record_dir"] else None
        )

    async def create(self, pod: ResolvedPod) -> WorkloadState:
        spec = self.body.render_spec(pod)
        if self.record_dir is not None:
            self.record_dir.mkdir(parents=True, exist_ok=True)
            (self.record_dir / f"{pod.uid}.json").write_text(json.dumps(spec, indent=2))
        return await super().create(pod)


def _factory(ctx: TranslatorContext) -> Translator:
    return AcmeTranslator(ctx)


SPEC = BackendSpec(
    kind=KIND,
    factory=_factory,
    settings=settings,
    offline=AcmeRenderer,
    default_template=DEFAULT_TEMPLATE,
    templates_dir=TEMPLATES,
    schema=SCHEMA,
    features=FEATURES,
)
