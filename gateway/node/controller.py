"""The virtual Node: register it, keep its status true, heartbeat its Lease.

``start()`` (blocking until the Node is registered):

1. check the ``coordination.k8s.io/v1`` Lease API exists (missing → ``StartupError``; Go VK
   retries that forever);
2. ping the backend once (bounded by ``node.ping_timeout``) — a down backend does *not* abort
   startup, the Node registers ``Ready=False`` with reason ``BackendUnreachable``;
3. GET the Node; 404 → POST it with labels, taint and status; else PATCH only our labels / our
   taint (never delete + recreate, never drop others' labels or taints);
4. start three loops: Lease renewal, backend ping, status sync.

While the API server is unreachable, steps 1 and 3 retry with capped, jittered backoff and log
one line per attempt (1 s, 2 s, 4 s … 30 s apart, so at most two lines a minute); wrong
credentials or an invalid Node (401/403/422) fail startup with the server's message instead.

``Ready`` is ``True`` only while the backend answers its ping **and** the node's start-up gate
is open (gateway.inputs): until every input pod rendering reads has loaded, it is ``False`` with
reason ``InputsNotSynced`` and the gate's reason as its message, so no pod is bound to a node that
would render it wrongly (docs/design/startup.md).

The status loop wakes every ``min(10 s, node.status_interval)`` or at once when backend health
flips or the gate's reason changes, refreshes capacity/nodeInfo from the backend, GETs the Node (404 → recreate: someone
deleted it while we run) and PATCHes ``nodes/<name>/status`` only when something we own differs
from the server's object or ``node.status_interval`` has passed since the last write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from gateway.config import Settings
from gateway.errors import StartupError
from gateway.inputs import InputsGate
from gateway.kube.client import NO_RETRY, KubeClient
from gateway.kube.errors import (
    ApiError,
    ApiUnavailable,
    Conflict,
    Forbidden,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
)
from gateway.kube.events import EventRecorder, rfc3339
from gateway.node import conditions as cond
from gateway.node import spec
from gateway.node.health import BackendHealth, with_timeout
from gateway.node.lease import LeaseKeeper
from translators.base import Capacity, NodeInfo, Translator
from vkgate_core.backoff import Backoff
from vkgate_core.clock import Clock, SystemClock
from vkgate_core.kubetypes import Node, as_node

log = logging.getLogger("gateway.node")

T = TypeVar("T")
LEASE_API = "/apis/coordination.k8s.io/v1"
PATCH_TRIES = 5


class NodeController:
    def __init__(
        self,
        client: KubeClient,
        translator: Translator,
        settings: Settings,
        *,
        clock: Clock | None = None,
        events: EventRecorder | None = None,
        rng: random.Random | None = None,
        startup_backoff: Backoff | None = None,
        inputs: InputsGate | None = None,
    ) -> None:
        """``inputs``: the node's start-up gate; Ready waits for it (None: no gate)."""
        ns = settings.node
        self.client = client
        self.translator = translator
        self.settings = settings
        self.name = ns.name
        self.kind = settings.backend.kind
        self.clock: Clock = clock or SystemClock()
        self.events = events
        self._rng = rng or random.Random()
        self.startup_backoff = startup_backoff or Backoff(base=1.0, factor=2.0, cap=30.0)
        self.health = BackendHealth(
            translator.ping,
            kind=self.kind,
            interval=ns.ping_interval,
            timeout=ns.ping_timeout,
            failures_threshold=ns.ping_failures,
            clock=self.clock,
            on_change=self.wake,
        )
        self.lease = LeaseKeeper(
            client.lease_lane(),  # not behind the pods' bucket and connections
            self.name,
            duration=ns.lease_duration,
            renew_interval=ns.lease_renew_interval,
            clock=self.clock,
            rng=self._rng,
        )
        self.check_interval = min(10.0, ns.status_interval)
        self.boot_id = str(uuid.uuid4())
        #: The server's latest Node object (after our last read or write).
        self.node: Node | None = None
        self.status_writes = 0
        self._info = NodeInfo(hostname=self.name)
        self._info_loaded = False
        self._capacity: Capacity | None = None
        self._owned_resources: set[str] = set()
        self._last_write = float("-inf")
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._api_checked = False
        self.inputs = inputs
        if inputs is not None:
            inputs.subscribe(self.wake)

    # -- public state ------------------------------------------------------------------

    @property
    def path(self) -> str:
        return f"/api/v1/nodes/{self.name}"

    @property
    def uid(self) -> str:
        return str(((self.node or {}).get("metadata") or {}).get("uid") or "")

    @property
    def ready(self) -> bool:
        return self.health.healthy is True

    @property
    def internal_ip(self) -> str:
        """settings.node.internal_ip, else the backend's, else 127.0.0.1 — never empty."""
        return self.settings.node.internal_ip or self._info.internal_ip or "127.0.0.1"

    def wake(self) -> None:
        """Ask the status loop to recompute now (health flipped, capacity changed …)."""
        self._wake.set()

    # -- lifecycle ---------------------------------------------------------------------

    async def wait_for_api(self) -> None:
        """Step 1 alone (idempotent): the App runs it before leader election, so an unreachable
        API server is reported by the one backoff loop below."""
        if not self._api_checked:
            await self._startup_retry("check the Lease API", self._check_lease_api)
            self._api_checked = True

    async def start(self) -> None:
        await self.wait_for_api()
        await self.health.check_once()
        await self._refresh_backend()
        await self._startup_retry("register the node", self._register)
        if self.events is not None and self.node is not None:
            await self.events.record(
                self.node,
                type="Normal",
                reason="Starting",
                message=f"Starting vkgate {spec.vkgate_version()} ({self.kind} backend).",
            )
        self._tasks = [
            asyncio.create_task(self.lease.run(), name=f"lease:{self.name}"),
            asyncio.create_task(self.health.run(), name=f"ping:{self.name}"),
            asyncio.create_task(self._status_loop(), name=f"node-status:{self.name}"),
        ]

    async def stop(self) -> None:
        """Stop renewing and leave the Node (it goes NotReady/Unknown by itself), unless
        ``node.delete_on_shutdown``."""
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self.settings.node.delete_on_shutdown:
            for what, coro in (
                ("node", self.client.delete(self.path)),
                ("lease", self.lease.delete()),
            ):
                try:
                    await coro
                    log.info("deleted %s %s on shutdown", what, self.name)
                except NotFound:
                    pass
                except ApiError as exc:
                    log.warning("could not delete %s %s on shutdown: %s", what, self.name, exc)

    # -- startup -----------------------------------------------------------------------

    async def _startup_retry(self, what: str, fn: Callable[[], Awaitable[T]]) -> T:
        failures = 0
        while True:
            try:
                return await fn()
            except (ApiUnavailable, ServerError, TooManyRequests) as exc:
                failures += 1
                delay = self.startup_backoff.delay(failures, self._rng)
                if exc.retry_after is not None:
                    delay = max(delay, min(exc.retry_after, self.startup_backoff.cap))
                why = "unreachable" if isinstance(exc, ApiUnavailable) else "not ready"
                log.warning(
                    "cannot %s: API server %s %s (%s); attempt %d, retrying in %.0fs",
                    what,
                    self.client.server,
                    why,
                    exc,
                    failures,
                    delay,
                )
                await self.clock.sleep(delay)
            except (Unauthorized, Forbidden) as exc:
                raise StartupError(
                    f"cannot {what}: the API server refused our credentials ({exc}); "
                    "check kube.kubeconfig and the identity's RBAC"
                ) from exc
            except ApiError as exc:
                raise StartupError(f"cannot {what}: {exc}") from exc

    async def _check_lease_api(self) -> None:
        try:
            discovery = await self.client.get(LEASE_API, retry=NO_RETRY)
        except NotFound:
            discovery = {}
        names = {r.get("name") for r in discovery.get("resources") or []}
        if "leases" not in names:
            raise StartupError(
                f"the API server {self.client.server} does not serve coordination.k8s.io/v1 "
                "leases; vkgate heartbeats through Node Leases (Kubernetes >= 1.14 required)"
            )

    # -- backend data ------------------------------------------------------------------

    async def _refresh_backend(self) -> None:
        if self.health.healthy is False:
            return
        timeout = self.settings.node.ping_timeout
        try:
            self._capacity = await with_timeout(self.translator.capacity(), timeout, self.clock)
        except Exception as exc:
            log.debug("capacity from %s backend failed: %s", self.kind, exc)
        if not self._info_loaded:
            try:
                self._info = await with_timeout(self.translator.node_info(), timeout, self.clock)
                self._info_loaded = True
            except Exception as exc:
                log.debug("node_info from %s backend failed: %s", self.kind, exc)

    # -- desired state -----------------------------------------------------------------

    def _labels(self) -> dict[str, str]:
        node = self.settings.node
        return spec.node_labels(
            self.name,
            self.kind,
            self._info,
            node.labels,
            exclude_from_load_balancers=node.exclude_from_load_balancers,
        )

    def _taints(self) -> tuple[dict[str, str] | None, dict[str, str] | None]:
        """(our taint or None when disabled, the taint to remove when disabled)."""
        t = self.settings.node.taint
        key = t.key if t else "virtual-kubelet.io/provider"
        value = (t.value if t else "") or self.kind
        effect = t.effect if t else "NoSchedule"
        taint = spec.provider_taint(key, value, effect)
        if self.settings.node.disable_taint or t is None:
            return None, taint
        return taint, None

    def _facts(self) -> spec.NodeFacts:
        return spec.NodeFacts(
            name=self.name,
            backend_kind=self.kind,
            kubelet_port=self.settings.kubelet.port,
            internal_ip=self.internal_ip,
            hostname=self._info.hostname or self.name,
            info=self._info,
            boot_id=self.boot_id,
            capacity=spec.capacity_map(self._capacity, self.settings.node.capacity),
        )

    def _conditions(self) -> list[cond.Condition]:
        if self.health.healthy is None:
            return cond.desired_conditions(
                ready=False,
                backend_kind=self.kind,
                not_ready_message=f"{self.kind} backend health not checked yet",
            )
        waiting = self.inputs.reason() if self.inputs is not None else None
        if self.health.healthy and waiting is not None:
            return cond.desired_conditions(
                ready=False,
                backend_kind=self.kind,
                not_ready_reason=cond.REASON_INPUTS_NOT_SYNCED,
                not_ready_message=waiting,
            )
        return cond.desired_conditions(
            ready=self.health.healthy,
            backend_kind=self.kind,
            not_ready_reason=self.health.reason,
            not_ready_message=self.health.message,
        )

    # -- registration ------------------------------------------------------------------

    def _set_node(self, node: Node) -> None:
        before = self.uid
        self.node = node
        if self.uid and self.uid != before:
            self.lease.set_owner(self.uid)

    async def _register(self) -> None:
        try:
            node = as_node(await self.client.get(self.path))
        except NotFound:
            created = await self._create()
            if created is not None:
                self._set_node(created)
                self._last_write = self.clock.monotonic()
                self._owned_resources = set(self._facts().capacity)
                log.info("registered node %s (uid %s)", self.name, self.uid)
                await self._sync_status()  # writes only if the server dropped some status
                return
            node = as_node(await self.client.get(self.path))  # created concurrently
        node = await self._patch_metadata(node)
        self._set_node(node)
        log.info("node %s exists (uid %s): updated it in place", self.name, self.uid)
        await self._sync_status(force=True)

    async def _create(self) -> Node | None:
        facts = self._facts()
        status = facts.status()
        now = rfc3339(self.clock.now())
        status["conditions"] = cond.with_times(self._conditions(), [], now)
        body = spec.new_node(self.name, self._labels(), self._taints()[0], status)
        try:
            return as_node(await self.client.create("/api/v1/nodes", body))
        except Conflict:
            return None

    async def _patch_metadata(self, node: Node) -> Node:
        ours, remove = self._taints()
        labels = self._labels()
        allow_taints = True
        for _ in range(PATCH_TRIES):
            if allow_taints:
                patch = spec.metadata_patch(node, labels, ours, remove=remove)
            else:
                patch = spec.metadata_patch(node, labels, None)
            if patch is None:
                return node
            try:
                return as_node(await self.client.patch(self.path, patch))
            except Conflict:
                node = as_node(await self.client.get(self.path))
            except Forbidden as exc:
                if "spec" not in patch:
                    raise
                # NodeRestriction forbids a node to change its own taints after creation.
                log.warning("cannot update taints of existing node %s: %s", self.name, exc)
                allow_taints = False
        raise Conflict(f"node {self.name} kept changing; gave up after {PATCH_TRIES} tries")

    # -- status ------------------------------------------------------------------------

    async def _status_loop(self) -> None:
        failures = 0
        while True:
            sleeper = asyncio.ensure_future(self.clock.sleep(self.check_interval))
            waiter = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                waiter.cancel()
            self._wake.clear()
            try:
                await self._refresh_backend()
                await self._sync_status()
                failures = 0
            except Exception as exc:  # never let the status loop die
                if not isinstance(exc, ApiError):
                    log.exception("unexpected error syncing node %s status", self.name)
                failures += 1
                delay = min(self.startup_backoff.delay(failures, self._rng), self.check_interval)
                log.warning(
                    "node %s status sync failed (%s); retry in %.1fs", self.name, exc, delay
                )
                await self.clock.sleep(delay)

    async def _sync_status(self, *, force: bool = False) -> bool:
        """Write status if anything we own differs (or it is due).  Returns True if written."""
        try:
            node = as_node(await self.client.get(self.path))
        except NotFound:
            log.warning("node %s was deleted while running; registering it again", self.name)
            self.node = None
            await self._register()
            return True
        self._set_node(node)
        current = node.get("status") or {}
        desired = self._facts().status()
        wanted = self._conditions()
        stale = self._owned_resources - set(desired["capacity"])
        due = self.clock.monotonic() - self._last_write >= self.settings.node.status_interval
        changed = cond.differs(wanted, current.get("conditions") or []) or spec.status_differs(
            desired, current, stale
        )
        if not (force or due or changed):
            return False
        log.debug(
            "writing node %s status (%s)",
            self.name,
            "changed" if changed else "forced" if force else "status_interval passed",
        )
        now = rfc3339(self.clock.now())
        timed = cond.with_times(wanted, current.get("conditions") or [], now)
        patch = spec.status_patch(desired, timed, stale)
        result = as_node(await self.client.patch(self.path + "/status", patch))
        self._set_node(result)
        self._last_write = self.clock.monotonic()
        self._owned_resources = set(desired["capacity"])
        self.status_writes += 1
        await self._ready_event(current.get("conditions") or [], timed)
        return True

    async def _ready_event(self, before: list[dict[str, Any]], after: list[dict[str, Any]]) -> None:
        old = next((c.get("status") for c in before if c.get("type") == cond.READY), None)
        new = next((c for c in after if c["type"] == cond.READY), None)
        if new is None or old == new["status"] or old is None:
            return
        log.info(
            "node %s Ready=%s (%s: %s)", self.name, new["status"], new["reason"], new["message"]
        )
        if self.events is not None and self.node is not None:
            ready = new["status"] == "True"
            await self.events.record(
                self.node,
                type="Normal" if ready else "Warning",
                reason="NodeReady" if ready else "NodeNotReady",
                message=f"Node {self.name} status is now: {'NodeReady' if ready else 'NodeNotReady'}"
                + ("" if ready else f" ({new['message']})"),
            )
