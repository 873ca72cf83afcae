"""The pinned build modules: committed pins, exact versions, a builder that never resolves.

These read the real module folders under devstack/gomod/ (no fakes of the pins) and run
the real builder against a stand-in ``go`` command on PATH, so the checks cannot pass on zero
modules or on a builder that was patched away.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devstack import build, components

MODULES = components.modules()

#: Semantic versions and Go pseudo-versions; "latest", "upgrade", branches and paths are not exact.
EXACT = re.compile(r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+incompatible)?$")


def _requirements(gomod: str) -> list[tuple[str, str]]:
    """(module, version) of every require line and every replace target in a go.mod."""
    out: list[tuple[str, str]] = []
    block = ""
    for raw in gomod.splitlines():
        line = raw.split("//")[0].strip()
        if not line:
            continue
        if line.endswith("("):
            block = line.split()[0]
            continue
        if line == ")":
            block = ""
            continue
        words = line.split()
        kind = block or words[0]
        if not block:
            words = words[1:]
        if kind == "require":
            out.append((words[0], words[1]))
        elif kind == "replace":
            target = line.split("=>", 1)[1].split()
            out.append((target[0], target[1] if len(target) > 1 else ""))
    return out


def test_the_module_list_is_not_empty() -> None:
    assert {"kubernetes", "etcd", "nomad", "metrics-server", "vk-e2e", "vkbench"} <= set(MODULES)
    assert {
        "kube-apiserver",
        "kube-scheduler",
        "kube-controller-manager",
        "vkbench",
        "virtual-kubelet",
    } <= set(components.binaries())


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_is_committed_with_go_sum(name: str) -> None:
    module = MODULES[name]
    assert (module.path / "go.mod").is_file()
    assert (module.path / "go.sum").is_file()
    assert (module.path / "go.sum").stat().st_size > 1000  # a real graph, not an empty file
    build.check_pins(module)  # the builder's own check agrees


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_requirement_and_replace_is_an_exact_version(name: str) -> None:
    gomod = (MODULES[name].path / "go.mod").read_text()
    reqs = _requirements(gomod)
    assert len(reqs) > 3
    for module, version in reqs:
        assert EXACT.match(version), f"{name}/go.mod: {module} is pinned to {version!r}"


def test_the_kubernetes_module_pins_every_staging_module_and_the_release() -> None:
    gomod = (MODULES["kubernetes"].path / "go.mod").read_text()
    assert f"k8s.io/kubernetes v{components.K8S_VERSION}" in gomod
    staging = f"v0.{components.K8S_VERSION.split('.', 1)[1]}"
    for m in components.K8S_STAGING:
        assert f"k8s.io/{m} => k8s.io/{m} {staging}" in gomod
    assert len(components.K8S_STAGING) == 33


def test_the_nomad_module_pins_the_api_module_once() -> None:
    gomod = (MODULES["nomad"].path / "go.mod").read_text()
    assert f"github.com/hashicorp/nomad v{components.NOMAD_VERSION}" in gomod
    assert (
        f"github.com/hashicorp/nomad/api => github.com/hashicorp/nomad/api "
        f"{components.NOMAD_API_VERSION}"
    ) in gomod


def test_nomad_is_pinned_below_the_first_busl_release() -> None:
    """From v1.7.0 on github.com/hashicorp/nomad is under the Business Source License: the
    project builds only MPL-2.0 releases (docs/licences.md)."""
    version = tuple(int(x) for x in components.NOMAD_VERSION.split("."))
    assert version < components.NOMAD_FIRST_BUSL
    gomod = (MODULES["nomad"].path / "go.mod").read_text()
    assert "github.com/hashicorp/nomad v1.6.3\n" in gomod
    # The api module at the v1.6.3 tag commit (e0497bff1437), not a newer (BUSL) one.
    assert components.NOMAD_API_VERSION.endswith("-" + components.NOMAD_COMMIT)


def test_only_nomad_builds_with_cgo() -> None:
    """runc's nsenter (linked by Nomad 1.6) is C; everything else stays static (CGO off)."""
    assert {m.folder for m in MODULES.values() if m.cgo} == {"nomad"}
    assert build.go_env(cgo=True)["CGO_ENABLED"] == "1"
    assert build.go_env()["CGO_ENABLED"] == "0"
    nomad = MODULES["nomad"]
    assert build.module_key(nomad) != build.module_key(dataclasses.replace(nomad, cgo=False))


def test_the_vkbench_module_pins_the_vk_library_with_its_own_client_go() -> None:
    """The bench's Go agents build against virtual-kubelet v1.13.0 and the client-go its go.mod
    requires (api and apimachinery at the same version), so the library runs with the
    dependencies upstream tested it with; the e2e suite follows its own, newer release."""
    vkbench = dict(_requirements((MODULES["vkbench"].path / "go.mod").read_text()))
    e2e = dict(_requirements((MODULES["vk-e2e"].path / "go.mod").read_text()))
    assert vkbench["github.com/virtual-kubelet/virtual-kubelet"] == f"v{components.VK_VERSION}"
    for m in ("k8s.io/client-go", "k8s.io/api", "k8s.io/apimachinery"):
        assert vkbench[m] == f"v{components.VK_CLIENT_GO_VERSION}", m
    assert e2e["github.com/virtual-kubelet/virtual-kubelet"] == f"v{components.VK_E2E_VERSION}"


