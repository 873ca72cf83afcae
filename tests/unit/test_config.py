"""Settings that would spin, stall or be refused by the API server are rejected when they
load, with the key named, in one line (docs/design/config-bounds.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from pathlib import Path
from typing import Any

import pytest

from gateway import cli
from gateway import config as cfg
from gateway.errors import StartupError
from gateway.kube.client import load_config
from gateway.kubelet.server import HttpServer


def _load(**dotted: Any) -> cfg.Settings:
    overrides: dict[str, Any] = {}
    for key, value in dotted.items():
        cfg.set_dotted(overrides, key.replace("__", "."), value)
    return cfg.load(None, environ={}, overrides=overrides)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("pods.reconcile_interval", "0"),
        ("pods.config_refresh_interval", "0"),
        ("node.lease_renew_interval", "0"),
        ("node.status_interval", "0"),
        ("kube.timeout", "-1"),
        ("node.lease_duration", "-1"),
        ("node.ping_interval", "0"),
        ("node.ping_failures", "0"),
        ("kube.qps", "0"),
        ("kube.burst", "0"),
        ("pods.workers", "0"),
        ("pods.max_retries", "0"),
        ("pods.backoff_base", "-1"),
        ("pods.rate_qps", "0"),
        ("kubelet.port", "70000"),
        ("kube.timeout", "nan"),
        ("pods.reconcile_interval", "inf"),
    ],
)
def test_out_of_range_numbers_are_rejected_with_the_key(key: str, value: str) -> None:
    with pytest.raises(cfg.ConfigError) as info:
        _load(**{key.replace(".", "__"): value})
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: expected ")


def test_every_numeric_setting_is_bounded() -> None:
    """A new number without bounds would be accepted at 0 or -1: fail until it gets them."""
    unbounded: list[str] = []

    def walk(cls: type, prefix: str) -> None:
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            default = f.default
            if f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            if dataclasses.is_dataclass(default):
                walk(type(default), f"{prefix}{f.name}.")
            elif type(default) in (int, float) and "bounds" not in f.metadata:
                unbounded.append(f"{prefix}{f.name}")

    walk(cfg.Settings, "")
    assert unbounded == []


def test_defaults_and_the_edges_of_each_range_load() -> None:
    s = _load(
        pods__reconcile_interval="0.5",
        node__lease_duration="10",
        node__lease_renew_interval="5",
        kube__timeout="600",
    )
    assert (s.pods.reconcile_interval, s.node.lease_duration, s.kube.timeout) == (0.5, 10, 600)
    assert cfg.load(None, environ={}) == cfg.validate(cfg.Settings())


def test_renewal_must_be_shorter_than_the_lease() -> None:
    with pytest.raises(cfg.ConfigError, match=r"^node.lease_renew_interval: must be shorter"):
        _load(node__lease_duration="20", node__lease_renew_interval="20")


@pytest.mark.parametrize(
    ("overrides", "key", "fragment"),
    [
        ({"node": {"labels": {"bad key": "x"}}}, "node.labels.bad key", "invalid label key"),
        ({"node": {"labels": {"-a": "x"}}}, "node.labels.-a", "invalid label key"),
        ({"node": {"labels": {"Example.COM/a": "x"}}}, "node.labels.Example.COM/a", "prefix"),
        ({"node": {"labels": {"/a": "x"}}}, "node.labels./a", "prefix"),
        ({"node": {"labels": {"a/": "x"}}}, "node.labels.a/", "name part"),
        ({"node": {"labels": {"a" * 64: "x"}}}, f"node.labels.{'a' * 64}", "63"),
        ({"node": {"labels": {"zone": "a b"}}}, "node.labels.zone", "invalid label value"),
        ({"node": {"labels": {"zone": "v" * 64}}}, "node.labels.zone", "invalid label value"),
        ({"node": {"taint": {"key": "x/y/z"}}}, "node.taint.key", "invalid taint key"),
        ({"node": {"taint": {"value": "-bad-"}}}, "node.taint.value", "invalid taint value"),
        ({"node": {"taint": {"effect": "NoRun"}}}, "node.taint.effect", "NoSchedule"),
        ({"node": {"capacity": {"nvidia com/gpu": "1"}}}, "node.capacity.nvidia com/gpu", "name"),
    ],
)
def test_node_labels_and_taint_follow_kubernetes_rules(
    overrides: dict[str, Any], key: str, fragment: str
) -> None:
    with pytest.raises(cfg.ConfigError) as info:
        cfg.load(None, environ={}, overrides=overrides)
    assert info.value.key == key
    assert fragment in str(info.value)


def test_valid_kubernetes_names_are_accepted() -> None:
    s = cfg.load(
        None,
        environ={},
        overrides={
            "node": {
                "labels": {"topology.kubernetes.io/zone": "dc1", "A_b.c": "", "x": "Y-1_2.z"},
                "taint": {"key": "example.com/Dedicated", "value": "team_a", "effect": "NoExecute"},
                "capacity": {"nvidia.com/gpu": "2"},
            }
        },
    )
    assert s.node.labels["topology.kubernetes.io/zone"] == "dc1"


@pytest.mark.parametrize(
    ("overrides", "key", "fragment"),
    [
        ({"templates": {"teams": {"ml": "a/b"}}}, "templates.teams.ml", "invalid team name"),
        ({"templates": {"teams": {"ml": ""}}}, "templates.teams.ml", "must not be empty"),
        (
            {"templates": {"configmap_teams": {"c": ".."}}},
            "templates.configmap_teams.c",
            "invalid team name",
        ),
        (
            {"templates": {"configmap_teams": {"c": "ml"}, "global_configmaps": ["c"]}},
            "templates.global_configmaps[0]",
            "one team's or global",
        ),
    ],
)
def test_team_names_and_template_configmaps_are_checked(
    overrides: dict[str, Any], key: str, fragment: str
) -> None:
    """Team names become template folders (teams/<team>/); docs/design/teams.md."""
    with pytest.raises(cfg.ConfigError) as info:
        cfg.load(None, environ={}, overrides=overrides)
    assert info.value.key == key and fragment in str(info.value)


def test_by_default_no_label_chooses_a_team_and_no_configmap_is_global() -> None:
    t = cfg.load(None, environ={}).templates
    assert (t.team_label_namespaces, t.team_label_configmaps) == ([], [])
    assert (t.configmap_teams, t.global_configmaps) == ({}, [])
    env = {"VKGATE_TEMPLATES__TEAM_LABEL_NAMESPACES": "ml-*,lab"}
    assert cfg.load(None, environ=env).templates.team_label_namespaces == ["ml-*", "lab"]


def _check(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["config", "check", *argv])
    err = capsys.readouterr().err
    return code, err


def test_config_check_on_a_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _check([str(tmp_path)], capsys)
    assert code == 1
    assert err == f"vkgate: config error: {tmp_path}: is a directory, not a TOML file\n"


def test_config_check_on_a_non_utf8_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "vkgate.toml"
    path.write_bytes(b'[node]\nname = "\xff"\n')
    code, err = _check([str(path)], capsys)
    assert code == 1
    assert err.count("\n") == 1
    assert err.startswith(f"vkgate: config error: {path}: not UTF-8 text")


def test_config_check_names_the_key_of_a_zero_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "vkgate.toml"
    path.write_text("[pods]\nreconcile_interval = 0\n")
    code, err = _check([str(path)], capsys)
    assert code == 1
    assert (
        err
        == "vkgate: config error: pods.reconcile_interval: expected a number in 0.5..3600, got 0.0\n"
    )


def test_a_kubeconfig_that_is_not_yaml_is_one_startup_error(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nclusters: [\n  {name: a,\n")
    with pytest.raises(StartupError) as info:
        load_config(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"cannot load Kubernetes credentials from {path}: ")


async def test_a_port_in_use_is_one_startup_error() -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]

    async def handler(*_: Any) -> None:
        await asyncio.sleep(0)

    try:
        server = HttpServer(handler, host="127.0.0.1", port=port, name="kubelet")
        with pytest.raises(StartupError, match=rf"^kubelet: cannot listen on 127.0.0.1:{port}: "):
            await server.start()
    finally:
        busy.close()
