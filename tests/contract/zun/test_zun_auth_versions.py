"""Keystone auth (token expiry, clouds.yaml, catalog), microversion negotiation and a server
downgraded under us, capacity from quotas — against the stateful fake."""

from __future__ import annotations

import httpx
import pytest
import yaml
from fake_zun import FakeOpenStack, LoopbackServer
from zun_pods import resolved_pod, simple_pod

from translators.base import BackendAuthError, UnsupportedError
from translators.zun import ZunTranslator
from vkgate_core.clock import FakeClock

pytestmark = pytest.mark.contract


def multi_pod(name: str = "multi", *, init: bool = False) -> dict:
    pod = simple_pod(name, "nginx:1.27", restart="Always")
    pod["spec"]["containers"].append(
        {"name": "sidecar", "image": "busybox:1.36", "command": ["sleep", "1d"]}
    )
    if init:
        pod["spec"]["initContainers"] = [
            {"name": "init", "image": "busybox:1.36", "command": ["true"]}
        ]
    return pod


async def test_expired_token_is_renewed_once_and_the_call_succeeds(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    await zun.create(resolved_pod(simple_pod("a")))
    assert fake.token_requests == 1
    fake.expire_tokens()
    states = await zun.list()
    assert [s.ref.name for s in states] == ["a"]
    assert fake.token_requests == 2
    unauthorized = [
        p for m, p, _ in fake.requests if p == "/container/v1/containers" and m == "GET"
    ]
    assert len(unauthorized) == 2  # the 401 and the retry


async def test_wrong_password_is_an_auth_error_not_a_crash(
    make_translator, fake: FakeOpenStack
) -> None:
    env = {
        "OS_AUTH_URL": fake.auth_url,
        "OS_USERNAME": "demo",
        "OS_PASSWORD": "wrong",
        "OS_PROJECT_NAME": "demo",
        "OS_USER_DOMAIN_NAME": "Default",
        "OS_PROJECT_DOMAIN_NAME": "Default",
    }
    zun = await make_translator(environ=env)  # start() logs, does not raise
    with pytest.raises(BackendAuthError, match="Keystone rejected"):
        await zun.ping()


async def test_clouds_yaml_with_os_cloud(make_translator, fake: FakeOpenStack, tmp_path) -> None:
    path = tmp_path / "clouds.yaml"
    path.write_text(yaml.safe_dump(fake.clouds_yaml("lab")))
    zun = await make_translator(environ={"OS_CLOUD": "lab", "OS_CLIENT_CONFIG_FILE": str(path)})
    await zun.ping()
    assert zun.client.version == (1, 40)


async def test_interface_from_clouds_yaml_selects_the_catalog_endpoint(
    make_translator, fake: FakeOpenStack, tmp_path
) -> None:
    fake.internal_url = "http://zun-internal.test/v1"
    clouds = fake.clouds_yaml("lab")
    clouds["clouds"]["lab"]["interface"] = "internal"
    (tmp_path / "clouds.yaml").write_text(yaml.safe_dump(clouds))
    env = {"OS_CLOUD": "lab", "OS_CLIENT_CONFIG_FILE": str(tmp_path / "clouds.yaml")}
    zun = await make_translator(environ=env)
    assert await zun.auth.endpoint() == "http://zun-internal.test/v1"
    public = await make_translator(environ=env, interface="public")  # the setting wins
    assert await public.auth.endpoint() == fake.zun_url


async def test_remote_vendor_profile_served_on_loopback_supplies_auth_url_and_region(
    make_translator, fake: FakeOpenStack, tmp_path
) -> None:
    """``profile: <url>``: openstacksdk fetches ``<url>/.well-known/openstack/api`` (a vendor
    profile) and merges it under the clouds.yaml entry, which only carries the user's login."""
    with LoopbackServer(fake):
        fake.vendor_profile = {
            "name": "labcloud",
            "profile": {
                "auth": {"auth_url": fake.auth_url},
                "regions": [fake.region],
                "identity_api_version": "3",
            },
        }
        login = fake.clouds_yaml("mine")["clouds"]["mine"]["auth"]
        del login["auth_url"]
        clouds = {"clouds": {"mine": {"profile": fake.base_url, "auth": login}}}
        (tmp_path / "clouds.yaml").write_text(yaml.safe_dump(clouds))
        zun = await make_translator(
            environ={"OS_CLOUD": "mine", "OS_CLIENT_CONFIG_FILE": str(tmp_path / "clouds.yaml")}
        )
        await zun.ping()
    assert ("GET", "/.well-known/openstack/api", {}) in fake.requests
    assert fake.token_requests == 1 and zun.client.version == (1, 40)


async def test_catalog_with_the_official_service_type_is_found(
    make_translator, fake: FakeOpenStack
) -> None:
    fake.service_type = "application-container"
    zun = await make_translator()
    await zun.ping()
    assert await zun.auth.endpoint() == fake.zun_url


async def test_negotiates_down_to_an_older_server_and_drops_newer_fields(
    make_translator, fake: FakeOpenStack, caplog: pytest.LogCaptureFixture
) -> None:
    fake.set_versions("1.1", "1.30")
    caplog.set_level("INFO", logger="translators.zun")
    zun = await make_translator()
    pod = simple_pod(
        "old", command=["python", "-m"], args=["http.server"], ports=[{"containerPort": 8000}]
    )
    await zun.create(resolved_pod(pod))
    sent = next(iter(fake.containers.values()))
    assert zun.client.version == (1, 30)
    assert sent["entrypoint"] is None
    assert sent["command"] == ["python", "-m", "http.server"]  # no entrypoint before 1.40
    assert sent["exposed_ports"] == {"8000/tcp": {}}
    headers = [r for r in fake.requests if r[1] == "/container/v1/containers"]
    assert headers  # every call went through the version check (406 otherwise)
    assert "entrypoint (pod command replaces the image ENTRYPOINT) disabled" in caplog.text


async def test_very_old_server_gets_a_command_string_and_no_ports(
    make_translator, fake: FakeOpenStack
) -> None:
    fake.set_versions("1.1", "1.12")
    zun = await make_translator()
    pod = simple_pod("older", command=["sh", "-c", "echo 'a b'"], ports=[{"containerPort": 80}])
    await zun.create(resolved_pod(pod))
    sent = next(iter(fake.containers.values()))
    assert sent["command"] == "sh -c 'echo '\"'\"'a b'\"'\"''"
    assert sent["exposed_ports"] == {}


async def test_init_containers_on_a_server_without_capsule_init_support_are_unsupported(
    make_translator, fake: FakeOpenStack
) -> None:
    fake.set_versions("1.1", "1.33")
    zun = await make_translator()
    with pytest.raises(UnsupportedError) as info:
        await zun.create(resolved_pod(multi_pod(init=True)))
    assert info.value.reason == "UnsupportedByBackend"
    assert "1.34" in str(info.value)
    assert not fake.capsules


async def test_multi_container_pod_without_capsule_support_is_unsupported(
    make_translator, fake: FakeOpenStack
) -> None:
    fake.set_versions("1.1", "1.31")
    zun = await make_translator()
    assert "sidecars" not in zun.features.pod_features
    with pytest.raises(UnsupportedError, match=r"capsules need Zun microversion 1\.32"):
        await zun.create(resolved_pod(multi_pod()))


async def test_server_downgraded_under_us_is_renegotiated(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    await zun.create(resolved_pod(simple_pod("x")))
    assert zun.client.version == (1, 40)
    fake.set_versions("1.1", "1.36")  # e.g. a rollback of the Zun API service
    states = await zun.list()
    assert [s.ref.name for s in states] == ["x"]
    assert zun.client.version == (1, 36)
    assert "entrypoint" not in {k for k, v in zun._flags().items() if v}


async def test_the_fake_refuses_a_wrong_service_in_the_version_header(fake: FakeOpenStack) -> None:
    token = "t"
    fake.tokens[token] = 10**9
    async with httpx.AsyncClient(transport=fake.transport()) as http:
        wrong = await http.get(
            fake.zun_url + "/containers",
            headers={"X-Auth-Token": token, "OpenStack-API-Version": "application-container 1.40"},
        )
        high = await http.get(
            fake.zun_url + "/containers",
            headers={"X-Auth-Token": token, "OpenStack-API-Version": "container 1.41"},
        )
    assert wrong.status_code == 406 and high.status_code == 406
    assert high.json()["errors"][0]["detail"].startswith("Version 1.41 was requested")
    assert high.headers["OpenStack-API-Maximum-Version"] == "container 1.40"


async def test_capacity_is_quota_minus_other_tenants_usage(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    fake.quota = {"containers": 40, "cpu": 20, "memory": 51200, "disk": 100}
    fake.foreign_usage = {"containers": 5, "cpu": 4.0, "memory": 2048}
    pod = simple_pod("big", resources={"requests": {"cpu": "2", "memory": "1Gi"}})
    await zun.create(resolved_pod(pod))
    await zun.list()
    cap = await zun.capacity()
    assert cap.cpu_millis == 16_000  # 20 - 4 foreign; our own 2 vCPU are not subtracted
    assert cap.memory_bytes == (51200 - 2048) * 2**20
    assert cap.pods == 35
    assert fake.count("GET", f"/container/v1/quotas/{fake.project_id}") == 1


async def test_configured_capacity_wins_and_old_servers_fall_back(
    make_translator, fake: FakeOpenStack
) -> None:
    zun = await make_translator(cpu="8", memory="16Gi", pods=10)
    cap = await zun.capacity()
    assert (cap.cpu_millis, cap.memory_bytes, cap.pods) == (8000, 16 * 2**30, 10)
    fake.set_versions("1.1", "1.25")
    old = await make_translator(memory="4Gi")
    cap = await old.capacity()
    assert cap.memory_bytes == 4 * 2**30
    assert cap.cpu_millis == 64_000  # default for an unknown quota
