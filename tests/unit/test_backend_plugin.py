"""The open backend seam: a backend vkgate has never heard of, installed as its own distribution
(``tests/plugins/vkgate-acme``), works with every command; and one settings path for all.

The acme plugin is installed into the test environment (tox.ini ``deps``, ``.ci/run``); without
it these tests fail rather than skip, because they are the proof that the seam is open.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from gateway import cli
from translators import plugins

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "templates" / "samples"
BUILT_IN = ("simulated", "nomad", "zun", "batch")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("VKGATE_CONFIG", "ACME_REGION", "NOMAD_ADDR", "NOMAD_TOKEN", "OS_CLOUD"):
        monkeypatch.delenv(var, raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def conf(tmp_path: Path, text: str) -> str:
    path = tmp_path / "vkgate.toml"
    path.write_text(text)
    return str(path)


def test_the_acme_plugin_is_installed_from_its_own_distribution() -> None:
    assert "acme" in plugins.kinds(), "pip install tests/plugins/vkgate-acme"
    spec = plugins.load("acme")
    assert spec.kind == "acme" and spec.templates_dir is not None
    assert "vkgate-acme" in str(spec.templates_dir) or "vkgate_acme" in str(spec.templates_dir)
    assert not (ROOT / "templates" / "acme").exists()  # its templates ship with it, not vkgate


def test_config_check_accepts_and_validates_the_plugins_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ACME_REGION", "us-2")
    path = conf(tmp_path, '[backend]\nkind = "acme"\n[backend.acme]\nslots = 8\n')
    code, out, err = run(capsys, "config", "check", path)
    assert code == 0, err
    table = out.split("[backend.acme]\n", 1)[1]
    assert 'region = "us-2"  # env ACME_REGION' in table
    assert "slots = 8\n" in table  # from the file: no note
    assert 'record_dir = ""  # default' in table

    path = conf(tmp_path, '[backend]\nkind = "acme"\n[backend.acme]\nslots = 0\n')
    code, out, err = run(capsys, "config", "check", path)
    assert code == 1 and out == ""
    assert err == "vkgate: config error: backend.acme.slots: must be in 1.., got 0\n"


def test_render_and_templates_check_use_the_plugins_templates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = conf(tmp_path, '[backend]\nkind = "acme"\n[backend.acme]\nslots = 2\n')
    code, out, err = run(capsys, "render", str(SAMPLES / "multi-container.yaml"), "-c", path)
    assert code == 0, err
    body = json.loads(out)
    assert body["name"] == "acme-default-multi" and body["slots"] == 2
    assert [c["name"] for c in body["containers"]] == ["web", "writer"]

    code, out, _ = run(capsys, "templates", "check", "--backend", "acme", "-c", path)
    assert code == 0, out
    assert "1 template(s)" in out and " 0 failed" in out
    # rendered for real: every sample but the two the agent refuses for acme (a sidecar, a hostPort)
    assert int(out.rsplit(": ", 1)[1].split(" ok")[0]) == 7 and "2 unsupported" in out

    broken = tmp_path / "tpl" / "acme"
    broken.mkdir(parents=True)
    (broken / "workload.j2").write_text('{"name": "x", "region": "r", "slots": 0}')
    code, out, _ = run(
        capsys, "templates", "check", str(tmp_path / "tpl"), "--backend", "acme", "-c", path
    )
    assert code == 1 and "output does not match the acme schema" in out


@pytest.mark.parametrize(
    ("kind", "typo"),
    [("simulated", "start_dealy"), ("nomad", "adress"), ("zun", "clowd"), ("batch", "pool")],
)
def test_a_backend_typo_is_one_line_and_exit_1_in_config_check_and_run(
    kind: str, typo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = conf(tmp_path, f'[backend]\nkind = "{kind}"\n[backend.{kind}]\n{typo} = "x"\n')
    code, out, err = run(capsys, "config", "check", path)
    assert code == 1 and out == ""
    assert err.startswith(f"vkgate: config error: backend.{kind}.{typo}: unknown setting")
    assert err.count("\n") == 1
    run_code, _, run_err = run(capsys, "run", "-c", path)
    assert (run_code, run_err) == (code, err)


def test_an_uninstalled_kind_names_what_is_installed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = conf(tmp_path, '[backend]\nkind = "acne"\n')
    code, _, err = run(capsys, "config", "check", path)
    assert code == 1
    assert "backend.kind: no backend 'acne' is installed" in err and "acme" in err


def test_config_check_shows_backend_defaults_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NOMAD_ADDR", "http://127.0.0.1:4646")
    monkeypatch.setenv("NOMAD_TOKEN", "s3cret-token")
    path = conf(tmp_path, '[backend]\nkind = "nomad"\n[backend.nomad]\ndatacenters = ["dc1"]\n')
    code, out, _ = run(capsys, "config", "check", path)
    assert code == 0
    table = out.split("[backend.nomad]\n", 1)[1]
    assert 'address = "http://127.0.0.1:4646"  # env NOMAD_ADDR' in table
    assert 'token = "*****"  # env NOMAD_TOKEN' in table and "s3cret" not in out
    assert 'datacenters = ["dc1"]\n' in table
    assert "priority = 50  # default" in table

    monkeypatch.setenv("OS_AUTH_URL", "http://127.0.0.1:5000/v3")
    monkeypatch.setenv("OS_PASSWORD", "pw-value")
    path = conf(tmp_path, '[backend]\nkind = "zun"\n')
    code, out, _ = run(capsys, "config", "check", path)
    assert code == 0
    assert '# OS_AUTH_URL = "http://127.0.0.1:5000/v3"  (environment)' in out
    assert '# OS_PASSWORD = "*****"  (environment)' in out and "pw-value" not in out

    monkeypatch.setenv("AZURE_BATCH_ENDPOINT", "https://a.b.batch.azure.com")
    monkeypatch.setenv("AZURE_TENANT_ID", "tenant-1")
    path = conf(tmp_path, '[backend]\nkind = "batch"\n[backend.batch]\npool_id = "p"\n')
    code, out, err = run(capsys, "config", "check", path)
    assert code == 0, err
    assert 'endpoint = "https://a.b.batch.azure.com"  # env AZURE_BATCH_ENDPOINT' in out
    assert '# AZURE_TENANT_ID = "tenant-1"  (environment)' in out


def _code_strings(path: Path) -> set[str]:
    """String constants in code (docstrings excluded)."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.add(id(value))
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    }


