"""Pod → Batch task JSON.

Python computes every value that needs care (ids, quoting, limits, secrets) and the template
``templates/batch/task.j2`` only arranges them, so a user can override a block (add
``outputFiles``, change constraints) without re-implementing quoting.  The rendered JSON is then
checked again (``validate_task``): the id charset, the 32,768-character command line and that no
secret value leaked into ``displayName``.

Identity: the main task's id is ``<prefix><40 hex of sha256(ns/name/uid)>`` (lower case, so the
service's case-insensitive ids cannot collide); init containers get ``<id>-i<k>``.  Tasks carry no
labels, so ``displayName`` is ``<ns>/<name>/<uid>/<container>`` (``…/init:<k>:<container>`` for init
containers): the reconcile list maps tasks back to pods with it.  Nothing else about the pod is put
on the task — in particular never the pod JSON (the old provider leaked resolved secrets that way).

Mapping decisions (see also docs/design/batch.md, "Pod to task mapping"):

* **Command.**  Batch runs the image with ``commandLine`` as the container command; ``""`` keeps
  the image default.  Kubernetes ``command`` replaces the ENTRYPOINT, so ``command[0]`` becomes
  ``--entrypoint`` in ``containerRunOptions`` and ``command[1:] + args`` the command line.  Every
  argument is POSIX-quoted (``shlex.quote``): whether the agent splits the line itself or hands it
  to ``/bin/sh -c``, each argv element arrives intact and ``;``/``$()`` are never interpreted.
* **Env.**  ``environmentSettings`` in declaration order.  Batch has no secure variant for task
  environment settings, so secret values are readable by whoever can read the task; operators who
  cannot accept that set ``secret_env = "reject"``, which also refuses mounts carrying Secret data
  (Secret, projected, service-account token files: they would travel base64 in the same place).
* **Pod strings in options.**  ``containerRunOptions`` is built from vkgate's own options, each
  value one plain word (``translators.batch.runoptions``); the pod strings Batch or docker read
  again (mount paths, subPaths, ``workingDir``, ``command[0]``, the image, container and env
  names) are checked first and the pod refused naming the field (``translators.podstrings``).
  After rendering, ``translators.batch.policy`` holds the template to the node's policy.
* **restartPolicy.**  Never → ``maxTaskRetryCount`` 0; OnFailure → ``on_failure_retries``;
  Always → best effort: -1 (unlimited retries on failure; a clean exit completes the task, so the
  pod ends Succeeded — Batch cannot restart a successful task) or ``always = "reject"``.
* **Deadline.**  ``activeDeadlineSeconds`` → ``constraints.maxWallClockTime`` ``PT<n>S``.
* **Resources.**  ``requiredSlots`` = ceil(cpu request ÷ cores per slot), at least 1 and at most
  the pool's ``taskSlotsPerNode``; cores per slot = ``cores_per_slot`` or pool cores ÷ slots.
  Limits are enforced with docker ``--cpus``/``--memory`` (``--gpus`` for ``nvidia.com/gpu``) on
  dockerCompatible pools.
* **Volumes.**  emptyDir → an anonymous docker volume (``--volume <path>``; ``--tmpfs`` for
  ``medium: Memory``).  ConfigMap/Secret/projected/downwardAPI files have no Batch equivalent
  (``resourceFiles`` need a URL), so with ``file_volumes = "shell"`` and an explicit ``command``
  they are delivered through environment variables and written by a ``/bin/sh`` wrapper before
  ``exec`` of the real command (needs ``sh`` and ``base64`` in the image); otherwise
  ``UnsupportedError(reason="UnsupportedVolume")``.
* **Init containers.**  One task each, chained with ``dependsOn`` (the job has
  ``usesTaskDependencies``); the main task depends on all of them.  They may run on different
  compute nodes, so nothing but success/failure is shared between them.
* **workingDir** → docker ``--workdir`` (``containerSettings.workingDirectory`` only offers
  ``containerImageDefault`` / ``taskWorkingDirectory``, from ``working_directory``).
* **Registry.**  ``containerSettings.registry{registryServer, username, password}`` from the
  pod's imagePullSecrets (resolved by the gateway: the credential matching the container's image,
  ``vkgate_core.imageregistry``; ``registryServer`` is the image's registry host, ``docker.io`` for
  Docker Hub), else from ``[backend.batch.registry]`` when the image is on that server.  The
  password never goes into ``displayName`` (checked) and the service never returns it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from translators.render.engine import Renderer

import base64
import hashlib
import math
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from translators.base import (
    JSON,
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    TranslationError,
    UnsupportedError,
    VolumeFile,
    VolumeMount,
    cpu_millis,
    parse_quantity,
)
from translators.batch import policy
from translators.batch.capacity import PoolInfo, vm_size
from translators.batch.runoptions import RunOptions
from translators.batch.settings import BatchSettings
from translators.podstrings import (
    container_field,
    dns_label,
    env_name,
    image_ref,
    mount_path,
    relative_path,
)
from vkgate_core.imageregistry import credential_for, image_host

MAX_COMMAND_LINE = 32_768
MAX_DISPLAY_NAME = 1024
TASK_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
FILE_VOLUME_KINDS = frozenset({"configMap", "secret", "projected", "downwardAPI"})
VOLUME_KINDS = FILE_VOLUME_KINDS | {"emptyDir"}


# --------------------------------------------------------------------------- identity


def base_task_id(prefix: str, namespace: str, name: str, uid: str) -> str:
    digest = hashlib.sha256(f"{namespace}/{name}/{uid}".encode()).hexdigest()
    return f"{prefix}{digest[:40]}"


def init_task_id(base: str, index: int) -> str:
    return f"{base}-i{index}"


@dataclass(frozen=True)
class TaskName:
    """What a task's ``displayName`` says about its pod and container."""

    namespace: str
    name: str
    uid: str
    container: str
    role: str = "main"
    index: int = 0

    def render(self) -> str:
        head = f"{self.namespace}/{self.name}/{self.uid}/"
        if self.role == "init":
            return f"{head}init:{self.index}:{self.container}"
        return head + self.container


