"""Pod → job arithmetic and policy (the parts templates must not get wrong): identity, MHz and
MiB, ports, constraints, template delimiters, restart policy, per-pod overrides, and the checks
after rendering."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from translators.base import (
    OWNER_KEY,
    EnvVar,
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    TranslationError,
    UnsupportedError,
    VolumeFile,
    VolumeMount,
)
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import (
    constraints,
    device_name,
    finish_job,
    is_owned,
    job_id,
    mebibytes,
    mhz,
    render_job,
    restart_policy,
    task_volumes,
)
from translators.nomad.literal import POD_IP_SENTINEL, delimiters
from translators.nomad.network import networks
from translators.nomad.overrides import overrides
from translators.nomad.restarts import interval_for
from translators.nomad.variables import VAR_LEFT, VAR_RIGHT, Variable
from translators.render.engine import Renderer
from vkgate_core.backoff import RESTART_BACKOFF

CFG = NomadConfig.from_settings({}, environ={})


def pod(**kw: Any) -> ResolvedPod:
    raw = {"metadata": {"name": "web", "namespace": "ns", "uid": "u-1"}, "spec": kw.pop("spec", {})}
    base: dict[str, Any] = dict(
        namespace="ns",
        name="web",
        uid="1234abcd-0000",
        node_name="vk",
        pod=raw,
        containers=(ResolvedContainer(name="app", image="busybox", command=("true",)),),
    )
    base.update(kw)
    return ResolvedPod(**base)


# -- identity ---------------------------------------------------------------------------


def test_job_id_is_namespace_name_and_a_uid_suffix() -> None:
    assert job_id("default", "web", "0b7c1f2e-1111-2222") == "default-web-0b7c1f2e"
    assert job_id("default", "web", "0b7c1f2e-1111", prefix="k8s-") == "k8s-default-web-0b7c1f2e"


def test_job_ids_of_look_alike_pods_differ() -> None:
    assert job_id("a-b", "c", "11111111") != job_id("a", "b-c", "22222222")
    # the same pod name re-created (new UID) while the old job still stops
    assert job_id("ns", "db-0", "aaaaaaaa-1") != job_id("ns", "db-0", "bbbbbbbb-2")


_k8s_name = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,200}[a-z0-9])?", fullmatch=True)


@given(ns=_k8s_name, name=_k8s_name, uid=st.uuids().map(str))
def test_job_ids_are_always_valid_and_at_most_128(ns: str, name: str, uid: str) -> None:
    jid = job_id(ns, name, uid)
    assert len(jid) <= 128
    assert re.fullmatch(r"[A-Za-z0-9._-]+", jid)
    assert jid.endswith(uid.replace("-", "")[:8])


def test_ownership_needs_owner_and_node() -> None:
    assert is_owned({OWNER_KEY: "vkgate", "vkgate.node": "vk"}, "vk")
    assert not is_owned({OWNER_KEY: "vkgate", "vkgate.node": "other"}, "vk")
    assert not is_owned({"vkgate.node": "vk"}, "vk")
    assert not is_owned(None, "vk")


# -- numbers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "factor", "expected"),
    [
        ("100m", 1000, 100),
        ("0.1", 2445, 245),  # ceil(244.5), exact decimal arithmetic
        ("250m", 2000, 500),
        ("1", 2394.5, 2395),
        ("1m", 1000, 1),
        ("1n", 1000, 1),  # minimum 1 MHz
        (2, 3000, 6000),
    ],
)
def test_cpu_to_mhz(cpu: Any, factor: float, expected: int) -> None:
    assert mhz(cpu, factor) == expected


@pytest.mark.parametrize(
    ("mem", "expected"), [("128Mi", 128), ("100M", 96), ("1Gi", 1024), ("1", 10), ("10485761", 11)]
)
def test_memory_to_mib_rounds_up_with_a_minimum_of_10(mem: str, expected: int) -> None:
    assert mebibytes(mem) == expected


@pytest.mark.parametrize(
    ("resource", "device"),
    [
        ("nvidia.com/gpu", "nvidia/gpu"),
        ("amd.com/gpu", "amd/gpu"),
        ("cpu", None),
        ("ephemeral-storage", None),
        ("hugepages-2Mi", None),
    ],
)
def test_extended_resources_become_devices(resource: str, device: str | None) -> None:
    assert device_name(resource) == device


# -- ports and constraints ---------------------------------------------------------------


def _ports(name: str, *ports: dict[str, Any]) -> ResolvedContainer:
    return ResolvedContainer(name=name, image="x", spec={"ports": list(ports)})


def test_host_mode_reserves_each_container_port_as_the_same_static_port() -> None:
    """Host networking: podIP is the client's address, so containerPort must be the port on
    it — static, never a dynamic port Nomad picks and reports nowhere."""
    c1 = _ports("a", {"name": "http", "containerPort": 80}, {"containerPort": 81, "hostPort": 81})
    c2 = _ports("b", {"name": "http", "containerPort": 90})
    nets, labels = networks((c1, c2))
    assert labels == {"a": ["http", "p81"], "b": ["http_2"]}
    assert nets == [
        {
            "Mode": "host",
            "ReservedPorts": [
                {"Label": "http", "Value": 80, "To": 80},
                {"Label": "p81", "Value": 81, "To": 81},
                {"Label": "http_2", "Value": 90, "To": 90},
            ],
        }
    ]
    assert networks((ResolvedContainer(name="c", image="x"),)) == ([], {})


def test_host_mode_refuses_a_host_port_other_than_its_container_port() -> None:
    c = _ports("a", {"containerPort": 80}, {"containerPort": 81, "hostPort": 8081})
    with pytest.raises(UnsupportedError) as err:
        networks((c,))
    assert err.value.field == "spec.containers[a].ports[1].hostPort"
    assert err.value.reason == "UnsupportedPodFeature"
    assert "8081" in str(err.value) and 'network_mode = "bridge"' in str(err.value)


def test_one_port_number_twice_in_a_pod_is_one_reservation() -> None:
    """53/TCP and 53/UDP (or two containers declaring one port): Nomad reserves numbers, and a
    job reserving one twice would collide with itself."""
    dns = _ports(
        "dns",
        {"name": "dns-tcp", "containerPort": 53},
        {"name": "dns-udp", "containerPort": 53, "protocol": "UDP"},
    )
    probe = _ports("probe", {"containerPort": 53})
    nets, labels = networks((dns, probe))
    assert nets[0]["ReservedPorts"] == [{"Label": "dns_tcp", "Value": 53, "To": 53}]
    assert labels == {"dns": ["dns_tcp"], "probe": ["dns_tcp"]}


@pytest.mark.parametrize("mode", ["bridge", "cni/vknet"])
def test_own_network_modes_give_every_pod_a_group_network_and_only_host_ports(mode: str) -> None:
    """Bridge / CNI: the allocation's own namespace is the pod's (shared localhost), so even a
    pod without ports gets the group network; containerPorts need nothing on the client, and
    a hostPort is mapped from the client's address to the containerPort."""
    c = _ports(
        "a", {"name": "http", "containerPort": 8080}, {"containerPort": 8443, "hostPort": 443}
    )
    nets, labels = networks((c,), mode=mode)
    assert nets == [{"Mode": mode, "ReservedPorts": [{"Label": "p8443", "Value": 443, "To": 8443}]}]
    assert labels == {"a": ["p8443"]}
    assert networks((ResolvedContainer(name="c", image="x"),), mode=mode) == (
        [{"Mode": mode}],
        {},
    )


