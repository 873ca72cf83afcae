"""The agent: build the components from settings, start them in order, stop them in reverse.

    App(settings)
      .kube        KubeClient           (gateway.kube; one for every node: one connection pool)
      .units       one NodeUnit per virtual node (gateway.nodeunit; ``settings.units()``)
      .templates   TemplatesSource      (live templates from ConfigMaps; one per process)
      .teams       NamespaceTeams       (namespace team labels, list + watch; one per process)
      .metrics     the process's Metrics (one node: that node's; several: merged, ``node`` label)

With one node (no ``[[nodes]]``) ``app.translator``, ``.events``, ``.leader``, ``.node``,
``.pods`` and ``.kubelet`` are that unit's, as before.  ``start()`` starts every unit's events
recorder and translator, the plain-HTTP metrics/probe server, waits for the API server, acquires
every node's leader Lease, starts the process-wide inputs (templates source, namespace team
labels: they load in the background), then starts each unit (its start-up gate, its Node —
blocking until registered, retrying while the API server is unreachable — its pod controller
and kubelet server); ``stop()`` goes in reverse.  No pod of any node is synced before every
input of that node's gate has loaded: the start-up order and the gate are in
docs/design/startup.md.  What is shared and what is per node: docs/design/multinode.md.

``run_forever(settings)`` is what ``vkgate run`` calls: logging, SIGTERM/SIGINT → clean stop
(stop renewing, leave the Node unless ``node.delete_on_shutdown``), exit code 0; a
``StartupError`` (bad credentials, missing translator, no Lease API) → one error line, exit 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import signal
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from gateway.config import Settings
from gateway.errors import StartupError
from gateway.inputs import NamespaceTeams, TeamRule
from gateway.kube.client import KubeClient
from gateway.kubelet.api import MetricsServer
from gateway.logging_setup import NODE, setup_logging
from gateway.metrics import Metrics, NodeMetrics
from gateway.node.leader import LEASES, LeaderElector, default_identity
from gateway.nodeunit import Component, NodeUnit, load_translator
from translators.base import Translator
from vkgate_core.clock import Clock, SystemClock

if TYPE_CHECKING:
    from gateway.kube.events import EventRecorder
    from gateway.kubelet.service import KubeletServer
    from gateway.node.controller import NodeController
    from gateway.pods.controller import PodController
    from gateway.templating.source import TemplatesSource

__all__ = ["App", "load_translator", "run_forever"]

log = logging.getLogger("gateway.app")


class App:
    def __init__(
        self,
        settings: Settings,
        *,
        kube: KubeClient | None = None,
        translator: Translator | None = None,
        translators: Mapping[str, Translator] | None = None,
        clock: Clock | None = None,
    ) -> None:
        """``translator``: the one node's backend (tests); ``translators``: by node name."""
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.kube = kube or KubeClient.from_settings(settings.kube, clock=self.clock)
        from gateway.templating.source import TemplatesSource, renderer_from_settings

        nodes = settings.units()
        single = not settings.nodes
        kinds = list(dict.fromkeys(n.backend.kind for n in nodes))
        #: The template renderer every translator uses (ConfigMap templates land in its overlay).
        self.renderer = renderer_from_settings(settings.templates, kinds=kinds)
        given = dict(translators or {})
        #: The leader-election identity of every node: one candidate per process.
        identity = settings.ha.identity or default_identity()
        if translator is not None:
            given.setdefault(nodes[0].node.name, translator)
        #: Live templates from ConfigMaps (templates.configmap_namespace), when configured;
        #: candidates are validated against the first node's backend (its events recorder is
        #: set below, once the units exist).
        self.templates: TemplatesSource | None = None
        if settings.templates.configmap_namespace:
            self.templates = TemplatesSource.from_settings(
                self.kube,
                self.renderer,
                settings.templates,
                backend=nodes[0].backend.kind,
                backend_settings=nodes[0].backend.table(),
                clock=self.clock,
            )
        #: The namespace team labels (templates.namespace_labels), shared by every node.
        self.teams: NamespaceTeams | None = None
        if settings.templates.namespace_labels:
            self.teams = NamespaceTeams(
                self.kube, clock=self.clock, rule=TeamRule.namespaces(settings.templates)
            )
        #: The process-wide inputs of every node's start-up gate (gateway.inputs).
        shared = tuple(c.input for c in (self.templates, self.teams) if c is not None)
        #: One unit per virtual node, all on ``self.kube``.  The plain-HTTP metrics/probe
        #: endpoint is one per process: the one node's kubelet server serves it (as before
        #: ``[[nodes]]`` existed); with several nodes the App does, for all of them.
        self.units: list[NodeUnit] = [
            NodeUnit(
                n if single else _one_of_several(n, identity),
                kube=self.kube,
                clock=self.clock,
                renderer=self.renderer,
                translator=given.get(n.node.name),
                on_lost=self._lost,
                ready=self.readiness,
                process_metrics=single,
                count_api=single,
                inputs=shared,
                teams=self.teams,
            )
            for n in nodes
        ]
        first = self.units[0]
        #: What ``/metrics`` serves: the one node's registry, or every node's merged.
        self.metrics: Metrics | NodeMetrics = (
            first.metrics if single else NodeMetrics({u.name: u.metrics for u in self.units})
        )
        if isinstance(self.metrics, NodeMetrics):
            self._count_api(self.metrics)
        self._count_teams()
        if self.templates is not None:
            self.templates.events = first.events
        # Every write through ``kube`` is fenced on the leader Lease of every node.
        self.kube.fence = self._fence
        self._metrics_server: MetricsServer | None = None
        address = settings.kubelet.metrics_address
        if not single and address and any(n.kubelet.enabled for n in nodes):
            self._metrics_server = MetricsServer(self.metrics, address, ready=self.readiness)
        #: Exit status of ``run_forever``: 1 when leadership was lost.
        self.exit_code = 0
        self._stop = asyncio.Event()
        self._started: list[Any] = []

    # The single-node view (and tests): the first unit's components.
    @property
    def translator(self) -> Translator:
        return self.units[0].translator

    @property
    def events(self) -> EventRecorder:
        return self.units[0].events

    @property
    def leader(self) -> LeaderElector:
        return self.units[0].leader

    @property
    def node(self) -> NodeController:
        return self.units[0].node

    @property
    def pods(self) -> PodController:
        return self.units[0].pods

    @pods.setter
    def pods(self, value: PodController) -> None:
        self.units[0].pods = value

    @property
    def kubelet(self) -> KubeletServer | None:
        return self.units[0].kubelet

    @kubelet.setter
    def kubelet(self, value: KubeletServer | None) -> None:
        self.units[0].kubelet = value

    @property
    def metrics_port(self) -> int | None:
        """The plain-HTTP metrics/probe port once started (None: not served)."""
        if self._metrics_server is not None:
            return self._metrics_server.port
        return self.kubelet.metrics_port if self.kubelet is not None else None

    async def _start_metrics(self) -> None:
        if self._metrics_server is not None:
            await self._metrics_server.start()
        elif self.kubelet is not None:
            await self.kubelet.start_metrics()

    async def _stop_metrics(self) -> None:
        if self._metrics_server is not None:
            await self._metrics_server.stop()
        elif self.kubelet is not None:
            await self.kubelet.stop_metrics()

    def _count_api(self, metrics: NodeMetrics) -> None:
        """Process-wide: the shared client's writes, and how many API clients (connection
        pools, rate limiters) the nodes use — one, by construction; the e2e test reads it."""
        from gateway.kubelet.service import add_component_collectors

        add_component_collectors(metrics, kube=self.kube)
        metrics.collect(
            "vkgate_api_clients",
            "Kubernetes API clients (each: one HTTP connection pool and one token bucket) "
            "the virtual nodes of this process use",
            (),
            lambda: {(): float(len({id(u.kube) for u in self.units}))},
            kind="gauge",
        )

    def _count_teams(self) -> None:
        """Process-wide: the team labels the operator's rule ignores, and the template
        ConfigMap versions refused by reason (docs/design/teams.md)."""

        def ignored() -> dict[tuple[str, ...], float]:
            out: dict[tuple[str, ...], float] = {}
            for kind, counts in (
                ("namespace", self.teams.ignored() if self.teams is not None else {}),
                ("configmap", self.templates.ignored() if self.templates is not None else {}),
            ):
                for reason, n in counts.items():
                    out[(kind, reason)] = float(n)
            return out

        def refused() -> dict[tuple[str, ...], float]:
            counts = self.templates.refused if self.templates is not None else {}
            return {(reason,): float(n) for reason, n in counts.items()}

        self.metrics.collect(
            "vkgate_team_labels_ignored",
            "Labelled namespaces and template ConfigMaps whose vkgate.io/team label the "
            "operator's config ignores now, by object and reason (not_allowed, map_differs)",
            ("object", "reason"),
            ignored,
            kind="gauge",
        )
        self.metrics.collect(
            "vkgate_template_configmaps_refused",
            "Template ConfigMap versions refused, by reason (conflict: a template another "
            "ConfigMap defines; owner: outside its team's prefix or global and not named by the "
            "operator; invalid: does not compile or render)",
            ("reason",),
            refused,
        )

    def _fence(self, method: str, path: str) -> str | None:
        """``KubeClient.fence``: a write is refused unless this process leads every node it
        serves — except the writes that acquire or renew a leader Lease itself."""
        leaders = [u.leader for u in self.units]
        if any(path in (le.path, LEASES) for le in leaders):
            return None
        for le in leaders:
            if (refused := le.fence(method, path)) is not None:
                return refused
        return None

    def _lost(self, reason: str) -> None:
        """Leadership lost: stop everything (writes are already fenced) and exit non-zero, so
        the Deployment restarts this instance as a standby."""
        self.exit_code = 1
        self.request_stop()

    def readiness(self) -> str | None:
        """``/readyz``: None when every node is registered and its backend answers its ping;
        else the reasons of the nodes that are not (one per node, ``; `` between)."""
        reasons = [r for u in self.units if (r := u.readiness()) is not None]
        return "; ".join(reasons) or None

    def components(self) -> list[Component]:
        """Process-wide optional components, in start order (each has async start()/stop()):
        the inputs every node's pod syncs wait for."""
        return [c for c in (self.templates, self.teams) if c is not None]

    async def _as(self, unit: NodeUnit, step: Coroutine[Any, Any, None]) -> None:
        """Run ``step`` in ``unit``'s logging context (``NODE``, with several nodes): every
        task it starts inherits it, so each log line names its node."""
        if not self.settings.nodes:
            return await step
        ctx = contextvars.copy_context()
        ctx.run(NODE.set, unit.name)
        return await asyncio.create_task(step, name=f"start:{unit.name}", context=ctx)

    async def start(self) -> None:
        self.renderer.start()  # the render workers spawn in the background
        for unit in self.units:
            self._started.append(unit)
            await self._as(unit, unit.start_backend())
        await self._start_metrics()  # before the leader wait: a standby answers its probes
        await self.units[0].node.wait_for_api()
        for unit in self.units:  # every write is fenced on every node's leader Lease
            await self._as(unit, unit.lead())
        # The shared inputs load in the background from here; each node's gate waits for them
        # (docs/design/startup.md).  After leadership: a standby writes nothing (Events).
        for component in self.components():
            await component.start()
            self._started.append(component)
        for unit in self.units:
            await self._as(unit, unit.start())

    async def stop(self) -> None:
        """Stop what was started, in reverse; then the metrics server and the client."""
        while self._started:
            component = self._started.pop()
            try:
                if isinstance(component, NodeUnit):
                    await self._as(component, component.stop(release=self.exit_code == 0))
                else:
                    await component.stop()
            except Exception:
                log.exception("error while stopping %s", type(component).__name__)
        await self._stop_metrics()  # started before the leader wait
        await self.kube.aclose()
        self.renderer.close()

    def request_stop(self) -> None:
        if self._stop.is_set():
            log.info("already stopping")
        self._stop.set()

    async def run(self) -> None:
        """Start, wait for ``request_stop()``, stop.  A stop during startup cancels it."""
        starting = asyncio.create_task(self.start(), name="app-start")
        stopping = asyncio.create_task(self._stop.wait(), name="app-stop")
        try:
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if starting.done():
                starting.result()  # StartupError propagates after stop() below
                log.info("vkgate is running as node %s", ", ".join(u.name for u in self.units))
                await stopping
            else:
                log.info("stop requested during startup")
        finally:
            for t in (starting, stopping):
                if not t.done():
                    t.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await t
            await self.stop()


async def _main(settings: Settings) -> int:
    app = App(settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, app.request_stop)
    log.info(
        "vkgate starting: %s, API server %s",
        ", ".join(f"node {u.name} (backend {u.settings.backend.kind})" for u in app.units),
        app.kube.server,
    )
    await app.run()
    log.info("vkgate stopped")
    return app.exit_code


def run_forever(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT; 0 on a clean stop, 1 when startup failed."""
    setup_logging(settings.log.level, settings.log.format)
    try:
        return asyncio.run(_main(settings))
    except StartupError as exc:
        log.error("startup failed: %s", exc)
        return 1
    except KeyboardInterrupt:  # a signal before the handlers were installed
        return 0


def _one_of_several(settings: Settings, identity: str) -> Settings:
    """A node's settings in a multi-node process: its kubelet server leaves
    ``metrics_address`` to the App, and its leader election runs as the process's one
    ``identity`` (one candidate per process, docs/design/multinode.md)."""
    kubelet = dataclasses.replace(settings.kubelet, metrics_address="")
    ha = dataclasses.replace(settings.ha, identity=identity)
    return dataclasses.replace(settings, kubelet=kubelet, ha=ha)
