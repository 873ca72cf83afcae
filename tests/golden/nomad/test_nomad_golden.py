"""Golden files for the Nomad backend.

* ``pods/*.yaml`` (a Pod plus the ConfigMaps/Secrets it references) → ``pods/*.json``: the
  ``POST /v1/jobs`` body, rendered through the packaged templates exactly as ``create`` sends
  it (the pod is resolved by the gateway's own offline resolver).  A pod the backend refuses
  produces ``{"error": …}`` instead.
* ``states/*.nomad.json`` (job stub + allocations + evaluations as the Nomad API returned
  them — captured from a real ``nomad agent -dev``, or derived from such a capture where a dev
  agent cannot produce the situation; ``note`` says which) → ``states/*.status.json``: the
  ``WorkloadState`` the translator reports and the PodStatus the gateway builds from it.

``pytest --update-golden tests/golden/nomad`` rewrites the expected files; review the diff.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.offline import parse_inputs, resolve
from gateway.pods.status import from_workload
from translators.base import TranslatorError
from translators.nomad import NomadTranslator
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import render_job
from translators.nomad.status import JobView, placement_from, workload_state
from translators.rendering import Renderer

NODE = "vk-golden"
SETTINGS: dict[str, Any] = {
    "mhz_per_core": 2000,
    "datacenters": ["dc1"],
    "namespaces": ["analytics"],
    "allowed_datacenters": ["dc2"],
    "node_pools": ["batch"],
    "max_priority": 80,
    "restart_delay": "10s",
}
NOW = _dt.datetime(2026, 11, 22, 10, 0, 0, tzinfo=_dt.UTC)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@pytest.mark.golden_files("pods", "*.yaml")
def test_pod_renders_to_expected_nomad_job(golden_case: Path, golden: Any) -> None:
    settings = dict(SETTINGS)
    if golden_case.name.startswith("raw-exec"):
        settings["template"] = "nomad/raw_exec.j2"
    inputs = parse_inputs(golden_case.read_text(), source=golden_case.name)
    resolved = resolve(inputs, node_name=NODE, features=NomadTranslator.features, backend="nomad")
    assert resolved.pod is not None and not resolved.errors, resolved.errors
    cfg = NomadConfig.from_settings(settings, environ={})
    try:
        out: Any = render_job(
            resolved.pod, renderer=Renderer(), cfg=cfg, settings=settings, factor=2000.0
        )
    except TranslatorError as exc:
        out = {"error": type(exc).__name__, "message": str(exc), "field": getattr(exc, "field", "")}
    golden.check(out, golden_case.with_suffix(".json"))


def test_render_spec_is_what_the_golden_files_pin() -> None:
    """``NomadTranslator.render_spec`` (vkgate render / templates check) = ``render_job``."""
    case = Path(__file__).parent / "pods" / "plain.yaml"
    resolved = resolve(parse_inputs(case.read_text()), node_name=NODE).pod
    translator = NomadTranslator(None, environ={}, **SETTINGS)
    expected = json.loads(case.with_suffix(".json").read_text())
    assert json.loads(json.dumps(translator.render_spec(resolved))) == expected


@pytest.mark.golden_files("states", "*.nomad.json")
def test_allocation_maps_to_expected_pod_status(golden_case: Path, golden: Any) -> None:
    doc = json.loads(golden_case.read_text())
    view = JobView.from_job(doc["job"])
    for alloc in doc["allocations"]:
        view.allocs[alloc["ID"]] = alloc
    view.placement = placement_from(doc.get("evaluations") or [])
    state = workload_state(view, node_ips=doc["node_ips"])
    status = from_workload(doc["pod"], state, now=NOW, host_ip="10.0.0.9", backend="nomad")
    out = {"note": doc.get("note", ""), "workload": _plain(state), "podStatus": status}
    golden.check(
        out, golden_case.with_name(golden_case.name.replace(".nomad.json", ".status.json"))
    )
