"""``KubeletServer``: the :10250 HTTPS API wired together — TLS, authn, authz, routes, own
metrics — with ``start()``/``stop()`` for the App.

Every request is authenticated, then authorized, then routed; a failure answers 401/403/500
with a message that says why (the user and the subresources checked — never a token).
Requests and auth outcomes are counted in the gateway's own metrics, served plain-HTTP on
``kubelet.metrics_address`` and behind auth at ``/metrics`` here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Any, Protocol

from gateway.config import KubeletSettings
from gateway.errors import StartupError
from gateway.kube.client import KubeClient
from gateway.kubelet.api import KubeletAPI, MetricsServer, PodLookup, Readiness, path_class
from gateway.kubelet.auth import (
    Authenticator,
    AuthError,
    Authorizer,
    CertStore,
    ReviewClient,
    ServingCertManager,
)
from gateway.kubelet.server import Exchange, HttpServer, Request
from gateway.metrics import Exposition, Metrics
from translators.base import Translator
from vkgate_core.clock import Clock, SystemClock

log = logging.getLogger(__name__)


class KubeletServer:
    def __init__(
        self,
        *,
        settings: KubeletSettings,
        node_name: str,
        pods: PodLookup,
        translator: Translator,
        client: ReviewClient | None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        hosts: Sequence[str] | Callable[[], Sequence[str]] = (),
        default_address: str = "0.0.0.0",
        cert_check_interval: float = 5.0,
        ready: Readiness | None = None,
        csr_client: KubeClient | None = None,
    ) -> None:
        self.settings = settings
        self.node_name = node_name
        self.clock = clock or SystemClock()
        self.metrics = metrics or Metrics(process=False)
        self.address = settings.address or default_address
        self._hosts = hosts
        self._cert_check_interval = cert_check_interval
        self._ready = ready
        self._csr_client = csr_client
        #: Serving certificate from a CSR (``kubelet.csr``), started with the server.
        self.csr: ServingCertManager | None = None
        self.authn = Authenticator(client=client, anonymous=settings.anonymous, clock=self.clock)
        self.authz = Authorizer(
            client=client,
            node_name=node_name,
            mode=settings.authorization,
            clock=self.clock,
        )
        self.api = KubeletAPI(
            node_name=node_name,
            pods=pods,
            translator=translator,
            clock=self.clock,
            started=self.clock.now(),
            metrics=self.metrics,
            config=self._configz(),
        )
        self.certs: CertStore | None = None
        self._http: HttpServer | None = None
        self._metrics_server: MetricsServer | None = None

    def _configz(self) -> dict[str, Any]:
        s = self.settings
        return {
            "kind": "KubeletConfiguration",
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "address": self.address,
            "port": s.port,
            "tlsCertFile": s.cert_file,
            "authentication": {
                "anonymous": {"enabled": s.anonymous},
                "webhook": {"enabled": True, "cacheTTL": "2m0s"},
                "x509": {"clientCAFile": s.client_ca_file},
            },
            "authorization": {
                "mode": "Webhook" if s.authorization == "webhook" else "AlwaysAllow",
                "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"},
            },
            "streamingConnectionIdleTimeout": "4h0m0s",
        }

    @property
    def port(self) -> int:
        return self._http.port if self._http else self.settings.port

    @property
    def metrics_port(self) -> int | None:
        return self._metrics_server.port if self._metrics_server else None

    async def start(self) -> None:
        s = self.settings
        extra = self._hosts() if callable(self._hosts) else self._hosts
        hosts = [h for h in (*extra, self.node_name, self.address, "127.0.0.1") if h]
        self.certs = CertStore(
            cert_file="" if s.csr else s.cert_file,
            key_file="" if s.csr else s.key_file,
            client_ca_file=s.client_ca_file,
            hosts=[h for h in dict.fromkeys(hosts) if h != "0.0.0.0"],
            check_interval=self._cert_check_interval,
            clock=self.clock,
        )
        if not s.client_ca_file and s.authorization == "webhook":
            log.warning("kubelet: no client_ca_file: only bearer tokens can authenticate")
        self._http = HttpServer(
            self.handle,
            host=self.address,
            port=s.port,
            certs=self.certs,
            access_log=self._access,
            name="kubelet",
        )
        await self._http.start()
        await self.start_metrics()
        if s.csr:
            self._start_csr()

    def _start_csr(self) -> None:
        """Ask the signer for a certificate; until it arrives the self-signed one serves."""
        assert self.certs is not None
        if self._csr_client is None:
            raise StartupError("kubelet.csr needs the Kubernetes client")
        if self.settings.cert_file:
            log.warning("kubelet.csr: ignoring kubelet.cert_file/key_file (the CSR replaces them)")
        certs = self.certs

        def addresses() -> list[str]:
            return list(self._hosts() if callable(self._hosts) else self._hosts)

        self.csr = ServingCertManager(
            self._csr_client,
            self.node_name,
            addresses=addresses,
            cert_file=certs.cert_file,
            key_file=certs.key_file,
            self_approve=self.settings.csr_self_approve,
            clock=self.clock,
            on_written=certs.reload_if_changed,
        )
        self.csr.start()

    async def start_metrics(self) -> None:
        """The plain-HTTP metrics/probe server alone (idempotent): the App starts it before
        waiting for leadership, so a standby answers its probes."""
        s = self.settings
        if s.metrics_address and self._metrics_server is None:
            self._metrics_server = MetricsServer(self.metrics, s.metrics_address, ready=self._ready)
            await self._metrics_server.start()

    async def stop_metrics(self) -> None:
        if self._metrics_server is not None:
            await self._metrics_server.stop()
            self._metrics_server = None

    async def stop(self) -> None:
        if self.csr is not None:
            await self.csr.stop()
        if self._http is not None:
            await self._http.stop()
        await self.stop_metrics()
        if self.certs is not None:
            self.certs.close()

    async def handle(self, req: Request, ex: Exchange) -> None:
        try:
            req.user = await self.authn.authenticate(
                peer_cert=req.peer_cert, authorization=req.header("authorization")
            )
            await self.authz.authorize(req.user, method=req.method, path=req.path)
        except AuthError as exc:
            result = {401: "unauthenticated", 403: "forbidden"}.get(exc.status, "error")
            self.metrics.kubelet_auth.labels(result).inc()
            log.info("kubelet: %s %s from %s: %s", req.method, req.path, req.peer, exc.message)
            await ex.fail(exc.status, exc.message)
            return
        self.metrics.kubelet_auth.labels("allowed").inc()
        await self.api.handle(req, ex)

    def _access(self, req: Request, ex: Exchange, seconds: float) -> None:
        cls = path_class(req.path)
        code = str(ex.status or 0)
        self.metrics.kubelet_requests.labels(cls, req.method, code).inc()
        self.metrics.kubelet_duration.labels(cls).observe(seconds)
        log.debug(
            "kubelet: %s %s -> %s (%.3fs, %d bytes, user=%s, upgrade=%s)",
            req.method,
            req.path,
            code,
            seconds,
            ex.bytes_sent,
            getattr(req.user, "name", "-"),
            req.upgrade or "-",
        )


class _Requesting(Protocol):
    """A backend that counts its HTTP requests by (method, endpoint) (``BackendRequests``)."""

    def backend_requests(self) -> Mapping[tuple[str, str], int]: ...


class _Counted(Protocol):
    """A component with counters: ``stats`` (the API client's writes, the pod syncs)."""

    @property
    def stats(self) -> Mapping[Any, int]: ...


class _Watching(Protocol):
    @property
    def counts(self) -> Mapping[str, int]: ...


class PodCounters(_Counted, Protocol):
    """What the pod controller shows the collectors: sync counters, its queue, its watch."""

    @property
    def queue(self) -> Sized: ...

    @property
    def reflector(self) -> _Watching: ...


class RenewingLease(Protocol):
    """The node Lease and the leader Lease: failed renewals; ``leader`` tells them apart."""

    @property
    def renew_failures(self) -> int: ...


def add_component_collectors(
    metrics: Exposition,
    *,
    kube: _Counted | None = None,
    pods: PodCounters | None = None,
    leases: Sequence[tuple[str, RenewingLease]] = (),
    events: _Watching | None = None,
    backend: _Requesting | None = None,
) -> None:
    """Expose other components' plain counters at scrape time (they never import this package).

    ``kube.stats``: API writes keyed ``(verb, resource)``; ``pods.stats``: pod sync counters by
    name; ``pods.queue``: its length; ``pods.reflector.counts`` / ``templates.reflector``: watch
    (re)starts by reason; each of ``leases`` has ``renew_failures`` (heartbeat and leader);
    ``events.counts``: Events by outcome (posted, aggregated, failed, dropped);
    ``backend.backend_requests()``: the backend's HTTP requests by (method, endpoint)."""

    def api_writes() -> dict[tuple[str, ...], float]:
        out: dict[tuple[str, ...], float] = {}
        for key, n in (kube.stats if kube is not None else {}).items():
            verb, resource = key if isinstance(key, tuple) and len(key) == 2 else ("", str(key))
            out[(str(verb), str(resource))] = float(n)
        return out

    def pod_syncs() -> dict[tuple[str, ...], float]:
        return {(str(k),): float(n) for k, n in (pods.stats if pods is not None else {}).items()}

    def queue_depth() -> dict[tuple[str, ...], float]:
        return {(): float(len(pods.queue))} if pods is not None else {}

    def watch_restarts() -> dict[tuple[str, ...], float]:
        counts = pods.reflector.counts if pods is not None else {}
        return {
            ("pods", reason): float(counts.get(key, 0))
            for key, reason in (("gone", "expired"), ("errors", "error"), ("inactivity", "idle"))
        }

    def lease_failures() -> dict[tuple[str, ...], float]:
        out: dict[tuple[str, ...], float] = {}
        for kind, lease in leases:
            out[(kind,)] = float(lease.renew_failures)
        return out

    if kube is not None:
        metrics.collect(
            "vkgate_api_writes",
            "Writes sent to the Kubernetes API",
            ("verb", "resource"),
            api_writes,
        )
    if pods is not None:
        metrics.collect(
            "vkgate_pod_sync_operations",
            "Pod controller operations (creates, status writes, deletes, ...)",
            ("operation",),
            pod_syncs,
        )
        metrics.collect(
            "vkgate_pod_queue_depth",
            "Pods waiting in the work queue",
            (),
            queue_depth,
            kind="gauge",
        )
        metrics.collect(
            "vkgate_watch_restarts",
            "Pod watch restarts by reason (expired: 410 relist, error, idle)",
            ("resource", "reason"),
            watch_restarts,
        )

    def event_outcomes() -> dict[tuple[str, ...], float]:
        counts = events.counts if events is not None else {}
        return {
            (o,): float(counts.get(o, 0)) for o in ("posted", "aggregated", "failed", "dropped")
        }

    if events is not None:
        metrics.collect(
            "vkgate_events",
            "Kubernetes Events by outcome: posted, aggregated (a repeat PATCHed into its Event), "
            "failed (refused or unreachable API), dropped (the event queue was full)",
            ("outcome",),
            event_outcomes,
        )

    def backend_requests() -> dict[tuple[str, ...], float]:
        counts = backend.backend_requests() if backend is not None else {}
        return {(str(m), str(e)): float(n) for (m, e), n in dict(counts).items()}

    if backend is not None:
        metrics.collect(
            "vkgate_backend_requests",
            "HTTP requests sent to the backend (retries included) by method and endpoint "
            "(the endpoint table's path, e.g. /job/:job_id)",
            ("method", "endpoint"),
            backend_requests,
        )
    if leases:
        metrics.collect(
            "vkgate_lease_renew_failures",
            "Failed Lease renewals (heartbeat: the node Lease; leader: leader election)",
            ("lease",),
            lease_failures,
        )
