"""Every packaged pod template, for every sample pod → the exact backend request body.

Expected files: ``tests/golden/rendered/<template path without .j2>/<sample>.json``; regenerate
with ``pytest tests/golden/rendered --update-golden`` and review the diff.  Rendering goes
through the backend's ``render_spec`` (what ``create`` sends), with the offline settings below;
a backend that refuses a kind of pod (``UnsupportedError``) or cannot translate it
(``TranslationError``) records that refusal instead.
"""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gateway.templating.offline import SpecRenderer, load_samples, resolve
from translators.base import Renderable, TranslationError, UnsupportedError
from translators.render.engine import Renderer, backend_of, is_entry_template
from translators.render.pool import RenderPool

HERE = Path(__file__).parent
NODE = "vkgate"
SETTINGS: dict[str, dict[str, Any]] = {
    # both packaged drivers: every packaged template renders here (a node allows the driver of
    # its own template only: docs/design/nomad.md, "Policy on the rendered job")
    "nomad": {
        "address": "http://127.0.0.1:4646",
        "mhz_per_core": 2000,
        "drivers": ["docker", "raw_exec"],
    },
    "zun": {
        "auth_url": "http://127.0.0.1:5000/v3",
        "username": "demo",
        "password": "demo-password",
        "project_name": "demo",
        "user_domain_name": "Default",
    },
    "batch": {
        "endpoint": "https://acct.westeurope.batch.azure.com",
        "account_name": "acct",
        "account_key": base64.b64encode(b"not-a-real-key").decode(),
        "pool_id": "pool-1",
    },
}
SAMPLES = load_samples()
TEMPLATES = [
    n for n in Renderer().list_templates() if is_entry_template(n) and not n.startswith("teams/")
]


@pytest.fixture(scope="module")
def pool() -> Any:
    """The agent renders in worker processes (translators/render/pool.py): the same bytes."""
    pool = RenderPool(workers=1)
    yield pool
    pool.close()


def _renderer(backend: str, pool: RenderPool | None) -> SpecRenderer:
    # every packaged template is allowed: the golden files are about rendering, not lookup
    renderer = Renderer(allowed={"*": ["*"]}, pool=pool)
    sr = SpecRenderer(renderer, backend=backend, settings=SETTINGS[backend], node_name=NODE)
    if not isinstance(sr.translator, Renderable):
        pytest.skip(f"{backend}: rendered by {sr.via}; golden files need render_spec")
    return sr


@pytest.mark.parametrize("isolation", ["thread", "process"])
@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
@pytest.mark.parametrize("template", TEMPLATES)
def test_packaged_template_renders_sample(
    template: str, sample: Any, isolation: str, golden: Any, request: pytest.FixtureRequest
) -> None:
    backend = backend_of(template)
    sr = _renderer(backend, request.getfixturevalue("pool") if isolation == "process" else None)
    if (
        "vkgate:partial"
        in (sr.renderer.current_env.loader.get_source(sr.renderer.env, template)[0])
    ):  # type: ignore[union-attr]
        pytest.skip(f"{template} is not a pod template")
    resolved = resolve(sample.inputs, node_name=NODE, features=sr.features, backend=backend)
    if resolved.pod is None:  # the agent refuses this pod (admission): nothing is submitted
        golden.check(
            {"refused": resolved.errors},
            HERE / template.removesuffix(".j2") / f"{sample.name}.json",
        )
        return
    pod = dataclasses.replace(resolved.pod, template=template)
    try:
        spec: Any = sr.render(pod)
    except UnsupportedError as exc:
        spec = {"unsupported": {"reason": exc.reason, "message": str(exc)}}
    except TranslationError as exc:  # e.g. raw_exec and a container without a command
        spec = {"translation_failed": {"field": exc.field, "message": str(exc)}}
    golden.check(spec, HERE / template.removesuffix(".j2") / f"{sample.name}.json")
