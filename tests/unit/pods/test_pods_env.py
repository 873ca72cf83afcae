"""Environment resolution, table-driven against what the kubelet produces.

Rules: docs/design/kubelet-contract.md, "Environment resolution".
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.pods.resolve.env import (
    EnvSources,
    ReadError,
    expand,
    field_value,
    referenced_objects,
    resolve_container_env,
    resource_value,
    service_env,
)

VARS = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(VAR_A)", "A"),
        ("___$(VAR_B)___", "___B___"),
        ("$(VAR_A)-$(VAR_A)", "A-A"),
        ("f000-$$VAR_A", "f000-$VAR_A"),
        ("foo\\$(VAR_C)bar", "foo\\Cbar"),
        ("$(VAR_A)$(VAR_B)$(VAR_C)", "ABC"),
        ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
        ("$$(VAR_A)$$(VAR_B)", "$(VAR_A)$(VAR_B)"),
        ("f00__(VAR_A)__", "f00__(VAR_A)__"),
        ("$(VAR_REF)", "$(VAR_A)"),  # no recursive expansion
        ("$(VAR_EMPTY)", ""),
        ("$(UNKNOWN)", "$(UNKNOWN)"),
        ("$(VAR_A", "$(VAR_A"),  # incomplete reference
        ("$(VAR_A)$(", "A$("),
        ("$VAR_A", "$VAR_A"),
        ("$$$(VAR_A)", "$A"),
        ("$$$$(VAR_A)", "$$(VAR_A)"),
        ("$", "$"),
        ("$$", "$"),
        ("$(VAR_A)$", "A$"),
        ("$()", "$()"),
        ("", ""),
        ("no refs here", "no refs here"),
        ("$(VAR_A)$(VAR_B", "A$(VAR_B"),
        ("é$(VAR_A)é", "éAé"),
    ],
)
def test_expand_matches_kubernetes(text: str, expected: str) -> None:
    assert expand(text, VARS.get) == expected


@given(st.text(alphabet=st.sampled_from(list("$()AB_xé "))))
def test_expand_of_escaped_text_is_the_text(text: str) -> None:
    # Doubling every '$' is how a user writes a literal; expansion must give it back exactly.
    assert expand(text.replace("$", "$$"), VARS.get) == text


@given(st.text(alphabet=st.characters(blacklist_characters="$")))
def test_expand_without_dollar_is_identity(text: str) -> None:
    assert expand(text, lambda _: "X") == text


# --------------------------------------------------------------------------- helpers


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def pod(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web",
            "namespace": "team",
            "uid": "uid-1",
            "labels": {"app": "web", "tier": "front"},
            "annotations": {"note": 'say "hi"'},
        },
        "spec": {"nodeName": "vk-1", "serviceAccountName": "sa", "containers": containers, **spec},
    }


def svc(ns: str, name: str, ip: str, ports: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name},
        "spec": {"clusterIP": ip, "ports": ports},
    }


KUBERNETES = svc("default", "kubernetes", "10.0.0.1", [{"name": "https", "port": 443}])
SOURCES = EnvSources(
    configmaps={
        "cfg": {"data": {"A": "1", "B": "two", "1BAD": "x", "we=ird": "y"}},
        "other": {"data": {"A": "override"}},
    },
    secrets={"sec": {"data": {"PASSWORD": b64("s3cret"), "TOKEN": b64("t")}}},
    services=[KUBERNETES],
    pod_ips=("10.88.1.2",),
    host_ips=("127.0.0.2",),
    allocatable={"cpu": "4", "memory": "8Gi", "ephemeral-storage": "100Gi"},
)


def env_of(container: dict[str, Any], sources: EnvSources = SOURCES, **spec: Any) -> Any:
    p = pod([container], **spec)
    return resolve_container_env(p, container, sources)


def as_dict(result: Any) -> dict[str, str]:
    return {e.name: e.value for e in result.env}


# --------------------------------------------------------------------------- cases


def test_env_order_is_declaration_order_and_later_wins_in_place() -> None:
    r = env_of(
        {
            "name": "app",
            "envFrom": [{"configMapRef": {"name": "cfg"}}, {"configMapRef": {"name": "other"}}],
            "env": [
                {"name": "Z", "value": "z"},
                {"name": "B", "value": "b2"},
                {"name": "M", "value": "$(A)-$(Z)"},
            ],
        },
        enableServiceLinks=False,
    )
    names = [e.name for e in r.env]
    assert names[:5] == ["1BAD", "A", "B", "Z", "M"]
    d = as_dict(r)
    assert d["A"] == "override" and d["B"] == "b2" and d["M"] == "override-z"
    assert r.error == ""


def test_env_from_prefix_and_relaxed_vs_strict_names() -> None:
    c = {"name": "app", "envFrom": [{"prefix": "P_", "configMapRef": {"name": "cfg"}}]}
    relaxed = env_of(c)
    assert {"P_A", "P_B", "P_1BAD"} <= set(as_dict(relaxed))
    assert "P_we=ird" not in as_dict(relaxed)
    [ev] = [e for e in relaxed.events if e.reason == "InvalidEnvironmentVariableNames"]
    assert ev.type == "Warning" and "P_we=ird" in ev.message and "team/cfg" in ev.message

    strict = EnvSources(**{**SOURCES.__dict__, "strict_names": True})
    r = env_of({"name": "app", "envFrom": [{"configMapRef": {"name": "cfg"}}]}, strict)
    assert "1BAD" not in as_dict(r)
    [ev] = [e for e in r.events if e.reason == "InvalidEnvironmentVariableNames"]
    assert "Keys [1BAD, we=ird]" in ev.message


def test_secret_values_are_decoded_and_marked_secret_including_expansions() -> None:
    r = env_of(
        {
            "name": "app",
            "env": [
                {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "PASSWORD"}}},
                {"name": "DSN", "value": "user:$(PW)@db"},
                {"name": "PLAIN", "value": "x"},
            ],
            "envFrom": [{"secretRef": {"name": "sec"}, "prefix": "S_"}],
        }
    )
    by = {e.name: e for e in r.env}
    assert by["PW"].value == "s3cret" and by["PW"].secret
    assert by["DSN"].value == "user:s3cret@db" and by["DSN"].secret
    assert by["S_TOKEN"].value == "t" and by["S_TOKEN"].secret
    assert not by["PLAIN"].secret


@pytest.mark.parametrize(
    ("ref", "reason", "etype", "blocks", "message"),
    [
        (
            {"configMapKeyRef": {"name": "nope", "key": "k"}},
            "MandatoryConfigMapNotFound",
            "Warning",
            True,
            'configmap "nope" not found',
        ),
        (
            {"configMapKeyRef": {"name": "nope", "key": "k", "optional": True}},
            "OptionalConfigMapNotFound",
            "Normal",
            False,
            'configmap "nope" not found',
        ),
        (
            {"configMapKeyRef": {"name": "cfg", "key": "missing"}},
            "MandatoryConfigMapKeyNotFound",
            "Warning",
            True,
            'key "missing" does not exist in configmap "cfg"',
        ),
        (
            {"configMapKeyRef": {"name": "cfg", "key": "missing", "optional": True}},
            "OptionalConfigMapKeyNotFound",
            "Normal",
            False,
            'key "missing" does not exist in configmap "cfg"',
        ),
        (
            {"secretKeyRef": {"name": "nope", "key": "k"}},
            "MandatorySecretNotFound",
            "Warning",
            True,
            'secret "nope" not found',
        ),
        (
            {"secretKeyRef": {"name": "sec", "key": "missing", "optional": True}},
            "OptionalSecretKeyNotFound",
            "Normal",
            False,
            'key "missing" does not exist in secret "sec"',
        ),
        (
            {"secretKeyRef": {"name": "broken", "key": "k"}},
            "FailedToReadMandatorySecret",
            "Warning",
            True,
            'failed to read secret "broken": 403 Forbidden',
        ),
        (
            {"secretKeyRef": {"name": "broken", "key": "k", "optional": True}},
            "FailedToReadOptionalSecret",
            "Warning",
            True,  # a read error is not "missing": never start without the value
            'failed to read secret "broken": 403 Forbidden',
        ),
    ],
)
def test_missing_references(
    ref: dict[str, Any], reason: str, etype: str, blocks: bool, message: str
) -> None:
    sources = EnvSources(
        **{
            **SOURCES.__dict__,
            "configmaps": {**SOURCES.configmaps, "nope": None},
            "secrets": {**SOURCES.secrets, "nope": None, "broken": ReadError("403 Forbidden")},
        }
    )
    r = env_of({"name": "app", "env": [{"name": "V", "valueFrom": ref}]}, sources)
    [ev] = r.events
    assert (ev.reason, ev.type) == (reason, etype)
    assert message in ev.message and "container app" in ev.message
    assert ev.field_path == "spec.containers{app}"
    assert bool(r.error) is blocks
    assert "V" not in as_dict(r)
    if blocks:
        assert message in r.error


def test_optional_env_from_missing_is_skipped() -> None:
    sources = EnvSources(**{**SOURCES.__dict__, "configmaps": {"gone": None}})
    r = env_of(
        {"name": "app", "envFrom": [{"configMapRef": {"name": "gone", "optional": True}}]}, sources
    )
    assert r.error == ""
    assert [e.reason for e in r.events] == ["OptionalConfigMapNotFound"]
    r = env_of({"name": "app", "envFrom": [{"configMapRef": {"name": "gone"}}]}, sources)
    assert 'configmap "gone" not found' in r.error


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("metadata.name", "web"),
        ("metadata.namespace", "team"),
        ("metadata.uid", "uid-1"),
        ("metadata.labels['app']", "web"),
        ("metadata.labels['missing']", ""),
        ("metadata.annotations['note']", 'say "hi"'),
        ("metadata.labels", 'app="web"\ntier="front"'),
        ("metadata.annotations", 'note="say \\"hi\\""'),
        ("spec.nodeName", "vk-1"),
        ("spec.serviceAccountName", "sa"),
        ("status.podIP", "10.88.1.2"),
        ("status.podIPs", "10.88.1.2,fd00::2"),
        ("status.hostIP", "127.0.0.2"),
        ("status.hostIPs", "127.0.0.2"),
    ],
)
def test_field_ref_paths(path: str, expected: str) -> None:
    p = pod([])
    assert (
        field_value(p, path, pod_ips=("10.88.1.2", "fd00::2"), host_ips=("127.0.0.2",)) == expected
    )


def test_unknown_field_path_blocks_with_clear_message() -> None:
    r = env_of(
        {
            "name": "app",
            "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}],
        }
    )
    assert "spec.bogus" in r.error
    assert r.events[0].reason == "UnsupportedFieldRef"


@pytest.mark.parametrize(
    ("resources", "resource", "divisor", "expected"),
    [
        ({"limits": {"cpu": "250m"}}, "limits.cpu", None, "1"),
        ({"limits": {"cpu": "250m"}}, "limits.cpu", "1m", "250"),
        ({"limits": {"cpu": "1500m"}}, "limits.cpu", "1", "2"),
        ({"requests": {"cpu": "100m"}}, "requests.cpu", "1m", "100"),
        ({}, "requests.cpu", None, "0"),
        ({"limits": {"memory": "64Mi"}}, "limits.memory", "1Mi", "64"),
        ({"limits": {"memory": "64Mi"}}, "limits.memory", None, str(64 * 2**20)),
        ({"limits": {"memory": "1G"}}, "limits.memory", "1Mi", "954"),
        ({}, "limits.memory", "1Gi", "8"),  # node allocatable
        ({}, "limits.cpu", None, "4"),  # node allocatable
        ({}, "limits.ephemeral-storage", "1Gi", "100"),
        ({"limits": {"hugepages-2Mi": "4Mi"}}, "limits.hugepages-2Mi", "1Mi", "4"),
    ],
)
def test_resource_field_ref(
    resources: dict[str, Any], resource: str, divisor: str | None, expected: str
) -> None:
    c = {"name": "app", "resources": resources}
    assert resource_value(c, resource, divisor, allocatable=SOURCES.allocatable) == expected
    r = env_of(
        {
            "name": "app",
            "resources": resources,
            "env": [
                {
                    "name": "R",
                    "valueFrom": {
                        "resourceFieldRef": {
                            "resource": resource,
                            **({"divisor": divisor} if divisor else {}),
                        }
                    },
                }
            ],
        }
    )
    assert as_dict(r)["R"] == expected


def test_resource_field_ref_other_container() -> None:
    side = {"name": "side", "resources": {"limits": {"memory": "32Mi"}}}
    app = {
        "name": "app",
        "env": [
            {
                "name": "SIDE_MEM",
                "valueFrom": {
                    "resourceFieldRef": {
                        "containerName": "side",
                        "resource": "limits.memory",
                        "divisor": "1Mi",
                    }
                },
            }
        ],
    }
    p = pod([app, side])
    r = resolve_container_env(p, app, SOURCES)
    assert as_dict(r)["SIDE_MEM"] == "32"


def test_service_links() -> None:
    services = [
        KUBERNETES,
        svc(
            "team",
            "my-db",
            "10.0.0.7",
            [
                {"port": 5432, "protocol": "TCP"},
                {"name": "metrics", "port": 9187, "protocol": "UDP"},
            ],
        ),
        svc("team", "headless", "None", [{"port": 80}]),
        svc("other", "elsewhere", "10.0.0.9", [{"port": 80}]),
    ]
    env = service_env("team", services, enable_service_links=True)
    assert env["KUBERNETES_SERVICE_HOST"] == "10.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "443"
    assert env["KUBERNETES_SERVICE_PORT_HTTPS"] == "443"
    assert env["KUBERNETES_PORT"] == "tcp://10.0.0.1:443"
    assert env["KUBERNETES_PORT_443_TCP_ADDR"] == "10.0.0.1"
    assert env["MY_DB_SERVICE_HOST"] == "10.0.0.7"
    assert env["MY_DB_SERVICE_PORT"] == "5432"
    assert env["MY_DB_SERVICE_PORT_METRICS"] == "9187"
    assert env["MY_DB_PORT"] == "tcp://10.0.0.7:5432"
    assert env["MY_DB_PORT_9187_UDP"] == "udp://10.0.0.7:9187"
    assert env["MY_DB_PORT_9187_UDP_PROTO"] == "udp"
    assert env["MY_DB_PORT_9187_UDP_PORT"] == "9187"
    assert not any(k.startswith(("HEADLESS", "ELSEWHERE")) for k in env)

    off = service_env("team", services, enable_service_links=False)
    assert set(off) == {k for k in env if k.startswith("KUBERNETES")}

    v6 = service_env(
        "team", [svc("team", "six", "fd00::1", [{"port": 80}])], enable_service_links=True
    )
    assert v6["SIX_PORT"] == "tcp://[fd00::1]:80"


def test_service_vars_do_not_override_and_feed_expansion() -> None:
    r = env_of(
        {
            "name": "app",
            "env": [
                {"name": "KUBERNETES_SERVICE_HOST", "value": "mine"},
                {
                    "name": "API",
                    "value": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)",
                },
            ],
        }
    )
    d = as_dict(r)
    assert d["KUBERNETES_SERVICE_HOST"] == "mine"
    assert d["API"] == "https://mine:443"
    # service vars come after the declared ones
    names = [e.name for e in r.env]
    assert names[:2] == ["KUBERNETES_SERVICE_HOST", "API"]


def test_pod_enable_service_links_false() -> None:
    sources = EnvSources(
        **{
            **SOURCES.__dict__,
            "services": [KUBERNETES, svc("team", "db", "10.0.0.7", [{"port": 1}])],
        }
    )
    on = env_of({"name": "app"}, sources)
    off = env_of({"name": "app"}, sources, enableServiceLinks=False)
    assert "DB_SERVICE_HOST" in as_dict(on)
    assert "DB_SERVICE_HOST" not in as_dict(off)
    assert "KUBERNETES_SERVICE_HOST" in as_dict(off)
    gateway_off = EnvSources(**{**sources.__dict__, "enable_service_links": False})
    forced = env_of({"name": "app"}, gateway_off, enableServiceLinks=True)
    assert "DB_SERVICE_HOST" not in as_dict(forced)
    assert "KUBERNETES_SERVICE_HOST" in as_dict(forced)


def test_service_list_failure_blocks() -> None:
    sources = EnvSources(**{**SOURCES.__dict__, "services": ReadError("connection refused")})
    r = env_of({"name": "app"}, sources)
    assert "connection refused" in r.error


def test_command_and_args_expand_against_final_env() -> None:
    r = env_of(
        {
            "name": "app",
            "command": ["/bin/$(BIN)", "$$(BIN)"],
            "args": ["--ip=$(MY_IP)", "--node=$(NODE)", "$(UNSET)"],
            "env": [
                {"name": "BIN", "value": "server"},
                {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            ],
        }
    )
    assert r.command == ("/bin/server", "$(BIN)")
    assert r.args == ("--ip=10.88.1.2", "--node=vk-1", "$(UNSET)")


def test_empty_value_defines_empty_var() -> None:
    r = env_of({"name": "app", "env": [{"name": "E"}, {"name": "X", "value": "[$(E)]"}]})
    assert as_dict(r)["E"] == "" and as_dict(r)["X"] == "[]"


def test_init_container_field_path() -> None:
    init = {
        "name": "setup",
        "env": [{"name": "V", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k"}}}],
    }
    p = pod([{"name": "app"}], initContainers=[init])
    r = resolve_container_env(p, init, EnvSources(configmaps={"x": None}))
    assert r.events[0].field_path == "spec.initContainers{setup}"


def test_referenced_objects_and_pod_ip_use() -> None:
    p = pod(
        [
            {
                "name": "app",
                "envFrom": [{"configMapRef": {"name": "c1"}}, {"secretRef": {"name": "s1"}}],
                "env": [
                    {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c2", "key": "k"}}},
                    {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s2", "key": "k"}}},
                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                ],
            }
        ],
        initContainers=[{"name": "i", "envFrom": [{"configMapRef": {"name": "c3"}}]}],
    )
    assert referenced_objects(p) == ({"c1", "c2", "c3"}, {"s1", "s2"})
