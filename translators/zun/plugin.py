"""The Zun backend's spec (entry point ``vkgate.translators:zun``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from translators.base import JSON, Features, ResolvedPod, Translator, TranslatorContext
from translators.plugins import BackendSpec
from translators.render.engine import Renderer, packaged_templates_dir
from translators.zun.client import FEATURES, feature_flags
from translators.zun.config import load_config, parse_microversion
from translators.zun.schema import ZUN
from translators.zun.spec import SpecBuilder
from translators.zun.translator import ZunTranslator, zun_features
from vkgate_core.settings import Setting, report

#: Variables openstacksdk's config loader reads (``OS_CLOUD``, ``OS_AUTH_URL``, …).
ENV_PREFIX = "OS_"


def settings(table: Mapping[str, Any], environ: Mapping[str, str], node_name: str) -> list[Setting]:
    """``[backend.zun]`` validated, plus the ``OS_*`` variables the Keystone login will read."""
    cfg = load_config(table)
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    out = report("backend.zun", values, table=table)
    out += [
        Setting(f"backend.zun.env.{var}", environ[var], f"env {var}")
        for var in sorted(environ)
        if var.startswith(ENV_PREFIX) and environ[var]
    ]
    return out


class OfflineZun:
    """Renders what ``ZunTranslator.create`` would send, from settings alone: no Keystone login,
    the configured microversion taken as the negotiated one."""

    #: ``ZunTranslator`` is an ``Executor`` (translators/zun/exec.py): exec probes run live.
    can_exec = True

    def __init__(self, ctx: TranslatorContext) -> None:
        cfg = load_config(ctx.settings)
        version = parse_microversion(cfg.microversion)
        self.flags = feature_flags(version)
        renderer = ctx.renderer if ctx.renderer is not None else Renderer()
        self.specs = SpecBuilder.from_config(cfg, renderer=renderer, settings=dict(ctx.settings))
        self.features: Features = zun_features(cfg, lambda f: version >= FEATURES[f][0])

    def render_spec(self, pod: ResolvedPod) -> JSON:
        return self.specs.render(pod, self.flags).body


def _factory(ctx: TranslatorContext) -> Translator:
    return ZunTranslator(ctx)


def _offline(ctx: TranslatorContext) -> OfflineZun:
    return OfflineZun(ctx)


SPEC = BackendSpec(
    kind="zun",
    factory=_factory,
    settings=settings,
    offline=_offline,
    default_template="zun/container.j2",
    templates_dir=packaged_templates_dir(),
    schema=ZUN,
    features=zun_features(load_config({}), lambda f: FEATURES[f][0] <= (1, 40)),
)
