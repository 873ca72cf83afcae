"""The node's policy on the rendered job: a template customizes, the operator's settings constrain.

A template (``templates/nomad/job.j2``, a team's ``teams/<team>/nomad/job.j2``, a ConfigMap's)
writes the job, and may write anything a Nomad job can say.  What reaches Nomad is bounded by the
node's ``[backend.nomad]`` settings all the same: ``check`` runs on the job as rendered, after
rendering and before anything is written to Nomad (the job's Variable or the register), for the
agent (``submit.Submitter``) and ``vkgate render`` (``Submitter.render_spec``) alike, through
``jobs.finish_job`` — the way Kubernetes admission runs after mutation (docs/design/nomad.md,
"Policy on the rendered job").  What it checks is what the template rendered, never what the
template says it used: the values vkgate computed (``jobs.backend_info``) are kept out of the
template's reach (``jobs.sealed``).

=============================================  =============================================
rendered field                                 allowed; the setting that allows more
=============================================  =============================================
``Namespace``                                  vkgate's, or one of ``namespaces`` (a pod that
                                               ``namespace_from_pod`` maps: only its own)
``Region``                                     vkgate's, or one of ``regions``
``Datacenters`` (absent: ``["*"]``)            each matched by ``datacenters`` or listed in
                                               ``allowed_datacenters``
``NodePool``                                   vkgate's, or one of ``node_pools``
``Priority`` (absent: 50)                      at most ``max_priority``
``Type`` (absent: service)                     what the pod's restartPolicy needs; no setting
``Constraints``                                every one vkgate computed (the node's
                                               ``node_class``, the pod's nodeSelector); no
                                               setting
``TaskGroups``                                 one group, ``Count`` 1, one task per container
                                               of the pod; no setting
``Periodic``, ``ParameterizedJob``,            absent, unless listed in ``allow_job_fields``
``Multiregion``, group ``Services``,
``Consul``, task ``Services``, ``Vault``,
``Consul``, ``CSIPluginConfig``; group
``Volumes`` other than the pod's claims
task ``Driver``                                one of ``drivers`` (default: docker, and
                                               raw_exec on a node whose ``template`` is
                                               ``nomad/raw_exec.j2``)
task ``Config.<key>`` of ``DRIVER_CONFIG``     what the key's rule allows (below), unless the
                                               key is listed in ``allow_driver_config``
=============================================  =============================================

Each field above, and each a check after rendering reads, must be spelled as it is read here,
once: Nomad's JSON ignores the case of field names (``_spelling``).

A refusal is a ``PolicyRefused`` (reason ``PolicyRefused``, as on every backend): the pod fails, with a message
naming the template, every field it broke and the setting that would allow each.  The job ID is
checked before, by ``jobs.finish_job`` (a ``TranslationError``: the template is wrong, whatever
the node allows); the Variable's path is ``variables.variable_path`` of vkgate's job ID, never
read from the rendered job.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from translators.base import PolicyRefused, ResolvedPod
from translators.nomad.config import NomadConfig
from translators.nomad.overrides import mapped_namespace

REASON = "PolicyRefused"
#: Nomad's Priority of a job that names none.
DEFAULT_PRIORITY = 50


@dataclass(frozen=True)
class Refusal:
    """One field of the rendered job the node does not allow."""

    field: str
    value: Any
    why: str
    #: What would allow it: the setting to change, or why none does.
    allow: str

    def text(self) -> str:
        shown = json.dumps(self.value, sort_keys=True, default=str)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        return f"{self.field} = {shown}: {self.why} ({self.allow})"


def check(
    job: Mapping[str, Any],
    pod: ResolvedPod,
    *,
    info: Mapping[str, Any],
    cfg: NomadConfig,
    template: str,
    secrets: Collection[str] = (),
) -> None:
    """Refuse ``job`` (``UnsupportedError`` naming the first field, the message every one) when
    it breaks the node's policy; ``info`` is vkgate's own ``backend_info``, which no template
    has seen.  The message quotes the values it refuses, with ``secrets`` (the pod's Secret
    values a template could copy into one) masked: it becomes the pod's status."""
    refusals = [*_spelling(job), *_placement(job, pod, info, cfg), *_structure(job, info, cfg)]
    if not refusals:
        return
    message = f"the job rendered by template {template} breaks the node's policy: " + "; ".join(
        r.text() for r in refusals
    )
    first = refusals[0]
    raise PolicyRefused.listing(
        _masked(message, secrets), template=template, field=first.field, setting=first.allow
    )


def _masked(text: str, secrets: Collection[str]) -> str:
    """``text`` without any of ``secrets``, as written or as JSON escapes it."""
    for secret in sorted(secrets, key=len, reverse=True):
        for form in (secret, json.dumps(secret)[1:-1]):
            if len(form) >= 4:
                text = text.replace(form, "*****")
    return text


