"""`vkgate render` and `vkgate templates check`, offline, through the real argument parser."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway import cli, offline
from translators.rendering import packaged_templates_dir

JOB = """{
  "Job": {
    "ID": {{ ("k8s-" ~ meta.namespace ~ "-" ~ meta.name)|tojson }},
    "Priority": {% block priority %}50{% endblock %},
    "Meta": {% block meta %}{"team": {{ team|tojson }}}{% endblock %},
    "TaskGroups": [{"Name": "pod", "Tasks": [
      {%- for c in containers %}{% if not loop.first %},{% endif %}
      {"Name": {{ c.name|tojson }}, "Driver": "docker",
       "Config": {"image": {{ c.image|tojson }}, "args": {{ c.args|tojson }}},
       "Env": {{ c.env|tojson }}}
      {%- endfor %}]}]
  }
}
"""

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: ml
  annotations: {}
spec:
  containers:
    - name: app
      image: nginx:1.27
      args: ["--db=$(DB)"]
      env:
        - {name: DB, valueFrom: {configMapKeyRef: {name: cfg, key: db}}}
        - {name: PW, valueFrom: {secretKeyRef: {name: creds, key: password}}}
        - {name: TOKEN, valueFrom: {secretKeyRef: {name: not-in-file, key: token}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: ml}
data: {db: "db:5432"}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: ml}
stringData: {password: hunter2-secret}
---
apiVersion: v1
kind: Namespace
metadata: {name: ml, labels: {vkgate.io/team: ml}}
"""


@pytest.fixture(autouse=True)
def direct_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """Render with the fixture templates directly, whatever the real backends implement."""
    monkeypatch.setattr(offline, "_load_translator", lambda *a, **k: (None, ""))
    monkeypatch.delenv("VKGATE_CONFIG", raising=False)


@pytest.fixture
def tdir(tmp_path: Path) -> Path:
    d = tmp_path / "tpl"
    (d / "nomad").mkdir(parents=True)
    (d / "nomad" / "job.j2").write_text(JOB)
    return d


@pytest.fixture
def pod_file(tmp_path: Path) -> Path:
    p = tmp_path / "pod.yaml"
    p.write_text(POD)
    return p


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_render_prints_the_spec_with_secrets_masked(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "render", str(pod_file), "--backend", "nomad", "--templates-dir", str(tdir)
    )
    assert code == 0, err
    job = json.loads(out)["Job"]
    task = job["TaskGroups"][0]["Tasks"][0]
    assert job["ID"] == "k8s-ml-web"
    assert job["Meta"] == {"team": "ml"}  # team from the Namespace document's label
    assert task["Config"]["args"] == ["--db=db:5432"]  # $(VAR) expanded from the ConfigMap
    assert task["Env"]["PW"] == "*****"
    assert task["Env"]["TOKEN"] == "*****"  # placeholder secrets are secrets too
    assert "hunter2-secret" not in out


def test_show_secrets_and_placeholders(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys,
        "render",
        str(pod_file),
        "--backend",
        "nomad",
        "--templates-dir",
        str(tdir),
        "--show-secrets",
    )
    env = json.loads(out)["Job"]["TaskGroups"][0]["Tasks"][0]["Env"]
    assert code == 0
    assert env["PW"] == "hunter2-secret"
    assert env["TOKEN"] == "<secret not-in-file token>"


def test_explain_shows_the_lookup_on_stderr(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tdir / "teams" / "ml" / "nomad").mkdir(parents=True)
    (tdir / "teams" / "ml" / "nomad" / "job.j2").write_text(
        '{% extends "nomad/job.j2" %}{% block priority %}80{% endblock %}'
    )
    code, out, err = run(
        capsys,
        "render",
        str(pod_file),
        "--backend",
        "nomad",
        "--templates-dir",
        str(tdir),
        "--explain",
    )
    assert code == 0
    assert json.loads(out)["Job"]["Priority"] == 80
    assert "#   team: 'ml' (from the namespace label vkgate.io/team)" in err
    assert "2. team template 'teams/ml/nomad/job.j2': used" in err
    assert f"# template: teams/ml/nomad/job.j2 (from {tdir / 'teams/ml/nomad/job.j2'})" in err
    assert "secret 'not-in-file' is not in the file: placeholder values" in err


