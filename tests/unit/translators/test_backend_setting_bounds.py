"""Every backend's numeric settings are bounded: an interval of 0 would spin the agent, a
timeout of 0 never connects.  Checked through each backend's own settings parser, the one
``vkgate config check`` and ``vkgate run`` call (``translators.plugins.load(kind).settings``)."""

from __future__ import annotations

from typing import Any

import pytest

from translators import plugins
from vkgate_core.settings import SettingsError

#: (backend, key, a value the agent cannot live with); every other required key is given.
BAD = [
    ("nomad", "backstop_interval", 0),
    ("nomad", "blocking_wait", "0s"),
    ("nomad", "timeout", 0),
    ("nomad", "connect_timeout", -1),
    ("nomad", "stats_concurrency", 0),
    ("zun", "delete_poll_interval", 0),
    ("zun", "log_poll_interval", 0.0),
    ("zun", "timeout", 0),
    ("zun", "page_size", 0),
    ("batch", "node_refresh_seconds", 0),
    ("batch", "log_poll_seconds", 0),
    ("batch", "request_timeout", 0),
    ("batch", "full_relist_seconds", 1),
    ("simulated", "notify_interval", 0),
    ("simulated", "start_delay", -1),
]

#: The minimum each backend needs besides the key under test.
BASE: dict[str, dict[str, Any]] = {
    "nomad": {"address": "http://127.0.0.1:4646"},
    "zun": {
        "auth": {
            "auth_url": "http://127.0.0.1:5000/v3",
            "username": "u",
            "password": "p",
            "project_name": "p",
            "user_domain_name": "Default",
            "project_domain_name": "Default",
        }
    },
    "batch": {
        "endpoint": "http://127.0.0.1:1/",
        "account_name": "a",
        "account_key": "a2V5",
        "pool_id": "pool",
    },
    "simulated": {},
}


@pytest.mark.parametrize(("kind", "key", "value"), BAD, ids=[f"{k}.{n}" for k, n, _ in BAD])
def test_a_spinning_value_is_refused_with_its_key(kind: str, key: str, value: Any) -> None:
    parse = plugins.load(kind).settings
    parse(BASE[kind], {}, "vk")  # the base table itself is fine
    with pytest.raises(SettingsError) as info:
        parse({**BASE[kind], key: value}, {}, "vk")
    assert info.value.key == f"backend.{kind}.{key}"
    assert "must be in" in str(info.value) or "non-negative" in str(info.value)
