"""One virtual node's components, built from that node's settings (docs/design/multinode.md).

    NodeUnit(settings of one node, shared kube client)
      .translator  the backend          (entry point group ``vkgate.translators``, by backend.kind)
      .metrics     this node's Metrics  (own registry; the App merges them with a ``node`` label)
      .events      EventRecorder        (source.host = this node)
      .leader      LeaderElector        (Lease kube-node-lease/vkgate-leader-<node>)
      .gate        InputsGate           (gateway.inputs: what pod syncs wait for)
      .node        NodeController       (registration, status, Lease, backend health)
      .pods        PodController        (its own pod watch, field selector spec.nodeName=<node>)
      .kubelet     kubelet HTTPS server (its own port and serving certificate)

The App (gateway.app) builds one unit per virtual node and hands every unit the same
``KubeClient`` (one connection pool, one token bucket) and the process-wide inputs (template
ConfigMaps, namespace team labels).  ``start_backend()`` starts the events recorder and the
translator, ``lead()`` waits for this node's leader Lease, ``start()`` completes the node's
start-up gate with the pod controller's own inputs and starts its watchdog, registers the Node
(``Ready=False`` while the gate is closed), then starts each optional component in
``components()`` order; ``stop()`` goes in reverse (docs/design/startup.md).  The App leads every node before it starts any (its writes are fenced on all of them).  A component is any object with
async ``start()`` and ``stop()``.  A unit never stops another: a backend that is down keeps its
Node ``Ready=False`` and its pods as they are, and retries (gateway.node.health), while the other
units run on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from gateway.config import Settings
from gateway.errors import StartupError
from gateway.inputs import Input, InputsGate, NamespaceTeams
from gateway.kube.client import KubeClient
from gateway.kube.events import EventRecorder
from gateway.metrics import InstrumentedTranslator, Metrics
from gateway.node.controller import NodeController
from gateway.node.leader import LeaderElector
from gateway.pods.controller import PodController
from translators import plugins
from translators.base import BackendRequests, Translator, TranslatorContext
from translators.render.engine import Renderer
from vkgate_core.clock import Clock, SystemClock
from vkgate_core.settings import SettingsError

if TYPE_CHECKING:
    from gateway.kubelet.service import KubeletServer

log = logging.getLogger("gateway.nodeunit")


class Component(Protocol):
    """A part of a node or of the App that runs between ``start()`` and ``stop()``."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def load_translator(
    settings: Settings, *, renderer: Any = None, clock: Clock | None = None
) -> Translator:
    """Build the configured backend through its spec (only that backend is imported); it
    takes its time from ``clock`` (the agent's)."""
    kind = settings.backend.kind
    try:
        spec = plugins.load(kind)
    except plugins.PluginError as exc:
        raise StartupError(f"backend.kind: {exc}") from exc
    from gateway.templating.source import renderer_from_settings

    ctx = TranslatorContext(
        node_name=settings.node.name,
        settings=settings.backend.table(),
        renderer=renderer
        if renderer is not None
        else renderer_from_settings(settings.templates, kinds=[kind]),
        clock=clock if clock is not None else SystemClock(),
    )
    try:
        return spec.factory(ctx)
    except SettingsError as exc:
        raise StartupError(str(exc)) from exc
    except (ValueError, TypeError, KeyError, OSError) as exc:
        raise StartupError(f"backend.{kind}: {exc}") from exc


