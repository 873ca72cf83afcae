"""The TypedDicts of vkgate_core.kubetypes describe the pod JSON vkgate actually sees: every
field of every pod in the golden inputs (all backends) and of the status cases is declared, so
typing a function ``pod: Pod`` never hides a field the code reads from mypy."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_type_hints

import pytest
import yaml

from vkgate_core import kubetypes as kt

ROOT = Path(__file__).resolve().parents[2] / "golden"


def _pods() -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(ROOT.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "Pod":
                found.append((str(path.relative_to(ROOT)), doc))
    return found


PODS = _pods()


def _undeclared(obj: Any, td: type, where: str) -> list[str]:
    if not isinstance(obj, dict):
        return []
    hints = get_type_hints(td)
    out = [f"{where}.{k}" for k in obj if k not in hints]
    nested = {
        "metadata": kt.ObjectMeta,
        "spec": kt.PodSpec,
        "status": kt.PodStatus,
        "ownerReferences": kt.OwnerReference,
        "containers": kt.Container,
        "initContainers": kt.Container,
        "ephemeralContainers": kt.Container,
        "containerStatuses": kt.ContainerStatus,
        "initContainerStatuses": kt.ContainerStatus,
    }
    for key, sub in nested.items():
        if key not in hints or key not in obj:
            continue
        value = obj[key]
        if isinstance(value, list):
            for i, item in enumerate(value):
                out += _undeclared(item, sub, f"{where}.{key}[{i}]")
        else:
            out += _undeclared(value, sub, f"{where}.{key}")
    return out


def test_there_are_many_pods_to_check() -> None:
    assert len(PODS) >= 25


@pytest.mark.parametrize(("source", "pod"), PODS, ids=[s for s, _ in PODS])
def test_every_field_of_a_golden_pod_is_declared(source: str, pod: dict[str, Any]) -> None:
    assert _undeclared(pod, kt.Pod, "pod") == []


def test_an_undeclared_field_is_found() -> None:
    """The check itself: a field the types do not know is reported with its path."""
    pod = {"spec": {"containers": [{"name": "a", "bogus": 1}], "alsoBogus": True}}
    assert _undeclared(pod, kt.Pod, "pod") == ["pod.spec.alsoBogus", "pod.spec.containers[0].bogus"]


def test_the_cast_boundaries_do_not_copy() -> None:
    raw: dict[str, Any] = {"metadata": {"name": "p"}}
    assert kt.as_pod(raw) is raw and kt.as_node(raw) is raw
    assert kt.CONTAINER_GROUPS == ("initContainers", "containers")
