"""Golden files: pod YAML (+ server microversion, settings) → the Zun request body the
templates render, or the clear error the pod gets instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from zun_pods import resolved_pod
from zun_upstream import zun_api_or_none

from translators.base import TranslatorError, UnsupportedError
from translators.render.engine import Renderer
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


def zun_api() -> Any:
    """Zun's own API application (tests/contract/zun/zun_upstream.py)."""
    api = zun_api_or_none()
    if api is None:
        pytest.skip("the zun package (extra zun-server) is not installed")
    return api


def accepted_cases() -> list[Path]:
    """The golden pods vkgate renders a body for (its expected output has no ``error``)."""
    folder = Path(__file__).parent / "pods"
    return [
        p
        for p in sorted(folder.glob("*.yaml"))
        if "error" not in json.loads(p.with_suffix(".json").read_text())
    ]


@pytest.mark.parametrize("path", accepted_cases(), ids=lambda p: p.stem)
async def test_zuns_own_api_accepts_every_golden_body_at_its_microversion(path: Path) -> None:
    """Each body vkgate renders goes through Zun's real API layer (routing, microversion,
    JSON schema, policy as a project member, the create code path) and must get 202."""
    case = yaml.safe_load(path.read_text())
    out = await render_case(case)
    api = zun_api()
    who = {"project_id": "golden-" + path.stem, "user_id": "u-golden", "admin": False}
    if case.get("settings", {}).get("send_image_pull_policy"):
        who["admin"] = True  # the setting is for admin credentials
    if out["body"].get("registry"):
        status, body, _ = api.call(
            "POST",
            "/v1/registries",
            version="container 1.40",
            body=json.dumps(
                {
                    "registry": {
                        "name": out["body"]["registry"],
                        "domain": "r.example",
                        "username": "u",
                        "password": "p",
                    }
                }
            ).encode(),
            **who,
        )
        assert status == 200, body
    version = f"container {case.get('microversion', '1.40')}"
    kind_path = "/v1/capsules" if out["kind"] == "capsule" else "/v1/containers"
    query = {} if out["kind"] == "capsule" else {"run": ["true"]}
    status, body, _ = api.call(
        "POST",
        kind_path,
        query=query,
        version=version,
        body=json.dumps(out["body"]).encode(),
        **who,
    )
    assert status == 202, body


async def test_zuns_own_api_refuses_what_vkgate_now_leaves_out() -> None:
    """The two refusals the fixes above avoid, straight from Zun's API."""
    api = zun_api()
    who = {"project_id": "golden-refusals", "user_id": "u-golden", "admin": False}
    both = {"image": "nginx:1.27", "exposed_ports": {"80/tcp": {}}, "security_groups": ["web"]}
    status, body, _ = api.call(
        "POST", "/v1/containers", version="container 1.40", body=json.dumps(both).encode(), **who
    )
    assert status == 400 and "security_groups" in json.dumps(body)
    pull = {"image": "app:latest", "image_pull_policy": "always"}
    status, body, _ = api.call(
        "POST", "/v1/containers", version="container 1.40", body=json.dumps(pull).encode(), **who
    )
    assert status == 403, body


async def test_zun_18_cannot_say_406_for_an_unsupported_microversion() -> None:
    """Zun 18's HTTPNotAcceptableAPIVersion calls ``bytes.encode`` on Python 3, so a request
    outside 1.1-1.40 escapes its middleware (a 500 from the WSGI server, not the documented 406).
    vkgate therefore learns the range from ``GET /v1`` (docs/backends/zun.md) before any call."""
    api = zun_api()
    who = {"project_id": "golden-versions", "user_id": "u-golden", "admin": False}
    status, body, _ = api.call("GET", "/v1/containers", version="container 1.41", **who)
    assert status == 500 and "AttributeError" in body["exception"]
    status, _, headers = api.call("GET", "/v1", version=None, **who)
    assert status == 200
    assert headers["OpenStack-API-Maximum-Version"] == "container 1.40"