def test_the_upstream_vk_command_is_built_from_the_vkbench_pins() -> None:
    module = components.binaries()["virtual-kubelet"]
    assert module.folder == "vkbench"
    (spec,) = [b for b in module.binaries if b.name == "virtual-kubelet"]
    assert spec.package == "github.com/virtual-kubelet/virtual-kubelet/cmd/virtual-kubelet"
    # a blank import behind the "tools" tag keeps the command's dependencies in go.mod/go.sum
    tools = (module.path / "tools.go").read_text()
    assert tools.startswith("//go:build tools\n")
    assert f'import _ "{spec.package}"' in tools
    go_sum = (module.path / "go.sum").read_text()
    for dep in ("github.com/spf13/cobra", "github.com/sirupsen/logrus"):
        assert f"{dep} " in go_sum, f"{dep} (imported by the command) is not pinned"


@pytest.mark.parametrize("binary", sorted(components.binaries()))
def test_build_commands_never_resolve(binary: str) -> None:
    module = components.binaries()[binary]
    (spec,) = [b for b in module.binaries if b.name == binary]
    cmd = build.build_commands(module, spec, Path("/tmp/out"))
    assert cmd[:2] in (["go", "build"], ["go", "test"])
    assert "-mod=readonly" in cmd
    assert not {"get", "install", "tidy", "-mod=mod"} & set(cmd)


def test_kubernetes_binaries_are_version_stamped_reproducibly() -> None:
    flags = " ".join(components.kubernetes().ldflags)
    assert f"-X k8s.io/component-base/version.gitVersion=v{components.K8S_VERSION}" in flags
    assert flags == " ".join(components.kubernetes().ldflags)  # no wall-clock date


def _fake_go(bindir: Path, script: str) -> None:
    go = bindir / "go"
    go.write_text("#!/bin/sh\n" + script)
    go.chmod(go.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VKGATE_CACHE", str(tmp_path / "cache"))
    bindir = tmp_path / "gobin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return bindir


def test_builder_writes_the_binary_under_a_key_of_the_pins(fake_go: Path) -> None:
    # The stand-in writes its -o argument, as the real go command would.
    _fake_go(fake_go, 'while [ "$1" != "-o" ]; do shift; done; echo built > "$2"\n')
    path = build.ensure("etcd", say=lambda _m: None)
    assert path.read_text() == "built\n"
    assert path.name == f"etcd-{components.ETCD_VERSION}-{build.module_key(MODULES['etcd'])}"
    assert build.ensure("etcd", say=lambda _m: None) == path  # cached: not rebuilt


def test_builder_fails_when_the_go_command_would_change_go_mod(fake_go: Path) -> None:
    _fake_go(
        fake_go,
        'echo "require example.com/drift v1.0.0" >> go.mod\n'
        'while [ "$1" != "-o" ]; do shift; done; echo built > "$2"\n',
    )
    with pytest.raises(build.BuildError, match=r"changed go\.mod"):
        build.ensure("etcd", say=lambda _m: None)
    assert not build.binary_path("etcd").exists()


def test_missing_go_is_a_clear_build_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKGATE_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    with pytest.raises(build.BuildError, match="`go` command is not on PATH"):
        build.ensure("etcd")


def test_if_go_available_skips_without_go_locally_but_not_in_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VKGATE_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    monkeypatch.delenv("CI", raising=False)
    assert build.main(["--if-go-available", "etcd"]) == 0
    assert "e2e tests will skip" in capsys.readouterr().out
    monkeypatch.setenv("CI", "true")
    assert build.main(["--if-go-available", "etcd"]) == 1
    assert "BUILD FAILED" in capsys.readouterr().err


def test_slow_build_reports_progress_and_counts_build_time_only(
    fake_go: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "PROGRESS_EVERY", 0.2)
    _fake_go(fake_go, 'sleep 0.7; while [ "$1" != "-o" ]; do shift; done; echo ok > "$2"\n')
    lines: list[str] = []
    build.ensure("etcd", say=lines.append)
    assert any("etcd: still building" in line for line in lines), lines
    assert any(re.search(r"built etcd in \d+ s", line) for line in lines), lines


def test_lock_wait_reports_progress_and_sigterm_says_what_it_stopped(
    fake_go: Path, tmp_path: Path
) -> None:
    """A second process waits on the first one's lock; SIGTERM ends the wait with a message."""
    lock = tmp_path / "cache" / "locks" / "etcd.lock"
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import fcntl,time;f=open({str(lock)!r},'w');"
            "fcntl.flock(f,fcntl.LOCK_EX);print('held',flush=True);time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        code = "from devstack import build; build.PROGRESS_EVERY = 0.5; build.ensure('etcd')"
        waiter = subprocess.Popen(
            [sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, env=os.environ
        )
        time.sleep(2.5)
        waiter.terminate()
        _, err = waiter.communicate(timeout=10)
        assert "waiting for another process's build" in err
        assert re.search(r"waiting for another process's build \(\d+ s\)", err), err
        assert "SIGTERM: stopped waiting for the etcd build lock" in err
        assert waiter.returncode != 0
    finally:
        holder.kill()
        holder.communicate()
