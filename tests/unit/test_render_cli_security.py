"""``vkgate render --explain`` lists every securityContext restriction of the pod and its fate
on the backend: enforced (the spec must carry it), relaxed by the node, or refused; a refused
render names every field the job does not carry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway import cli

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: restricted, namespace: default}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 1000}
  containers:
    - name: app
      image: busybox:1.36
      command: [sleep, "60"]
      securityContext: {readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
"""


def render(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    pod = tmp_path / "pod.yaml"
    pod.write_text(POD)
    code = cli.main(["render", str(pod), "--explain", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def explained(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("# securityContext: ")]


def test_nomad_docker_enforces_each_and_the_job_carries_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = render(capsys, tmp_path, "--backend", "nomad")
    assert code == 0, err
    enforced = "enforced: the rendered spec must carry it, else the pod is refused"
    assert explained(err) == [
        f"# securityContext: spec.securityContext.runAsUser: {enforced}",
        f"# securityContext: spec.securityContext.runAsNonRoot: {enforced}",
        f"# securityContext: spec.containers[app].securityContext.readOnlyRootFilesystem: {enforced}",
        f"# securityContext: spec.containers[app].securityContext.capabilities: {enforced}",
    ]
    task = json.loads(out)["Job"]["TaskGroups"][0]["Tasks"][0]
    assert task["User"] == "1000" and task["Config"]["cap_drop"] == ["all"]


def test_raw_exec_refuses_naming_every_field_it_does_not_carry(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # a raw_exec node (a docker node refuses the raw_exec driver first: its drivers)
    conf = tmp_path / "vkgate.toml"
    conf.write_text('[backend.nomad]\ntemplate = "nomad/raw_exec.j2"\n')
    code, out, err = render(
        capsys, tmp_path, "--backend", "nomad", "--template", "nomad/raw_exec.j2", "-c", str(conf)
    )
    assert code == 1 and out == ""
    (line,) = [x for x in err.splitlines() if x.startswith("vkgate render: ")]
    for field in ("runAsUser", "runAsNonRoot", "readOnlyRootFilesystem", "capabilities"):
        assert f"securityContext.{field}: the raw_exec driver cannot enforce it" in line, line


def test_a_relaxed_field_is_explained_and_recorded_in_the_job(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    conf = tmp_path / "vkgate.toml"
    conf.write_text(
        '[backend.nomad]\ntemplate = "nomad/raw_exec.j2"\nrelax_security_context = '
        '["runAsUser", "runAsNonRoot", "readOnlyRootFilesystem", "capabilities"]\n'
    )
    code, out, err = render(capsys, tmp_path, "--backend", "nomad", "-c", str(conf))
    assert code == 0, err
    relaxed = "relaxed by this node: runs unenforced where the spec does not carry it"
    assert f"# securityContext: spec.securityContext.runAsUser: {relaxed}" in explained(err)
    assert "SecurityContextRelaxed: spec.securityContext.runAsUser" in err
    meta = json.loads(out)["Job"]["Meta"]["vkgate.security-relaxed"]
    assert meta.count("the raw_exec driver cannot enforce it") == 4


def test_a_backend_without_them_refuses_each(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = render(capsys, tmp_path, "--backend", "zun")
    assert code == 1 and out == ""
    refused = [
        x for x in explained(err) if x.endswith("refused: the zun backend cannot enforce it")
    ]
    assert len(refused) == 4, err
    assert "the agent would not start this pod: spec.securityContext.runAsUser: " in err
