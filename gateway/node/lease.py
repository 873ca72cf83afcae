"""The node heartbeat: ``coordination.k8s.io/v1`` Lease ``kube-node-lease/<node>``.

Renewed every ``renew_interval`` (10 s = 0.25 x the 40 s duration, as the kubelet does) from the
copy we last wrote, so a healthy renewal costs one PUT.  409 → re-GET and retry (at most 5 tries
per renewal); 404 → create.  Failures back off with jitter (0.2 s doubling to 7 s, like the
kubelet) so a blip is retried well inside the 40 s the controller-manager waits.

The Lease is owned by the Node (``ownerReferences`` with the Node's uid) so it is garbage
collected with it; when the Node is recreated the controller calls ``set_owner`` with the new uid
and the next renewal fixes the reference.  Backend health does not stop renewal: a node whose
backend is down is ``Ready=False`` with a reason, not silently ``Unknown``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import random
from typing import Any

from gateway.kube.client import KubeClient
from gateway.kube.errors import ApiError, Conflict, NotFound
from vkgate_core.backoff import Backoff
from vkgate_core.clock import Clock, SystemClock

log = logging.getLogger("gateway.node.lease")

NAMESPACE = "kube-node-lease"
MAX_TRIES = 5


def micro_time(t: _dt.datetime) -> str:
    """MicroTime: ``2026-03-01T10:00:00.000000Z``."""
    return t.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseKeeper:
    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        *,
        duration: int = 40,
        renew_interval: float = 10.0,
        clock: Clock | None = None,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.duration = duration
        self.renew_interval = renew_interval
        self.clock: Clock = clock or SystemClock()
        self.backoff = backoff or Backoff(base=0.2, factor=2.0, cap=7.0, jitter=0.2)
        self._rng = rng or random.Random()
        self.owner_uid = ""
        self.lease: dict[str, Any] | None = None
        self.renewals = 0
        self.failures = 0
        #: Failed renewals since start (metrics: vkgate_lease_renew_failures_total).
        self.renew_failures = 0

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{self.node_name}"

    def set_owner(self, uid: str) -> None:
        self.owner_uid = uid

    def _owner_refs(self) -> list[dict[str, Any]]:
        if not self.owner_uid:
            return []
        return [{"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": self.owner_uid}]

    def _desired(self, base: dict[str, Any] | None) -> dict[str, Any]:
        lease: dict[str, Any] = dict(base or {})
        lease["apiVersion"] = "coordination.k8s.io/v1"
        lease["kind"] = "Lease"
        meta = dict(lease.get("metadata") or {})
        meta.setdefault("name", self.node_name)
        meta.setdefault("namespace", NAMESPACE)
        refs = self._owner_refs()
        if refs:
            others = [r for r in meta.get("ownerReferences") or [] if r.get("kind") != "Node"]
            meta["ownerReferences"] = refs + others
        lease["metadata"] = meta
        spec = dict(lease.get("spec") or {})
        spec["holderIdentity"] = self.node_name
        spec["leaseDurationSeconds"] = self.duration
        spec["renewTime"] = micro_time(self.clock.now())
        lease["spec"] = spec
        return lease

    async def renew_once(self) -> dict[str, Any]:
        """One renewal (create if missing); raises ApiError after ``MAX_TRIES`` conflicts."""
        base = self.lease
        last: ApiError | None = None
        for _ in range(MAX_TRIES):
            try:
                if base is None:
                    base = await self.client.get(self.path)
                result = await self.client.replace(self.path, self._desired(base))
            except NotFound:
                body = self._desired(None)
                body["metadata"].pop("resourceVersion", None)
                try:
                    result = await self.client.create(
                        f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases", body
                    )
                except Conflict as exc:  # created concurrently: read it and update
                    last, base = exc, None
                    continue
            except Conflict as exc:
                last, base = exc, None
                continue
            self.lease = result
            self.renewals += 1
            return result
        self.lease = None
        assert last is not None
        raise last

    async def run(self) -> None:
        """Renew forever (until cancelled); errors back off with jitter, never stop the loop."""
        while True:
            try:
                await self.renew_once()
                self.failures = 0
                delay = self.renew_interval
            except Exception as exc:  # never let the heartbeat die
                if not isinstance(exc, ApiError):
                    log.exception("unexpected error renewing lease %s", self.node_name)
                self.failures += 1
                self.renew_failures += 1
                self.lease = None  # re-read before the next try
                delay = min(self.backoff.delay(self.failures, self._rng), self.renew_interval)
                level = (
                    logging.WARNING
                    if self.failures in (1, 3) or self.failures % 10 == 0
                    else logging.DEBUG
                )
                log.log(
                    level,
                    "lease %s/%s renewal failed (%s); retry %d in %.1fs",
                    NAMESPACE,
                    self.node_name,
                    exc,
                    self.failures,
                    delay,
                )
            await self.clock.sleep(delay)

    async def delete(self) -> None:
        with contextlib.suppress(NotFound):
            await self.client.delete(self.path)
