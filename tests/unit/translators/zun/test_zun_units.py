"""Pure pieces of the Zun backend: settings, credential resolution, names and quantities,
status helpers, restart counting, capacity arithmetic, log options."""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable

import pytest
import yaml

from translators.base import LogOptions
from translators.zun.auth import KeystoneAuth, describe, load_cloud_region
from translators.zun.capacity import Usage, capacity_from_quotas, usage_of
from translators.zun.config import ZunConfigError, load_config
from translators.zun.logs import query, split_timestamp
from translators.zun.spec import cores, mebibytes, zun_name
from translators.zun.status import RestartTracker, exit_code, is_image_problem, parse_time, pod_ip
from vkgate_core.settings import SettingsError

# -- settings -------------------------------------------------------------------------------


def test_settings_parse_lists_numbers_and_flat_auth_keys() -> None:
    cfg = load_config(
        {
            "nets": "a, b",
            "security_groups": ["web"],
            "timeout": "5",
            "capsules": "false",
            "password": "pw",
            "auth_url": "https://ks/v3",
        }
    )
    assert cfg.nets == ("a", "b") and cfg.security_groups == ("web",)
    assert cfg.timeout == 5.0 and cfg.capsules is False
    assert cfg.auth == {"password": "pw", "auth_url": "https://ks/v3"}


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"microversion": "latest"}, "backend.zun.microversion"),
        ({"interface": "external"}, "backend.zun.interface"),
        ({"pagesize": 3}, "backend.zun.pagesize"),
        ({"timeout": "soon"}, "backend.zun.timeout"),
        ({"cpu": "lots"}, "backend.zun.cpu"),
        ({"capsules": "maybe"}, "backend.zun.capsules"),
    ],
)
def test_bad_settings_name_the_key(table: dict, key: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_config(table)
    assert info.value.key == key
    assert str(info.value).startswith(key)


# -- credentials (openstacksdk's loader) ------------------------------------------------------


@pytest.fixture
def os_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Callable[[dict[str, str]], None]:
    """Replace every ``OS_*`` variable (openstacksdk reads ``os.environ``); no stray files."""

    def apply(env: dict[str, str]) -> None:
        for key in [k for k in os.environ if k.startswith("OS_")]:
            monkeypatch.delenv(key)
        monkeypatch.setenv("OS_CLIENT_SECURE_FILE", str(tmp_path / "no-secure.yaml"))
        for key, value in env.items():
            monkeypatch.setenv(key, value)

    monkeypatch.chdir(tmp_path)  # ./clouds.yaml is on the search path
    return apply


def write_clouds(path, clouds: dict) -> str:
    path.write_text(yaml.safe_dump({"clouds": clouds}))
    return str(path)


def test_os_env_is_used_without_a_cloud_and_settings_override_it(os_env) -> None:
    os_env(
        {
            "OS_AUTH_URL": "https://ks/v3",
            "OS_USERNAME": "u",
            "OS_PASSWORD": "pw-env-1",
            "OS_PROJECT_NAME": "pr",
            "OS_REGION_NAME": "R1",
            "OS_INTERFACE": "internal",
        }
    )
    region = load_cloud_region(load_config({"auth": {"password": "from-settings"}}))
    assert region.config["auth_type"] == "password"
    assert region.config["auth"]["password"] == "from-settings"
    assert region.config["auth"]["username"] == "u"
    assert (region.region_name, region.get_interface()) == ("R1", "internal")
    assert "pw-env-1" not in describe(region) and "from-settings" not in describe(region)
    auth = KeystoneAuth(region)
    assert (auth.interface, auth.region_name, auth.verify) == ("internal", "R1", True)


def test_application_credentials_use_the_plugin_os_auth_type_names(os_env) -> None:
    os_env(
        {
            "OS_AUTH_TYPE": "v3applicationcredential",
            "OS_AUTH_URL": "https://ks/v3",
            "OS_APPLICATION_CREDENTIAL_ID": "id",
            "OS_APPLICATION_CREDENTIAL_SECRET": "s",
        }
    )
    region = load_cloud_region(load_config({}))
    assert type(region.get_auth()).__name__ == "ApplicationCredential"


def test_clouds_yaml_entry_merges_secure_yaml_and_can_turn_verify_off(os_env, tmp_path) -> None:
    clouds = write_clouds(
        tmp_path / "clouds.yaml",
        {
            "lab": {
                "auth": {"auth_url": "https://ks/v3", "username": "u", "project_name": "p"},
                "region_name": "R2",
                "verify": False,
            },
            "other": {"auth": {"auth_url": "https://elsewhere/v3"}},
        },
    )
    secure = tmp_path / "secure.yaml"
    secure.write_text(yaml.safe_dump({"clouds": {"lab": {"auth": {"password": "hidden"}}}}))
    os_env({"OS_CLOUD": "lab", "OS_CLIENT_CONFIG_FILE": clouds})
    os.environ["OS_CLIENT_SECURE_FILE"] = str(secure)
    region = load_cloud_region(load_config({}))
    auth = region.config["auth"]
    assert (auth["auth_url"], auth["username"], auth["password"]) == (
        "https://ks/v3",
        "u",
        "hidden",
    )
    assert region.name == "lab" and region.region_name == "R2"
    assert KeystoneAuth(region).verify is False
    # the setting wins over $OS_CLOUD
    assert load_cloud_region(load_config({"cloud": "other"})).name == "other"


def test_vendor_profile_fills_auth_url_and_region_picks_its_template(os_env, tmp_path) -> None:
    """``profile: citycloud`` is one of openstacksdk's bundled vendor profiles: its auth_url is
    ``https://{region_name}.citycloud.com:5000/v3/`` and it lists the valid regions."""
    clouds = write_clouds(
        tmp_path / "clouds.yaml",
        {"city": {"profile": "citycloud", "auth": {"username": "u", "password": "p"}}},
    )
    os_env({"OS_CLIENT_CONFIG_FILE": clouds})
    region = load_cloud_region(load_config({"cloud": "city", "region_name": "Fra1"}))
    assert region.config["auth"]["auth_url"] == "https://Fra1.citycloud.com:5000/v3/"
    assert region.region_name == "Fra1"
    with pytest.raises(ZunConfigError) as info:
        load_cloud_region(load_config({"cloud": "city", "region_name": "Mars1"}))
    assert info.value.key == "backend.zun.region_name" and "Mars1" in str(info.value)


def test_missing_cloud_and_missing_credentials_are_clear_errors(os_env, tmp_path) -> None:
    clouds = write_clouds(tmp_path / "clouds.yaml", {"a": {"auth": {"auth_url": "https://k"}}})
    os_env({})
    with pytest.raises(ZunConfigError, match=r"Cloud b was not found.*clouds: a") as info:
        load_cloud_region(load_config({"cloud": "b", "clouds_file": clouds}))
    assert info.value.key == "backend.zun.cloud"
    with pytest.raises(ZunConfigError, match="no Keystone credentials") as info:
        load_cloud_region(load_config({}))
    assert info.value.key == "backend.zun.auth"
    with pytest.raises(ZunConfigError) as info:
        load_cloud_region(load_config({"clouds_file": str(tmp_path / "missing.yaml")}))
    assert info.value.key == "backend.zun.clouds_file"
    os_env({"OS_AUTH_URL": "https://ks/v3", "OS_AUTH_TYPE": "kerberos-ish"})
    with pytest.raises(ZunConfigError) as info:
        load_cloud_region(load_config({}))
    assert info.value.key == "backend.zun.auth_type"


# -- names and quantities -------------------------------------------------------------------


def test_names_are_valid_and_bounded() -> None:
    assert zun_name("vkgate", "shop", "web-0") == "vkgate-shop-web-0"
    assert zun_name("", "shop", "web") == "shop-web"
    long = zun_name("vkgate", "n" * 63, "p" * 253)
    assert len(long) == 255 and long != zun_name("vkgate", "n" * 63, "p" * 252 + "q")
    assert zun_name("_x", "a", "b")[0].isalnum()


@pytest.mark.parametrize(
    ("resources", "cpu", "mem"),
    [
        ({"requests": {"cpu": "100m", "memory": "1"}}, 0.1, 1),
        ({"requests": {"cpu": "2"}, "limits": {"cpu": "4", "memory": "1.5Gi"}}, 2.0, 1536),
        ({"limits": {"memory": "1000000000"}}, None, 954),
        ({}, None, None),
    ],
)
def test_cpu_in_cores_and_memory_in_mib_rounded_up(
    resources: dict, cpu: float | None, mem: int | None
) -> None:
    assert cores(resources) == cpu
    assert mebibytes(resources) == mem


# -- status helpers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2018-01-12 09:37:25+00:00", _dt.datetime(2018, 1, 12, 9, 37, 25, tzinfo=_dt.UTC)),
        ("2019-05-18 21:02:12", _dt.datetime(2019, 5, 18, 21, 2, 12, tzinfo=_dt.UTC)),
        ("2019-05-18T23:02:12.123+02:00", _dt.datetime(2019, 5, 18, 21, 2, 12, tzinfo=_dt.UTC)),
        ("yesterday", None),
        (None, None),
    ],
)
def test_zun_timestamps(text: str | None, expected: _dt.datetime | None) -> None:
    assert parse_time(text) == expected