def parse_display_name(value: str) -> TaskName | None:
    parts = value.split("/")
    if len(parts) != 4 or not all(parts):
        return None
    ns, name, uid, tail = parts
    if tail.startswith("init:"):
        bits = tail.split(":", 2)
        if len(bits) != 3 or not bits[1].isdigit():
            return None
        return TaskName(ns, name, uid, bits[2], role="init", index=int(bits[1]))
    return TaskName(ns, name, uid, tail)


def command_line(argv: Sequence[str]) -> str:
    """POSIX-quoted words: each argument arrives as one argv element, nothing is interpreted."""
    return " ".join(shlex.quote(a) for a in argv)


# --------------------------------------------------------------------------- builder


def _restart_retries(policy: str, settings: BatchSettings) -> int:
    if policy == "Never":
        return 0
    if policy == "OnFailure":
        return settings.on_failure_retries
    if settings.always == "reject":
        raise UnsupportedError(
            "restartPolicy Always cannot be honoured by Azure Batch (a task that exits 0 is "
            "never restarted); use OnFailure or Never",
            reason="UnsupportedRestartPolicy",
            field="spec.restartPolicy",
        )
    return -1


def _image_host(image: str) -> str:
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return first.lower()
    return "docker.io"


def _registry_host(server: str) -> str:
    host = re.sub(r"^https?://", "", server.strip()).rstrip("/").split("/", 1)[0].lower()
    return "docker.io" if host in ("index.docker.io", "registry-1.docker.io") else host


