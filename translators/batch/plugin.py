"""The Azure Batch backend's spec (entry point ``vkgate.translators:batch``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from translators.base import JSON, Features, ResolvedPod, Translator, TranslatorContext
from translators.batch.schema import BATCH
from translators.batch.settings import ENV_ACCOUNT, ENV_ENDPOINT, ENV_KEY, parse_settings
from translators.batch.spec import TaskBuilder
from translators.batch.translator import BatchTranslator
from translators.plugins import BackendSpec
from translators.render.engine import Renderer, packaged_templates_dir
from vkgate_core.settings import Setting, report

#: Table keys the Azure CLI's conventional variables fill in when the table leaves them out.
ENV_KEYS = {"account_name": ENV_ACCOUNT, "account_key": ENV_KEY, "endpoint": ENV_ENDPOINT}
#: Variables azure-identity's ``DefaultAzureCredential`` reads (``AZURE_TENANT_ID``, …).
ENV_PREFIX = "AZURE_"
#: What offline rendering assumes for the settings that only matter for talking to Batch.
OFFLINE_DEFAULTS = {
    "endpoint": "https://account.region.batch.azure.com",
    "pool_id": "pool",
    "auth": "azure_identity",
}


def settings(table: Mapping[str, Any], environ: Mapping[str, str], node_name: str) -> list[Setting]:
    """``[backend.batch]`` over the ``AZURE_BATCH_*`` variables, validated, plus the ``AZURE_*``
    variables an azure-identity login will read."""
    parsed = parse_settings(table, node_name=node_name, environ=environ)
    values = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(parsed)}
    values["registry"] = dataclasses.asdict(parsed.registry)
    values["vm_sizes"] = {k: dataclasses.asdict(v) for k, v in parsed.vm_sizes.items()}
    out = report("backend.batch", values, table=table, environ_keys=ENV_KEYS, environ=environ)
    out += [
        Setting(f"backend.batch.env.{var}", environ[var], f"env {var}")
        for var in sorted(environ)
        if var.startswith(ENV_PREFIX) and var not in ENV_KEYS.values() and environ[var]
    ]
    return out


class OfflineBatch:
    """Renders the task collection ``BatchTranslator.create`` would send, from settings alone:
    no credentials, no pool lookup (``requiredSlots`` then follows the settings)."""

    features: Features = BatchTranslator.features

    def __init__(self, ctx: TranslatorContext) -> None:
        table = {**OFFLINE_DEFAULTS, **ctx.settings}
        parsed = parse_settings(table, node_name=ctx.node_name, environ={})
        renderer = ctx.renderer if ctx.renderer is not None else Renderer()
        self.builder = TaskBuilder(parsed, renderer)

    def render_spec(self, pod: ResolvedPod) -> JSON:
        return {"value": self.builder.build(pod, pool=None)}


def _factory(ctx: TranslatorContext) -> Translator:
    return BatchTranslator(ctx)


def _offline(ctx: TranslatorContext) -> OfflineBatch:
    return OfflineBatch(ctx)


SPEC = BackendSpec(
    kind="batch",
    factory=_factory,
    settings=settings,
    offline=_offline,
    default_template="batch/task.j2",
    templates_dir=packaged_templates_dir(),
    schema=BATCH,
    features=BatchTranslator.features,
)