def test_team_flag_and_template_flag(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tdir / "nomad" / "other.j2").write_text(
        '{% extends "nomad/job.j2" %}{% block priority %}7{% endblock %}'
    )
    code, out, _ = run(
        capsys,
        "render",
        str(pod_file),
        "--backend",
        "nomad",
        "--templates-dir",
        str(tdir),
        "--team",
        "web",
    )
    assert code == 0 and json.loads(out)["Job"]["Meta"] == {"team": "web"}
    code, out, _ = run(
        capsys,
        "render",
        str(pod_file),
        "--backend",
        "nomad",
        "--templates-dir",
        str(tdir),
        "--template",
        "nomad/other.j2",
    )
    assert code == 0 and json.loads(out)["Job"]["Priority"] == 7


def test_template_error_exits_1_with_template_and_line(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tdir / "nomad" / "job.j2").write_text('{\n  "Job": {{ nope.x }}\n}')
    code, out, err = run(
        capsys, "render", str(pod_file), "--backend", "nomad", "--templates-dir", str(tdir)
    )
    assert code == 1 and out == ""
    assert "nomad/job.j2:2: undefined: 'nope' is undefined" in err


def test_schema_error_names_the_field(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tdir / "nomad" / "job.j2").write_text(JOB.replace('"Driver": "docker"', '"Driver": 1'))
    code, _, err = run(
        capsys, "render", str(pod_file), "--backend", "nomad", "--templates-dir", str(tdir)
    )
    assert code == 1
    assert "Job.TaskGroups[0].Tasks[0].Driver" in err and "nomad/job.j2" in err