class TaskBuilder:
    """Build the task JSON (init tasks first, main task last) for one resolved pod."""

    def __init__(self, settings: BatchSettings, renderer: Renderer) -> None:
        self.settings = settings
        self.renderer = renderer

    # -- public --------------------------------------------------------------------------

    def template_for(self, pod: ResolvedPod) -> str:
        """The task template ``pod`` renders with: annotation / team / default (the
        renderer's lookup order), default ``task_template``."""
        choice = self.renderer.select(pod, backend="batch", default=self.settings.task_template)
        return str(choice.name)

    def build(
        self, pod: ResolvedPod, *, pool: PoolInfo | None = None, template: str = ""
    ) -> list[JSON]:
        """Init tasks (in order) then the main task, rendered and validated.  Blocking (the
        renderer runs templates under its limits); async callers use a thread."""
        from translators.render.engine import pod_context

        template = template or self.template_for(pod)

        self._check_pod(pod)
        spec = pod.pod.get("spec", {}) or {}
        retries = _restart_retries(str(spec.get("restartPolicy", "Always")), self.settings)
        base = base_task_id(self.settings.task_id_prefix, pod.namespace, pod.name, pod.uid)
        vm = vm_size(pool.vm_size, self.settings.vm_sizes) if pool else None
        context = pod_context(
            pod,
            backend="batch",
            settings=self.settings.template_view(),
            extra={
                "job_id": self.settings.job_id,
                "pool": pool.as_context(vm) if pool else {"id": self.settings.pool_id},
            },
        )
        secrets = [
            e.value for c in (*pod.init_containers, *pod.containers) for e in c.env if e.secret
        ]
        secrets += [
            f.content.decode("utf-8", "replace") for v in pod.volumes for f in v.files if f.secret
        ]
        secrets += [c.password for c in pod.registry_credentials]
        # what the policy step looks for when secret_env = "reject" (registry passwords
        # belong in containerSettings.registry)
        scanned: list[str | bytes] = [
            e.value for c in (*pod.init_containers, *pod.containers) for e in c.env if e.secret
        ]
        scanned += [f.content for v in pod.volumes for f in v.files if f.secret]

        inits = list(pod.init_containers)
        init_ids = [init_task_id(base, i) for i in range(len(inits))]
        tasks: list[JSON] = []
        for i, c in enumerate(inits):
            name = TaskName(pod.namespace, pod.name, pod.uid, c.name, role="init", index=i)
            deps = [init_ids[i - 1]] if i else []
            task = self._task(
                pod=pod,
                c=c,
                task_id=init_ids[i],
                name=name,
                retries=retries,
                depends_on=deps,
                pool=pool,
                vm=vm,
                spec=spec,
            )
            tasks.append(
                self._render(context, task, template=template, secrets=secrets, scanned=scanned)
            )
        main = pod.containers[0]
        name = TaskName(pod.namespace, pod.name, pod.uid, main.name)
        task = self._task(
            pod=pod,
            c=main,
            task_id=base,
            name=name,
            retries=retries,
            depends_on=init_ids,
            pool=pool,
            vm=vm,
            spec=spec,
        )
        tasks.append(
            self._render(context, task, template=template, secrets=secrets, scanned=scanned)
        )
        return tasks

    # -- checks --------------------------------------------------------------------------

    def _check_pod(self, pod: ResolvedPod) -> None:
        if len(pod.containers) != 1:
            raise UnsupportedError(
                f"the Azure Batch backend runs exactly one container per pod, this pod has "
                f"{len(pod.containers)}",
                reason="Unsupported",
                field="spec.containers",
            )
        sidecars = [c.name for c in pod.init_containers if c.role == "sidecar"]
        if sidecars:
            raise UnsupportedError(
                f"sidecar containers are not supported by the Azure Batch backend: {sidecars}",
                reason="Unsupported",
                field="spec.initContainers",
            )
        for c in (*pod.init_containers, *pod.containers):
            _check_strings(c)
        if self.settings.secret_env == "reject":
            volumes = {v.name: v for v in pod.volumes}
            for c in (*pod.init_containers, *pod.containers):
                leaked = [e.name for e in c.env if e.secret]
                if leaked:
                    raise UnsupportedError(
                        f"container {c.name!r} takes {leaked} from Secrets; Batch task environment "
                        f"is readable by anyone who can read the task and secret_env = 'reject'",
                        reason="SecretEnvNotAllowed",
                        field=f"{container_field(c)}.env",
                    )
                for i, m in enumerate(c.mounts):
                    vol = volumes.get(m.volume)
                    if vol is None or vol.kind == "emptyDir":
                        continue
                    if any(f.secret for f in _written(vol, m)):
                        raise UnsupportedError(
                            f"container {c.name!r} mounts Secret data of volume {vol.name!r} "
                            f"({vol.kind}); Batch would carry the files in the task's "
                            f"environmentSettings, readable by anyone who can read the task, "
                            f"and secret_env = 'reject' ([backend.batch])",
                            reason="SecretFileNotAllowed",
                            field=f"{container_field(c)}.volumeMounts[{i}]",
                        )
        for v in pod.volumes:
            if v.kind not in VOLUME_KINDS:
                raise UnsupportedError(
                    f"volume {v.name!r} of type {v.kind} is not supported by the Azure Batch backend",
                    reason="UnsupportedVolume",
                    field=f"spec.volumes[{v.name}]",
                )
        size = sum(len(f.content) for v in pod.volumes for f in v.files)
        if size > self.settings.max_file_volume_bytes:
            raise UnsupportedError(
                f"ConfigMap/Secret volumes hold {size} bytes; the Azure Batch backend passes at "
                f"most {self.settings.max_file_volume_bytes} (max_file_volume_bytes)",
                reason="UnsupportedVolume",
                field="spec.volumes",
            )

    # -- one task ------------------------------------------------------------------------

    def _task(
        self,
        *,
        pod: ResolvedPod,
        c: ResolvedContainer,
        task_id: str,
        name: TaskName,
        retries: int,
        depends_on: list[str],
        pool: PoolInfo | None,
        vm: Any,
        spec: Mapping[str, Any],
    ) -> JSON:
        s = self.settings
        where = container_field(c)
        run_opts = RunOptions()
        env = [{"name": e.name, "value": e.value} for e in c.env]
        volumes = {v.name: v for v in pod.volumes}
        writes: list[tuple[str, str, str]] = []  # (path, env var, mode)
        docker = s.resource_limits == "always" or (
            s.resource_limits == "auto" and (pool is None or pool.container_type != "criCompatible")
        )
        for i, m in enumerate(c.mounts):
            vol = volumes.get(m.volume)
            if vol is None:
                continue
            if vol.kind == "emptyDir":
                option = "--tmpfs" if vol.medium == "Memory" else "--volume"
                run_opts.add(option, m.mount_path, field=f"{where}.volumeMounts[{i}].mountPath")
                continue
            for f in _written(vol, m):
                relative_path(f.path, field=f"spec.volumes[{vol.name}]")
                path = m.mount_path if m.sub_path else posixpath.join(m.mount_path, f.path)
                var = f"VKGATE_FILE_{len(writes)}"
                env.append({"name": var, "value": base64.b64encode(f.content).decode()})
                writes.append((path, var, f"{f.mode:04o}"))

        entry = c.command[0] if c.command else ""
        rest = [*c.command[1:], *c.args]
        if writes:
            if s.file_volumes != "shell" or not entry:
                why = (
                    "file_volumes = 'reject'"
                    if s.file_volumes != "shell"
                    else "the container sets no command, so vkgate cannot wrap it to write the files"
                )
                raise UnsupportedError(
                    f"container {c.name!r} mounts ConfigMap/Secret files, which Azure Batch cannot "
                    f"place ({why})",
                    reason="UnsupportedVolume",
                    field=f"spec.containers[{c.name}].volumeMounts",
                )
            script = " && ".join(
                f"mkdir -p {shlex.quote(posixpath.dirname(p) or '/')} && "
                f'printf %s "${var}" | base64 -d > {shlex.quote(p)} && chmod {mode} {shlex.quote(p)}'
                for p, var, mode in writes
            )
            run_opts.add("--entrypoint", "/bin/sh", field=f"{where}.command[0]")
            argv = ["-c", f'{script} && exec "$@"', "vkgate-files", entry, *rest]
        elif entry:
            run_opts.add("--entrypoint", entry, field=f"{where}.command[0]")
            argv = rest
        else:
            argv = rest

        if c.working_dir:  # workingDirectory only knows two fixed values
            run_opts.add("--workdir", c.working_dir, field=f"{where}.workingDir")
        resources = c.spec.get("resources", {}) or {}
        requests = resources.get("requests", {}) or {}
        limits = resources.get("limits", {}) or {}
        if docker:
            limit = f"{where}.resources.limits"
            if "cpu" in limits:
                run_opts.add("--cpus", _cores(limits["cpu"]), field=f"{limit}.cpu")
            if "memory" in limits:
                memory = str(int(parse_quantity(limits["memory"])))
                run_opts.add("--memory", memory, field=f"{limit}.memory")
            gpus = limits.get("nvidia.com/gpu")
            if gpus:
                count = str(int(parse_quantity(gpus)))
                run_opts.add("--gpus", count, field=f"{limit}[nvidia.com/gpu]")
        options = run_opts.text(s.container_run_options)

        container: JSON = {
            "imageName": c.image,
            "containerRunOptions": options,
            "workingDirectory": s.working_directory,
        }
        cred = credential_for(c.image, pod.registry_credentials)
        if cred is not None:
            container["registry"] = {
                "registryServer": image_host(c.image),
                "username": cred.username,
                "password": cred.password,
            }
        elif s.registry.server and _image_host(c.image) == _registry_host(s.registry.server):
            container["registry"] = {
                "registryServer": s.registry.server,
                "username": s.registry.username,
                "password": s.registry.password,
            }

        constraints: JSON = {"maxTaskRetryCount": retries}
        deadline = spec.get("activeDeadlineSeconds")
        if deadline:
            constraints["maxWallClockTime"] = f"PT{int(deadline)}S"
        if s.retention:
            constraints["retentionTime"] = s.retention

        cpu = requests.get("cpu", limits.get("cpu"))
        slots = self._slots(cpu, pool, vm)
        line = command_line(argv)
        check_command_line(line, container=c.name)
        return {
            "id": task_id,
            "display_name": name.render(),
            "command_line": line,
            "container_settings": container,
            "environment": env,
            "constraints": constraints,
            "required_slots": slots,
            "depends_on": list(depends_on),
            "user_identity": (
                {"autoUser": {"scope": "task", "elevationLevel": s.elevation}}
                if s.elevation
                else None
            ),
            "role": name.role,
            "container_name": c.name,
        }

    def _slots(self, cpu: Any, pool: PoolInfo | None, vm: Any) -> int:
        if cpu in (None, ""):
            return 1
        per_slot = self.settings.cores_per_slot
        if not per_slot and pool is not None and vm is not None:
            per_slot = vm.cpus / max(pool.slots_per_node, 1)
        per_slot = per_slot or 1.0
        slots = max(1, math.ceil(cpu_millis(cpu) / 1000 / per_slot - 1e-9))
        if pool is not None:
            slots = min(slots, max(pool.slots_per_node, 1))
        return slots

    # -- render + validate -----------------------------------------------------------------

    def _render(
        self,
        context: JSON,
        task: JSON,
        *,
        template: str,
        secrets: list[str],
        scanned: Sequence[str | bytes],
    ) -> JSON:
        ctx = dict(context)
        ctx["task"] = task
        ctx["container"] = next(
            (
                c
                for c in (*context["init_containers"], *context["containers"])
                if c["name"] == task["container_name"]
            ),
            {},
        )
        out = self.renderer.render(template, ctx)
        validate_task(out, template=template, secrets=secrets)
        policy.enforce(out, task, template=template, settings=self.settings, secrets=scanned)
        for key, want in (("id", task["id"]), ("displayName", task["display_name"])):
            if out.get(key) != want:  # vkgate finds, adopts and deletes its tasks by these
                raise TranslationError(
                    f"{key} must stay {want!r} (vkgate maps tasks back to pods by it), "
                    f"the template made it {out.get(key)!r}",
                    template=template,
                    field=key,
                )
        result: JSON = out
        return result


