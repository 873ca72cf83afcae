"""The node's policy on the rendered job (translators/nomad/policy.py): a team template
(``teams/<team>/nomad/job.j2``) that asks for another namespace, node pool, priority, job type,
driver or a privilege of the client is refused — the pod fails naming the template, the field
and the setting that would allow it — and the same template runs on a node whose settings allow
that by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from translators.base import (
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    TranslationError,
    UnsupportedError,
    VolumeFile,
    VolumeMount,
)
from translators.nomad import NomadTranslator
from translators.nomad.config import DRIVER_CONFIG_KEYS, NomadConfig
from translators.nomad.jobs import render_job
from translators.nomad.policy import DRIVER_CONFIG, REASON
from translators.render.engine import Renderer
from vkgate_core.settings import SettingsError

TEAM = "b"
TEMPLATE = f"teams/{TEAM}/nomad/job.j2"


def pod(*, spec: dict[str, Any] | None = None, **kw: Any) -> ResolvedPod:
    raw: Any = {"metadata": {"name": "web", "namespace": "ns", "uid": "u-1"}, "spec": spec or {}}
    base: dict[str, Any] = dict(
        namespace="ns",
        name="web",
        uid="1234abcd-0000",
        node_name="vk",
        pod=raw,
        team=TEAM,
        containers=(ResolvedContainer(name="app", image="busybox", command=("true",)),),
    )
    base.update(kw)
    return ResolvedPod(**base)


def team_renderer(tmp_path: Path, body: str, *, base: str = "nomad/job.j2") -> Renderer:
    folder = tmp_path / "teams" / TEAM / "nomad"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.j2").write_text(f'{{% extends "{base}" %}}\n{body}')
    return Renderer(extra_dirs=[tmp_path])


def render(
    tmp_path: Path, body: str, p: ResolvedPod | None = None, *, base: str = "nomad/job.j2", **s: Any
) -> dict[str, Any]:
    cfg = NomadConfig.from_settings(s, environ={})
    out: dict[str, Any] = render_job(
        p or pod(),
        renderer=team_renderer(tmp_path, body, base=base),
        cfg=cfg,
        settings=s,
        factor=1000,
    )
    job: dict[str, Any] = out["Job"]
    return job


def refused(tmp_path: Path, body: str, p: ResolvedPod | None = None, **s: Any) -> UnsupportedError:
    with pytest.raises(UnsupportedError) as err:
        render(tmp_path, body, p, **s)
    assert err.value.reason == REASON
    assert TEMPLATE in str(err.value)
    return err.value


def with_job(**fields: Any) -> str:
    """A team template that sets job fields over what vkgate computed."""
    return f"{{% set backend_info = dict(backend_info, **{json.dumps(fields)}) %}}"


def with_config(**extra: Any) -> str:
    """A team template that adds keys to each task's driver Config."""
    return (
        "{% block config %}{{ super().strip()[:-1] }}, "
        + json.dumps(extra)[1:-1]
        + "}{% endblock %}"
    )