# --------------------------------------------------------------------------- spelling

#: The fields of a job, a group and a task this module (and ``jobs.finish_job``) reads.
_JOB_KEYS = (
    "ID",
    "Namespace",
    "Region",
    "Datacenters",
    "NodePool",
    "Priority",
    "Type",
    "Constraints",
    "TaskGroups",
    "Meta",
    "Periodic",
    "ParameterizedJob",
    "Multiregion",
)
_GROUP_KEYS = ("Name", "Count", "Tasks", "Services", "Consul", "Volumes")
_TASK_KEYS = (
    "Name",
    "Driver",
    "Config",
    "User",
    "Services",
    "Consul",
    "Vault",
    "CSIPluginConfig",
    "VolumeMounts",
)


def _spelling(job: Mapping[str, Any]) -> Iterator[Refusal]:
    """Nomad reads a job's JSON with Go's ``encoding/json``, which matches a key to a field
    without regard to case (Unicode simple folding: ``namespace``, ``NAMESPACE`` and
    ``Name\\u017fpace``, with a long s, all set ``Namespace``; of two such keys, the last
    wins).  A field this policy reads must be spelled as it reads it, and no key may fold onto
    another: else the check would read one value and Nomad register another."""
    yield from _keys(job, "Job", _JOB_KEYS)
    for i, group in enumerate(job.get("TaskGroups") or []):
        if not isinstance(group, Mapping):
            continue
        where = f"Job.TaskGroups[{group.get('Name', i)}]"
        yield from _keys(group, where, _GROUP_KEYS)
        for j, task in enumerate(group.get("Tasks") or []):
            if isinstance(task, Mapping):
                yield from _keys(task, f"{where}.Tasks[{task.get('Name', j)}]", _TASK_KEYS)


def _keys(obj: Mapping[str, Any], where: str, canonical: Sequence[str]) -> Iterator[Refusal]:
    spelled = {name.casefold(): name for name in canonical}
    seen: dict[str, str] = {}
    for key in obj:
        folded = str(key).casefold()
        meant = spelled.get(folded) or seen.get(folded)
        if meant is not None and meant != key:
            yield Refusal(
                f"{where}.{key}",
                obj[key],
                f"Nomad reads it as {meant!r} (its JSON field names ignore case): spell it "
                f"{meant!r}, once",
                "no setting",
            )
        seen.setdefault(folded, str(key))


# --------------------------------------------------------------------------- where it runs


def _setting(key: str) -> str:
    return f"backend.nomad.{key}"


def _placement(
    job: Mapping[str, Any], pod: ResolvedPod, info: Mapping[str, Any], cfg: NomadConfig
) -> Iterator[Refusal]:
    ns = job.get("Namespace", info["namespace"])
    if ns != info["namespace"]:
        mapped = mapped_namespace(pod.namespace, cfg)
        if mapped is not None:
            yield Refusal(
                "Job.Namespace",
                ns,
                f"the pod's namespace {pod.namespace!r} maps to the Nomad namespace {mapped!r}",
                f"{_setting('namespace_from_pod')} = {cfg.namespace_from_pod!r} pins it; no "
                "setting lets a template move the pod",
            )
        elif ns not in cfg.all_namespaces:
            yield Refusal(
                "Job.Namespace",
                ns,
                f"not an allowed Nomad namespace; allowed: {', '.join(cfg.all_namespaces)}",
                f"add it to {_setting('namespaces')}",
            )
    region = job.get("Region")
    region = info["region"] if region is None else region
    if region != info["region"] and region not in cfg.all_regions:
        yield Refusal(
            "Job.Region", region, "not an allowed Nomad region", f"add it to {_setting('regions')}"
        )
    dcs = job.get("Datacenters")
    dcs = ["*"] if dcs is None else dcs
    if not isinstance(dcs, list) or not all(isinstance(d, str) for d in dcs):
        yield Refusal("Job.Datacenters", dcs, "expected a list of names", "no setting")
    else:
        denied = [d for d in dcs if d not in info["datacenters"] and not cfg.datacenter_allowed(d)]
        if denied:
            yield Refusal(
                "Job.Datacenters",
                dcs,
                f"{', '.join(map(repr, denied))} not allowed; allowed: "
                f"{', '.join((*cfg.datacenters, *cfg.allowed_datacenters))}",
                f"add them to {_setting('allowed_datacenters')}",
            )
    pool = job.get("NodePool") or ""
    if pool != (info["node_pool"] or "") and pool not in cfg.all_node_pools:
        yield Refusal(
            "Job.NodePool",
            pool,
            f"not an allowed node pool; allowed: {', '.join(cfg.all_node_pools)}",
            f"add it to {_setting('node_pools')}",
        )
    priority = job.get("Priority")
    priority = DEFAULT_PRIORITY if priority is None else priority
    if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 100:
        yield Refusal("Job.Priority", priority, "expected 1..100", "no setting")
    elif priority > max(cfg.pod_max_priority, int(info["priority"])):
        yield Refusal(
            "Job.Priority",
            priority,
            f"above the node's highest priority {cfg.pod_max_priority}",
            f"raise {_setting('max_priority')}",
        )
    kind = job.get("Type") or "service"
    if kind != info["type"]:
        policy = str((pod.pod.get("spec") or {}).get("restartPolicy") or "Always")
        yield Refusal(
            "Job.Type",
            kind,
            f"the pod's restartPolicy {policy} runs as a {info['type']} job",
            "no setting allows another Type",
        )
    have = job.get("Constraints") or []
    for wanted in info["constraints"]:
        if wanted not in have:
            yield Refusal(
                "Job.Constraints",
                wanted,
                "the template dropped a constraint vkgate sets: the node's node_class, the "
                "pod's nodeSelector or required node affinity",
                "no setting",
            )