@pytest.mark.parametrize(
    ("container", "field"),
    [
        (
            ResolvedContainer(
                name="app", image="x", env=(EnvVar("MY_IP", f"ip={POD_IP_SENTINEL}"),)
            ),
            "spec.containers[app].env[MY_IP]",
        ),
        (
            ResolvedContainer(name="app", image="x", args=("--bind", POD_IP_SENTINEL)),
            "spec.containers[app].args",
        ),
    ],
)
def test_bridge_mode_refuses_a_pod_ip_fieldref_naming_the_field(
    container: ResolvedContainer, field: str
) -> None:
    bridge = NomadConfig.from_settings({"network_mode": "bridge"}, environ={})
    with pytest.raises(UnsupportedError) as err:
        render_job(
            pod(containers=(container,)),
            renderer=Renderer(),
            cfg=bridge,
            settings={},
            factor=1000.0,
        )
    assert err.value.field == field
    assert "status.podIP" in str(err.value) and "'bridge'" in str(err.value)
    # host mode: the same pod renders, the placeholder becoming the client's address
    job = render_job(
        pod(containers=(container,)), renderer=Renderer(), cfg=CFG, settings={}, factor=1000.0
    )
    assert "${attr.unique.network.ip-address}" in json.dumps(job)


def test_bridge_mode_is_recorded_in_meta_and_host_mode_is_not() -> None:
    bridge = NomadConfig.from_settings({"network_mode": "bridge"}, environ={})
    args = dict(renderer=Renderer(), settings={}, factor=1000.0)
    job = render_job(pod(), cfg=bridge, **args)["Job"]
    assert job["Meta"]["vkgate.network"] == "bridge"
    assert job["TaskGroups"][0]["Networks"] == [{"Mode": "bridge"}]
    plain = render_job(pod(), cfg=CFG, **args)["Job"]
    assert "vkgate.network" not in plain["Meta"] and plain["TaskGroups"][0]["Networks"] == []


