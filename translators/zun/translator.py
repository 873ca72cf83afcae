"""``ZunTranslator``: the OpenStack Zun backend behind the ``Translator`` Protocol.

Pieces: ``auth`` (Keystone, in a thread), ``client`` (HTTP, microversions, errors), ``spec``
+ ``templates/zun`` (pod → JSON), ``status`` (JSON → ``WorkloadState``), ``capacity``,
``logs``, ``exec``.  This module holds the per-node state that ties them together:

* **Index by pod UID.**  ``list()`` (one paginated ``GET /containers`` plus ``GET /capsules``
  per reconcile, filtered by vkgate's labels *and* this node) rebuilds the uid → Zun uuid
  index that ``delete``/``logs``/``exec`` use.  ``create`` is idempotent by UID: a pod it does
  not know yet is looked up by its deterministic Zun name first, so a gateway restart adopts
  the existing container instead of creating a second one.
* **Deletes never block a worker.**  Zun deletes asynchronously and refuses to delete a
  running container.  ``delete`` stops with ``timeout=<grace>`` and hands the rest to a small
  per-container task (the *reaper*) that deletes once Zun reports ``Stopped`` and escalates
  after grace + ``stop_slack`` (``?force=True`` when allowed, else ``?stop=True``).  A grace of
  0 escalates at once.  Capsules are deleted with one ``DELETE`` (Zun stops them itself).
* No ``Notifier``: Zun cannot push changes; the gateway's periodic ``list()`` is the loop.
* **imagePullSecrets** become a vkgate-owned Zun registry object referenced by the container
  (``registries``); where Zun cannot take one (capsules, a refusing registry API) the create
  goes on without it and the state carries a Warning event ``ImagePullSecretNotApplied``; below
  microversion 1.31 one log line says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from translators.base import (
    JSON,
    BackendAuthError,
    BackendConflict,
    BackendError,
    BackendNotFound,
    BackendRejected,
    Capacity,
    ExecSession,
    Features,
    LogOptions,
    NodeInfo,
    PodRef,
    ResolvedPod,
    TranslatorContext,
    UnsupportedError,
    WorkloadState,
)
from translators.zun import logs as zun_logs
from translators.zun.auth import ZunAuth, build_auth
from translators.zun.capacity import Usage, capacity_from_quotas, usage_of
from translators.zun.client import ZunClient, feature_flags, format_version, retry_policy
from translators.zun.config import ZunConfig, load_config
from translators.zun.exec import run_exec
from translators.zun.registries import Registries
from translators.zun.spec import LABEL_UID, SpecBuilder, zun_name
from translators.zun.status import (
    GONE_STATUSES,
    PENDING_STATUSES,
    RUNNING_STATUSES,
    CapsuleNames,
    RestartTracker,
    capsule_workload,
    container_workload,
    owned_by,
)
from vkgate_core.clock import Clock, SystemClock

log = logging.getLogger(__name__)

#: Statuses in which Zun accepts a plain DELETE of a container.
DELETABLE = frozenset({"Created", "Error", "Stopped", "Deleted", "Dead"})
PULL_SECRET_EVENT = "ImagePullSecretNotApplied"
CAPSULE_NO_LOGS = (
    "Zun does not serve logs/exec for containers of a capsule (multi-container pod); only "
    "single-container pods run as standalone Zun containers with logs and exec"
)


@dataclass
class _Entry:
    """What vkgate knows about one pod's Zun object."""

    kind: str
    uuid: str
    ref: PodRef
    #: pod container name → Zun container uuid
    containers: dict[str, str] = field(default_factory=dict)
    #: pod container name → image
    images: dict[str, str] = field(default_factory=dict)


def zun_features(cfg: ZunConfig, supports: Callable[[str], bool]) -> Features:
    """What a Zun at the microversion ``supports`` answers for can run, under ``cfg``."""
    capsules = cfg.capsules and supports("capsules")
    pod_features = {"sidecars"} if capsules else set()
    if capsules and supports("capsule_init_containers"):
        pod_features.add("initContainers")
    volume_kinds = {"projected"}  # only the ServiceAccount token volume, which is skipped
    if cfg.cinder_volumes:
        volume_kinds.add("emptyDir")
    return Features(
        volume_kinds=frozenset(volume_kinds),
        pod_features=frozenset(pod_features),
        updatable_fields=frozenset({"metadata.labels", "metadata.annotations"}),
        # podIP is the container's own address on its Neutron network, which vkgate must be
        # able to reach (docs/backends/zun.md): kubectl port-forward dials podIP:port.
        routable_pod_ip=True,
    )


