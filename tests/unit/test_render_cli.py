"""`vkgate render` and `vkgate templates check`, offline, through the real argument parser and
the real backends (each built by its spec's ``offline`` from settings alone: no credentials).

Team templates extend the packaged ones (``{% extends "nomad/job.j2" %}``), as users write them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway import cli
from gateway.templating import offline
from translators.render.engine import packaged_templates_dir

#: A team template: the packaged Nomad job with the team in Meta.
TEAM_JOB = (
    '{% extends "nomad/job.j2" %}'
    "{% block meta %}{{ dict(backend_info.meta, team=team) | tojson }}{% endblock %}"
)


def variant(name: str) -> str:
    """A Nomad template that marks its output with ``Meta.variant``."""
    return (
        '{% extends "nomad/job.j2" %}'
        f'{{% block meta %}}{{{{ dict(backend_info.meta, variant="{name}") | tojson }}}}'
        "{% endblock %}"
    )


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
def no_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VKGATE_CONFIG", raising=False)
    # the operator lets namespace ml choose its team by label (the POD file's Namespace
    # document); by default no label does (test_a_label_the_operator_did_not_allow_is_a_note)
    monkeypatch.setenv("VKGATE_TEMPLATES__TEAM_LABEL_NAMESPACES", "ml")


@pytest.fixture
def tdir(tmp_path: Path) -> Path:
    d = tmp_path / "tpl"
    (d / "teams" / "ml" / "nomad").mkdir(parents=True)
    (d / "teams" / "ml" / "nomad" / "job.j2").write_text(TEAM_JOB)
    (d / "nomad").mkdir()
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


def render(
    capsys: pytest.CaptureFixture[str], pod: Path, tdir: Path, *extra: str
) -> tuple[int, str, str]:
    return run(
        capsys, "render", str(pod), "--backend", "nomad", "--templates-dir", str(tdir), *extra
    )


def task_of(out: str) -> dict[str, object]:
    task: dict[str, object] = json.loads(out)["Job"]["TaskGroups"][0]["Tasks"][0]
    return task


def test_render_prints_the_spec_with_secrets_masked(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = render(capsys, pod_file, tdir)
    assert code == 0, err
    job = json.loads(out)["Job"]
    assert job["ID"] == "ml-web-00000000" and job["Name"] == "ml/web"
    assert job["Meta"]["team"] == "ml"  # team from the Namespace document's label
    assert job["Meta"]["k8s.uid"]  # the translator's own values reach the template
    task = task_of(out)
    assert task["Config"]["args"] == ["--db=db:5432"]  # type: ignore[index]
    # Secret env values never sit in the job: they are items of the job's Nomad Variable, which
    # render prints beside it (masked; placeholders are secrets too).
    assert "PW" not in task["Env"] and "TOKEN" not in task["Env"]  # type: ignore[operator]
    env_templates = [t for t in task["Templates"] if t.get("Envvars")]  # type: ignore[attr-defined]
    assert env_templates and "PW=" in env_templates[0]["EmbeddedTmpl"]
    variable = json.loads(out)["Variable"]
    assert variable["Path"] == "nomad/jobs/ml-web-00000000"
    assert sorted(variable["Items"].values()) == ["*****", "*****"]
    assert "hunter2-secret" not in out


def test_show_secrets_and_placeholders(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = render(capsys, pod_file, tdir, "--show-secrets")
    assert code == 0
    items = json.loads(out)["Variable"]["Items"]
    assert sorted(items.values()) == ["<secret not-in-file token>", "hunter2-secret"]


def test_explain_shows_the_lookup_on_stderr(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = render(capsys, pod_file, tdir, "--explain")
    assert code == 0
    assert json.loads(out)["Job"]["Meta"]["team"] == "ml"
    assert "rendered by NomadTranslator.render_spec" in err
    assert "#   team: 'ml' (from the namespace label vkgate.io/team)" in err
    assert "2. team template 'teams/ml/nomad/job.j2': used" in err
    assert f"# template: teams/ml/nomad/job.j2 (from {tdir / 'teams/ml/nomad/job.j2'})" in err
    assert "secret 'not-in-file' is not in the file: placeholder values" in err


def test_a_label_the_operator_did_not_allow_is_a_note(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`vkgate render` decides the team as the agent does (docs/design/teams.md): by default
    the Namespace's vkgate.io/team label chooses nothing, and --explain says why."""
    monkeypatch.delenv("VKGATE_TEMPLATES__TEAM_LABEL_NAMESPACES")
    code, out, err = render(capsys, pod_file, tdir, "--explain")
    assert code == 0, err
    assert "team" not in json.loads(out)["Job"]["Meta"]  # not ml's template
    assert "#   team: none" in err and "3. backend default 'nomad/job.j2': used" in err
    assert "TeamLabelIgnored: namespace ml: label vkgate.io/team='ml' ignored" in err
    assert "templates.team_label_namespaces" in err


