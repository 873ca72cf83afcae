"""The agent: build the components from settings, start them in order, stop them in reverse.

    App(settings)
      .kube        KubeClient           (gateway.kube)
      .translator  the backend          (entry point group ``vkgate.translators``, by backend.kind)
      .events      EventRecorder
      .node        NodeController       (registration, status, Lease, backend health)
      .pods        PodController        (gateway.pods; None until wired)
      .kubelet     kubelet HTTPS server (gateway.kubelet; None until wired)

``start()`` starts the translator, then the node (blocks until the Node is registered: it
retries while the API server is unreachable), then each optional component in
``components()`` order; ``stop()`` goes in reverse.  A component is any object with async
``start()`` and ``stop()``: to add one, construct it in ``__init__``, assign the attribute, and
list it in ``components()``.

``run_forever(settings)`` is what ``vkgate run`` calls: logging, SIGTERM/SIGINT → clean stop
(stop renewing, leave the Node unless ``node.delete_on_shutdown``), exit code 0; a
``StartupError`` (bad credentials, missing translator, no Lease API) → one error line, exit 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

from gateway.config import Settings
from gateway.errors import StartupError
from gateway.kube.client import KubeClient
from gateway.kube.events import EventRecorder
from gateway.logging_setup import setup_logging
from gateway.metrics import InstrumentedTranslator, Metrics
from gateway.node.controller import NodeController
from gateway.node.leader import LeaderElector
from gateway.pods.controller import PodController
from translators import plugins
from translators.base import Translator, TranslatorContext
from vkgate_core.clock import Clock, SystemClock
from vkgate_core.settings import SettingsError

log = logging.getLogger("gateway.app")


def load_translator(settings: Settings, *, renderer: Any = None) -> Translator:
    """Build the configured backend through its spec (only that backend is imported)."""
    kind = settings.backend.kind
    try:
        spec = plugins.load(kind)
    except plugins.PluginError as exc:
        raise StartupError(f"backend.kind: {exc}") from exc
    from gateway.templates_source import renderer_from_settings

    ctx = TranslatorContext(
        node_name=settings.node.name,
        settings=settings.backend.table(),
        renderer=renderer
        if renderer is not None
        else renderer_from_settings(settings.templates, kinds=[kind]),
    )
    try:
        return spec.factory(ctx)
    except SettingsError as exc:
        raise StartupError(str(exc)) from exc
    except (ValueError, TypeError, KeyError, OSError) as exc:
        raise StartupError(f"backend.{kind}: {exc}") from exc


class App:
    def __init__(
        self,
        settings: Settings,
        *,
        kube: KubeClient | None = None,
        translator: Translator | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.kube = kube or KubeClient.from_settings(settings.kube, clock=self.clock)
        from gateway.templates_source import TemplatesSource, renderer_from_settings

        #: The template renderer the translator uses (ConfigMap templates land in its overlay).
        self.renderer = renderer_from_settings(settings.templates, kinds=[settings.backend.kind])
        self.translator = translator or load_translator(settings, renderer=self.renderer)
        #: Own metrics (prometheus_client; gateway.metrics); controllers get the backend
        #: through ``backend``, which counts and times every call.
        self.metrics = Metrics(backend=settings.backend.kind)
        backend: Any = InstrumentedTranslator(self.translator, self.metrics)
        self.events = EventRecorder(
            self.kube,
            component="vkgate",
            host=settings.node.name,
            clock=self.clock,
            qps=settings.kube.event_qps,
            burst=settings.kube.event_burst,
            queue_size=settings.kube.event_queue,
        )
        #: Live templates from ConfigMaps (templates.configmap_namespace), when configured.
        self.templates: Any = None
        if settings.templates.configmap_namespace:
            self.templates = TemplatesSource(
                self.kube,
                self.renderer,
                namespace=settings.templates.configmap_namespace,
                events=self.events,
                backend=settings.backend.kind,
                backend_settings=settings.backend.table(),
                clock=self.clock,
            )
        #: One instance drives a node: the leader Lease (docs/design/ha.md); every write
        #: through ``kube`` is fenced on it.
        self.leader = LeaderElector(
            self.kube, settings.node.name, settings.ha, clock=self.clock, on_lost=self._lost
        )
        self.kube.fence = self.leader.fence
        #: Exit status of ``run_forever``: 1 when leadership was lost.
        self.exit_code = 0
        self.node = NodeController(
            self.kube, backend, settings, clock=self.clock, events=self.events
        )
        #: gateway.pods PodController: pod lifecycle; the kubelet server reads its pod cache.
        self.pods: Any = PodController(
            self.kube,
            backend,
            self.events,
            settings,
            clock=self.clock,
            metrics=self.metrics,
            host_ip=lambda: self.node.internal_ip,
            allocatable=lambda: (
                ((self.node.node or {}).get("status") or {}).get("allocatable") or {}
            ),
        )
        # A template change (e.g. a ConfigMap version accepted) retries the pods that failed
        # to translate; the gateway side subscribes, so translators never import gateway.
        self.renderer.subscribe(self.pods.templates_changed)
        #: gateway.kubelet server (the kubelet helper wires it here).
        self.kubelet: Any = None
        if settings.kubelet.enabled:
            from gateway.kubelet.service import KubeletServer, add_component_collectors

            self.kubelet = KubeletServer(
                settings=settings.kubelet,
                node_name=settings.node.name,
                pods=self.pods,
                translator=backend,
                client=self.kube,
                clock=self.clock,
                hosts=lambda: [self.node.internal_ip],
                ready=self.readiness,
                metrics=self.metrics,
                csr_client=self.kube,
            )
            add_component_collectors(
                self.metrics,
                kube=self.kube,
                pods=self.pods,
                leases=(self.node.lease, self.leader),
                events=self.events,
            )
        self._stop = asyncio.Event()
        self._started: list[Any] = []

    def _lost(self, reason: str) -> None:
        """Leadership lost: stop everything (writes are already fenced) and exit non-zero, so
        the Deployment restarts this instance as a standby."""
        self.exit_code = 1
        self.request_stop()

    def readiness(self) -> str | None:
        """``/readyz``: None when the Node is registered and the backend answers its ping."""
        if not self.leader.still_leader():
            # A standby is ready when it sees a live leader it could replace.
            held = self.leader.observed_holder
            return None if held else "waiting for the leader Lease"
        if self.node.node is None:
            return f"node {self.settings.node.name} is not registered yet"
        if not self.node.ready:
            error = self.node.health.last_error or "no successful ping yet"
            return f"{self.settings.backend.kind} backend unreachable: {error}"
        return None

    def components(self) -> list[Any]:
        """Optional components, in start order (each has async start()/stop())."""
        return [c for c in (self.templates, self.pods, self.kubelet) if c is not None]

    async def start(self) -> None:
        await self.events.start()
        self._started.append(self.events)
        await self.translator.start()
        self._started.append(self.translator)
        start_metrics = getattr(self.kubelet, "start_metrics", None)
        if start_metrics is not None:
            await start_metrics()
        await self.node.wait_for_api()
        await self.leader.acquire()
        self.leader.start()
        self._started.append(self.leader)
        await self.node.start()
        self._started.append(self.node)
        for component in self.components():
            await component.start()
            self._started.append(component)

    async def stop(self) -> None:
        """Stop what was started, in reverse; then close the translator and the client."""
        while self._started:
            component = self._started.pop()
            try:
                if component is self.translator:
                    await self.translator.close()
                elif component is self.leader:
                    await self.leader.stop(release=self.exit_code == 0)
                else:
                    await component.stop()
            except Exception:
                log.exception("error while stopping %s", type(component).__name__)
        stop_metrics = getattr(self.kubelet, "stop_metrics", None)
        if stop_metrics is not None:
            await stop_metrics()  # started before the leader wait
        await self.kube.aclose()

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
                log.info("vkgate is running as node %s", self.settings.node.name)
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
        "vkgate starting: node %s, backend %s, API server %s",
        settings.node.name,
        settings.backend.kind,
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