def test_node_selector_keys_map_to_nomad_targets() -> None:
    out = constraints(
        {
            "kubernetes.io/arch": "arm64",
            "meta.nomad.vkgate.io/rack": "r1",
            "kubernetes.io/hostname": "vk-1",
        }
    )
    assert out == [
        {"LTarget": "${attr.cpu.arch}", "RTarget": "arm64", "Operand": "="},
        {"LTarget": "${meta.rack}", "RTarget": "r1", "Operand": "="},
    ]


# -- volumes -----------------------------------------------------------------------------


def test_delimiters_never_occur_in_the_content() -> None:
    assert delimiters("plain {{ text }}") == ("[[vkgate", "vkgate]]")
    left, right = delimiters("has [[vkgate and vkgate1]]")
    assert left not in "has [[vkgate and vkgate1]]" and right not in "has [[vkgate and vkgate1]]"


def test_binary_files_go_through_base64decode_and_secrets_into_secrets_dir() -> None:
    vol = ResolvedVolume(
        "certs", "secret", files=(VolumeFile("key.der", b"\xff\x00\x01", mode=0o400, secret=True),)
    )
    c = ResolvedContainer(name="app", image="x", mounts=(VolumeMount("certs", "/certs", True),))
    var = Variable("nomad/jobs/j")
    templates, binds = task_volumes(c, {"certs": vol}, var)
    assert templates[0]["DestPath"] == "secrets/vkgate/certs/key.der"
    assert templates[0]["EmbeddedTmpl"] == (
        '[[vkgate with nomadVar "nomad/jobs/j" vkgate]]'
        "[[vkgate base64Decode .f0.Value vkgate]][[vkgate end vkgate]]"
    )
    assert var.items == {"f0": "/wAB"}
    assert templates[0]["Perms"] == "0400"
    assert templates[0]["ChangeMode"] == "noop"
    assert binds == ["secrets/vkgate/certs:/certs:ro"]


def test_file_contents_are_variable_items_never_template_text() -> None:
    """Content that looks like a template (both delimiter styles) is an item, printed as
    data: the template body is vkgate's own and names only the item."""
    text = '{{ env "HOME" }} [[vkgate .f1 vkgate]] ${NOMAD_TASK_DIR}'
    vol = ResolvedVolume(
        "cfg",
        "configMap",
        files=(VolumeFile("a.txt", text.encode(), mode=0o644), VolumeFile("b", b"x", mode=0o600)),
    )
    c = ResolvedContainer(name="app", image="x", mounts=(VolumeMount("cfg", "/etc/cfg"),))
    var = Variable("nomad/jobs/j")
    templates, _ = task_volumes(c, {"cfg": vol}, var)
    assert var.items == {"f0": text, "f1": "x"}
    assert [t["EmbeddedTmpl"] for t in templates] == [
        f'{VAR_LEFT} with nomadVar "nomad/jobs/j" {VAR_RIGHT}{VAR_LEFT} .{k} {VAR_RIGHT}'
        f"{VAR_LEFT} end {VAR_RIGHT}"
        for k in ("f0", "f1")
    ]
    assert all(text not in t["EmbeddedTmpl"] for t in templates)
    assert [t["DestPath"] for t in templates] == ["local/vkgate/cfg/a.txt", "local/vkgate/cfg/b"]


def test_unsupported_volume_kind_is_refused_with_the_volume_named() -> None:
    c = ResolvedContainer(name="app", image="x", mounts=(VolumeMount("data", "/data"),))
    with pytest.raises(UnsupportedError, match="'data' of kind hostPath"):
        task_volumes(c, {"data": ResolvedVolume("data", "hostPath")}, Variable("nomad/jobs/j"))
    # a claim is not a file volume: a Nomad volume request and VolumeMounts (claims.py)
    claim = ResolvedVolume("data", "persistentVolumeClaim", claim="c")
    assert task_volumes(c, {"data": claim}, Variable("nomad/jobs/j")) == ([], [])


# -- policy ------------------------------------------------------------------------------


