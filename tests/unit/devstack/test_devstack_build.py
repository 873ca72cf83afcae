"""The Go wrapper modules carry the facts the builds depend on (real-control-plane.md §2-§4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.devstack import build


def test_kube_apiserver_wrapper_replaces_every_staging_module() -> None:
    gomod = build.kube_apiserver("1.36.3").go_mod()
    assert "go 1.26.0" in gomod
    assert "require k8s.io/kubernetes v1.36.3" in gomod
    for name in build.K8S_STAGING:
        assert f"k8s.io/{name} => k8s.io/{name} v0.36.3" in gomod
    assert len(build.K8S_STAGING) == 33  # 1.36/1.37 include cri-streaming and streaming


def test_kube_apiserver_is_version_stamped() -> None:
    flags = " ".join(build.kube_apiserver("1.36.3").ldflags)
    assert "-X k8s.io/component-base/version.gitVersion=v1.36.3" in flags
    assert "-X k8s.io/client-go/pkg/version.gitMinor=36" in flags


def test_nomad_wrapper_pins_api_module_and_forks() -> None:
    comp = build.nomad("1.11.3", api_version="v0.0.0-20260311091027-173ab08a0210")
    gomod = comp.go_mod()
    assert "github.com/hashicorp/hcl => github.com/hashicorp/hcl v1.0.1-nomad-1" in gomod
    assert (
        "github.com/hashicorp/nomad/api => github.com/hashicorp/nomad/api "
        "v0.0.0-20260311091027-173ab08a0210"
    ) in gomod
    assert "codegen_generated" in comp.tags


def test_binaries_are_cached_by_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VKGATE_CACHE", str(tmp_path))
    assert build.binary_path("etcd") == tmp_path / "bin" / f"etcd-{build.ETCD_VERSION}"
    fake = build.binary_path("etcd")
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\n")
    monkeypatch.setattr(build, "go_available", lambda: False)
    assert build.ensure("etcd") == fake  # present: no Go needed, nothing rebuilt


def test_missing_go_is_a_clear_build_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VKGATE_CACHE", str(tmp_path))
    monkeypatch.setattr(build, "go_available", lambda: False)
    with pytest.raises(build.BuildError, match="`go` command is not on PATH"):
        build.build(build.etcd())


def test_if_go_available_skips_without_go_locally_but_not_in_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VKGATE_CACHE", str(tmp_path))
    monkeypatch.setattr(build, "go_available", lambda: False)
    monkeypatch.delenv("CI", raising=False)
    assert build.main(["--if-go-available", "etcd"]) == 0
    assert "e2e tests will skip" in capsys.readouterr().out
    monkeypatch.setenv("CI", "true")
    assert build.main(["--if-go-available", "etcd"]) == 1
    assert "BUILD FAILED" in capsys.readouterr().err
