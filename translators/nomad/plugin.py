"""The Nomad backend's spec (entry point ``vkgate.translators:nomad``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from translators.base import Renderable, Translator, TranslatorContext
from translators.nomad.config import ENV_KEYS, NomadConfig
from translators.nomad.schema import NOMAD
from translators.nomad.translator import NomadTranslator
from translators.plugins import BackendSpec
from translators.render.engine import packaged_templates_dir
from vkgate_core.settings import Setting, report


def settings(table: Mapping[str, Any], environ: Mapping[str, str], node_name: str) -> list[Setting]:
    """``[backend.nomad]`` over the ``NOMAD_*`` variables, validated."""
    cfg = NomadConfig.from_settings(table, environ)
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    return report("backend.nomad", values, table=table, environ_keys=ENV_KEYS, environ=environ)


def _factory(ctx: TranslatorContext) -> Translator:
    return NomadTranslator(ctx)


def _offline(ctx: TranslatorContext) -> Renderable:
    # Construction does no I/O (the client connects lazily) and needs no token.
    return NomadTranslator(ctx)


SPEC = BackendSpec(
    kind="nomad",
    factory=_factory,
    settings=settings,
    offline=_offline,
    default_template="nomad/job.j2",
    templates_dir=packaged_templates_dir(),
    schema=NOMAD,
    features=NomadTranslator.features,
)
