"""Golden files for the Azure Batch backend.

* ``pods/*.yaml`` (a Pod plus the ConfigMaps/Secrets it references) → ``pods/*.json``: the
  add-task-collection body ``create`` sends (``render_spec``), rendered through the packaged
  ``templates/batch/task.j2`` for a fixed pool (standard_d4s_v3, 4 slots, dockerCompatible).
  The pod is resolved by the gateway's own offline resolver.  A pod the backend refuses
  produces ``{"error": …}``.
* ``states/*.batch.json`` (the pod, its tasks as the Batch REST API returns them, node IPs) →
  ``states/*.status.json``: the ``WorkloadState`` the translator reports and the PodStatus the
  gateway builds from it.
* ``jobs/job.json``: the job body ``templates/batch/_job.j2`` renders for a node.

``pytest --update-golden tests/golden/batch`` rewrites the expected files; review the diff.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import enum
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.pods.status.rules import from_workload
from gateway.templating.offline import parse_inputs, resolve
from translators.base import OWNER_KEY, OWNER_VALUE, TranslatorError
from translators.batch import BatchTranslator
from translators.batch.capacity import PoolInfo
from translators.batch.status import group_tasks, workload_state
from translators.render.engine import Renderer

NODE = "vk-golden"
NOW = _dt.datetime(2026, 3, 1, 10, 2, 0, tzinfo=_dt.UTC)
SETTINGS: dict[str, Any] = {
    "endpoint": "https://acct.westeurope.batch.azure.com",
    "account_name": "acct",
    "account_key": base64.b64encode(b"golden-files-are-not-a-real-key").decode(),
    "pool_id": "pool-1",
}
#: Extra settings per case (file stem).
CASE_SETTINGS: dict[str, dict[str, Any]] = {
    "registry": {
        "registry": {
            "server": "myregistry.azurecr.io",
            "username": "puller",
            "password": "golden-password",
        }
    },
    "pull-secrets": {  # the pod's imagePullSecrets win over the configured registry
        "registry": {
            "server": "myregistry.azurecr.io",
            "username": "puller",
            "password": "golden-password",
        }
    },
}
POOL = PoolInfo(
    id="pool-1", vm_size="standard_d4s_v3", slots_per_node=4, container_type="dockerCompatible"
)


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


def _translator(stem: str) -> BatchTranslator:
    settings = {**SETTINGS, **CASE_SETTINGS.get(stem, {})}
    t = BatchTranslator(None, environ={}, node_name=NODE, **settings)
    t.nodes.pool = POOL
    return t


@pytest.mark.golden_files("pods", "*.yaml")
def test_pod_renders_to_expected_task_collection(golden_case: Path, golden: Any) -> None:
    translator = _translator(golden_case.stem)
    inputs = parse_inputs(golden_case.read_text(), source=golden_case.name)
    resolved = resolve(inputs, node_name=NODE, features=BatchTranslator.features, backend="batch")
    try:
        if resolved.pod is None:  # the agent refuses it (admission): nothing is submitted
            out: Any = {"refused": resolved.errors}
        else:
            out = translator.render_spec(resolved.pod)
    except TranslatorError as exc:
        out = {
            "error": type(exc).__name__,
            "reason": getattr(exc, "reason", ""),
            "message": str(exc),
            "field": getattr(exc, "field", ""),
        }
    golden.check(out, golden_case.with_suffix(".json"))


@pytest.mark.golden_files("states", "*.batch.json")
def test_tasks_map_to_expected_pod_status(golden_case: Path, golden: Any) -> None:
    doc = json.loads(golden_case.read_text())
    (group,) = group_tasks(doc["tasks"]).values()
    state = workload_state(
        group, job_id=doc["job_id"], node_name=NODE, ip_of=lambda n: doc["nodes"].get(n, "")
    )
    status = from_workload(doc["pod"], state, now=NOW, host_ip="10.0.0.9", backend="batch")
    out = {"note": doc.get("note", ""), "workload": _plain(state), "podStatus": status}
    golden.check(
        out, golden_case.with_name(golden_case.name.replace(".batch.json", ".status.json"))
    )


def test_job_template(golden: Any) -> None:
    body = Renderer().render(
        "batch/_job.j2",
        {
            "job": {"id": "vkgate-vk-golden", "pool_id": "pool-1", "node_name": NODE},
            "owner": {"key": OWNER_KEY, "value": OWNER_VALUE},
            "settings": {},
        },
    )
    golden.check(body, Path(__file__).parent / "jobs" / "job.json")


def test_secret_values_only_in_environment_settings() -> None:
    """The golden env case: the Secret's value is in env, nowhere else in the body."""
    case = Path(__file__).parent / "pods" / "env-secrets.yaml"
    pod = resolve(parse_inputs(case.read_text()), node_name=NODE).pod
    (task,) = _translator("env-secrets").render_spec(pod)["value"]
    assert {"name": "DB_PASSWORD", "value": "s3cr3t-passw0rd"} in task["environmentSettings"]
    rest = {k: v for k, v in task.items() if k != "environmentSettings"}
    assert "s3cr3t" not in json.dumps(rest)