def config(job: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = job["TaskGroups"][0]["Tasks"][0]["Config"]
    return found


# -- where the job runs ------------------------------------------------------------------


def test_the_row_2_template_renders_only_where_the_node_allows_each_of_its_fields(
    tmp_path: Path,
) -> None:
    """Issue row 2 as filed: every field of the template is named in one refusal."""
    body = with_job(namespace="team-b", node_pool="gpu", priority=100, type="system") + (
        with_config(
            privileged=True,
            network_mode="host",
            pid_mode="host",
            volumes=["/:/host"],
            cap_add=["all"],
        )
    )
    err = refused(tmp_path, body)
    text = str(err)
    for field, setting in (
        ("Job.Namespace", "backend.nomad.namespaces"),
        ("Job.NodePool", "backend.nomad.node_pools"),
        ("Job.Priority", "backend.nomad.max_priority"),
        ("Job.Type", "restartPolicy Always runs as a service job"),
        ("Config.privileged", "backend.nomad.allow_driver_config"),
        ("Config.network_mode", '"network_mode" to backend.nomad.allow_driver_config'),
        ("Config.pid_mode", '"pid_mode"'),
        ("Config.volumes", '"volumes"'),
        ("Config.cap_add", '"cap_add"'),
    ):
        assert field in text and setting in text, (field, setting, text)
    assert err.field == "Job.Namespace"


def test_namespace_outside_the_allow_list_is_refused_and_a_listed_one_runs(
    tmp_path: Path,
) -> None:
    err = refused(tmp_path, with_job(namespace="team-b"))
    assert err.field == "Job.Namespace"
    assert "add it to backend.nomad.namespaces" in str(err)
    job = render(tmp_path, with_job(namespace="team-b"), namespaces=["team-b"])
    assert job["Namespace"] == "team-b"


def test_a_mapped_pod_stays_in_its_namespace_whatever_the_template(tmp_path: Path) -> None:
    err = refused(
        tmp_path,
        with_job(namespace="team-b"),
        namespaces=["ns", "team-b"],
        namespace_from_pod="same",
    )
    assert err.field == "Job.Namespace"
    assert "backend.nomad.namespace_from_pod" in str(err)


def test_a_template_that_leaves_namespace_out_gets_vkgates(tmp_path: Path) -> None:
    body = "{% block meta %}{{ n.meta | tojson }}{% endblock %}"
    assert render(tmp_path, body, namespace="apps")["Namespace"] == "apps"


def test_region_datacenters_and_node_pool_stay_within_the_settings(tmp_path: Path) -> None:
    assert refused(tmp_path, with_job(region="eu")).field == "Job.Region"
    assert render(tmp_path, with_job(region="eu"), regions=["eu"])["Region"] == "eu"
    err = refused(tmp_path, with_job(datacenters=["dc9"]), datacenters=["dc1"])
    assert err.field == "Job.Datacenters" and "backend.nomad.allowed_datacenters" in str(err)
    ok = render(
        tmp_path, with_job(datacenters=["dc9"]), datacenters=["dc1"], allowed_datacenters=["dc9"]
    )
    assert ok["Datacenters"] == ["dc9"]
    err = refused(tmp_path, with_job(node_pool="gpu"))
    assert err.field == "Job.NodePool" and "backend.nomad.node_pools" in str(err)
    assert render(tmp_path, with_job(node_pool="gpu"), node_pools=["gpu"])["NodePool"] == "gpu"


def test_leaving_datacenters_or_the_node_pool_out_is_not_a_way_around_them(
    tmp_path: Path,
) -> None:
    """Nomad's defaults (every datacenter, the default pool) are not the node's."""
    folder = tmp_path / "teams" / TEAM / "nomad"
    folder.mkdir(parents=True)
    (folder / "job.j2").write_text(
        '{"Job": {"ID": {{ backend_info.job_id | tojson }}, "Type": "service",'
        ' "Priority": 50, "TaskGroups": [{"Name": "pod", "Tasks": [{"Name": "app",'
        ' "Driver": "docker", "Config": {"image": "busybox"}}]}]}}'
    )
    cfg = NomadConfig.from_settings({"datacenters": ["dc1"], "node_pool": "vk"}, environ={})
    with pytest.raises(UnsupportedError) as err:
        render_job(
            pod(), renderer=Renderer(extra_dirs=[tmp_path]), cfg=cfg, settings={}, factor=1000
        )
    assert 'Job.Datacenters = ["*"]' in str(err.value)
    assert 'Job.NodePool = ""' in str(err.value)


def test_priority_above_max_priority_is_refused_and_runs_once_raised(tmp_path: Path) -> None:
    err = refused(tmp_path, with_job(priority=100))
    assert err.field == "Job.Priority" and "raise backend.nomad.max_priority" in str(err)
    assert render(tmp_path, with_job(priority=100), max_priority=100)["Priority"] == 100
    # within the node's range: a template may pick (what the e2e team template does)
    assert render(tmp_path, with_job(priority=30))["Priority"] == 30


@pytest.mark.parametrize(
    ("policy", "forged"), [("Always", "batch"), ("Never", "service"), ("Always", "system")]
)
def test_the_job_type_is_what_the_pods_restart_policy_needs(
    tmp_path: Path, policy: str, forged: str
) -> None:
    p = pod(spec={"restartPolicy": policy})
    err = refused(tmp_path, with_job(type=forged), p)
    assert err.field == "Job.Type" and f"restartPolicy {policy}" in str(err)


def test_a_template_may_not_drop_the_node_class_constraint(tmp_path: Path) -> None:
    body = "{% block constraints %}[]{% endblock %}"
    err = refused(tmp_path, body, node_class="gpu-nodes")
    assert err.field == "Job.Constraints" and "gpu-nodes" in str(err)
    extra = '{% block constraints %}{{ (n.constraints + [{"LTarget": "${meta.x}", "RTarget": "1", "Operand": "="}]) | tojson }}{% endblock %}'
    assert len(render(tmp_path, extra, node_class="gpu-nodes")["Constraints"]) == 2


def test_one_group_run_once_with_one_task_per_container(tmp_path: Path) -> None:
    body = "{% block group %}{{ super() }}, {{ super() }}{% endblock %}"
    assert refused(tmp_path, body).field == "Job.TaskGroups"
    count = '{% block networks %}{{ n.networks | tojson }}, "Count": 5{% endblock %}'
    assert refused(tmp_path, count).field == "Job.TaskGroups[pod].Count"
    extra_task = (
        '{% block task %}{{ super() }}, {"Name": "miner", "Driver": "docker",'
        ' "Config": {"image": "miner"}}{% endblock %}'
    )
    assert refused(tmp_path, extra_task).field == "Job.TaskGroups[pod].Tasks"


@pytest.mark.parametrize(
    ("where", "body", "name"),
    [
        (
            "Job.Periodic",
            '{% block meta %}{{ n.meta | tojson }}, "Periodic": {"Spec": "* * * * *", "Enabled": true}{% endblock %}',
            "Periodic",
        ),
        (
            "Job.TaskGroups[pod].Tasks[app].Vault",
            '{% block user %}"Vault": {"Policies": ["admin"]},{% endblock %}',
            "Vault",
        ),
        (
            "Job.TaskGroups[pod].Tasks[app].CSIPluginConfig",
            '{% block user %}"CSIPluginConfig": {"ID": "x", "Type": "monolith"},{% endblock %}',
            "CSIPluginConfig",
        ),
        (
            "Job.TaskGroups[pod].Services",
            '{% block networks %}{{ n.networks | tojson }}, "Services": [{"Name": "payments"}]{% endblock %}',
            "Services",
        ),
        (
            "Job.TaskGroups[pod].Volumes",
            '{% block networks %}{{ n.networks | tojson }}, "Volumes": {"sock": {"Type": "host", "Source": "docker-sock"}}{% endblock %}',
            "Volumes",
        ),
    ],
)
def test_job_fields_that_reach_beyond_the_pod_need_allow_job_fields(
    tmp_path: Path, where: str, body: str, name: str
) -> None:
    err = refused(tmp_path, body)
    assert err.field == where
    assert f'add "{name}" to backend.nomad.allow_job_fields' in str(err)
    render(tmp_path, body, allow_job_fields=[name])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        # Nomad's JSON ignores the case of field names: the later key wins there
        (
            '{% block meta %}{{ n.meta | tojson }}, "namespace": "team-b"{% endblock %}',
            "Job.namespace",
        ),
        (
            '{% block meta %}{{ n.meta | tojson }}, "id": "ns-victim-99999999"{% endblock %}',
            "Job.id",
        ),
        ('{% block meta %}{{ n.meta | tojson }}, "PRIORITY": 100{% endblock %}', "Job.PRIORITY"),
        (
            '{% block meta %}{{ n.meta | tojson }}, "Name\u017fpace": "team-b"{% endblock %}',
            "Job.Name\u017fpace",  # a long s folds to s
        ),
        ('{% block user %}"user": "0",{% endblock %}', "Job.TaskGroups[pod].Tasks[app].user"),
        (
            '{% block user %}"driver": "raw_exec",{% endblock %}',
            "Job.TaskGroups[pod].Tasks[app].driver",
        ),
        (
            '{% block networks %}{{ n.networks | tojson }}, "count": 9{% endblock %}',
            "Job.TaskGroups[pod].count",
        ),
    ],
)
def test_a_field_spelled_in_another_case_is_refused(tmp_path: Path, body: str, field: str) -> None:
    err = refused(tmp_path, body)
    assert err.field == field and "its JSON field names ignore case" in str(err)