# --------------------------------------------------------------------------- what it runs


def _extra_fields(
    obj: Mapping[str, Any], where: str, names: Sequence[str], cfg: NomadConfig
) -> Iterator[Refusal]:
    for name in names:
        if obj.get(name) and name not in cfg.allow_job_fields:
            yield Refusal(
                f"{where}.{name}",
                obj[name],
                "reaches beyond the pod",
                f'add "{name}" to {_setting("allow_job_fields")}',
            )


def _structure(
    job: Mapping[str, Any], info: Mapping[str, Any], cfg: NomadConfig
) -> Iterator[Refusal]:
    yield from _extra_fields(job, "Job", ("Periodic", "ParameterizedJob", "Multiregion"), cfg)
    groups = job.get("TaskGroups") or []
    if len(groups) != 1:
        yield Refusal(
            "Job.TaskGroups",
            [(g or {}).get("Name") for g in groups],
            "a pod is one task group",
            "no setting",
        )
        return
    group = groups[0] or {}
    where = f"Job.TaskGroups[{group.get('Name', '')}]"
    if group.get("Count") not in (None, 1):
        yield Refusal(f"{where}.Count", group.get("Count"), "a pod runs once", "no setting")
    yield from _extra_fields(group, where, ("Services", "Consul"), cfg)
    claims = set(info.get("volumes") or {})
    extra = sorted(set(group.get("Volumes") or {}) - claims)
    if extra and "Volumes" not in cfg.allow_job_fields:
        yield Refusal(
            f"{where}.Volumes",
            extra,
            "volumes that are none of the pod's persistentVolumeClaims",
            f'mount a claim instead, or add "Volumes" to {_setting("allow_job_fields")}',
        )
    tasks = [t or {} for t in group.get("Tasks") or []]
    names = [str(t.get("Name", "")) for t in tasks]
    if sorted(names) != sorted(info["tasks"]):
        yield Refusal(
            f"{where}.Tasks",
            names,
            f"the tasks must be the pod's containers: {', '.join(sorted(info['tasks']))}",
            "no setting",
        )
    for task in tasks:
        name = str(task.get("Name", ""))
        at = f"{where}.Tasks[{name}]"
        driver = str(task.get("Driver", ""))
        if driver not in cfg.allowed_drivers:
            yield Refusal(
                f"{at}.Driver",
                driver,
                f"not an allowed task driver; allowed: {', '.join(cfg.allowed_drivers)}",
                f"add it to {_setting('drivers')}",
            )
        yield from _extra_fields(task, at, ("Services", "Consul", "Vault", "CSIPluginConfig"), cfg)
        wanted = info["tasks"].get(name) or {}
        config = task.get("Config") or {}
        if isinstance(config, Mapping):
            yield from _config(config, at, wanted, cfg)
        else:
            yield Refusal(f"{at}.Config", config, "expected an object", "no setting")


# --------------------------------------------------------------------------- driver config

#: ``(value, vkgate's task values) → why it is refused, or ""``.
Rule = Callable[[Any, Mapping[str, Any]], str]


def _on(value: Any) -> bool:
    return value not in (None, False, 0, "", "false", [], {})


def _only(allowed: frozenset[str], why: str) -> Rule:
    def rule(value: Any, wanted: Mapping[str, Any]) -> str:
        return "" if value in allowed else why

    return rule


def _any(why: str) -> Rule:
    return lambda value, wanted: why if _on(value) else ""


def _host_path(source: str) -> bool:
    """A bind source outside the allocation's own directory: absolute, interpolated (Nomad
    expands ``${…}`` on the client, to anything), or climbing out of the allocation dir
    (``../alloc`` is the allocation's shared dir; ``../..`` is the client's)."""
    if not source or source.startswith(("/", "~")) or "${" in source or "\\" in source:
        return True
    norm = posixpath.normpath(source)
    return norm == ".." or norm.startswith("../..")