def _written(vol: ResolvedVolume, m: VolumeMount) -> list[VolumeFile]:
    """The files of ``vol`` that mount ``m`` places (one with a subPath)."""
    return [f for f in vol.files if not m.sub_path or f.path == m.sub_path]


def _check_strings(c: ResolvedContainer) -> None:
    """The pod strings of ``c`` that Batch parses again (translators/podstrings.py); the ones
    written into containerRunOptions are checked as they are added (``RunOptions``)."""
    where = container_field(c)
    dns_label(c.name, field=f"{where}.name")
    image_ref(c.image, field=f"{where}.image")
    for e in c.env:
        env_name(e.name, field=f"{where}.env[{e.name}]")
    for i, m in enumerate(c.mounts):
        mount_path(m.mount_path, field=f"{where}.volumeMounts[{i}].mountPath")
        if m.sub_path:
            relative_path(m.sub_path, field=f"{where}.volumeMounts[{i}].subPath")


def _cores(quantity: Any) -> str:
    millis = cpu_millis(quantity)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis / 1000:g}"


def check_command_line(line: str, *, container: str = "") -> None:
    if len(line) > MAX_COMMAND_LINE:
        who = f"container {container!r}: " if container else ""
        raise UnsupportedError(
            f"{who}the task command line is {len(line)} characters; Azure Batch accepts at most "
            f"{MAX_COMMAND_LINE} (shorten command/args or move data into a ConfigMap volume)",
            reason="CommandLineTooLong",
            field=f"spec.containers[{container}].args" if container else "commandLine",
        )


