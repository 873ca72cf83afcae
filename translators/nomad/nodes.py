"""The node side of the Nomad translator: capacity, node info and the MHz factor, read from Nomad.

Internal to the package: ``NomadTranslator`` holds one ``Nodes`` and answers ``capacity()``,
``node_info()`` and ``mhz_per_core()`` through it.  The arithmetic (which clients count, what an
allocation holds, what is free) is ``capacity.py``'s, pure; this module owns the requests and
what is kept between them:

* ``/v1/nodes?resources=true`` (``read``), which also gives each client's address (a pod's
  ``hostIP``: ``ips``), its Nomad version (for ``metrics.py``) and the MHz-per-core factor;
* what the allocations of other jobs hold on the eligible clients (``held``): a one-stub probe
  of the allocation table, and the list of every namespace's allocations only when the probe
  shows a change (``HeldList``; docs/design/nomad.md, "Capacity").
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from translators.base import BackendAuthError, BackendError, Capacity, NodeInfo
from translators.nomad import capacity as cap
from translators.nomad.client import NomadClient
from translators.nomad.config import NomadConfig
from translators.nomad.metrics import NomadMetrics
from translators.nomad.views import JobBook
from vkgate_core.clock import Clock

log = logging.getLogger(__name__)

JSON = dict[str, Any]
#: Lists the scopes not listed yet, so the job book knows this node's own jobs.
ListOwn = Callable[[], Awaitable[None]]

#: Up to this many eligible clients, the capacity's allocation list is filtered to them by
#: Nomad; beyond, the filter would only grow the URL (the client side filters anyway).
MAX_NODE_CLAUSES = 32

#: While this node's own jobs change (a burst of its pods), seconds a list of the other jobs'
#: allocations is used before the next (docs/design/nomad.md, "Capacity"): each of its own
#: allocations moves the allocation index, and each list is every other job's allocation on
#: the eligible clients.
HELD_MAX_AGE = 60.0


@dataclasses.dataclass(frozen=True)
class HeldList:
    """An answer of the other-jobs allocation list and what it was asked under."""

    index: int  # the allocation table's X-Nomad-Index
    clients: tuple[str, ...]  # the eligible client IDs
    at: float  # when it was listed (the translator's monotonic clock)
    ours: frozenset[tuple[str, str]]  # (namespace, job ID) of this node's own jobs then
    #: (namespace, job ID, NodeID, what it holds) of each allocation of a job that was not
    #: this node's when listed
    others: tuple[tuple[str, str, str, cap.Held], ...]

    def held(self, ours: frozenset[tuple[str, str]]) -> dict[str, cap.Held]:
        """NodeID → what the listed allocations hold, leaving out jobs that are this node's
        now (one registered while the list was answered is not another job's)."""
        return cap.per_node(
            (node, held)
            for namespace, job, node, held in self.others
            if (namespace, job) not in ours
        )


class Nodes:
    """The client nodes as the translator last read them, and the other jobs' holdings."""

    def __init__(
        self,
        client: NomadClient,
        config: NomadConfig,
        *,
        clock: Clock,
        metrics: NomadMetrics,
        book: JobBook,
    ) -> None:
        self.client = client
        self.config = config
        #: The monotonic clock of ``HeldList.at`` and ``own_jobs_changed``.
        self.clock = clock
        self.metrics = metrics
        self.book = book
        #: NodeID → the client's address (a pod's hostIP; ``status.workload_state``).
        self.ips: dict[str, str] = {}
        #: The measured MHz per core (None: not read yet).
        self.factor: float | None = None
        #: The last other-jobs allocation list: reused while a one-stub probe shows the same
        #: allocation index (``held``).
        self.held_last: HeldList | None = None
        #: when an event last changed one of this node's jobs or allocations (``held``)
        self.own_changed_at = float("-inf")

    async def read(self) -> list[JSON]:
        """``/v1/nodes?resources=true``: the clients, remembering their addresses, versions and
        the MHz factor."""
        nodes = await self.client.get("/nodes", params={"resources": True}, namespace="")
        nodes = list(nodes or [])
        self.ips.update(cap.node_addresses(nodes))
        self.metrics.node_versions.update(
            {str(n["ID"]): str(n.get("Version") or "") for n in nodes if n.get("ID")}
        )
        self.factor = cap.mhz_per_core(nodes, self.config)
        return nodes

    def own_jobs_changed(self) -> None:
        """An event changed one of this node's jobs or allocations (``held``)."""
        self.own_changed_at = self.clock.monotonic()

    async def capacity(self, *, list_own: ListOwn) -> Capacity:
        """Free capacity of the eligible clients (``capacity.py``): ``/v1/nodes?resources=true``
        and what other jobs hold (``held``: a one-stub probe, and the allocation list of
        every namespace only when the probe shows a change)."""
        nodes = await self.read()
        return cap.capacity(nodes, self.config, held=await self.held(nodes, list_own=list_own))

    async def held(self, nodes: Sequence[JSON], *, list_own: ListOwn) -> dict[str, cap.Held]:
        """NodeID → what the allocations of jobs this node does not own hold on the eligible
        clients: ``GET /v1/allocations?namespace=*&resources=true`` with the non-terminal
        filter (one request; per-node ``/v1/node/:id/allocations`` would be one request per
        client, each returning whole allocations with their jobs).  Own jobs are those in the
        job book, so the first call lists the scopes if no listing has yet (``list_own``).

        The list is what the node's status loop costs at rest (5,000 allocations decoded every
        10 s), so a probe of one stub (``per_page=1``) comes first: its ``X-Nomad-Index`` is
        the allocation table's, and while it and the eligible clients are those of the last
        list, that list's answer still holds.  While this node's own jobs or their allocations
        change (its job book, or an event on one of them since the list), a list younger than
        ``HELD_MAX_AGE`` holds without a probe: each own allocation moves the index, so in a
        burst of its pods the probe would call for a list every time.  Own jobs are left out of
        the answer when it is used, so one registered while the list was answered is not
        counted as another's (docs/design/nomad.md, "Capacity")."""
        ids = tuple(
            sorted(str(n["ID"]) for n in nodes if n.get("ID") and cap.eligible(n, self.config))
        )
        if not ids:
            return {}
        await list_own()
        ours = frozenset((k[1], k[2]) for k in self.book.views)
        last = self.held_last
        now = self.clock.monotonic()
        try:
            if last is not None and last.clients == ids:
                busy = last.ours != ours or self.own_changed_at >= last.at
                if busy and now - last.at < HELD_MAX_AGE:
                    return last.held(ours)
                probe = await self.client.call(
                    "GET",
                    "/allocations",
                    params={"per_page": 1, "task_states": False},
                    namespace="*",
                )
                if probe.index and probe.index == last.index:
                    return last.held(ours)
            where = cap.HELD_FILTER
            if len(ids) <= MAX_NODE_CLAUSES:
                where += " and (" + " or ".join(f'NodeID == "{i}"' for i in ids) + ")"
            reply = await self.client.call(
                "GET",
                "/allocations",
                params={"resources": True, "task_states": False, "filter": where},
                namespace="*",
            )
        except BackendAuthError as exc:
            log.warning("nomad: other jobs' allocations unreadable, not subtracted: %s", exc)
            return {}
        eligible = set(ids)
        others: list[tuple[str, str, str, cap.Held]] = []
        for a in reply.data or []:
            node = str(a.get("NodeID") or "")
            key = (str(a.get("Namespace") or "default"), str(a.get("JobID")))
            if node in eligible and key not in ours and cap.holds_resources(a):
                others.append((*key, node, cap.held_by(a)))
        self.held_last = HeldList(reply.index, ids, now, ours, tuple(others))
        return self.held_last.held(ours)

    async def node_info(self) -> NodeInfo:
        nodes = await self.read()
        detail = None
        chosen = next((n for n in nodes if cap.eligible(n, self.config)), None)
        if chosen is not None:
            with contextlib.suppress(BackendError):
                detail = await self.client.get(f"/node/{chosen['ID']}", namespace="")
        return cap.node_info(nodes, detail, self.config)

    async def mhz_per_core(self) -> float:
        if self.config.mhz_per_core > 0:
            return self.config.mhz_per_core
        if self.factor is None:
            await self.read()
        return self.factor or cap.DEFAULT_MHZ_PER_CORE

    def offline_mhz_per_core(self) -> float:
        """The factor without a request (offline rendering): the setting, else the last
        measured value, else 1000 MHz per core."""
        return self.config.mhz_per_core or self.factor or cap.DEFAULT_MHZ_PER_CORE
