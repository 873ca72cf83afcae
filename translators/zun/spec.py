"""Pod → Zun request body: decide container vs capsule, compute the values, render the template.

The rules that need code (which Zun object, quantities, restart policy, what the negotiated
microversion allows, name validity) live here and are handed to the template as
``backend_info``; the templates (``templates/zun/container.j2``, ``capsule.j2``) only arrange
them into JSON, so teams can override a block without re-implementing the rules.

Mapping (docs/design/zun.md, "Pod to Zun mapping"): one main container and no init containers → a
standalone container (logs and exec work); anything else → a capsule (needs capsule support, ≥1.34
for init containers), otherwise ``UnsupportedError(reason="UnsupportedByBackend")``.  Kubernetes
``command`` becomes Zun ``entrypoint`` (≥1.40) and ``args`` becomes ``command``.  emptyDir volumes
become auto-removed Cinder volumes; ConfigMap/Secret/projected/downwardAPI volumes have no Zun
equivalent (``mounts`` carries Cinder volumes only) → ``UnsupportedError(reason=
"UnsupportedVolume")``.  The ServiceAccount token volume (``kube-api-access-*``) that admission adds
to every pod is skipped: a Zun workload cannot reach the API server through it anyway.

imagePullSecrets: a standalone container whose image matches one of the pod's credentials
gets ``registry`` = the uuid of a vkgate-owned Zun registry object holding that login (made by
``translators.zun.registries``; ``backend_info.registry``).  Offline rendering (no I/O) shows
the object's deterministic name instead, which Zun accepts as well.  Capsules cannot carry one.

Before rendering, ``check_pod`` refuses what Zun cannot carry as the pod asks (pod strings Zun
or docker read again; Secret env values with ``secret_env = "reject"``, the default); after
rendering, ``translators.zun.policy`` holds the template to the node's policy (docs/backends/zun.md,
"Security: Secrets and templates").  Both run for ``build`` and ``render`` alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from translators.render.engine import Renderer

import hashlib
import logging
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from translators.base import (
    JSON,
    OWNER_KEY,
    OWNER_VALUE,
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    TranslationError,
    UnsupportedError,
    cpu_millis,
    parse_quantity,
)
from translators.podstrings import container_field, dns_label, env_name, mount_path
from translators.render.engine import pod_context
from translators.zun import policy
from translators.zun.config import AUTH_KEYS, ZunConfig
from translators.zun.registries import registry_name
from vkgate_core.imageregistry import RegistryCredential, credential_for, image_host

log = logging.getLogger(__name__)

ANN = "vkgate.io/"
ANN_NETS = ANN + "zun-nets"
ANN_SECURITY_GROUPS = ANN + "zun-security-groups"
ANN_AZ = ANN + "zun-availability-zone"

#: Labels every vkgate workload carries in Zun (docs/design/zun.md, "Pod to Zun mapping").
LABEL_NODE = "vkgate.node"
LABEL_NAMESPACE = "k8s.namespace"
LABEL_NAME = "k8s.name"
LABEL_UID = "k8s.uid"
#: Container names of a capsule, in Zun's order (Zun renames capsule containers).
LABEL_CONTAINERS = "vkgate.containers"
LABEL_SIDECARS = "vkgate.sidecars"
LABEL_INIT = "vkgate.init-containers"

NAME_MAX = 255
_INVALID = re.compile(r"[^a-zA-Z0-9_.-]")
_PULL = {"always": "always", "ifnotpresent": "ifnotpresent", "never": "never"}
_RESTART = {"Always": "always", "OnFailure": "on-failure", "Never": "no"}


@dataclass(frozen=True)
class ZunSpec:
    """What to submit: ``kind`` is ``container`` or ``capsule``; ``body`` the rendered JSON,
    sent as is (a capsule's is ``{"template": {…}}``)."""

    kind: str
    name: str
    body: JSON
    template: str


def zun_name(prefix: str, namespace: str, name: str) -> str:
    """``<prefix>-<namespace>-<pod>`` made valid for Zun (``^[a-zA-Z0-9][a-zA-Z0-9_.-]+$``,
    ≤255 characters; too long → truncated + 8 hex of a hash, so it stays unique)."""
    base = "-".join(p for p in (prefix, namespace, name) if p)
    base = _INVALID.sub("-", base)
    if not base[:1].isalnum():
        base = "x" + base
    if len(base) > NAME_MAX:
        digest = hashlib.sha256(base.encode()).hexdigest()[:8]
        base = base[: NAME_MAX - 9] + "-" + digest
    return base


def ownership_labels(pod: ResolvedPod) -> dict[str, str]:
    return {
        OWNER_KEY: OWNER_VALUE,
        LABEL_NODE: pod.node_name,
        LABEL_NAMESPACE: pod.namespace,
        LABEL_NAME: pod.name,
        LABEL_UID: pod.uid,
    }


def cores(resources: Mapping[str, Any]) -> float | None:
    """vCPU as a float: request, else limit (Zun enforces it as a cap)."""
    for kind in ("requests", "limits"):
        value = (resources.get(kind) or {}).get("cpu")
        if value not in (None, ""):
            return cpu_millis(value) / 1000
    return None


def mebibytes(resources: Mapping[str, Any]) -> int | None:
    """Memory in MiB, rounded up: request, else limit."""
    for kind in ("requests", "limits"):
        value = (resources.get(kind) or {}).get("memory")
        if value not in (None, ""):
            return max(1, math.ceil(parse_quantity(value) / 2**20))
    return None


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _skip_volume(v: ResolvedVolume) -> bool:
    return v.kind == "projected" and v.name.startswith("kube-api-access-")


def _gib(size_limit: str, default: int) -> int:
    if not size_limit:
        return default
    return max(1, math.ceil(parse_quantity(size_limit) / 2**30))


class SpecBuilder:
    """Computes ``backend_info`` and renders the Zun templates for one translator."""

    def __init__(
        self,
        *,
        renderer: Renderer,
        settings: Mapping[str, Any],
        name_prefix: str = "vkgate",
        security_groups: Sequence[str] = (),
        nets: Sequence[str] = (),
        availability_zone: str = "",
        on_failure_max_retries: int = 3,
        capsules: bool = True,
        cinder_volumes: bool = True,
        emptydir_size_gb: int = 1,
        send_image_pull_policy: bool = False,
        secret_env: str = "reject",
        secret_files: str = "reject",
        template_keys: Sequence[str] = (),
    ) -> None:
        self.renderer = renderer
        self.secret_env = secret_env
        self.secret_files = secret_files
        self.template_keys = tuple(template_keys)
        self.send_image_pull_policy = send_image_pull_policy
        self.settings = {k: v for k, v in settings.items() if k not in AUTH_KEYS and k != "auth"}
        self.name_prefix = name_prefix
        self.security_groups = list(security_groups)
        self.nets = list(nets)
        self.availability_zone = availability_zone
        self.on_failure_max_retries = on_failure_max_retries
        self.capsules = capsules
        self.cinder_volumes = cinder_volumes
        self.emptydir_size_gb = emptydir_size_gb

    @classmethod
    def from_config(
        cls, cfg: ZunConfig, *, renderer: Any, settings: Mapping[str, Any]
    ) -> SpecBuilder:
        return cls(
            renderer=renderer,
            settings=settings,
            name_prefix=cfg.name_prefix,
            security_groups=cfg.security_groups,
            nets=cfg.nets,
            availability_zone=cfg.availability_zone,
            on_failure_max_retries=cfg.on_failure_max_retries,
            capsules=cfg.capsules,
            cinder_volumes=cfg.cinder_volumes,
            emptydir_size_gb=cfg.emptydir_size_gb,
            send_image_pull_policy=cfg.send_image_pull_policy,
            secret_env=cfg.secret_env,
            secret_files=cfg.secret_files,
            template_keys=cfg.template_keys,
        )

    # -- decisions -----------------------------------------------------------------------

    def check_pod(self, pod: ResolvedPod) -> None:
        """What Zun cannot carry as the pod asks, refused by field: pod strings Zun or docker
        read again (translators/podstrings.py: container names go into vkgate's labels, env
        names into docker's ``NAME=value``, mount paths into docker's ``source:destination``),
        and Secret env values with ``secret_env = "reject"`` (Zun keeps a container's
        environment in plain text, readable by anyone who can read the container)."""
        for c in (*pod.init_containers, *pod.containers):
            where = container_field(c)
            dns_label(c.name, field=f"{where}.name")
            for e in c.env:
                env_name(e.name, field=f"{where}.env[{e.name}]")
            for i, m in enumerate(c.mounts):
                mount_path(m.mount_path, field=f"{where}.volumeMounts[{i}].mountPath")
            leaked = [e.name for e in c.env if e.secret]
            if leaked and self.secret_env == "reject":
                raise UnsupportedError(
                    f"container {c.name!r} takes {leaked} from Secrets; Zun keeps a container's "
                    "environment in plain text, readable by anyone who can read the container, "
                    "and secret_env = 'reject' ([backend.zun])",
                    reason="SecretEnvNotAllowed",
                    field=f"{where}.env",
                )

    def kind_for(self, pod: ResolvedPod, features: Mapping[str, bool]) -> str:
        inits = [c for c in pod.init_containers if c.role != "sidecar"]
        sidecars = [c for c in pod.init_containers if c.role == "sidecar"]
        if len(pod.containers) == 1 and not pod.init_containers:
            return "container"
        if not pod.containers:
            raise TranslationError("pod has no containers", field="spec.containers")
        what = "init containers" if inits else "several containers"
        if sidecars and not inits and len(pod.containers) == 1:
            what = "sidecar containers"
        if not self.capsules:
            raise UnsupportedError(
                f"pod has {what}; Zun runs those only as capsules, which are disabled "
                "([backend.zun] capsules = false)",
                reason="UnsupportedByBackend",
                field="spec.initContainers" if inits else "spec.containers",
            )
        if not features.get("capsules"):
            raise UnsupportedError(
                f"pod has {what}; capsules need Zun microversion 1.32, the server gives "
                f"{features.get('_version', '?')}",
                reason="UnsupportedByBackend",
                field="spec.containers",
            )
        if inits and not features.get("capsule_init_containers"):
            raise UnsupportedError(
                "init containers need Zun microversion 1.34 (capsule initContainers), the "
                f"server gives {features.get('_version', '?')}",
                reason="UnsupportedByBackend",
                field="spec.initContainers",
            )
        return "capsule"

    def _volumes(self, pod: ResolvedPod, kind: str, features: Mapping[str, bool]) -> dict[str, int]:
        """Mounted volumes → Cinder size (GB); raises for kinds Zun cannot provide."""
        by_name = {v.name: v for v in pod.volumes}
        mounted = {m.volume for c in (*pod.init_containers, *pod.containers) for m in c.mounts}
        sizes: dict[str, int] = {}
        for name in sorted(mounted):
            v = by_name.get(name)
            if v is None:
                declared = next(
                    (
                        d
                        for d in (pod.pod.get("spec") or {}).get("volumes") or []
                        if d.get("name") == name
                    ),
                    None,
                )
                if declared is None:
                    raise TranslationError(
                        f"volumeMount refers to undefined volume {name!r}", field="spec.volumes"
                    )
                kind = next((k for k in declared if k != "name"), "unknown")
                raise UnsupportedError(
                    f"volume {name!r} ({kind}) is not supported by the zun backend",
                    reason="UnsupportedVolume",
                    field=f"spec.volumes[{name}]",
                )
            if _skip_volume(v):
                continue
            if v.kind != "emptyDir":
                raise UnsupportedError(
                    f"volume {name!r} ({v.kind}): Zun cannot place {v.kind} files into a "
                    "container (its mounts carry Cinder volumes only)",
                    reason="UnsupportedVolume",
                    field=f"spec.volumes[{name}]",
                )
            if not self.cinder_volumes:
                raise UnsupportedError(
                    f"volume {name!r} (emptyDir) needs Cinder volumes, disabled by "
                    "[backend.zun] cinder_volumes = false",
                    reason="UnsupportedVolume",
                    field=f"spec.volumes[{name}]",
                )
            if kind == "container" and not features.get("mounts"):
                raise UnsupportedError(
                    f"volume {name!r} (emptyDir) needs Zun microversion 1.11 (mounts)",
                    reason="UnsupportedVolume",
                    field=f"spec.volumes[{name}]",
                )
            sizes[name] = _gib(v.size_limit, self.emptydir_size_gb)
        return sizes

    def _placement(self, pod: ResolvedPod) -> dict[str, Any]:
        ann: Mapping[str, str] = (pod.pod.get("metadata") or {}).get("annotations") or {}
        nets = _csv(ann[ANN_NETS]) if ann.get(ANN_NETS) else self.nets
        groups = (
            _csv(ann[ANN_SECURITY_GROUPS]) if ann.get(ANN_SECURITY_GROUPS) else self.security_groups
        )
        return {
            "nets": [{"network": n} for n in nets],
            "security_groups": list(groups),
            "availability_zone": ann.get(ANN_AZ) or self.availability_zone,
        }

    def _container_info(
        self,
        c: ResolvedContainer,
        *,
        kind: str,
        sizes: Mapping[str, int],
        features: Mapping[str, bool],
    ) -> dict[str, Any]:
        spec = c.spec
        resources = spec.get("resources") or {}
        pull = _PULL.get(str(spec.get("imagePullPolicy") or "").lower(), "")
        info: dict[str, Any] = {
            "name": c.name,
            "cpu": cores(resources),
            "memory": mebibytes(resources),
            "image_pull_policy": pull,
            "tty": bool(spec.get("tty")),
            "stdin": bool(spec.get("stdin")),
            "workdir": c.working_dir,
        }
        ports = [p for p in spec.get("ports") or [] if p.get("containerPort")]
        for i, p in enumerate(spec.get("ports") or []):
            # the container's own Neutron address is the pod's: Zun opens exposed ports on it
            # through a security group of its own, and its API knows tcp and udp only
            # (zun.common.utils.build_exposed_ports)
            if p.get("containerPort") and str(p.get("protocol") or "TCP").upper() not in (
                "TCP",
                "UDP",
            ):
                raise UnsupportedError(
                    f"port {p['containerPort']}/{p.get('protocol')}: Zun exposes tcp and udp "
                    "ports only",
                    reason="UnsupportedPodFeature",
                    field=f"spec.containers[{c.name}].ports[{i}].protocol",
                )
        if kind == "container":
            command, args = list(c.command), list(c.args)
            entrypoint: list[str] | None = None
            if command and features.get("entrypoint"):
                entrypoint, cmd = command, args
            else:
                if command:
                    log.info(
                        "zun: %s: entrypoint needs microversion 1.40; sending command+args as "
                        "the command (the image ENTRYPOINT still applies)",
                        c.name,
                    )
                cmd = command + args
            info["entrypoint"] = entrypoint
            info["command"] = (
                (cmd if features.get("command_list") else shlex.join(cmd)) if cmd else None
            )
            info["exposed_ports"] = (
                {
                    f"{p['containerPort']}/{str(p.get('protocol') or 'TCP').lower()}": {}
                    for p in ports
                }
                if features.get("exposed_ports")
                else {}
            )
            info["mounts"] = [
                {"destination": m.mount_path, "size": sizes[m.volume]}
                for m in c.mounts
                if m.volume in sizes
            ]
            info["tty"] = info["tty"] and bool(features.get("tty"))
        else:
            info["command"] = list(c.command)
            info["args"] = list(c.args)
            info["ports"] = (
                [
                    {
                        "containerPort": int(p["containerPort"]),
                        "protocol": str(p.get("protocol") or "TCP").upper(),
                    }
                    for p in ports
                ]
                if features.get("capsule_ports")
                else []
            )
            info["volume_mounts"] = [
                {"name": m.volume, "mountPath": m.mount_path, "readOnly": m.read_only}
                for m in c.mounts
                if m.volume in sizes
            ]
            info["resources"] = {
                k: v for k, v in (("cpu", info["cpu"]), ("memory", info["memory"])) if v is not None
            }
            if not features.get("capsule_tty"):
                info["tty"] = info["stdin"] = False
        return info

    def registry_login(self, pod: ResolvedPod, kind: str) -> tuple[str, RegistryCredential] | None:
        """(registry host, credential) the pod's standalone container pulls with, or None
        (no matching pull secret, or a capsule: those take no registry)."""
        if kind != "container" or not pod.registry_credentials or not pod.containers:
            return None
        image = pod.containers[0].image
        cred = credential_for(image, pod.registry_credentials)
        return (image_host(image), cred) if cred is not None else None

    def backend_info(
        self, pod: ResolvedPod, features: Mapping[str, bool], *, registry: str = ""
    ) -> dict[str, Any]:
        kind = self.kind_for(pod, features)
        sizes = self._volumes(pod, kind, features)
        restart = str((pod.pod.get("spec") or {}).get("restartPolicy") or "Always")
        name = zun_name(self.name_prefix, pod.namespace, pod.name)
        labels = ownership_labels(pod)
        inits = [c for c in pod.init_containers if c.role != "sidecar"]
        sidecars = [c for c in pod.init_containers if c.role == "sidecar"]
        mains = list(pod.containers) + sidecars
        labels[LABEL_CONTAINERS] = ",".join(c.name for c in pod.containers)
        if kind == "capsule":
            if sidecars:
                labels[LABEL_SIDECARS] = ",".join(c.name for c in sidecars)
            if inits:
                labels[LABEL_INIT] = ",".join(c.name for c in inits)
        policy: dict[str, str] = {"Name": _RESTART.get(restart, "always")}
        if policy["Name"] == "on-failure":
            policy["MaximumRetryCount"] = str(self.on_failure_max_retries)
        hostname = str((pod.pod.get("spec") or {}).get("hostname") or pod.name)[:63].rstrip("-.")
        info: dict[str, Any] = {
            "kind": kind,
            "name": name,
            "hostname": hostname if features.get("hostname") and len(hostname) >= 2 else "",
            "labels": labels,
            "annotations": (
                {
                    k: v
                    for k, v in labels.items()
                    if k in (LABEL_CONTAINERS, LABEL_SIDECARS, LABEL_INIT)
                }
                if kind == "capsule" and features.get("capsule_annotations")
                else {}
            ),
            "microversion": features.get("_version", ""),
            "registry": registry if kind == "container" and features.get("registry") else "",
            "features": {k: v for k, v in features.items() if not k.startswith("_")},
            "restart_policy": policy,
            "capsule_restart_policy": restart if restart in _RESTART else "Always",
            **self._placement(pod),
            "containers": [
                self._container_info(c, kind=kind, sizes=sizes, features=features) for c in mains
            ],
            "init_containers": [
                self._container_info(c, kind=kind, sizes=sizes, features=features) for c in inits
            ],
            "volumes": [
                {"name": n, "cinder": {"size": s, "autoRemove": True}} for n, s in sizes.items()
            ],
        }
        if kind == "container":
            self._fit_container_policy(info, pod)
        return info

    def _fit_container_policy(self, info: dict[str, Any], pod: ResolvedPod) -> None:
        """What Zun's API refuses for standalone containers (docs/backends/zun.md):

        * ``exposed_ports`` together with ``security_groups`` (its create schema forbids both:
          exposed ports make Zun create a security group of its own) → the ports are left out,
          the configured groups must open them;
        * ``image_pull_policy`` from a non-admin (policy ``container:create:image_pull_policy``
          is admin-only by default) → left out unless ``send_image_pull_policy`` is set; Zun
          then pulls when the image is missing or tagged ``latest``, like Kubernetes' default.
        """
        z = info["containers"][0]
        if z.get("exposed_ports") and info["security_groups"]:
            log.info(
                "zun: %s/%s: exposed_ports left out (Zun refuses them together with "
                "security_groups %s; those groups must open the ports)",
                pod.namespace,
                pod.name,
                ",".join(info["security_groups"]),
            )
            z["exposed_ports"] = {}
        if not self.send_image_pull_policy:
            z["image_pull_policy"] = ""

    # -- rendering -----------------------------------------------------------------------

    def template_for(self, pod: ResolvedPod, kind: str) -> str:
        """The template for ``pod``.  ``pod.template`` when the caller already chose one
        (``vkgate render``), else the renderer's lookup (annotation ``vkgate.io/template``,
        team template ``teams/<team>/zun/<kind>.j2``, default ``zun/<kind>.j2``).

        The Zun object follows the pod's shape, so ``container.j2`` and ``capsule.j2`` are a
        pair: asking for one where the pod needs the other picks its twin in the same
        directory, or the packaged twin when that directory has none (a team that customised
        only ``container.j2`` still gets capsules for its multi-container pods).  Any other
        template serves both kinds and sees ``backend_info.kind`` (e.g.
        ``{% extends "zun/" ~ backend_info.kind ~ ".j2" %}``)."""
        default = f"zun/{kind}.j2"
        name = pod.template
        if not name:
            name = str(self.renderer.select(pod, backend="zun", default=default).name)
        head, _, base = name.rpartition("/")
        if base in ("container.j2", "capsule.j2") and base != f"{kind}.j2":
            twin = f"{head}/{kind}.j2" if head else f"{kind}.j2"
            return twin if self.renderer.exists(twin) else default
        return name

    def _prepare(
        self, pod: ResolvedPod, features: Mapping[str, Any], registry: str = ""
    ) -> tuple[dict[str, Any], str, dict[str, Any]]:
        self.check_pod(pod)
        info = self.backend_info(pod, features, registry=registry)
        template = self.template_for(pod, info["kind"])
        context = pod_context(pod, backend="zun", settings=self.settings, extra=info)
        if info["kind"] == "capsule":  # sidecars run as ordinary capsule containers: one list
            context["containers"] = context["containers"] + context["sidecars"]
            context["sidecars"] = []
        return info, template, context

    def render(self, pod: ResolvedPod, features: Mapping[str, Any]) -> ZunSpec:
        """Synchronous ``build`` (offline rendering: ``vkgate render``, template checks); a
        registry login is shown by the registry object's name (``create`` sends its uuid)."""
        login = self.registry_login(pod, self.kind_for(pod, features))
        registry = registry_name(self.name_prefix, login[0], login[1].username) if login else ""
        info, template, context = self._prepare(pod, features, registry)
        body = self.renderer.render(template, context)
        validate_body(info["kind"], body, template)
        self._enforce(pod, info, body, template)
        return ZunSpec(kind=info["kind"], name=info["name"], body=body, template=template)

    async def build(
        self, pod: ResolvedPod, features: Mapping[str, Any], *, registry: str = ""
    ) -> ZunSpec:
        """The request body for ``pod``; rendering runs off the event loop when it can.
        ``registry``: the uuid of the Zun registry object the container pulls with."""
        info, template, context = self._prepare(pod, features, registry)
        body = await self.renderer.arender(template, context)
        validate_body(info["kind"], body, template)
        self._enforce(pod, info, body, template)
        return ZunSpec(kind=info["kind"], name=info["name"], body=body, template=template)

    def _enforce(
        self, pod: ResolvedPod, info: Mapping[str, Any], body: JSON, template: str
    ) -> None:
        """The node's policy on the rendered body (translators/zun/policy.py)."""
        containers = (*pod.init_containers, *pod.containers)
        public = {
            "info": info,
            "pod": pod.pod,
            "env": [e.value for c in containers for e in c.env if not e.secret],
            "argv": [[*c.command, *c.args] for c in containers],
        }
        policy.enforce(
            info["kind"],
            body,
            info=info,
            template=template,
            allowed=self.template_keys,
            secret_files=self.secret_files,
            secrets=[f.content for v in pod.volumes for f in v.files if f.secret],
            public=public,
        )


def validate_body(kind: str, body: Any, template: str) -> None:
    """The minimum shape Zun needs, so a broken team template fails here with a clear field."""
    if not isinstance(body, dict):
        raise TranslationError("output must be a JSON object", template=template)
    if kind == "container":
        for key in ("name", "image"):
            if not isinstance(body.get(key), str) or not body[key]:
                raise TranslationError(f"missing string {key!r}", template=template, field=key)
        return
    tpl = body.get("template")
    if not isinstance(tpl, dict) or str(tpl.get("kind", "")).lower() != "capsule":
        raise TranslationError(
            'capsule output must be {"template": {"kind": "capsule", …}}',
            template=template,
            field="template.kind",
        )
    containers = (tpl.get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers:
        raise TranslationError(
            "capsule needs spec.containers", template=template, field="template.spec.containers"
        )
    for i, c in enumerate(containers):
        if not isinstance(c, dict) or not c.get("image"):
            raise TranslationError(
                "capsule container without image",
                template=template,
                field=f"template.spec.containers[{i}].image",
            )