def test_nothing_in_the_gateway_names_a_backend() -> None:
    """Outside the local devstack (which builds and starts a Nomad agent), no gateway code
    mentions a backend kind or one of its templates."""
    files = [
        p for p in (ROOT / "gateway").rglob("*.py") if "devstack" not in p.relative_to(ROOT).parts
    ]
    assert len(files) > 30
    found = []
    for path in files:
        for text in _code_strings(path):
            for kind in BUILT_IN:
                if text == kind or text.startswith(f"{kind}/") or f"[{kind}]" in text:
                    found.append(f"{path.relative_to(ROOT)}: {text!r}")
    assert found == []


def _vkgate_imports(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(module, names) of every import of a vkgate package in one file."""
    ours = ("gateway", "translators", "templates", "vkgate_core")
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, ()) for a in node.names if a.name.split(".")[0] in ours]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.split(".")[0] in ours
        ):
            found.append((node.module, tuple(a.name for a in node.names)))
    return found


def test_the_acme_plugin_imports_vkgate_only_through_the_public_api() -> None:
    """A plugin needs one vkgate module, ``translators.api`` (docs/backend-authors.md), and
    only the names it publishes."""
    from translators import api

    package = ROOT / "tests" / "plugins" / "vkgate-acme" / "vkgate_acme"
    imports = [
        (path.relative_to(ROOT), module, names)
        for path in sorted(package.rglob("*.py"))
        for module, names in _vkgate_imports(path)
    ]
    assert imports, "the acme plugin imports nothing from vkgate: the test looks at the wrong files"
    assert [i for i in imports if i[1] != "translators.api"] == []
    assert [n for *_, names in imports for n in names if n not in api.__all__] == []
