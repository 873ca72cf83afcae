"""Settings of the Nomad backend: NOMAD_* environment, the [backend.nomad] table winning over
it, and validation errors that name the key."""

from __future__ import annotations

import pytest

from translators.nomad.config import NomadConfig
from vkgate_core.settings import SettingsError


def test_defaults_are_safe() -> None:
    cfg = NomadConfig.from_settings({}, environ={})
    assert cfg.address == "http://127.0.0.1:4646"
    assert cfg.skip_verify is False
    assert cfg.max_connections < 100
    assert cfg.datacenters == ("*",)
    assert cfg.template == "nomad/job.j2"


def test_nomad_cli_environment_is_honoured() -> None:
    env = {
        "NOMAD_ADDR": "https://nomad.example:4646",
        "NOMAD_TOKEN": "t0ken",
        "NOMAD_NAMESPACE": "apps",
        "NOMAD_REGION": "eu",
        "NOMAD_CACERT": "/etc/nomad/ca.pem",
        "NOMAD_CLIENT_CERT": "/etc/nomad/cli.pem",
        "NOMAD_CLIENT_KEY": "/etc/nomad/cli-key.pem",
        "NOMAD_SKIP_VERIFY": "true",
    }
    cfg = NomadConfig.from_settings({}, environ=env)
    assert (cfg.address, cfg.token, cfg.namespace, cfg.region) == (
        "https://nomad.example:4646",
        "t0ken",
        "apps",
        "eu",
    )
    assert (cfg.ca_cert, cfg.client_cert, cfg.client_key, cfg.skip_verify) == (
        "/etc/nomad/ca.pem",
        "/etc/nomad/cli.pem",
        "/etc/nomad/cli-key.pem",
        True,
    )


def test_the_table_wins_over_the_environment() -> None:
    cfg = NomadConfig.from_settings(
        {"address": "http://10.0.0.5:4646/", "namespace": "vk"},
        environ={"NOMAD_ADDR": "http://elsewhere:4646", "NOMAD_NAMESPACE": "x"},
    )
    assert cfg.address == "http://10.0.0.5:4646" and cfg.namespace == "vk"


def test_token_is_not_in_the_repr() -> None:
    assert "s3cret" not in repr(NomadConfig.from_settings({"token": "s3cret"}, environ={}))


def test_durations_lists_and_numbers_are_parsed() -> None:
    cfg = NomadConfig.from_settings(
        {
            "restart_delay": "250ms",
            "restart_interval": "5m",
            "timeout": 10,
            "datacenters": "dc1, dc2",
            "retry_backoff": ["100ms", 1, "2s"],
            "priority": "70",
            "mhz_per_core": "2400.5",
        },
        environ={},
    )
    assert cfg.restart_delay == 0.25 and cfg.restart_interval == 300 and cfg.timeout == 10
    assert cfg.datacenters == ("dc1", "dc2")
    assert cfg.retry_backoff == (0.1, 1.0, 2.0)
    assert cfg.priority == 70 and cfg.mhz_per_core == 2400.5


@pytest.mark.parametrize(
    ("table", "key", "text"),
    [
        ({"adress": "x"}, "backend.nomad.adress", "unknown setting"),
        ({"address": "nomad:4646"}, "backend.nomad.address", "http(s)://"),
        ({"priority": 0}, "backend.nomad.priority", "1..100"),
        ({"max_connections": 100}, "backend.nomad.max_connections", "1..99"),
        ({"skip_verify": "maybe"}, "backend.nomad.skip_verify", "true or false"),
        ({"timeout": "soon"}, "backend.nomad.timeout", "duration"),
        ({"default_cpu": "lots"}, "backend.nomad.default_cpu", "invalid quantity"),
        ({"restart_interval": "2s"}, "backend.nomad.restart_interval", "at least 5s"),
        (
            {"restart_attempts": 10, "restart_delay": "1m", "restart_interval": "5m"},
            "backend.nomad.restart_interval",
            "must fit",
        ),
    ],
)
def test_bad_settings_name_the_key(table: dict[str, object], key: str, text: str) -> None:
    with pytest.raises(SettingsError) as err:
        NomadConfig.from_settings(table, environ={})
    assert err.value.key == key
    assert key in str(err.value) and text in str(err.value)


def test_allowed_namespaces_and_regions_include_the_configured_one() -> None:
    cfg = NomadConfig.from_settings(
        {"namespace": "a", "namespaces": ["b", "a"], "region": "r1", "regions": "r2"}, environ={}
    )
    assert cfg.all_namespaces == ("a", "b") and cfg.all_regions == ("r1", "r2")


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_template_setting_is_a_config_error(value: str) -> None:
    with pytest.raises(SettingsError, match=r"backend\.nomad\.template: must name a template"):
        NomadConfig.from_settings({"template": value}, environ={})


@pytest.mark.parametrize("value", ["host", "bridge", "cni/vknet", "cni/a.b-c_1"])
def test_network_mode_takes_nomads_group_modes(value: str) -> None:
    assert NomadConfig.from_settings({"network_mode": value}, environ={}).network_mode == value
    assert NomadConfig.from_settings({}, environ={}).network_mode == "host"


@pytest.mark.parametrize("value", ["none", "cni/", "cni", "Bridge", "cni/a b", "container:x"])
def test_a_network_mode_vkgate_cannot_render_is_a_config_error(value: str) -> None:
    with pytest.raises(SettingsError, match=r"backend\.nomad\.network_mode: expected"):
        NomadConfig.from_settings({"network_mode": value}, environ={})