@pytest.mark.parametrize(
    ("detail", "code"),
    [
        ("Exited(0) 8 mins ago ", 0),
        ("Exited(137) 2 mins ago (error)", 137),
        ("Exited (-1) now", -1),
        ("Restarting (3) 1 s ago", 3),
        ("Up 3 minutes", None),
        (None, None),
    ],
)
def test_exit_code_from_status_detail(detail: str | None, code: int | None) -> None:
    assert exit_code(detail) == code


def test_image_problems_are_recognised_and_others_are_not() -> None:
    assert is_image_problem("Image foo could not be found.")
    assert is_image_problem("pull access denied for foo, repository does not exist")
    assert not is_image_problem("No valid host was found.")


def test_pod_ip_prefers_ipv4() -> None:
    assert (
        pod_ip({"a": [{"addr": "fd00::1", "version": 6}, {"addr": "10.1.1.1", "version": 4}]})
        == "10.1.1.1"
    )
    assert pod_ip({"a": [{"addr": "fd00::1", "version": 6}]}) == "fd00::1"
    assert pod_ip(None) == ""


def test_restart_tracker_counts_restarting_entries_and_new_start_times() -> None:
    t = RestartTracker()
    seq = [
        ("Running", "t1"),
        ("Running", "t1"),
        ("Restarting", "t1"),
        ("Restarting", "t1"),
        ("Running", "t2"),
        ("Running", "t3"),
    ]
    counts = [t.observe({"uuid": "u", "status": s, "started_at": st}) for s, st in seq]
    assert counts == [0, 0, 1, 1, 1, 2]  # t2 came via Restarting (counted once); t3 was missed
    t.forget(set())
    assert t.observe({"uuid": "u", "status": "Running", "started_at": "t9"}) == 0