class ZunTranslator:
    kind = "zun"

    def __init__(
        self,
        ctx: TranslatorContext | None = None,
        *,
        auth: ZunAuth | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        requests_session: Any = None,
        renderer: Any = None,
        **settings: Any,
    ) -> None:
        table: dict[str, Any] = dict(ctx.settings) if ctx else {}
        table.update(settings)
        self.cfg: ZunConfig = load_config(table)
        self.node_name = ctx.node_name if ctx else "vkgate"
        #: Sleeps (retries, delete polls, log follows) and stop deadlines.
        self.clock: Clock = ctx.clock if ctx is not None else SystemClock()
        self.auth: ZunAuth = auth or build_auth(self.cfg, requests_session=requests_session)
        verify = self.auth.verify
        self.verify = verify
        self.client = ZunClient(
            self.auth,
            microversion=self.cfg.microversion,
            transport=transport,
            verify=verify,
            timeout=self.cfg.timeout,
            retry=retry_policy(self.cfg.retry_backoff),
            page_size=self.cfg.page_size,
            sleep=self.clock.sleep,
        )
        if renderer is None:
            renderer = ctx.renderer if ctx is not None and ctx.renderer is not None else None
        if renderer is None:
            from translators.render.engine import Renderer

            renderer = Renderer()
        self.specs = SpecBuilder.from_config(self.cfg, renderer=renderer, settings=table)
        self.features = self._features()
        self._index: dict[str, _Entry] = {}
        self._states: dict[str, WorkloadState] = {}
        self._restarts = RestartTracker()
        self._reapers: dict[str, asyncio.Task[None]] = {}
        self._own = Usage()
        self._quota_warned = False
        self.registries = Registries(self.client, prefix=self.cfg.name_prefix)
        self._registry_warned = False
        #: pod uid → the pull-secret Warning its states carry (until the pod is deleted)
        self._pull_warnings: dict[str, tuple[str, str, str, str]] = {}

    # -- features ------------------------------------------------------------------------

    def _features(self) -> Features:
        return zun_features(self.cfg, self.client.supports)

    def _flags(self) -> dict[str, Any]:
        return feature_flags(self.client.version)

    async def _negotiated(self) -> None:
        before = self.client.negotiated
        await self.client.ensure_negotiated()
        if before is not self.client.negotiated:
            self.features = self._features()

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self._negotiated()
        except BackendError as exc:
            log.warning("zun: backend not reachable at start (%s); will retry", exc)

    async def close(self) -> None:
        for task in list(self._reapers.values()):
            task.cancel()
        for task in list(self._reapers.values()):
            with contextlib.suppress(BaseException):
                await task
        self._reapers.clear()
        await self.client.aclose()

    async def ping(self) -> None:
        await self._negotiated()
        await self.client.request(
            "GET", "/containers", params={"limit": 1}, label="/containers?limit=1"
        )

    async def node_info(self) -> NodeInfo:
        version = format_version(self.client.version) if self.client.negotiated else "unknown"
        return NodeInfo(
            hostname=self.node_name,
            os_image="OpenStack Zun",
            runtime_version=f"zun://{version}",
        )

    async def capacity(self) -> Capacity:
        await self._negotiated()
        quotas: JSON | None = None
        if self.client.supports("quotas"):
            try:
                quotas = await self.client.quotas(await self.auth.project_id())
            except (BackendAuthError, BackendNotFound) as exc:
                if not self._quota_warned:
                    log.warning("zun: cannot read quotas (%s); using configured capacity", exc)
                    self._quota_warned = True
        elif not self._quota_warned:
            log.info("zun: quotas need microversion 1.26; using configured capacity")
            self._quota_warned = True
        hosts = None
        if self.cfg.use_hosts:
            try:
                hosts = await self.client.hosts()
            except BackendAuthError:
                log.warning("zun: GET /hosts is admin-only; use_hosts ignored")
        return capacity_from_quotas(
            quotas,
            own=self._own,
            hosts=hosts,
            cpu=self.cfg.cpu,
            memory=self.cfg.memory,
            pods=self.cfg.pods,
        )

    # -- create / update -----------------------------------------------------------------

    async def create(self, pod: ResolvedPod) -> WorkloadState:
        await self._negotiated()
        spec = await self.specs.build(pod, self._flags())
        existing = await self._existing(pod.ref, spec.kind, spec.name)
        if existing is not None:
            return existing
        registry, warning = await self._registry(pod, spec.kind)
        if warning:
            self._pull_warnings[pod.uid] = ("Warning", PULL_SECRET_EVENT, warning, "")
        if registry:
            spec = await self.specs.build(pod, self._flags(), registry=registry)
        if spec.kind == "container":
            raw = await self.client.create_container(spec.body, run=True)
        else:
            raw = await self.client.create_capsule(spec.body)
        log.info("zun: created %s %s for pod %s", spec.kind, raw.get("uuid"), pod.key)
        state = self._observe(spec.kind, raw)
        if state is None:  # the server dropped our labels: still report what we created
            raise BackendConflict(f"Zun {spec.kind} {raw.get('uuid')} came back without labels")
        return state

    async def _registry(self, pod: ResolvedPod, kind: str) -> tuple[str, str]:
        """(registry object uuid, warning) for the pod's image pull credentials."""
        if not pod.registry_credentials:
            return "", ""
        if kind != "container":
            log.info("zun: pod %s is a capsule; its imagePullSecrets are not applied", pod.key)
            return "", (
                "imagePullSecrets are not applied: Zun capsules (multi-container pods) take no "
                "registry login; the images are pulled anonymously"
            )
        login = self.specs.registry_login(pod, kind)
        if login is None:
            return "", ""
        if not self.client.supports("registry"):
            if not self._registry_warned:
                self._registry_warned = True
                log.warning(
                    "zun: imagePullSecrets need microversion 1.31 (the server gives %s); "
                    "containers are created without registry logins",
                    format_version(self.client.version),
                )
            return "", ""
        domain, cred = login
        try:
            ref = await self.registries.ensure(domain, cred)
        except (BackendAuthError, BackendNotFound, BackendRejected) as exc:
            log.warning("zun: cannot create the registry login for %s: %s", domain, exc)
            return "", (
                f"imagePullSecrets are not applied: Zun refused the registry login for {domain} "
                f"({exc}); the image is pulled anonymously"
            )
        return ref.uuid, ""

    def render_spec(self, pod: ResolvedPod) -> JSON:
        """``Renderable``: the body ``create`` would send (no I/O; the configured microversion
        unless one was negotiated already)."""
        return self.specs.render(pod, self._flags()).body

    async def _existing(self, ref: PodRef, kind: str, name: str) -> WorkloadState | None:
        """The workload of this pod UID if Zun already has it (adoption after a restart)."""
        entry = self._index.get(ref.uid)
        if entry is not None:
            try:
                raw = await self._get(entry.kind, entry.uuid)
            except BackendNotFound:
                self._index.pop(ref.uid, None)
            else:
                return self._observe(entry.kind, raw)
        raw_by_name = await self._by_name(kind, name, ref)
        if raw_by_name is None:
            return None
        return self._observe(kind, raw_by_name)

    async def _by_name(self, kind: str, name: str, ref: PodRef) -> JSON | None:
        try:
            raw = await self._get(kind, name)
        except BackendNotFound:
            return None
        except BackendConflict:  # several objects with that name: list and pick ours
            items = await self.client.list_all(f"{kind}s")
            mine = [i for i in items if (i.get("labels") or {}).get(LABEL_UID) == ref.uid]
            return mine[0] if mine else None
        uid = (raw.get("labels") or {}).get(LABEL_UID)
        if uid == ref.uid:
            return raw
        raise BackendConflict(
            f"Zun {kind} name {name!r} is still used by {raw.get('uuid')} "
            f"(pod uid {uid or 'none'}, status {raw.get('status')}); retrying after it is gone"
        )

    async def _get(self, kind: str, ident: str) -> JSON:
        if kind == "capsule":
            return await self.client.get_capsule(ident)
        return await self.client.get_container(ident)

    async def update(self, pod: ResolvedPod, current: WorkloadState) -> bool:
        entry = self._index.get(pod.uid)
        if entry is None:
            return True
        for c in (*pod.init_containers, *pod.containers):
            seen = entry.images.get(c.name)
            if seen and seen != c.image:
                return False  # Zun cannot change an image in place: re-create
        return True

    # -- list / observe ------------------------------------------------------------------

    def _observe(self, kind: str, raw: Mapping[str, Any]) -> WorkloadState | None:
        """Map one Zun object, remembering it in the index and the restart tracker."""
        uid = str((raw.get("labels") or {}).get(LABEL_UID) or "")
        previous = self._states.get(uid)
        if kind == "container":
            count = self._restarts.observe(raw)
            state = container_workload(raw, restart_count=count, previous=previous)
        else:
            members = [
                *(raw.get("containers") or []),
                *(raw.get("init_containers") or []),
            ]
            counts = {str(c.get("uuid")): self._restarts.observe(c) for c in members}
            state = capsule_workload(raw, restart_counts=counts, previous=previous)
        if state is None:
            return None
        warning = self._pull_warnings.get(uid)
        if warning is not None and warning not in state.events:
            state = replace(state, events=(*state.events, warning))
        self._states[uid] = state
        self._index[uid] = self._entry(kind, raw, state)
        return state

    @staticmethod
    def _entry(kind: str, raw: Mapping[str, Any], state: WorkloadState) -> _Entry:
        entry = _Entry(kind=kind, uuid=str(raw.get("uuid")), ref=state.ref)
        if kind == "container":
            name = state.containers[0].name if state.containers else state.ref.name
            entry.containers[name] = entry.uuid
            entry.images[name] = str(raw.get("image") or "")
            return entry
        names = CapsuleNames.of(raw)
        main = list(raw.get("containers") or [])
        init = list(raw.get("init_containers") or [])
        for items, pod_names in ((main, [*names.containers, *names.sidecars]), (init, names.init)):
            for c, n in zip(items, pod_names, strict=False):
                entry.containers[n] = str(c.get("uuid"))
                entry.images[n] = str(c.get("image") or "")
        return entry

    async def list(self) -> Sequence[WorkloadState]:
        await self._negotiated()
        containers = await self.client.list_all("containers")
        capsules: list[JSON] = []
        if self.cfg.capsules and self.client.supports("capsules"):
            capsules = await self.client.list_all("capsules")
        ours_caps = [c for c in capsules if owned_by(c.get("labels"), self.node_name)]
        in_capsules = {
            str(m.get("uuid"))
            for cap in ours_caps
            for m in (*(cap.get("containers") or []), *(cap.get("init_containers") or []))
        }
        ours = [
            c
            for c in containers
            if owned_by(c.get("labels"), self.node_name) and str(c.get("uuid")) not in in_capsules
        ]
        seen_uids: dict[str, str] = {}
        states: list[WorkloadState] = []
        old_states = self._states
        self._states = {}
        self._index = {}
        for kind, items in (("container", ours), ("capsule", ours_caps)):
            for raw in sorted(items, key=lambda i: str(i.get("created_at") or "")):
                uid = str((raw.get("labels") or {}).get(LABEL_UID))
                if uid in seen_uids:
                    log.warning(
                        "zun: pod uid %s has more than one Zun object (%s kept, %s ignored)",
                        uid,
                        seen_uids[uid],
                        raw.get("uuid"),
                    )
                    continue
                seen_uids[uid] = str(raw.get("uuid"))
                if uid in old_states:
                    self._states[uid] = old_states[uid]
                state = self._observe(kind, raw)
                if state is not None:
                    states.append(state)
        members = [
            m
            for cap in ours_caps
            for m in (*(cap.get("containers") or []), *(cap.get("init_containers") or []))
        ]
        self._own = usage_of([*ours, *members])
        self._restarts.forget({str(c.get("uuid")) for c in [*ours, *members]})
        return states

    # -- delete --------------------------------------------------------------------------

    async def _find(self, ref: PodRef) -> _Entry | None:
        entry = self._index.get(ref.uid)
        if entry is not None:
            return entry
        await self._negotiated()
        name = zun_name(self.cfg.name_prefix, ref.namespace, ref.name)
        kinds = ["container"]
        if self.cfg.capsules and self.client.supports("capsules"):
            kinds.append("capsule")
        for kind in kinds:
            try:
                raw = await self._by_name(kind, name, ref)
            except BackendConflict:
                raw = None  # the name belongs to another pod uid: nothing of ours
            if raw is not None:
                self._observe(kind, raw)
                return self._index.get(ref.uid)
        return None

    async def delete(self, ref: PodRef, *, grace_seconds: int) -> None:
        self._pull_warnings.pop(ref.uid, None)
        entry = await self._find(ref)
        if entry is None:
            return
        if entry.kind == "capsule":
            try:
                await self.client.delete_capsule(entry.uuid)
                log.info("zun: deleting capsule %s of pod %s", entry.uuid, ref.key)
            except (BackendNotFound, BackendConflict):
                pass
            return
        await self._delete_container(entry.uuid, ref, max(0, int(grace_seconds)))

    async def _delete_container(self, uuid: str, ref: PodRef, grace: int) -> None:
        try:
            raw = await self.client.get_container(uuid)
        except BackendNotFound:
            self._index.pop(ref.uid, None)
            return
        status = str(raw.get("status") or "")
        if status in GONE_STATUSES:
            return
        if status in DELETABLE:
            await self._delete_now(uuid)
            return
        reaping = uuid in self._reapers and not self._reapers[uuid].done()
        if grace == 0:
            if await self._escalate(uuid, status):
                return
        elif status == "Running" and not reaping and raw.get("task_state") != "container_stopping":
            try:
                await self.client.stop_container(uuid, timeout=grace)
                log.info("zun: stopping %s of pod %s (grace %ss)", uuid, ref.key, grace)
            except BackendConflict:
                pass  # changed state meanwhile; the reaper sorts it out
        if not reaping:
            deadline = self.clock.monotonic() + grace + self.cfg.stop_slack
            self._reapers[uuid] = asyncio.create_task(
                self._reap(uuid, deadline), name=f"zun-reap-{uuid}"
            )

    async def _delete_now(self, uuid: str) -> bool:
        try:
            await self.client.delete_container(uuid)
        except BackendNotFound:
            return True
        except BackendConflict:
            return False
        log.info("zun: deleted container %s", uuid)
        return True

    async def _escalate(self, uuid: str, status: str) -> bool:
        """Delete a container that did not stop: force (admin) or stop-then-delete."""
        try:
            if self.cfg.force_delete:
                await self.client.delete_container(uuid, force=True)
            elif self.client.supports("delete_stop"):
                await self.client.delete_container(uuid, stop=True)
            else:
                await self.client.stop_container(uuid, timeout=0)
                return False
        except BackendNotFound:
            return True
        except (BackendConflict, BackendAuthError) as exc:
            log.info("zun: cannot delete %s in state %s yet: %s", uuid, status, exc)
            return False
        log.info("zun: deleted container %s (escalated from %s)", uuid, status)
        return True

    async def _reap(self, uuid: str, deadline: float) -> None:
        """Finish an asynchronous stop: delete once stopped, escalate after the deadline."""
        give_up = deadline + 30 * max(self.cfg.delete_poll_interval, 0.1)
        try:
            while self.clock.monotonic() < give_up:
                await self.clock.sleep(self.cfg.delete_poll_interval)
                try:
                    raw = await self.client.get_container(uuid)
                except BackendNotFound:
                    return
                except BackendError as exc:
                    log.info("zun: checking %s during delete: %s", uuid, exc)
                    continue
                status = str(raw.get("status") or "")
                if status in GONE_STATUSES:
                    return
                if status in DELETABLE and await self._delete_now(uuid):
                    return
                if self.clock.monotonic() >= deadline and await self._escalate(uuid, status):
                    return
            log.warning("zun: container %s still not deleted; the next reconcile retries", uuid)
        finally:
            self._reapers.pop(uuid, None)

    # -- logs / exec ---------------------------------------------------------------------

    async def _container_uuid(self, ref: PodRef, container: str) -> tuple[_Entry, str]:
        entry = await self._find(ref)
        if entry is None:
            raise BackendNotFound(f"pod {ref.key} has no Zun workload")
        uuid = entry.containers.get(container)
        if uuid is None:
            raise BackendNotFound(f"container {container!r} is not part of pod {ref.key}")
        return entry, uuid

    async def _alive(self, uuid: str) -> bool:
        try:
            raw = await self.client.get_container(uuid)
        except BackendNotFound:
            return False
        status = str(raw.get("status") or "")
        return status in RUNNING_STATUSES or status in PENDING_STATUSES

    async def logs(self, ref: PodRef, container: str, options: LogOptions) -> AsyncIterator[bytes]:
        entry, uuid = await self._container_uuid(ref, container)
        stream = zun_logs.read_logs(
            self.client,
            uuid,
            options,
            alive=lambda: self._alive(uuid),
            sleep=self.clock.sleep,
            poll_interval=self.cfg.log_poll_interval,
        )
        try:
            async for chunk in stream:
                yield chunk
        except BackendNotFound as exc:
            if entry.kind == "capsule":
                raise UnsupportedError(CAPSULE_NO_LOGS, reason="UnsupportedByBackend") from exc
            raise
        finally:
            await stream.aclose()

    async def exec(
        self, ref: PodRef, container: str, command: Sequence[str], *, tty: bool, stdin: bool
    ) -> ExecSession:
        entry, uuid = await self._container_uuid(ref, container)
        try:
            return await run_exec(
                self.client,
                uuid,
                command,
                tty=tty,
                stdin=stdin,
                interactive_allowed=self.cfg.interactive_exec,
                verify=self.verify,
            )
        except BackendNotFound as exc:
            if entry.kind == "capsule":
                raise UnsupportedError(CAPSULE_NO_LOGS, reason="UnsupportedByBackend") from exc
            raise