# -- drivers -----------------------------------------------------------------------------


def test_drivers_come_from_the_allow_list(tmp_path: Path) -> None:
    body = '{% block driver %}"exec"{% endblock %}'
    err = refused(tmp_path, body)
    assert err.field == "Job.TaskGroups[pod].Tasks[app].Driver"
    assert "add it to backend.nomad.drivers" in str(err) and "allowed: docker" in str(err)
    job = render(tmp_path, body, drivers=["docker", "exec"])
    assert job["TaskGroups"][0]["Tasks"][0]["Driver"] == "exec"


def test_a_team_template_cannot_switch_a_docker_node_to_raw_exec(tmp_path: Path) -> None:
    err = refused(tmp_path, "", base="nomad/raw_exec.j2")
    assert err.field == "Job.TaskGroups[pod].Tasks[app].Driver"
    assert "raw_exec" in str(err)
    # on a node whose own template is raw_exec, raw_exec is that node's driver
    job = render(tmp_path, "", base="nomad/raw_exec.j2", template="nomad/raw_exec.j2")
    assert job["TaskGroups"][0]["Tasks"][0]["Driver"] == "raw_exec"
    assert render(tmp_path, "", base="nomad/raw_exec.j2", drivers=["raw_exec"])


def test_the_packaged_templates_pass_on_their_own_nodes() -> None:
    for template in ("nomad/job.j2", "nomad/raw_exec.j2"):
        cfg = NomadConfig.from_settings({"template": template}, environ={})
        render_job(pod(team=""), renderer=Renderer(), cfg=cfg, settings={}, factor=1000)
    assert NomadConfig.from_settings({}, environ={}).allowed_drivers == ("docker",)


