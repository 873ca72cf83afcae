"""Golden files: pod YAML (+ server microversion, settings) → the Zun request body the
templates render, or the clear error the pod gets instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from zun_pods import resolved_pod

from translators.base import TranslatorError, UnsupportedError
from translators.rendering import Renderer
from translators.zun.client import feature_flags
from translators.zun.config import load_config, parse_microversion
from translators.zun.spec import SpecBuilder


async def render_case(case: dict[str, Any]) -> dict[str, Any]:
    settings = case.get("settings") or {}
    builder = SpecBuilder.from_config(load_config(settings), renderer=Renderer(), settings=settings)
    flags = feature_flags(parse_microversion(str(case.get("microversion", "1.40"))))
    pod = resolved_pod(case["pod"], env=case.get("env"), files=case.get("files"))
    try:
        spec = await builder.build(pod, flags)
    except TranslatorError as exc:
        return {
            "error": {
                "type": type(exc).__name__,
                "reason": getattr(exc, "reason", ""),
                "field": getattr(exc, "field", ""),
                "message": str(exc),
            }
        }
    return {"kind": spec.kind, "template": spec.template, "body": spec.body}


@pytest.mark.golden_files("pods", "*.yaml")
async def test_pod_to_zun_request(golden_case: Path, golden) -> None:
    case = yaml.safe_load(golden_case.read_text())
    golden.check(await render_case(case), golden_case.with_suffix(".json"))


async def test_every_error_case_is_a_translator_error_with_a_reason() -> None:
    folder = Path(__file__).parent / "pods"
    for path in sorted(folder.glob("*unsupported*.yaml")) + sorted(
        folder.glob("capsules-disabled.yaml")
    ):
        out = await render_case(yaml.safe_load(path.read_text()))
        assert out["error"]["type"] == UnsupportedError.__name__, path.name
        assert out["error"]["reason"] in ("UnsupportedVolume", "UnsupportedByBackend"), path.name