def test_team_flag_and_template_flag(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tdir / "nomad" / "other.j2").write_text(variant("other"))
    code, out, err = render(capsys, pod_file, tdir, "--team", "web", "--explain")
    assert code == 0
    assert "team" not in json.loads(out)["Job"]["Meta"]  # no team template for web
    assert "3. backend default 'nomad/job.j2': used" in err
    code, out, _ = render(capsys, pod_file, tdir, "--template", "nomad/other.j2")
    assert code == 0 and json.loads(out)["Job"]["Meta"]["variant"] == "other"


def test_template_error_exits_1_with_template_and_line(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tdir / "teams" / "ml" / "nomad" / "job.j2").write_text(
        '{% extends "nomad/job.j2" %}\n{% block meta %}{{ nope.x }}{% endblock %}'
    )
    code, out, err = render(capsys, pod_file, tdir)
    assert code == 1 and out == ""
    assert "teams/ml/nomad/job.j2:2: undefined: 'nope' is undefined" in err


def test_schema_error_names_the_field(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tdir / "teams" / "ml" / "nomad" / "job.j2").write_text(
        '{% extends "nomad/job.j2" %}{% block driver %}1{% endblock %}'
    )
    code, _, err = render(capsys, pod_file, tdir)
    assert code == 1
    assert "Job.TaskGroups[0].Tasks[0].Driver" in err and "teams/ml/nomad/job.j2" in err


