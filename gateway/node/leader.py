"""Who drives a virtual node: leader election on the Lease ``kube-node-lease/vkgate-leader-<node>``.

Two instances configured with the same node name would otherwise both write the Node, its
heartbeat Lease, pod status and backend workloads.  Every instance therefore holds (or waits
for) one Lease per virtual node before it starts anything that writes (docs/design/ha.md):

* ``ha.enabled = true``: a standby polls every ``ha.retry_period`` and takes over once the
  holder has not renewed for ``ha.lease_duration`` — judged by *our* clock from the moment we
  last saw the record change (as client-go does), so the two hosts' clocks need not agree.
* ``ha.enabled = false``: a second instance refuses to start and names the holder.

Fencing: the leader renews every ``ha.retry_period``; ``still_leader()`` is true only while the
last successful renewal is younger than ``ha.renew_deadline`` (< ``lease_duration``), measured on
the monotonic clock.  ``KubeClient.fence`` consults it before every write, so a leader that was
paused, partitioned or lost the Lease stops writing *before* a standby may take over — and a
process that resumes after a long pause (its monotonic clock jumped) refuses its first write.
Losing leadership ends the process (``on_lost``); the Deployment restarts it as a standby.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.config import HaSettings
from gateway.errors import StartupError
from gateway.kube.client import NO_RETRY, KubeClient
from gateway.kube.errors import ApiError, Conflict, Forbidden, NotFound
from gateway.node.lease import micro_time
from vkgate_core.clock import Clock, SystemClock

log = logging.getLogger("gateway.node.leader")

NAMESPACE = "kube-node-lease"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"


def default_identity() -> str:
    """``$POD_NAME`` (or the hostname) plus a random suffix: a restarted process is a new
    candidate, never mistaken for the leader it replaced."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Holder:
    identity: str
    renewed: str
    transitions: int


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        settings: HaSettings,
        *,
        clock: Clock | None = None,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.settings = settings
        self.identity = settings.identity or default_identity()
        self.clock: Clock = clock or SystemClock()
        self.on_lost = on_lost
        self.name = f"vkgate-leader-{node_name}"
        self.path = f"{LEASES}/{self.name}"
        self.lease: dict[str, Any] | None = None
        #: Monotonic time of our last successful acquire/renew (None: not leading).
        self.renewed_at: float | None = None
        #: Renewals that failed (metrics: vkgate_lease_renew_failures_total).
        self.renew_failures = 0
        # What we last saw of someone else's record, and when (our clock).
        self._observed: tuple[str, str] | None = None
        self._observed_at = 0.0
        self._task: asyncio.Task[None] | None = None
        #: The other instance we last saw leading ("" when none or unknown).
        self.observed_holder = ""
        #: True when the identity may not use the leader Lease (``system:node:<name>`` under
        #: NodeRestriction may touch only the Lease named after its node): no election, no fence.
        self.unavailable = False

    # -- fencing -----------------------------------------------------------------------

    def still_leader(self) -> bool:
        return self.unavailable or (
            self.renewed_at is not None
            and self.clock.monotonic() - self.renewed_at < self.settings.renew_deadline
        )

    def fence(self, method: str, path: str) -> str | None:
        """For ``KubeClient.fence``: refuse writes unless leading (our own Lease excepted)."""
        if path in (self.path, LEASES) or self.still_leader():
            return None
        return f"{self.identity} is not the leader of node {self.node_name}"

    # -- one round ---------------------------------------------------------------------

    def _holder(self, lease: dict[str, Any]) -> Holder:
        spec = lease.get("spec") or {}
        return Holder(
            str(spec.get("holderIdentity") or ""),
            str(spec.get("renewTime") or ""),
            int(spec.get("leaseTransitions") or 0),
        )

    def _body(self, base: dict[str, Any] | None, *, transitions: int, acquire: bool) -> Any:
        now = micro_time(self.clock.now())
        lease: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": dict((base or {}).get("metadata") or {"name": self.name}),
        }
        spec = dict((base or {}).get("spec") or {})
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=max(1, round(self.settings.lease_duration)),
            renewTime=now,
            leaseTransitions=transitions,
        )
        if acquire:
            spec["acquireTime"] = now
        lease["spec"] = spec
        return lease

    async def try_acquire_or_renew(self) -> Holder | None:
        """One round: None when we lead now, else the current holder (someone else)."""
        start = self.clock.monotonic()
        try:
            current = await self.client.get(self.path, retry=NO_RETRY)
        except NotFound:
            try:
                body = self._body(None, transitions=0, acquire=True)
                self.lease = await self.client.create(LEASES, body)
            except Conflict:
                return Holder("(someone, concurrently)", "", 0)
            self.renewed_at = start
            return None
        holder = self._holder(current)
        if holder.identity != self.identity:
            record = (holder.identity, holder.renewed)
            if record != self._observed:
                self._observed, self._observed_at = record, start
            valid = self.clock.monotonic() - self._observed_at < self.settings.lease_duration
            if holder.identity and valid:
                return holder
            transitions, acquire = holder.transitions + 1, True
        else:
            transitions, acquire = holder.transitions, False
        try:
            self.lease = await self.client.replace(
                self.path, self._body(current, transitions=transitions, acquire=acquire)
            )
        except Conflict:
            return Holder("(someone, concurrently)", "", holder.transitions)
        if acquire:
            log.info(
                "node %s: %s became leader (previous holder %s)",
                self.node_name,
                self.identity,
                holder.identity or "none",
            )
        self.renewed_at = start
        return None

    # -- lifecycle ---------------------------------------------------------------------

    def _node_identity(self) -> str:
        """``system:node:<name>`` when the client authenticates with such a certificate."""
        cert_file = self.client.config.cert_file
        if not cert_file:
            return ""
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        try:
            with open(cert_file, "rb") as fh:
                cert = x509.load_pem_x509_certificate(fh.read())
        except (OSError, ValueError):
            return ""
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        cn = str(names[0].value) if names else ""
        return cn if cn.startswith("system:node:") else ""

    def _without_election(self, why: str) -> None:
        if self.settings.enabled:
            raise StartupError(
                f"ha.enabled = true but this identity may not use the leader Lease "
                f"{NAMESPACE}/{self.name}: {why}"
            )
        log.warning(
            "node %s: no leader election (%s); make sure only one instance drives this node",
            self.node_name,
            why,
        )
        self.unavailable = True

    async def acquire(self) -> None:
        """Return once we lead.  Without HA, raise ``StartupError`` naming the holder."""
        node_user = self._node_identity()
        if node_user:
            # NodeRestriction lets a node touch only the Lease named after it.
            self._without_election(
                f"{node_user} may use only the Lease {NAMESPACE}/{self.node_name}"
            )
            return
        waiting_logged = False
        first: tuple[str, str] | None = None
        while True:
            try:
                holder = await self.try_acquire_or_renew()
            except Forbidden as exc:
                self._without_election(exc.message)
                return
            except ApiError as exc:
                log.warning("node %s: leader Lease %s: %s", self.node_name, self.path, exc)
                self.observed_holder = ""
                await self.clock.sleep(self.settings.retry_period)
                continue
            if holder is None:
                self.observed_holder = ""
                return
            self.observed_holder = holder.identity
            record = (holder.identity, holder.renewed)
            if not self.settings.enabled and first is None:
                # A holder that crashed stops renewing: after lease_duration we take over.
                # One that renews while we watch is alive: refuse, naming it.
                first = record
                log.warning(
                    "node %s: Lease %s/%s is held by %s; waiting up to %.0fs to see if it is alive",
                    self.node_name,
                    NAMESPACE,
                    self.name,
                    holder.identity,
                    self.settings.lease_duration,
                )
            elif not self.settings.enabled and record != first:
                raise StartupError(
                    f"node {self.node_name} is already driven by {holder.identity} "
                    f"(Lease {NAMESPACE}/{self.name}, renewed {holder.renewed}); stop that "
                    "instance, pick another node.name, or set ha.enabled = true to stand by"
                )
            elif self.settings.enabled and not waiting_logged:
                log.info(
                    "node %s: standing by; %s leads (Lease %s/%s)",
                    self.node_name,
                    holder.identity,
                    NAMESPACE,
                    self.name,
                )
                waiting_logged = True
            await self.clock.sleep(self.settings.retry_period)

    async def run(self) -> None:
        """Renew every ``retry_period``; on loss (renew deadline passed or someone else holds
        the Lease) stop leading and call ``on_lost`` once."""
        while True:
            await self.clock.sleep(self.settings.retry_period)
            reason = ""
            try:
                holder = await self.try_acquire_or_renew()
                if holder is not None:
                    reason = f"Lease {NAMESPACE}/{self.name} is held by {holder.identity}"
            except ApiError as exc:
                self.renew_failures += 1
                log.warning("node %s: renewing the leader Lease failed: %s", self.node_name, exc)
                if not self.still_leader():
                    reason = f"could not renew the leader Lease for {self.settings.renew_deadline}s"
            if not reason and not self.still_leader():
                reason = "the renew deadline passed (was this process paused?)"
            if reason:
                self.renewed_at = None
                log.error("node %s: %s lost leadership: %s", self.node_name, self.identity, reason)
                if self.on_lost is not None:
                    self.on_lost(reason)
                return

    def start(self) -> None:
        if self.unavailable:
            return
        self._task = asyncio.create_task(self.run(), name=f"leader:{self.node_name}")

    async def stop(self, *, release: bool = True) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if release and not self.unavailable and self.still_leader() and self.lease is not None:
            # Hand over at once: an empty holder lets a standby acquire without waiting.
            body = dict(self.lease)
            body["spec"] = dict(body.get("spec") or {}, holderIdentity="")
            try:
                await self.client.replace(self.path, body)
            except ApiError as exc:
                log.info("node %s: could not release the leader Lease: %s", self.node_name, exc)
        self.renewed_at = None