def test_restart_policy_table() -> None:
    always = restart_policy("Always", CFG)
    on_failure = restart_policy("OnFailure", CFG)
    never = restart_policy("Never", CFG)
    assert always[0] == "service" and always[1]["Mode"] == "delay" and always[2] is None
    # a failing OnFailure container restarts for ever, as with the kubelet
    assert on_failure[0] == "batch" and on_failure[1]["Mode"] == "delay"
    assert on_failure[1]["Attempts"] == CFG.restart_attempts
    assert never[0] == "batch" and never[1]["Attempts"] == 0 and never[1]["Mode"] == "fail"
    assert never[2] == on_failure[2] == {"Attempts": 0, "Unlimited": False}
    with pytest.raises(TranslationError, match="restartPolicy"):
        restart_policy("Sometimes", CFG)


def test_restart_defaults_follow_the_kubelets_backoff() -> None:
    """10 s first delay (the kubelet's first back-off); 2 quick restarts per 5 min 20 s, so the
    stall after them is the kubelet's cap, 5 min (translators/nomad/restarts.py)."""
    cfg = NomadConfig.from_settings({}, environ={})
    _, restart, _ = restart_policy("Always", cfg)
    assert restart == {
        "Attempts": 2,
        "Interval": 320 * 10**9,
        "Delay": 10 * 10**9,
        "Mode": "delay",
    }
    assert cfg.restart_delay == RESTART_BACKOFF.base
    assert cfg.restart_interval == interval_for(cfg.restart_attempts, cfg.restart_delay)
    # OnFailure: the same block, never "fail" — a Job's backoffLimit decides, not the node
    assert restart_policy("OnFailure", cfg)[1] == restart


def test_overrides_respect_the_allow_lists() -> None:
    cfg = NomadConfig.from_settings(
        {
            "namespaces": ["batch"],
            "regions": ["eu"],
            "datacenters": ["dc1"],
            "allowed_datacenters": ["dc2"],
            "max_priority": 90,
        },
        environ={},
    )
    got = overrides(
        {
            "vkgate.io/nomad-namespace": "batch",
            "vkgate.io/nomad-region": "eu",
            "vkgate.io/nomad-datacenters": " dc1 ,dc2,",
            "vkgate.io/nomad-priority": "90",
        },
        cfg,
    )
    assert (got["namespace"], got["region"], got["datacenters"], got["priority"]) == (
        "batch",
        "eu",
        ["dc1", "dc2"],
        90,
    )
    with pytest.raises(TranslationError, match="not allowed") as err:
        overrides({"vkgate.io/nomad-namespace": "ops"}, cfg)
    assert err.value.field == "metadata.annotations[vkgate.io/nomad-namespace]"
    with pytest.raises(TranslationError, match=r"1\.\.100"):
        overrides({"vkgate.io/nomad-priority": "high"}, cfg)


@pytest.mark.parametrize(
    ("annotation", "value", "message"),
    [
        ("priority", "100", "priority 100 is not allowed (at most 50"),
        ("priority", "51", "priority 51 is not allowed"),
        ("datacenters", "dc1,dc9", "'dc9' are not allowed"),
        ("datacenters", "*", "'*' are not allowed"),
        ("node-pool", "all", "node pool 'all' is not allowed"),
        ("node-pool", "gpu", "node pool 'gpu' is not allowed"),
    ],
)
def test_priority_datacenters_and_node_pool_need_the_allow_lists(
    annotation: str, value: str, message: str
) -> None:
    """By default a pod may lower its priority, narrow its datacenters and use the default
    node pool, but not escape them (one pod got priority 100 and node pool "all")."""
    cfg = NomadConfig.from_settings({"datacenters": ["dc1", "eu-*"]}, environ={})
    key = f"vkgate.io/nomad-{annotation}"
    with pytest.raises(TranslationError, match=re.escape(message)) as err:
        overrides({key: value}, cfg)
    assert err.value.field == f"metadata.annotations[{key}]"


def test_allowed_values_pass_the_allow_lists() -> None:
    default = NomadConfig.from_settings({"datacenters": ["dc1", "eu-*"]}, environ={})
    got = overrides(
        {
            "vkgate.io/nomad-priority": "20",
            "vkgate.io/nomad-datacenters": "eu-west",
            "vkgate.io/nomad-node-pool": "default",
        },
        default,
    )
    assert (got["priority"], got["datacenters"], got["node_pool"]) == (20, ["eu-west"], "default")
    opened = NomadConfig.from_settings(
        {"node_pools": ["gpu"], "max_priority": 100, "allowed_datacenters": ["dc9"]}, environ={}
    )
    got = overrides(
        {
            "vkgate.io/nomad-priority": "100",
            "vkgate.io/nomad-datacenters": "dc9",
            "vkgate.io/nomad-node-pool": "gpu",
        },
        opened,
    )
    assert (got["priority"], got["datacenters"], got["node_pool"]) == (100, ["dc9"], "gpu")