def test_annotation_not_allowed_is_reported(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod_file.write_text(
        POD.replace("annotations: {}", "annotations: {vkgate.io/template: nomad/job.j2x}")
    )
    code, _, err = render(capsys, pod_file, tdir)
    assert code == 1
    assert "not allowed for team ml" in err and "metadata.annotations[vkgate.io/template]" in err


def test_config_file_allow_list_and_backend(
    tdir: Path, pod_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tdir / "nomad" / "gpu.j2").write_text(variant("gpu"))
    pod_file.write_text(
        POD.replace("annotations: {}", "annotations: {vkgate.io/template: nomad/gpu.j2}")
    )
    conf = tmp_path / "vkgate.toml"
    conf.write_text(
        f'[backend]\nkind = "nomad"\n[templates]\ndirs = ["{tdir}"]\n'
        '[templates.allowed]\nml = ["nomad/gpu*"]\n'
    )
    code, out, err = run(capsys, "render", str(pod_file), "-c", str(conf))
    assert code == 0, err
    assert json.loads(out)["Job"]["Meta"]["variant"] == "gpu"


def test_backend_settings_errors_name_the_key(
    pod_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "vkgate.toml"
    conf.write_text('[backend]\nkind = "nomad"\n[backend.nomad]\nadress = "http://x"\n')
    code, out, err = run(capsys, "render", str(pod_file), "-c", str(conf))
    assert code == 2 and out == ""
    assert err.startswith("vkgate: config error: backend.nomad.adress: unknown setting")


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
    code, _, err = run(capsys, "render", str(pod_file))  # default kind: simulated
    assert code == 2 and "--backend" in err
    code, _, err = run(capsys, "render", str(pod_file), "--backend", "nope")
    assert code == 2 and "'nope' has no templates" in err


# -- every built-in backend, without credentials ------------------------------------------


@pytest.mark.parametrize(
    ("backend", "sample", "check"),
    [
        ("nomad", "multi-container", lambda s: len(s["Job"]["TaskGroups"][0]["Tasks"]) == 2),
        ("zun", "plain", lambda s: s["image"] == "nginx:1.27"),
        ("zun", "multi-container", lambda s: len(s["template"]["spec"]["containers"]) == 2),
        (
            "batch",
            "plain",
            lambda s: s["value"][0]["containerSettings"]["imageName"] == "nginx:1.27",
        ),
    ],
)
def test_render_every_backend_without_credentials(
    backend: str,
    sample: str,
    check: object,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for var in ("OS_CLOUD", "OS_AUTH_URL", "AZURE_BATCH_ENDPOINT", "AZURE_BATCH_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    pod = packaged_templates_dir() / "samples" / f"{sample}.yaml"
    code, out, err = run(capsys, "render", str(pod), "--backend", backend, "--explain")
    assert code == 0, err
    assert check(json.loads(out))  # type: ignore[operator]
    assert "render_spec" in err


# -- templates check --------------------------------------------------------------------


def test_check_passes_good_templates(tdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tdir / "nomad" / "_macros.j2").write_text("{% macro m() %}x{% endmacro %}")
    code, out, _ = run(capsys, "templates", "check", str(tdir), "--backend", "nomad")
    assert code == 0, out
    # job.j2, raw_exec.j2 and the ml team's job, each against every sample pod
    assert "3 template(s)" in out and " 0 failed" in out


@pytest.mark.parametrize("backend", ["nomad", "zun", "batch"])
def test_check_renders_every_backend_for_real(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "templates", "check", "--backend", backend)
    assert code == 0, out
    ok = int(out.rsplit(": ", 1)[1].split(" ok")[0])
    assert ok >= 5, out  # rendered for real, not compiled only
    assert "compiled only" not in out and "SKIP" not in out


def test_check_reports_each_failure_and_exits_1(
    tdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # breaks only for pods with init containers
    (tdir / "teams" / "ml" / "nomad" / "job.j2").write_text(
        '{% extends "nomad/job.j2" %}{% block meta %}{{ init_containers[0].nope }}{% endblock %}'
    )
    (tdir / "nomad" / "_broken.j2").write_text("{% if %}")
    code, out, _ = run(capsys, "templates", "check", str(tdir), "--backend", "nomad")
    assert code == 1
    assert "FAIL nomad/_broken.j2 [-]: nomad/_broken.j2:1: syntax error" in out
    assert "FAIL teams/ml/nomad/job.j2 [plain]: teams/ml/nomad/job.j2:1: undefined" in out
    assert (
        "FAIL teams/ml/nomad/job.j2 [init-sidecar]: teams/ml/nomad/job.j2:1: undefined: "
        "'dict object' has no attribute 'nope'" in out
    )


def test_check_fails_when_the_backend_cannot_be_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "vkgate.toml"
    conf.write_text('[backend.batch]\npool_id = "has spaces"\n')
    code, out, _ = run(capsys, "templates", "check", "--backend", "batch", "-c", str(conf))
    assert code == 1
    assert "FAIL batch/task.j2 [-]: cannot render for batch: backend.batch.pool_id:" in out
    assert " 0 ok" in out


def test_a_check_that_renders_nothing_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every sample unsupported: zero rendered is not a pass."""
    samples = tmp_path / "samples"
    samples.mkdir()
    code, out, _ = run(capsys, "templates", "check", "--backend", "zun")
    assert code == 0  # sanity: the real samples render
    from gateway.templating import cli as render_cli

    original = render_cli.load_samples
    try:
        render_cli.load_samples = lambda: []  # type: ignore[assignment]
        code, out, _ = run(capsys, "templates", "check", "--backend", "zun")
    finally:
        render_cli.load_samples = original  # type: ignore[assignment]
    assert code == 1 and "nothing was checked" in out


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


def resolve_for(backend: str, inputs: offline.Inputs, **kw: Any) -> offline.Resolved:
    from translators import plugins

    return offline.resolve(
        inputs, node_name="vk", features=plugins.load(backend).features, backend=backend, **kw
    )


def test_samples_resolve_without_errors() -> None:
    for sample in offline.load_samples():
        resolved = resolve_for("nomad", sample.inputs)
        assert resolved.errors == [], sample.name
        assert resolved.pod is not None and resolved.pod.containers, sample.name
    env_sample = next(s for s in offline.load_samples() if s.name == "env-volumes-secrets")
    pod = resolve_for("nomad", env_sample.inputs).pod
    assert pod is not None
    env = {e.name: e for e in pod.containers[0].env}
    assert env["DB_PASSWORD"].value == "s3cr3t-passw0rd" and env["DB_PASSWORD"].secret
    assert {v.kind for v in pod.volumes} == {"configMap", "secret", "emptyDir"}
    init = next(s for s in offline.load_samples() if s.name == "init-sidecar")
    init_pod = resolve_for("nomad", init.inputs).pod
    assert init_pod is not None
    assert [c.role for c in init_pod.init_containers] == ["init", "sidecar"]


# -- offline resolution is the agent's: the same Resolver, over objects from the file ---------

HOST_POD = """
apiVersion: v1
kind: Pod
metadata: {name: root, namespace: default}
spec:
  hostNetwork: true
  containers:
    - name: app
      image: busybox
      securityContext: {privileged: true}
"""


def test_render_refuses_what_the_agent_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(HOST_POD)
    code, out, err = run(capsys, "render", str(pod), "--backend", "nomad")
    assert code == 1 and out == ""
    assert "the agent would not start this pod: spec.hostNetwork" in err
    assert "spec.containers[app].securityContext.privileged" in err


def test_a_container_whose_env_cannot_resolve_is_not_rendered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        POD.replace(
            "key: db}}}",
            "key: db}}}\n        - {name: X, valueFrom: {configMapKeyRef: {name: cfg, key: nope}}}",
        )
    )
    code, out, err = run(capsys, "render", str(pod), "--backend", "nomad")
    assert code == 1 and out == ""
    assert "container app: CreateContainerConfigError" in err and "nope" in err


def test_the_pod_ip_is_the_backends_placeholder_not_an_invented_address() -> None:
    from translators import plugins

    text = POD.replace(
        'args: ["--db=$(DB)"]',
        'args: ["--ip=$(IP)"]\n      env:\n        - {name: IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}',
    ).replace("      env:\n        - {name: DB", "        - {name: DB", 1)
    for backend in ("nomad", "simulated"):
        pod = resolve_for(backend, offline.parse_inputs(text)).pod
        assert pod is not None
        placeholder = plugins.load(backend).features.pod_ip_placeholder
        assert placeholder and pod.containers[0].args == (f"--ip={placeholder}",)
    pod = resolve_for("batch", offline.parse_inputs(text), host_ip="10.1.2.3").pod
    assert pod is not None and pod.containers[0].args == ("--ip=10.1.2.3",)  # host network


def test_the_team_from_the_config_map_reaches_the_template(
    tdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        POD.split("---\napiVersion: v1\nkind: Namespace", maxsplit=1)[0]
    )  # no Namespace label
    conf = tmp_path / "vkgate.toml"
    conf.write_text(f'[templates]\ndirs = ["{tdir}"]\n[templates.teams]\nml = "ml"\n')
    code, out, err = run(
        capsys, "render", str(pod), "--backend", "nomad", "-c", str(conf), "--explain"
    )
    assert code == 0, err
    assert json.loads(out)["Job"]["Meta"]["team"] == "ml"  # {{ team }} is set, as live
    assert "team: 'ml' (from the team map in config (templates.teams))" in err


def test_explain_names_one_source_for_the_team(
    tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--team wins over the Namespace label, and --explain says so once, without contradiction."""
    code, _out, err = render(capsys, pod_file, tdir, "--team", "other", "--explain")
    assert code == 0
    team_lines = [line for line in err.splitlines() if "team" in line and "'other'" in line]
    assert team_lines == ["#   team: 'other' (from --team)"]
    assert "namespace label" not in err


def test_a_zun_team_template_extending_container_j2_passes_on_multi_container_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    team = tmp_path / "tpl" / "teams" / "ml" / "zun"
    team.mkdir(parents=True)
    (team / "container.j2").write_text('{% extends "zun/container.j2" %}')
    code, out, _ = run(capsys, "templates", "check", str(tmp_path / "tpl"), "--backend", "zun")
    assert code == 0, out
    assert " 0 failed" in out and "multi-container" not in out


def test_render_as_one_of_several_nodes(
    tmp_path: Path, tdir: Path, pod_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "vkgate.toml"
    config.write_text(
        '[backend.nomad]\naddress = "http://127.0.0.1:4646"\n'
        '[[nodes]]\nname = "vk-a"\nkubelet = { port = 1 }\n'
        'backend = { kind = "nomad", nomad = { datacenters = ["dc-a"] } }\n'
        '[[nodes]]\nname = "vk-b"\nkubelet = { port = 2 }\n'
        'backend = { kind = "nomad", nomad = { datacenters = ["dc-b"] } }\n'
    )
    base = ("render", str(pod_file), "--templates-dir", str(tdir), "-c", str(config))
    code, out, err = run(capsys, *base, "--node", "vk-b")
    assert code == 0, err
    assert json.loads(out)["Job"]["Datacenters"] == ["dc-b"]
    code, out, err = run(capsys, *base)  # the first node by default
    assert code == 0, err
    assert json.loads(out)["Job"]["Datacenters"] == ["dc-a"]
    code, _, err = run(capsys, *base, "--node", "vk-z")
    assert code == 2
    assert "node: no node 'vk-z' in this configuration (nodes: vk-a, vk-b)" in err
