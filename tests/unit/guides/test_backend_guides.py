"""The backend guides (docs/backends/*.md) are exercised: every TOML block passes
``vkgate config check`` and the backend's own settings parser, every clouds.yaml block loads with
openstacksdk, and the README links each guide.  Snippets are read from the .md files, so the
docs and this test cannot drift apart."""

from __future__ import annotations

import base64
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main as vkgate
from translators.batch.settings import parse_settings
from translators.nomad.config import NomadConfig
from translators.zun.auth import load_cloud_region
from translators.zun.config import load_config

ROOT = Path(__file__).resolve().parents[3]
GUIDES = {kind: ROOT / "docs" / "backends" / f"{kind}.md" for kind in ("nomad", "zun", "batch")}
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SECTIONS = (
    "## Configure and authenticate",
    "## How a pod maps to",
    "## What is supported",
    "## Limits and failure modes",
)


def blocks(kind: str, lang: str) -> list[str]:
    return [body for fence, body in FENCE.findall(GUIDES[kind].read_text()) if fence == lang]


def test_every_guide_has_its_sections_and_a_support_row_for_each_feature() -> None:
    for kind, path in GUIDES.items():
        text = path.read_text()
        for heading in SECTIONS:
            assert heading in text, f"{path.name}: {heading}"
        for feature in ("kubectl logs", "kubectl exec", "kubectl attach", "kubectl port-forward"):
            assert f"| `{feature}`" in text or f"| {feature}" in text, f"{kind}: {feature}"
        for feature in ("| volumes |", "| metrics", "| restart policies |"):
            assert feature in text, f"{kind}: {feature}"


def settings_of(kind: str, table: dict[str, Any], node: str) -> Any:
    if kind == "nomad":
        return NomadConfig.from_settings(table, environ={})
    if kind == "zun":
        return load_config(table)
    env = {}
    if table.get("auth") == "shared_key" and "account_key" not in table:
        env["AZURE_BATCH_ACCESS_KEY"] = base64.b64encode(b"k" * 32).decode()
    return parse_settings(table, node_name=node, environ=env)


@pytest.mark.parametrize("kind", sorted(GUIDES))
def test_every_toml_example_passes_config_check_and_the_backend_parser(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    examples = blocks(kind, "toml")
    assert examples, f"{kind}.md has no TOML example"
    for i, text in enumerate(examples):
        path = tmp_path / f"{kind}-{i}.toml"
        path.write_text(text)
        table = tomllib.loads(text)["backend"][kind]
        # config check validates the backend's table with the environment a user would have:
        # a shared-key example without the key in the file gets it from the environment.
        monkeypatch.delenv("AZURE_BATCH_ACCESS_KEY", raising=False)
        if table.get("auth") == "shared_key" and "account_key" not in table:
            monkeypatch.setenv("AZURE_BATCH_ACCESS_KEY", base64.b64encode(b"k" * 32).decode())
        assert vkgate(["config", "check", str(path)]) == 0, capsys.readouterr().err
        data = tomllib.loads(text)
        assert data["backend"]["kind"] == kind
        settings_of(kind, data["backend"][kind], data["node"]["name"])


def test_the_batch_example_without_a_key_uses_azure_identity() -> None:
    first = tomllib.loads(blocks("batch", "toml")[0])
    settings = settings_of("batch", first["backend"]["batch"], first["node"]["name"])
    assert settings.auth == "azure_identity"


def test_every_clouds_yaml_example_loads_with_openstacksdk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    examples = [b for b in blocks("zun", "yaml") if "clouds:" in b]
    assert examples, "zun.md has no clouds.yaml example"
    for key in [k for k in os.environ if k.startswith("OS_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("OS_CLIENT_SECURE_FILE", str(tmp_path / "none.yaml"))
    loaded = 0
    for i, text in enumerate(examples):
        path = tmp_path / f"clouds-{i}.yaml"
        path.write_text(text)
        for name, entry in yaml.safe_load(text)["clouds"].items():
            region = load_cloud_region(load_config({"cloud": name, "clouds_file": str(path)}))
            assert region.config["auth"]["auth_url"].startswith("https://")
            assert region.region_name == entry["region_name"]
            loaded += 1
    assert loaded >= 2


def test_the_readme_links_every_guide_and_has_a_support_matrix() -> None:
    readme = (ROOT / "README.md").read_text()
    for kind in GUIDES:
        assert f"docs/backends/{kind}.md" in readme
    (line,) = [x for x in readme.splitlines() if "Support: " in x]
    for feature in ("logs -f", "exec", "attach", "port-forward", "metrics", "volumes"):
        assert feature in line
