"""The [backend.batch] table: validation names the key, env fallbacks, secrets stay hidden."""

from __future__ import annotations

from typing import Any

import pytest

from translators.batch.settings import parse_settings
from vkgate_core.settings import SettingsError

KEY = "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleQ=="
BASE = {
    "endpoint": "https://a.westeurope.batch.azure.com",
    "account_name": "a",
    "account_key": KEY,
    "pool_id": "p",
}


def parse(**kw: Any):
    return parse_settings({**BASE, **kw}, node_name="vk.example-1", environ={})


def test_defaults() -> None:
    s = parse()
    assert s.job_id == "vkgate-vk-example-1"  # '.' is not allowed in Batch ids
    assert s.auth == "shared_key" and s.max_collection_tasks == 100


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ({"pool_id": ""}, "pool_id"),
        ({"endpoint": ""}, "endpoint"),
        ({"account_key": "not base64!"}, "account_key"),
        ({"job_id": "has space"}, "job_id"),
        ({"task_id_prefix": "way-too-long-prefix-x"}, "task_id_prefix"),
        ({"max_collection_tasks": 500}, "max_collection_tasks"),
        ({"always": "sometimes"}, "always"),
        ({"on_failure_retries": -2}, "on_failure_retries"),
        ({"registry": {"server": "r.io"}}, "registry"),
        ({"vm_sizes": {"x": {"cpu": "2"}}}, "vm_sizes.x"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_errors_name_the_key(override: dict[str, Any], key: str) -> None:
    with pytest.raises(SettingsError) as err:
        parse(**override)
    assert err.value.key == f"backend.batch.{key}"
    assert str(err.value).startswith(f"backend.batch.{key}:")


def test_environment_fallbacks() -> None:
    env = {
        "AZURE_BATCH_ACCOUNT": "acct",
        "AZURE_BATCH_ACCESS_KEY": KEY,
        "AZURE_BATCH_ENDPOINT": "https://acct.x.batch.azure.com",
    }
    s = parse_settings({"pool_id": "p"}, node_name="vk", environ=env)
    assert (s.account_name, s.account_key, s.endpoint) == (
        "acct",
        KEY,
        "https://acct.x.batch.azure.com",
    )


def test_without_a_shared_key_auto_picks_azure_identity_and_shared_key_needs_one() -> None:
    table = {"endpoint": BASE["endpoint"], "pool_id": "p", "account_name": "acct"}
    assert parse_settings(table, node_name="vk", environ={}).auth == "azure_identity"
    env = {"AZURE_BATCH_ACCESS_KEY": KEY}
    assert parse_settings(table, node_name="vk", environ=env).auth == "shared_key"
    with pytest.raises(SettingsError) as err:
        parse_settings({**table, "auth": "shared_key"}, node_name="vk", environ={})
    assert err.value.key == "backend.batch.account_key"


def test_azure_identity_needs_no_key() -> None:
    s = parse_settings(
        {"endpoint": BASE["endpoint"], "pool_id": "p", "auth": "azure_identity"},
        node_name="vk",
        environ={},
    )
    assert s.auth == "azure_identity" and not s.account_key


def test_templates_never_see_credentials() -> None:
    s = parse(registry={"server": "r.io", "username": "u", "password": "pw"})
    view = s.template_view()
    assert "account_key" not in view and "registry" not in view
    assert "pw" not in repr(view) and KEY not in repr(view)
    assert view["registry_server"] == "r.io"
    assert KEY not in repr(s)  # repr never shows the key either