def validate_task(task: Any, *, template: str, secrets: Sequence[str] = ()) -> None:
    """Check rendered output against the rules the service (and vkgate) enforce."""
    if not isinstance(task, dict):
        raise TranslationError("output must be a JSON object (one task)", template=template)
    tid = task.get("id")
    if not isinstance(tid, str) or not TASK_ID.fullmatch(tid):
        raise TranslationError(
            f"task id must be 1-64 letters, digits, '-' or '_', got {tid!r}",
            template=template,
            field="id",
        )
    cmd = task.get("commandLine")
    if not isinstance(cmd, str):
        raise TranslationError(
            "commandLine must be a string", template=template, field="commandLine"
        )
    check_command_line(cmd)
    display = task.get("displayName", "")
    if not isinstance(display, str) or len(display) > MAX_DISPLAY_NAME:
        raise TranslationError(
            f"displayName must be a string of at most {MAX_DISPLAY_NAME} characters",
            template=template,
            field="displayName",
        )
    if any(len(s) >= 4 and s in display for s in secrets):
        raise TranslationError(
            "displayName contains a secret value; never put Secret data into it",
            template=template,
            field="displayName",
        )
    cs = task.get("containerSettings")
    if cs is not None and not (isinstance(cs, dict) and cs.get("imageName")):
        raise TranslationError(
            "containerSettings.imageName is required", template=template, field="containerSettings"
        )