# -- driver config -----------------------------------------------------------------------

FORBIDDEN: list[tuple[str, Any]] = [
    ("privileged", True),
    ("network_mode", "host"),
    ("network_mode", "container:other-tenant"),
    ("pid_mode", "host"),
    ("ipc_mode", "host"),
    ("uts_mode", "host"),
    ("userns_mode", "host"),
    ("cgroupns", "host"),
    ("volumes", ["/:/host"]),
    ("volumes", ["../../..:/up"]),
    ("volumes", ["${attr.unique.storage.volume}:/x"]),
    ("mount", [{"type": "bind", "source": "/var/run/docker.sock", "target": "/s"}]),
    ("mounts", [{"type": "volume", "source": "shared", "target": "/v"}]),
    ("volume_driver", "rexray"),
    ("devices", [{"host_path": "/dev/sda"}]),
    ("cap_add", ["all"]),
    ("cap_add", ["SYS_ADMIN"]),
    ("security_opt", ["seccomp=unconfined"]),
    ("security_opt", ["apparmor=unconfined"]),
    ("security_opt", ["label=disable"]),
    ("security_opt", ["systempaths=unconfined"]),
    ("runtime", "runc-privileged"),
    ("sysctl", [{"net.ipv4.ip_forward": "1"}]),
    ("ulimit", [{"nofile": "1048576"}]),
    ("group_add", ["docker"]),
    ("oom_score_adj", -1000),
    ("ipv4_address", "10.0.0.5"),
    ("mac_address", "02:42:ac:11:00:02"),
    ("cgroup_v2_override", "/"),
]


@pytest.mark.parametrize(("key", "value"), FORBIDDEN, ids=[f"{k}={v}" for k, v in FORBIDDEN])
def test_a_forbidden_driver_config_key_is_refused_naming_the_key_and_the_setting(
    tmp_path: Path, key: str, value: Any
) -> None:
    err = refused(tmp_path, with_config(**{key: value}))
    assert err.field == f"Job.TaskGroups[pod].Tasks[app].Config.{key}"
    assert f'add "{key}" to backend.nomad.allow_driver_config' in str(err)
    # the same template on a node that allows that key
    job = render(tmp_path, with_config(**{key: value}), allow_driver_config=[key])
    assert config(job)[key] == value


def test_every_denied_key_has_one_rule_and_a_test() -> None:
    assert tuple(DRIVER_CONFIG) == DRIVER_CONFIG_KEYS  # the settings' vocabulary (config.py)
    assert set(DRIVER_CONFIG) - {k for k, _ in FORBIDDEN} == {"ipv6_address", "cgroup_v1_override"}


ALLOWED: list[tuple[str, Any]] = [
    ("privileged", False),
    ("network_mode", "none"),
    ("ipc_mode", "private"),
    ("volumes", ["local/cache:/cache"]),
    ("volumes", ["../alloc/data/shared:/shared"]),
    ("mount", [{"type": "tmpfs", "target": "/scratch"}]),
    ("security_opt", ["no-new-privileges"]),
    ("security_opt", ["apparmor=docker-strict"]),
    ("oom_score_adj", 500),
    ("hostname", "web"),
    ("labels", [{"team": "b"}]),
]