def test_annotation_not_allowed_is_reported(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod_file.write_text(
        POD.replace("annotations: {}", "annotations: {vkgate.io/template: nomad/job.j2x}")
    )
    code, _, err = run(
        capsys, "render", str(pod_file), "--backend", "nomad", "--templates-dir", str(tdir)
    )
    assert code == 1
    assert "not allowed for team ml" in err and "metadata.annotations[vkgate.io/template]" in err


def test_config_file_allow_list_and_backend(
    tdir: Path, pod_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tdir / "nomad" / "gpu.j2").write_text(
        '{% extends "nomad/job.j2" %}{% block priority %}90{% endblock %}'
    )
    pod_file.write_text(
        POD.replace("annotations: {}", "annotations: {vkgate.io/template: nomad/gpu.j2}")
    )
    conf = tmp_path / "vkgate.toml"
    conf.write_text(
        f'[backend]\nkind = "nomad"\n[templates]\ndirs = ["{tdir}"]\n[templates.allowed]\nml = ["nomad/gpu*"]\n'
    )
    code, out, err = run(capsys, "render", str(pod_file), "-c", str(conf))
    assert code == 0, err
    assert json.loads(out)["Job"]["Priority"] == 90


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: ConfigMap\nmetadata: {name: x}\n", "no Pod document (found ConfigMap)"),
        ("a: [", "not valid YAML"),
    ],
)
def test_bad_pod_file(
    tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    code, _, err = run(capsys, "render", str(p), "--backend", "nomad")
    assert code == 1 and message in err


def test_render_needs_a_templated_backend(
    pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "render", str(pod_file))
    assert code == 2 and "--backend" in err


# -- templates check --------------------------------------------------------------------


@pytest.fixture
def only_fixture_templates(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Hide the packaged templates (their backends render via render_spec, tested elsewhere)."""
    empty = tmp_path / "packaged"
    empty.mkdir()
    monkeypatch.setattr("translators.rendering.packaged_templates_dir", lambda: empty)
    yield


def test_check_passes_good_templates(
    tdir: Path, only_fixture_templates: None, capsys: pytest.CaptureFixture[str]
) -> None:
    (tdir / "nomad" / "_macros.j2").write_text("{% macro m() %}x{% endmacro %}")
    code, out, _ = run(capsys, "templates", "check", str(tdir), "--backend", "nomad")
    samples = len(offline.load_samples())
    assert code == 0, out
    assert f"1 template(s), {samples} sample pod(s): {samples} ok, 0 failed" in out


def test_check_reports_each_failure_and_exits_1(
    tdir: Path, only_fixture_templates: None, capsys: pytest.CaptureFixture[str]
) -> None:
    (tdir / "teams" / "ml" / "nomad").mkdir(parents=True)
    # breaks only for pods with init containers
    (tdir / "teams" / "ml" / "nomad" / "job.j2").write_text(
        '{% extends "nomad/job.j2" %}{% block priority %}{{ init_containers[0].nope }}{% endblock %}'
    )
    (tdir / "nomad" / "_broken.j2").write_text("{% if %}")
    code, out, _ = run(capsys, "templates", "check", str(tdir), "--backend", "nomad")
    assert code == 1
    assert "FAIL nomad/_broken.j2 [-]: nomad/_broken.j2:1: syntax error" in out
    assert "FAIL teams/ml/nomad/job.j2 [plain]: teams/ml/nomad/job.j2:1: undefined" in out
    assert (
        "FAIL teams/ml/nomad/job.j2 [init-sidecar]: teams/ml/nomad/job.j2:1: undefined: 'dict object' has no attribute 'nope'"
        in out
    )


def test_check_missing_dir(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "templates", "check", "/nonexistent/dir")
    assert code == 2 and "not a directory" in out


def test_samples_cover_the_catalogue() -> None:
    names = {s.name for s in offline.load_samples()}
    assert {
        "plain",
        "multi-container",
        "init-sidecar",
        "env-volumes-secrets",
        "resources",
        "ports",
        "node-selector",
        "restart-never",
        "restart-onfailure",
    } <= names
    assert (packaged_templates_dir() / "samples").is_dir()


def test_samples_resolve_without_errors() -> None:
    for sample in offline.load_samples():
        resolved = offline.resolve(sample.inputs, node_name="vk")
        assert resolved.errors == [], sample.name
        assert resolved.pod.containers, sample.name
    env_sample = next(s for s in offline.load_samples() if s.name == "env-volumes-secrets")
    pod = offline.resolve(env_sample.inputs, node_name="vk").pod
    env = {e.name: e for e in pod.containers[0].env}
    assert env["DB_PASSWORD"].value == "s3cr3t-passw0rd" and env["DB_PASSWORD"].secret
    assert {v.kind for v in pod.volumes} == {"configMap", "secret", "emptyDir"}
    init = next(s for s in offline.load_samples() if s.name == "init-sidecar")
    roles = [c.role for c in offline.resolve(init.inputs, node_name="vk").pod.init_containers]
    assert roles == ["init", "sidecar"]


def test_check_compiles_only_when_the_backend_cannot_be_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        offline, "_load_translator", lambda *a, **k: (None, "translator not loaded: no endpoint")
    )
    d = tmp_path / "t"
    (d / "batch").mkdir(parents=True)
    (d / "batch" / "task.j2").write_text('{"id": {{ task.id|tojson }}}')
    code, out, _ = run(capsys, "templates", "check", str(d), "--backend", "batch")
    assert code == 0
    assert (
        "SKIP batch/task.j2: compiled only, not rendered (batch: translator not loaded: no endpoint)"
        in out
    )
    (d / "batch" / "task.j2").write_text('{"id": {{ task.id|tojson }')
    code, out, _ = run(capsys, "templates", "check", str(d), "--backend", "batch")
    assert code == 1 and "FAIL batch/task.j2 [-]: batch/task.j2:1: syntax error" in out


class FakeNomad:
    """A Renderable backend the way real ones work: select from pod.template, then render."""

    def __init__(self, renderer: Any) -> None:
        self.renderer = renderer
        self.calls: list[str] = []

    def render_spec(self, pod: Any) -> dict[str, Any]:
        from translators.rendering import pod_context

        name = self.renderer.select(pod, backend="nomad", default="nomad/job.j2").name
        self.calls.append(name)
        spec: dict[str, Any] = self.renderer.render(
            name, pod_context(pod, backend="nomad", settings={})
        )
        return spec


def test_renderable_backend_is_used_and_template_flag_bypasses_the_allow_list(
    tdir: Path, pod_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    made: list[FakeNomad] = []

    def load(backend: str, *, settings: Any, node_name: str, renderer: Any) -> tuple[Any, str]:
        made.append(FakeNomad(renderer))
        return made[-1], ""

    monkeypatch.setattr(offline, "_load_translator", load)
    (tdir / "nomad" / "other.j2").write_text(
        '{% extends "nomad/job.j2" %}{% block priority %}7{% endblock %}'
    )
    code, out, err = run(
        capsys,
        "render",
        str(pod_file),
        "--backend",
        "nomad",
        "--templates-dir",
        str(tdir),
        "--template",
        "nomad/other.j2",
        "--explain",
    )
    assert code == 0, err
    assert json.loads(out)["Job"]["Priority"] == 7
    assert made[-1].calls == ["nomad/other.j2"]
    assert "rendered by FakeNomad.render_spec" in err


def test_explain_names_one_source_for_the_team(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--team wins over the Namespace label, and --explain says so once, without contradiction."""
    code, _out, err = run(
        capsys,
        "render",
        str(pod_file),
        "--backend",
        "nomad",
        "--templates-dir",
        str(tdir),
        "--team",
        "other",
        "--explain",
    )
    assert code == 0
    team_lines = [line for line in err.splitlines() if "team" in line and "'other'" in line]
    assert team_lines == ["#   team: 'other' (from --team)"]
    assert "namespace label" not in err