# -- after rendering ---------------------------------------------------------------------


def test_a_template_may_not_change_the_job_id() -> None:
    info = {"job_id": "ns-web-1234abcd", "meta": {OWNER_KEY: "vkgate"}, "namespace": "default"}
    with pytest.raises(TranslationError, match=r"Job\.ID must be 'ns-web-1234abcd'"):
        finish_job(
            {"Job": {"ID": "mine", "TaskGroups": []}}, pod(), info=info, template="t.j2", cfg=CFG
        )


def test_ownership_meta_is_enforced_over_the_template(tmp_path: Any) -> None:
    (tmp_path / "nomad").mkdir()
    (tmp_path / "nomad" / "owner.j2").write_text(
        '{% extends "nomad/job.j2" %}{% block meta %}'
        + json.dumps({OWNER_KEY: "someone", "vkgate.node": "other", "team": "ml"})
        + "{% endblock %}"
    )
    out = render_job(
        pod(),
        renderer=Renderer(extra_dirs=[tmp_path]),
        cfg=CFG,
        settings={},
        factor=1000,
        template="nomad/owner.j2",
    )
    meta = out["Job"]["Meta"]
    assert (meta[OWNER_KEY], meta["vkgate.node"], meta["team"]) == ("vkgate", "vk", "ml")


def test_secret_values_never_reach_meta() -> None:
    secret_pod = pod(
        containers=(
            ResolvedContainer(
                name="app", image="x", env=(EnvVar("PASSWORD", "hunter2-secret", secret=True),)
            ),
        )
    )
    info = {"job_id": "j", "meta": {}, "namespace": "ns"}
    with pytest.raises(TranslationError, match="Secret value"):
        finish_job(
            {"ID": "j", "TaskGroups": [], "Meta": {"debug": "pw=hunter2-secret"}},
            secret_pod,
            info=info,
            template="t.j2",
            cfg=CFG,
        )


def test_a_team_template_overrides_one_block(tmp_path: Any) -> None:
    (tmp_path / "nomad").mkdir()
    (tmp_path / "nomad" / "big.j2").write_text(
        '{% extends "nomad/job.j2" %}'
        "{% block resources %}{{ dict(t.resources, CPU=t.resources.CPU * 2) | tojson }}{% endblock %}"
        '{% block env %}{{ dict(c.env, TEAM="ml") | tojson }}{% endblock %}'
    )
    p = pod(containers=(ResolvedContainer(name="app", image="x", env=(EnvVar("A", "1"),)),))
    job = render_job(
        p,
        renderer=Renderer(extra_dirs=[tmp_path]),
        cfg=CFG,
        settings={},
        factor=1000,
        template="nomad/big.j2",
    )
    task = job["Job"]["TaskGroups"][0]["Tasks"][0]
    assert task["Resources"]["CPU"] == 200  # default 100m at 1000 MHz/core, doubled
    assert task["Env"] == {"A": "1", "TEAM": "ml"}
    assert task["Driver"] == "docker"


def test_settings_secrets_are_not_in_the_template_context() -> None:
    from translators.nomad.jobs import context

    ctx = context(
        pod(), cfg=CFG, settings={"token": "tok", "client_key": "/k", "priority": 5}, factor=1000
    )
    assert "tok" not in json.dumps(ctx, default=str)
    assert ctx["settings"] == {"priority": 5}


def test_a_variable_over_nomads_64_kib_is_refused_before_anything_is_written() -> None:
    """Nomad 1.6.3 answers a larger Variable with a bare 500 (a retryable error): the pod is
    refused instead, naming the limit."""
    from translators.nomad.jobs import backend_info
    from translators.nomad.variables import MAX_VARIABLE_BYTES, variable_size

    def big(content: bytes) -> ResolvedPod:
        c = ResolvedContainer(
            name="app", image="busybox", command=("true",), mounts=(VolumeMount("cfg", "/c"),)
        )
        vol = ResolvedVolume("cfg", "configMap", files=(VolumeFile("a", content),))
        return pod(containers=(c,), volumes=(vol,))

    fits = backend_info(big(b"x" * 60_000), cfg=CFG, factor=1000)
    assert variable_size(fits["variable"]["items"]) < MAX_VARIABLE_BYTES
    with pytest.raises(TranslationError, match=r"at most 65536") as err:
        backend_info(big(b"x" * 70_000), cfg=CFG, factor=1000)
    assert err.value.field == "spec.volumes"
    # Go's JSON writes <, > and & as \u003c: six bytes each
    assert variable_size({"k": "<&>"}) == variable_size({"k": "abc"}) + 15
