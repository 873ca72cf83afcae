"""`vkgate dev` building blocks that need no servers."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from devstack import dev
from gateway.cli import build_parser
from gateway.config import ConfigError


def test_sample_deployment_is_left_to_the_scheduler_and_selects_the_virtual_node() -> None:
    dep = dev.sample_deployment("vk-dev")
    spec = dep["spec"]["template"]["spec"]
    assert "nodeName" not in spec  # the real scheduler places it
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "vk-dev"}
    assert {"key": "virtual-kubelet.io/provider", "operator": "Exists"} in spec["tolerations"]
    container = spec["containers"][0]
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert "hello from vkgate" in container["command"][2]
    # a real cluster mounts the ServiceAccount token: the demo does not opt out
    assert "automountServiceAccountToken" not in spec


def test_user_settings_merge_file_and_sets_but_keep_dev_credentials(tmp_path: Path) -> None:
    conf = tmp_path / "vkgate.toml"
    conf.write_text('[node]\nlabels = { team = "a" }\n[kube]\nkubeconfig = "/elsewhere"\n')
    args = build_parser().parse_args(
        ["dev", "-c", str(conf), "--set", "node.capacity.pods=7", "--log-level", "debug"]
    )
    got = dev._user_settings(args)
    assert got["node"] == {"labels": {"team": "a"}, "capacity": {"pods": "7"}}
    assert got["log"] == {"level": "debug"}
    assert "kube" not in got  # the dev cluster's kubeconfig always wins


def test_user_settings_bad_toml_names_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "bad.toml"
    conf.write_text("[node\n")
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        dev._user_settings(argparse.Namespace(config=str(conf), set=[]))


def test_missing_binaries_without_go_fail_with_a_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VKGATE_CACHE", str(tmp_path))
    monkeypatch.setattr(dev.build, "go_available", lambda: False)
    args = build_parser().parse_args(["dev", "--backend-dev", "simulated", "--no-wait"])
    assert dev.main(args) == 1
    out = capsys.readouterr().out
    assert "cannot build etcd, kube-apiserver, kube-controller-manager" in out
    assert "Go 1.26" in out