class NodeUnit:
    def __init__(
        self,
        settings: Settings,
        *,
        kube: KubeClient,
        clock: Clock,
        renderer: Renderer,
        translator: Translator | None = None,
        on_lost: Callable[[str], None] | None = None,
        ready: Callable[[], str | None] | None = None,
        process_metrics: bool = True,
        count_api: bool = True,
        inputs: tuple[Input, ...] = (),
        teams: NamespaceTeams | None = None,
    ) -> None:
        """``process_metrics``: this unit's registry also carries the process collectors (a
        single-node App exposes it as is); ``count_api``: it exposes the shared client's
        counters (a multi-node App exposes those once, process-wide).  ``inputs``: the
        process-wide inputs of the start-up gate; ``teams``: the namespace team labels."""
        self.settings = settings
        self.name = settings.node.name
        self.kube = kube
        self.clock = clock
        self.translator = translator or load_translator(settings, renderer=renderer, clock=clock)
        #: Own metrics (prometheus_client; gateway.metrics); controllers get the backend
        #: through ``backend``, which counts and times every call.
        self.metrics = Metrics(backend=settings.backend.kind, process=process_metrics)
        # the proxy has every attribute of the translator it wraps (gateway.metrics)
        backend = cast(Translator, InstrumentedTranslator(self.translator, self.metrics))
        self.events = EventRecorder(
            kube,
            component="vkgate",
            host=self.name,
            clock=clock,
            qps=settings.kube.event_qps,
            burst=settings.kube.event_burst,
            queue_size=settings.kube.event_queue,
        )
        #: One instance drives a node: the leader Lease (docs/design/ha.md).
        self.leader = LeaderElector(
            kube.lease_lane(), self.name, settings.ha, clock=clock, on_lost=on_lost
        )
        #: What this node's pod syncs, Ready condition and /readyz wait for (gateway.inputs).
        self.gate = InputsGate(
            inputs, clock=clock, timeout=settings.pods.inputs_timeout, node=self.name
        )
        self.node = NodeController(
            kube, backend, settings, clock=clock, events=self.events, inputs=self.gate
        )
        #: gateway.pods PodController: pod lifecycle; the kubelet server reads its pod cache.
        self.pods: PodController = PodController(
            kube,
            backend,
            self.events,
            settings,
            clock=clock,
            metrics=self.metrics,
            host_ip=lambda: self.node.internal_ip,
            allocatable=lambda: (
                ((self.node.node or {}).get("status") or {}).get("allocatable") or {}
            ),
            gate=self.gate,
            teams=teams,
        )
        # A template change (e.g. a ConfigMap version accepted) retries the pods that failed
        # to translate; the gateway side subscribes, so translators never import gateway.
        renderer.subscribe(self.pods.templates_changed)
        # Events wait a little while pod work is due (docs/design/kube-client.md).
        self.events.busy = self.pods.queue.busy
        #: gateway.kubelet server; its plain-HTTP metrics endpoint is the App's.
        self.kubelet: KubeletServer | None = None
        if settings.kubelet.enabled:
            from gateway.kubelet.service import KubeletServer, add_component_collectors

            self.kubelet = KubeletServer(
                settings=settings.kubelet,
                node_name=self.name,
                pods=self.pods,
                translator=backend,
                client=kube,
                clock=clock,
                hosts=lambda: [self.node.internal_ip],
                ready=ready or self.readiness,
                metrics=self.metrics,
                csr_client=kube,
            )
            add_component_collectors(
                self.metrics,
                kube=kube if count_api else None,
                pods=self.pods,
                leases=(("heartbeat", self.node.lease), ("leader", self.leader)),
                events=self.events,
                backend=(self.translator if isinstance(self.translator, BackendRequests) else None),
            )
        self._started: list[Any] = []

    def readiness(self) -> str | None:
        """None when this node is registered, its backend answers its ping and every input of
        its pod syncs has loaded (else the first of those that does not hold, as a reason)."""
        if not self.leader.still_leader():
            # A standby is ready when it sees a live leader it could replace.
            held = self.leader.observed_holder
            return None if held else f"node {self.name}: waiting for the leader Lease"
        if self.node.node is None:
            return f"node {self.name} is not registered yet"
        if not self.node.ready:
            error = self.node.health.last_error or "no successful ping yet"
            return f"node {self.name}: {self.settings.backend.kind} backend unreachable: {error}"
        if (waiting := self.gate.reason()) is not None:
            return f"node {self.name}: {waiting}"
        return None

    def components(self) -> list[Component]:
        """Optional components, in start order (each has async start()/stop())."""
        return [c for c in (self.pods, self.kubelet) if c is not None]

    async def start_backend(self) -> None:
        """The parts that need no leadership: the events recorder and the translator."""
        await self.events.start()
        self._started.append(self.events)
        await self.translator.start()
        self._started.append(self.translator)

    async def lead(self) -> None:
        """Return once this process leads the node (its leader Lease), renewing from then on."""
        await self.leader.acquire()
        self.leader.start()
        self._started.append(self.leader)

    async def start(self) -> None:
        """Complete and start the start-up gate, register the Node, then start the pod
        controller and kubelet server."""
        if isinstance(self.pods, PodController):  # before the Node says Ready: known inputs
            self.gate.add(*self.pods.inputs)
        await self.gate.start()
        self._started.append(self.gate)
        await self.node.start()
        self._started.append(self.node)
        for component in self.components():
            await component.start()
            self._started.append(component)

    async def stop(self, *, release: bool = True) -> None:
        """Stop what was started, in reverse; then close the translator."""
        while self._started:
            component = self._started.pop()
            try:
                if component is self.translator:
                    await self.translator.close()
                elif component is self.leader:
                    await self.leader.stop(release=release)
                else:
                    await component.stop()
            except Exception:
                log.exception(
                    "node %s: error while stopping %s", self.name, type(component).__name__
                )