# -- capacity -------------------------------------------------------------------------------


def test_unlimited_quota_falls_back_to_hosts_or_defaults_and_min_wins() -> None:
    quotas = {
        "containers": {"limit": -1, "in_use": 3},
        "cpu": {"limit": 4, "in_use": 0},
        "memory": {"limit": -1, "in_use": 0},
    }
    hosts = [{"cpus": 8, "mem_total": 16384}, {"cpus": 8, "mem_total": 16384}]
    cap = capacity_from_quotas(quotas, hosts=hosts)
    assert cap.cpu_millis == 4000  # quota 4 < hosts 16
    assert cap.memory_bytes == 32768 * 2**20
    assert cap.pods == 110
    no_hosts = capacity_from_quotas({"cpu": {"limit": -1, "in_use": 0}})
    assert no_hosts.cpu_millis == 64_000


def test_usage_of_sums_zun_fields() -> None:
    assert usage_of([{"cpu": 0.5, "memory": "256"}, {"cpu": 1, "memory": "512M"}, {}]) == Usage(
        1.5, 768, 3
    )


def test_own_usage_is_not_subtracted_and_nothing_goes_negative() -> None:
    quotas = {
        "cpu": {"limit": 2, "in_use": 10},
        "memory": {"limit": 100, "in_use": 50},
        "containers": {"limit": 5, "in_use": 5},
    }
    cap = capacity_from_quotas(quotas, own=Usage(cpu=1, memory_mib=50, containers=5))
    assert (cap.cpu_millis, cap.memory_bytes, cap.pods) == (0, 100 * 2**20, 5)


# -- logs -----------------------------------------------------------------------------------


def test_docker_timestamps_split_and_compare_with_nanoseconds() -> None:
    ts, text = split_timestamp("2026-03-01T10:00:00.000000123Z hello world\n")
    assert text == "hello world\n" and ts is not None and ts[1] == 123
    later, _ = split_timestamp("2026-03-01T10:00:00.0000002Z x")
    assert later is not None and later > ts
    assert split_timestamp("no stamp") == (None, "no stamp")


def test_log_options_map_to_zun_query_parameters() -> None:
    since = _dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=_dt.UTC)
    assert query(LogOptions(stream="Stdout", tail_lines=5), timestamps=False) == {
        "stdout": "True",
        "stderr": "False",
        "timestamps": "False",
        "tail": 5,
    }
    assert query(LogOptions(since=since), timestamps=True)["since"] == int(since.timestamp())
    assert query(LogOptions(), timestamps=False)["tail"] == "all"


def test_since_and_tail_lines_apply_together_but_a_follow_poll_takes_no_tail() -> None:
    since = _dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=_dt.UTC)
    both = query(LogOptions(since=since, tail_lines=2), timestamps=False)
    assert (both["since"], both["tail"]) == (int(since.timestamp()), 2)
    poll = query(LogOptions(since=since, tail_lines=2), timestamps=True, since=1234)
    assert poll["since"] == 1234 and "tail" not in poll
