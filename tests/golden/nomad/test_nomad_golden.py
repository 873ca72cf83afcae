"""Golden files for the Nomad backend.

* ``pods/*.yaml`` (a Pod plus the ConfigMaps/Secrets it references) → ``pods/*.json``: the
  ``POST /v1/jobs`` body, rendered through the packaged templates exactly as ``create`` sends
  it (the pod is resolved by the gateway's own offline resolver).  A pod the backend refuses
  produces ``{"error": …}`` instead.  ``raw-exec-*`` cases render ``nomad/raw_exec.j2``,
  ``bridge-*`` cases ``network_mode = "bridge"``, ``pull-secrets*`` cases
  ``registry_auth = "job"``.
* ``states/*.nomad.json`` (job stub + allocations + evaluations as the Nomad API returned
  them — captured from a real ``nomad agent -dev`` 1.11.3, or derived from such a capture where
  a dev agent cannot produce the situation; ``note`` says which) → ``states/*.status.json``:
  the ``WorkloadState`` the translator reports and the PodStatus the gateway builds from it.
* ``states-1.6.3/*.nomad.json``: the same situations captured from (or derived from captures
  of) Nomad 1.6.3 by ``nomad_capture.py``.  Each must map to the 1.11.3 expectation of the
  same state, compared without what differs by capture (IDs, times, Nomad's restart delays);
  a state whose status differs only in Nomad's own words keeps its own
  ``states-1.6.3/<name>.status.json`` and says why in ``DIFFERS_ON_1_6_3``.

``pytest --update-golden tests/golden/nomad`` rewrites the expected files; review the diff.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gateway.pods.status.rules import from_workload
from gateway.templating.offline import parse_inputs, resolve
from translators.base import TranslatorError
from translators.nomad import NomadTranslator
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import render_job
from translators.nomad.placements import placement_from
from translators.nomad.status import JobView, workload_state
from translators.render.engine import Renderer
from translators.render.pool import RenderPool

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


@pytest.fixture(scope="module")
def pool() -> Any:
    """The agent renders in worker processes (translators/render/pool.py): the same bytes."""
    pool = RenderPool(workers=1)
    yield pool
    pool.close()


@pytest.mark.parametrize("isolation", ["thread", "process"])
@pytest.mark.golden_files("pods", "*.yaml")
def test_pod_renders_to_expected_nomad_job(
    golden_case: Path, golden: Any, isolation: str, request: pytest.FixtureRequest
) -> None:
    renderer = Renderer(pool=request.getfixturevalue("pool") if isolation == "process" else None)
    settings = dict(SETTINGS)
    if golden_case.name.startswith("raw-exec"):
        settings["template"] = "nomad/raw_exec.j2"
    if golden_case.name.startswith("bridge-"):
        settings["network_mode"] = "bridge"
    if golden_case.name.startswith("pull-secrets"):
        settings["registry_auth"] = "job"  # refused by default (translators/nomad/pullauth.py)
    inputs = parse_inputs(golden_case.read_text(), source=golden_case.name)
    resolved = resolve(inputs, node_name=NODE, features=NomadTranslator.features, backend="nomad")
    assert resolved.pod is not None and not resolved.errors, resolved.errors
    cfg = NomadConfig.from_settings(settings, environ={})
    try:
        out: Any = render_job(
            resolved.pod, renderer=renderer, cfg=cfg, settings=settings, factor=2000.0
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


def _status_of(doc: dict[str, Any]) -> dict[str, Any]:
    view = JobView.from_job(doc["job"])
    for alloc in doc["allocations"]:
        view.allocs[alloc["ID"]] = alloc
    view.placement = placement_from(doc.get("evaluations") or [])
    state = workload_state(view, node_ips=doc["node_ips"])
    status = from_workload(doc["pod"], state, now=NOW, host_ip="10.0.0.9", backend="nomad")
    return {"note": doc.get("note", ""), "workload": _plain(state), "podStatus": status}


def _status_path(case: Path) -> Path:
    return case.with_name(case.name.replace(".nomad.json", ".status.json"))


@pytest.mark.golden_files("states", "*.nomad.json")
def test_allocation_maps_to_expected_pod_status(golden_case: Path, golden: Any) -> None:
    doc = json.loads(golden_case.read_text())
    golden.check(_status_of(doc), _status_path(golden_case))


# --------------------------------------------------------------------------- Nomad 1.6.3

STATES_1_11_3 = Path(__file__).parent / "states"
STATES_1_6_3 = Path(__file__).parent / "states-1.6.3"
#: 1.6.3 states whose status differs from the 1.11.3 expectation of the same situation, and
#: why (docs/design/nomad.md, "Nomad versions: 1.6.3 and 1.11.3").  Each keeps its own
#: ``states-1.6.3/<name>.status.json``; apart from the words quoted from Nomad, every field
#: must still equal the 1.11.3 expectation where there is one.
DIFFERS_ON_1_6_3 = {
    "docker-image-missing": (
        "Nomad's words only: 1.6.3's docker driver reports the failed pull as"
        " `Failed to pull …: API error (500): Get …` where 1.11.3 says `… Error response from"
        " daemon: Get …`; reason (ImagePullBackOff), phase and restart count are the same"
    ),
    "failed-validation": (
        "Nomad's words only: the HCL parser of 1.6.3 words the unescaped `${VAR:+yes}` as"
        " `Expected a closing brace to end the interpolation expression, but found extra"
        " characters.` where 1.11.3 says `Template interpolation doesn't expect a colon at"
        " this location. …`; reason (CreateContainerConfigError), exit code 128 and phase are"
        " the same"
    ),
    "docker-image-pull-first": (
        "no 1.11.3 counterpart: docker-image-missing after its first failed pull, captured from"
        " 1.6.3 (the 1.11.3 image-pull state is derived): ErrImagePull"
    ),
    "docker-image-pull-again": (
        "no 1.11.3 counterpart: docker-image-missing after its second failed pull, captured"
        " from 1.6.3 (the 1.11.3 image-pull-backoff state is derived): ImagePullBackOff"
    ),
}
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
_SHORT_ID = re.compile(r"\b[0-9a-f]{8}\b")  # an allocation ID's first 8 characters
_DELAY = re.compile(r"\d+\.\d+s\b")  # Nomad's jittered restart delay, "2.076918138s"


def _comparable(value: Any, *, words: bool = True) -> Any:
    """A status without what differs from one capture to the next: allocation and node IDs,
    times, restart delays and the note (``words=False`` also drops every ``message``)."""
    if isinstance(value, dict):
        return {
            k: _comparable(v, words=words)
            for k, v in value.items()
            if k not in ("note", "reason_1_6_3") and (words or k != "message")
        }
    if isinstance(value, list):
        return [_comparable(v, words=words) for v in value]
    if isinstance(value, str):
        for pattern, token in ((_UUID, "<id>"), (_TIME, "<time>"), (_SHORT_ID, "<id8>")):
            value = pattern.sub(token, value)
        return _DELAY.sub("<delay>", value)
    return value


def test_every_1_11_3_state_has_a_1_6_3_capture() -> None:
    old = {p.name for p in STATES_1_11_3.glob("*.nomad.json")}
    new = {p.name for p in STATES_1_6_3.glob("*.nomad.json")}
    assert old and old <= new, sorted(old - new)
    for case in STATES_1_6_3.glob("*.nomad.json"):
        assert "nomad agent -dev 1.6.3" in json.loads(case.read_text())["note"], case.name


@pytest.mark.golden_files("states-1.6.3", "*.nomad.json")
def test_1_6_3_allocation_maps_like_the_1_11_3_capture(golden_case: Path, golden: Any) -> None:
    name = golden_case.name.removesuffix(".nomad.json")
    out = _status_of(json.loads(golden_case.read_text()))
    own, reference = _status_path(golden_case), STATES_1_11_3 / f"{name}.status.json"
    expected = json.loads(reference.read_text()) if reference.exists() else None
    if name in DIFFERS_ON_1_6_3:
        golden.check({"reason_1_6_3": DIFFERS_ON_1_6_3[name], **out}, own)
        if expected is not None:
            assert _comparable(out) != _comparable(expected), f"{name} no longer differs"
            assert _comparable(out, words=False) == _comparable(expected, words=False)
        return
    assert not own.exists(), f"{own.name}: list the state in DIFFERS_ON_1_6_3 or remove it"
    assert expected is not None, f"{name}: no 1.11.3 expectation; list it in DIFFERS_ON_1_6_3"
    assert _comparable(out) == _comparable(expected)


def test_1_6_3_image_pulls_back_off_like_the_kubelet() -> None:
    """The kubelet's order on the real 1.6.3 driver: ErrImagePull after the first failed pull,
    ImagePullBackOff after the next ones — with Nomad's words as the message."""
    reasons = {}
    for name in ("docker-image-pull-first", "docker-image-pull-again", "docker-image-missing"):
        out = _status_of(json.loads((STATES_1_6_3 / f"{name}.nomad.json").read_text()))
        (container,) = out["podStatus"]["containerStatuses"]
        assert out["podStatus"]["phase"] == "Pending"
        assert container["state"]["waiting"]["message"].startswith(
            "Driver Failure: Failed to pull `127.0.0.1:1/vkgate/missing:1`"
        )
        reasons[name] = container["state"]["waiting"]["reason"]
    assert reasons == {
        "docker-image-pull-first": "ErrImagePull",
        "docker-image-pull-again": "ImagePullBackOff",
        "docker-image-missing": "ImagePullBackOff",
    }