def _volumes(value: Any, wanted: Mapping[str, Any]) -> str:
    ours = set(wanted.get("docker_volumes") or [])
    entries = value if isinstance(value, list) else [value]
    hosts = [str(v) for v in entries if str(v) not in ours and _host_path(str(v).split(":", 1)[0])]
    return f"bind-mounts the client's {', '.join(hosts)}" if hosts else ""


def _mounts(value: Any, wanted: Mapping[str, Any]) -> str:
    entries = value if isinstance(value, list) else [value]
    for m in entries:
        if not isinstance(m, Mapping):
            return "expected mount blocks"
        kind = str(m.get("type") or "volume")
        if kind == "tmpfs":
            continue
        if kind == "bind" and not _host_path(str(m.get("source") or "")):
            continue
        return f"mounts the client's {m.get('source')!r} ({kind})"
    return ""


def _caps(names: Any) -> set[str]:
    items = names if isinstance(names, list) else [names]
    return {str(n).lower().removeprefix("cap_") for n in items}


def _cap_add(value: Any, wanted: Mapping[str, Any]) -> str:
    asked = _caps((wanted.get("security") or {}).get("cap_add") or [])
    extra = sorted(_caps(value) - asked)
    return (
        f"adds capabilities the pod's securityContext did not ask for: {', '.join(extra)}"
        if extra
        else ""
    )


#: ``security_opt`` entries that only confine a container further.
_CONFINING = frozenset({"no-new-privileges", "no-new-privileges:true", "no-new-privileges=true"})


def _security_opt(value: Any, wanted: Mapping[str, Any]) -> str:
    asked = set((wanted.get("security") or {}).get("security_opt") or [])
    entries = value if isinstance(value, list) else [value]
    loose = [
        str(o)
        for o in entries
        if str(o) not in asked
        and str(o) not in _CONFINING
        and not (str(o).startswith(("apparmor=", "apparmor:")) and "unconfined" not in str(o))
    ]
    return f"loosens the container's confinement: {', '.join(loose)}" if loose else ""


def _oom_score_adj(value: Any, wanted: Mapping[str, Any]) -> str:
    try:
        low = int(value) < 0
    except (TypeError, ValueError):
        low = True
    return "shields the task from the OOM killer at its neighbours' cost" if low else ""


def _namespace_mode(kind: str, allowed: frozenset[str]) -> Rule:
    return _only(allowed, f"shares the client's (or another container's) {kind} namespace")


#: The rule of each driver ``Config`` key of ``config.DRIVER_CONFIG_KEYS`` (docker, podman,
#: exec and raw_exec share the names).
DRIVER_CONFIG: dict[str, Rule] = {
    "privileged": _any("a privileged container holds every capability and the client's devices"),
    "network_mode": _only(
        frozenset({"", "none", "bridge", "default"}),
        "puts the container on the client's or another network, not the pod's",
    ),
    "pid_mode": _namespace_mode("process", frozenset({"", "private"})),
    "ipc_mode": _namespace_mode("IPC", frozenset({"", "none", "private", "shareable"})),
    "uts_mode": _namespace_mode("UTS", frozenset({""})),
    "userns_mode": _namespace_mode("user", frozenset({""})),
    "cgroupns": _namespace_mode("cgroup", frozenset({"", "private"})),
    "volumes": _volumes,
    "mount": _mounts,
    "mounts": _mounts,
    "volume_driver": _any("mounts volumes through a docker volume driver"),
    "devices": _any("passes the client's devices into the container"),
    "cap_add": _cap_add,
    "security_opt": _security_opt,
    "runtime": _any("runs the container under another runtime"),
    "sysctl": _any("sets kernel parameters"),
    "ulimit": _any("sets resource limits the pod does not ask for"),
    "group_add": _any("adds supplementary groups the pod does not ask for"),
    "oom_score_adj": _oom_score_adj,
    "ipv4_address": _any("sets a network address of its own"),
    "ipv6_address": _any("sets a network address of its own"),
    "mac_address": _any("sets a network address of its own"),
    "cgroup_v1_override": _any("places the task in another cgroup"),
    "cgroup_v2_override": _any("places the task in another cgroup"),
}


def _config(
    config: Mapping[str, Any], at: str, wanted: Mapping[str, Any], cfg: NomadConfig
) -> Iterator[Refusal]:
    for key in sorted(config):
        rule = DRIVER_CONFIG.get(key)
        if rule is None or key in cfg.allow_driver_config:
            continue
        why = rule(config[key], wanted)
        if why:
            yield Refusal(
                f"{at}.Config.{key}",
                config[key],
                why,
                f'add "{key}" to {_setting("allow_driver_config")}',
            )
