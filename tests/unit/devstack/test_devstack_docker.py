"""The docker tier's pieces that need no daemon: the agent config and the image's root fs."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from devstack import docker
from devstack.nomad import _config


def test_nomad_uses_the_private_dockerd_and_never_collects_the_test_image(tmp_path: Path) -> None:
    cfg = json.loads(
        _config(workdir=tmp_path, http=1, rpc=2, serf=3, docker_host="unix:///tmp/d.sock")
    )
    plugin = cfg["plugin"]["docker"]["config"]
    assert plugin["endpoint"] == "unix:///tmp/d.sock"
    assert plugin["gc"]["image"] is False
    assert "docker" not in cfg["client"]["options"]["driver.denylist"]
    plain = json.loads(_config(workdir=tmp_path, http=1, rpc=2, serf=3))
    assert "docker" not in plain["plugin"]
    assert "docker" in plain["client"]["options"]["driver.denylist"]


def test_dockerd_opens_no_network_and_keeps_its_state_in_its_dir() -> None:
    assert {"--bridge=none", "--iptables=false", "--ip-forward=false"} <= set(docker.DAEMON_FLAGS)


@pytest.mark.skipif(not os.access(docker.BUSYBOX, os.X_OK), reason="no /bin/busybox here")
def test_busybox_root_fs_has_the_binary_and_an_applet_per_name() -> None:
    with tarfile.open(fileobj=io.BytesIO(docker.busybox_rootfs_tar())) as tar:
        names = {m.name: m for m in tar.getmembers()}
    assert names["bin/busybox"].isfile() and names["bin/busybox"].mode & 0o111
    assert names["bin/sh"].issym() and names["bin/sh"].linkname == "busybox"
    assert names["tmp"].mode == 0o1777


def test_without_root_the_reason_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert docker.unavailable_reason() == "dockerd needs root"
    with pytest.raises(docker.BinaryUnavailable, match="dockerd needs root"):
        docker.launch_dockerd()