@pytest.mark.parametrize(("key", "value"), ALLOWED, ids=[f"{k}={v}" for k, v in ALLOWED])
def test_harmless_values_of_the_same_keys_pass(tmp_path: Path, key: str, value: Any) -> None:
    assert config(render(tmp_path, with_config(**{key: value})))[key] == value


def test_what_the_pod_asked_for_is_not_beyond_it(tmp_path: Path) -> None:
    """vkgate's own binds, the pod's capabilities and seccomp choice: the template may repeat
    them (what the packaged template does); only more is refused."""
    sc = {"capabilities": {"add": ["NET_ADMIN"]}, "seccompProfile": {"type": "Unconfined"}}
    c = ResolvedContainer(
        name="app",
        image="busybox",
        command=("true",),
        mounts=(VolumeMount("cfg", "/etc/cfg", True),),
        spec={"name": "app", "securityContext": sc},
    )
    vol = ResolvedVolume("cfg", "configMap", files=(VolumeFile("a", b"1"),))
    p = pod(containers=(c,), volumes=(vol,))
    job = render(tmp_path, "", p)
    assert config(job)["cap_add"] == ["net_admin"]
    assert config(job)["security_opt"] == ["seccomp=unconfined"]
    assert config(job)["volumes"] == ["local/vkgate/cfg:/etc/cfg:ro"]
    err = refused(tmp_path, with_config(cap_add=["net_admin", "sys_admin"]), p)
    assert "sys_admin" in str(err) and "net_admin" not in str(err).split("did not ask for")[1]


def test_every_refused_field_is_listed_and_the_first_is_the_pods_reason(tmp_path: Path) -> None:
    err = refused(tmp_path, with_config(privileged=True, devices=[{"host_path": "/dev/kvm"}]))
    assert err.field == "Job.TaskGroups[pod].Tasks[app].Config.devices"  # keys in order
    assert "Config.privileged" in str(err)


def test_a_secret_copied_into_a_refused_value_is_masked_in_the_reason(tmp_path: Path) -> None:
    """The reason becomes the pod's status, readable by whoever may read the pod."""
    secret = 'hunter2 "quoted"\nline'
    vol = ResolvedVolume("creds", "secret", files=(VolumeFile("pw", secret.encode(), secret=True),))
    body = '{% block config %}{{ super().strip()[:-1] }}, "sysctl": {{ volumes[0].files[0].content | tojson }}}{% endblock %}'
    err = refused(tmp_path, body, pod(volumes=(vol,)))
    assert err.field.endswith("Config.sysctl")
    assert "hunter2" not in str(err) and "*****" in str(err)


# -- settings ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"allow_driver_config": ["privileged", "everything"]}, "unknown everything"),
        ({"allow_job_fields": ["Tasks"]}, "unknown Tasks"),
        ({"drivers": ["Docker Desktop"]}, "expected Nomad task driver names"),
        ({"registry_auth": "yes"}, "must be one of reject, job, client"),
    ],
)
def test_policy_settings_are_validated(table: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        NomadConfig.from_settings(table, environ={})


def test_policy_defaults_deny() -> None:
    cfg = NomadConfig.from_settings({}, environ={})
    assert (cfg.allow_driver_config, cfg.allow_job_fields, cfg.registry_auth) == ((), (), "reject")


# -- the same step for vkgate render -----------------------------------------------------


def test_render_spec_runs_the_same_policy(tmp_path: Path) -> None:
    renderer = team_renderer(tmp_path, with_config(privileged=True))
    t = NomadTranslator(None, environ={}, renderer=renderer)
    with pytest.raises(UnsupportedError) as err:
        t.render_spec(pod())
    assert err.value.field == "Job.TaskGroups[pod].Tasks[app].Config.privileged"
    allowed = NomadTranslator(
        None, environ={}, renderer=renderer, allow_driver_config=["privileged"]
    )
    assert config(allowed.render_spec(pod())["Job"])["privileged"] is True


def test_the_job_id_stays_a_template_error(tmp_path: Path) -> None:
    with pytest.raises(TranslationError, match=r"Job\.ID must be"):
        render(tmp_path, with_job(job_id="victim-job"))
