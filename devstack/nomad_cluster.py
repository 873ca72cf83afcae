"""A Nomad cluster as production runs it: one server and two clients, ACLs on, mutual TLS.

The e2e tier's Nomad (docs/design/nomad.md, "The e2e cluster").  Unlike the ``-dev`` agent of
``vkgate dev`` (``devstack.nomad``) this is three ``nomad agent`` processes:

- a server on 127.0.0.1 (``bootstrap_expect = 1``), HTTP and RPC over TLS with
  ``verify_https_client`` and ``verify_server_hostname``; its certificate names only
  ``server.global.nomad`` and ``localhost`` (no IP SAN), so a client connecting by address must
  send the server name it verifies (``NOMAD_TLS_SERVER_NAME``), as Nomad's own CLI does;
- two clients, each with its own address on its own veth interface inside the test's network
  namespace (``CLIENT_IPS``), its own data, alloc and state dirs and cgroup parent: client 1 has
  raw_exec and (given a dockerd) the docker driver, node class ``class-a``, the default node pool;
  client 2 has raw_exec only, node class ``class-b``, node pool ``pool-b`` (created by its
  registration); both carry ``meta.vkgate-client`` (``c1``/``c2``); client 1 has the host
  volumes ``HOST_VOLUMES`` (directories ``<client work dir>/hv/<name>``).  A job lands on client 2 only
  when it asks for ``pool-b``: every other e2e test's pods run on client 1.
- bridge networking on both clients: Debian's CNI plugins (``CNI_PATH``), each client its own
  bridge (``vkbr1``/``vkbr2``) and a quarter of 203.0.113.0/24 (``BRIDGE_SUBNETS``), the docker
  driver's infra image the locally imported ``PAUSE_IMAGE``; and a CNI network ``vknet`` (a
  conflist in each client's ``cni_config_dir``, bridges ``vknet1``/``vknet2``, the other two
  quarters, ``CNI_SUBNETS``).  Allocation addresses are routable from the test process (same
  namespace), never beyond it.

ACLs: the bootstrap token (``management_token``) is used only to set up — the ACL policy
vkgate ships (deploy/nomad/vkgate-policy.hcl) is applied and a client token is made from it
(``token``); vkgate runs with that token and nothing more.  Test code reads and cleans up with
the management token through ``get``/``request``.

Needs root inside the namespace ``devstack.netns`` made (veth interfaces, cgroups, the
docker socket).  The clients' addresses never exist on the host.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from devstack import netns
from devstack.certs import CertKey, issue, new_ca
from devstack.controlplane import binary
from devstack.docker import PAUSE_IMAGE
from devstack.nomad import DATACENTER, FINGERPRINT_DENYLIST, bench_client, docker_plugin
from devstack.process import DevstackError, Proc, free_ports, kill_processes_under, wait_for
from translators.base import OWNER_KEY, OWNER_VALUE
from translators.nomad.jobs import META_NODE

log = logging.getLogger("vkgate.devstack.nomad_cluster")

REPO = Path(__file__).resolve().parents[1]
#: The ACL policy vkgate ships; the cluster mints vkgate's token from exactly this file.
POLICY_FILE = REPO / "deploy" / "nomad" / "vkgate-policy.hcl"
POLICY_NAME = "vkgate"
SERVER_NAME = "server.global.nomad"
#: Documentation addresses (RFC 5737) of the two clients, inside the test namespace only.
CLIENT_IPS = ("198.51.100.21", "198.51.100.22")
#: Bridge networking of each client (docs/design/nomad.md, "Pod networking"): its own bridge
#: and a quarter of TEST-NET-3 (RFC 5737), so allocation addresses exist only inside the test's
#: network namespace and the two clients' never overlap.
BRIDGE_SUBNETS = ("203.0.113.0/26", "203.0.113.64/26")
#: The CNI network ``vknet`` (``network_mode = "cni/vknet"``) of each client: the other two
#: quarters, on bridges ``vknet1``/``vknet2``, host-local leases in the client's own dir.
CNI_NETWORK = "vknet"
CNI_SUBNETS = ("203.0.113.128/26", "203.0.113.192/26")
#: Where Debian's containernetworking-plugins installs the CNI plugins.
CNI_PATH = Path("/usr/lib/cni")
#: The plugins Nomad's bridge network runs (its own conflist: loopback, bridge with host-local
#: addresses, firewall, portmap).
BRIDGE_PLUGINS = ("loopback", "bridge", "host-local", "firewall", "portmap")
#: Where the host-local plugin keeps its address leases for Nomad's network ("nomad"): not
#: under the cluster's dir (Nomad's conflist sets no ``dataDir``), so ``stop`` removes the
#: leases of this cluster's allocations.
CNI_LEASES = Path("/var/lib/cni/networks/nomad")


def bridge_unavailable_reason() -> str | None:
    """Why the clients cannot run bridge-mode allocations here (one line), or None."""
    missing = [p for p in BRIDGE_PLUGINS if not os.access(CNI_PATH / p, os.X_OK)]
    if missing:
        return (
            f"CNI plugins {', '.join(missing)} not found in {CNI_PATH} "
            "(apt-get install containernetworking-plugins)"
        )
    if not shutil.which("iptables"):
        return "iptables not found (apt-get install iptables)"
    if not Path("/sys/module/bridge").exists():
        return "the kernel has no bridge module (Nomad's bridge fingerprint needs it)"
    return None


@dataclass(frozen=True)
class NomadTLS:
    """What an API client of the cluster needs: the CA, a client certificate, the server name."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    server_name: str = SERVER_NAME

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx


@dataclass(frozen=True)
class NomadClientNode:
    """One client agent of the cluster, as the tests steer to and check it."""

    name: str
    ip: str
    node_class: str
    meta: Mapping[str, str]
    drivers: tuple[str, ...]
    node_pool: str = "default"
    #: Bridge networking: the bridge's name and the allocations' subnet ("": Nomad's defaults).
    bridge: str = ""
    bridge_subnet: str = ""
    #: The subnet of its CNI network ``CNI_NETWORK`` ("": none).
    cni_subnet: str = ""
    #: Nomad host volumes (``host_volume "<name>"``), each a directory ``hv/<name>`` of the
    #: client's work dir, writable: PersistentVolumes name them (docs/backends/nomad.md,
    #: "Persistent volumes").
    host_volumes: tuple[str, ...] = ()


def cni_conflist(node: NomadClientNode, index: int, cni_dir: Path) -> dict[str, Any]:
    """The operator's CNI network as a client reads it from ``cni_config_dir``: a bridge of
    its own with host-local addresses from ``cni_subnet`` (leases under ``cni_dir``)."""
    return {
        "cniVersion": "0.4.0",
        "name": CNI_NETWORK,
        "plugins": [
            {"type": "loopback"},
            {
                "type": "bridge",
                "bridge": f"{CNI_NETWORK}{index + 1}",
                "isGateway": True,
                "ipMasq": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.cni_subnet}]],
                    "dataDir": str(cni_dir / "leases"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


@dataclass
class NomadCluster:
    """A running cluster; ``backend_settings()`` is what a vkgate node needs to use it."""

    workdir: Path
    #: The server's HTTP API by address (https://127.0.0.1:<port>); verify with ``tls.server_name``.
    address: str
    tls: NomadTLS
    management_token: str
    token: str
    clients: tuple[NomadClientNode, ...]
    server: Proc
    client_procs: tuple[Proc, ...]
    datacenter: str = DATACENTER
    ready_seconds: float = 0.0
    #: The server's own certificate and key (a TLS-terminating proxy in front of it serves them:
    #: bench/nomad_proxy.py).
    server_cert: CertKey | None = None
    _stopped: bool = field(default=False, repr=False)

    @property
    def pids(self) -> tuple[int, ...]:
        """The server's and every client's process (their CPU is the cluster's)."""
        return (self.server.pid, *(p.pid for p in self.client_procs))

    @property
    def pid(self) -> int:
        return self.server.pid

    @property
    def local_address(self) -> str:
        """The server by the name its certificate carries (for clients that cannot set SNI)."""
        return self.address.replace("127.0.0.1", "localhost")

    def backend_settings(self) -> dict[str, Any]:
        """``[backend.nomad]`` keys for a vkgate node on this cluster (the policy's token)."""
        return {
            "address": self.address,
            "token": self.token,
            "ca_cert": str(self.tls.ca_file),
            "client_cert": str(self.tls.cert_file),
            "client_key": str(self.tls.key_file),
            "tls_server_name": self.tls.server_name,
        }

    def cli_env(self, *, management: bool = False) -> dict[str, str]:
        """The ``NOMAD_*`` variables a ``nomad`` shell on this cluster has."""
        return {
            "NOMAD_ADDR": self.address,
            "NOMAD_TOKEN": self.management_token if management else self.token,
            "NOMAD_CACERT": str(self.tls.ca_file),
            "NOMAD_CLIENT_CERT": str(self.tls.cert_file),
            "NOMAD_CLIENT_KEY": str(self.tls.key_file),
            "NOMAD_TLS_SERVER_NAME": self.tls.server_name,
        }

    def request(self, method: str, path: str, body: Any = None, *, token: str | None = None) -> Any:
        """One HTTP API call with the management token (or ``token``); JSON in and out."""
        return _call(
            self.local_address, self.tls, token or self.management_token, method, path, body=body
        )

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def http_client(self, *, timeout: float = 10.0) -> httpx.Client:
        """An httpx client on the API with the management token (tests' reads and clean-up)."""
        return httpx.Client(
            base_url=self.local_address,
            verify=self.tls.context(),
            headers={"X-Nomad-Token": self.management_token},
            timeout=timeout,
            trust_env=False,
        )

    def nodes(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.get("/v1/nodes")
        return result

    def node_of(self, client: NomadClientNode) -> dict[str, Any]:
        """The Nomad node (list stub) of ``client``."""
        for node in self.nodes():
            if node.get("Name") == client.name:
                return node
        raise DevstackError(f"nomad client {client.name} is not registered")

    def purge_vkgate_jobs(self, *, keep: Collection[str]) -> list[str]:
        """Purge every vkgate job (``Meta vkgate.io/owner=vkgate``) whose ``vkgate.node`` is
        not in ``keep``; returns ``namespace/job`` of each.  The e2e tier calls it between
        tests with the nodes whose gateway still runs: a stopped gateway's jobs would otherwise
        hold the shared clients' CPU and memory for every later test."""
        purged: list[str] = []
        jobs = self.get("/v1/jobs?namespace=*&meta=true") or []
        for job in jobs:
            meta = job.get("Meta") or {}
            if meta.get(OWNER_KEY) != OWNER_VALUE or meta.get(META_NODE) in keep:
                continue
            ns, jid = str(job["Namespace"]), str(job["ID"])
            path = f"/v1/job/{urllib.parse.quote(jid, safe='')}"
            self.request("DELETE", f"{path}?purge=true&namespace={urllib.parse.quote(ns)}")
            purged.append(f"{ns}/{jid}")
        return purged

    def stop(self) -> None:
        """Stop the clients (their tasks too), then the server, and remove the dirs."""
        if self._stopped:
            return
        self._stopped = True
        allocs = self._alloc_ids()
        try:
            for proc in self.client_procs:
                proc.stop(timeout=15)
            self.server.stop(timeout=15)
        finally:
            from devstack.docker import unmount_below

            for what in kill_processes_under(self.workdir):
                log.warning("killed a process the stopped Nomad cluster left: %s", what)
            remove_cgroups(self.cgroup_parents())
            release_leases(allocs)
            unmount_below(self.workdir)
            shutil.rmtree(self.workdir, ignore_errors=True)

    def cgroup_parents(self) -> list[str]:
        return [cgroup_parent(self.workdir, node) for node in self.clients]

    def _alloc_ids(self) -> set[str]:
        try:
            return {str(a["ID"]) for a in self.get("/v1/allocations?namespace=*")}
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
            return set()


def _three(ports: tuple[int, ...]) -> tuple[int, int, int]:
    http, rpc, serf = ports
    return http, rpc, serf


def cgroup_parent(cluster_dir: Path, node: NomadClientNode) -> str:
    """The client's cgroup parent: unique per cluster (its temp dir's name) and client."""
    return f"/vkgate-{cluster_dir.name}-{node.name}"


#: Where the cgroup hierarchies are mounted (v1: one per controller; v2: the unified tree).
CGROUP_ROOT = Path("/sys/fs/cgroup")


def remove_cgroups(parents: Sequence[str], root: Path = CGROUP_ROOT) -> None:
    """Remove the clients' cgroup parents, deepest first, in every hierarchy that has them
    (Nomad leaves the parent behind; a cgroup with a process in it stays: rmdir refuses)."""
    if not root.is_dir():
        return
    tops = [root / p.strip("/") for p in parents]
    tops += [h / p.strip("/") for h in root.iterdir() if h.is_dir() for p in parents]
    for top in tops:
        if not top.is_dir():
            continue
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def release_leases(alloc_ids: set[str], leases: Path = CNI_LEASES) -> list[Path]:
    """Remove the host-local address leases held for ``alloc_ids`` (a lease file is named by
    the address and holds the container ID — Nomad passes the allocation ID — on its first
    line); clients stopped with their allocations never tear those down.  Other leases stay."""
    removed: list[Path] = []
    if not alloc_ids or not leases.is_dir():
        return removed
    for lease in leases.iterdir():
        try:
            owner = lease.read_text().splitlines()[0].strip()
        except (OSError, IndexError, UnicodeDecodeError):
            continue
        if owner in alloc_ids:
            lease.unlink(missing_ok=True)
            removed.append(lease)
    return removed


def _call(
    address: str, tls: NomadTLS, token: str, method: str, path: str, *, body: Any = None
) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(address + path, data=data, method=method)
    if token:
        req.add_header("X-Nomad-Token", token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10, context=tls.context()) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        exc.close()  # the error holds the connection open
        raise
    return json.loads(raw) if raw.strip() else None


def _make_pki(
    directory: Path, client_ips: Sequence[str]
) -> tuple[NomadTLS, CertKey, list[CertKey]]:
    """A CA, the server's and each client agent's certificate, and an API client certificate."""
    ca = new_ca(directory, "nomad-ca", "vkgate-e2e-nomad-ca")
    server = issue(
        ca,
        directory,
        "nomad-server",
        cn=SERVER_NAME,
        dns=(SERVER_NAME, "localhost"),
        server=True,
        client=True,
    )
    agents = [
        issue(
            ca,
            directory,
            f"nomad-client-{i + 1}",
            cn="client.global.nomad",
            dns=("client.global.nomad", "localhost"),
            ips=(ip,),
            server=True,
            client=True,
        )
        for i, ip in enumerate(client_ips)
    ]
    api = issue(ca, directory, "nomad-api-client", cn="vkgate-e2e", client=True)
    return NomadTLS(ca.files.cert, api.cert, api.key), server, agents


def _tls_block(tls: NomadTLS, own: CertKey) -> dict[str, Any]:
    return {
        "http": True,
        "rpc": True,
        "ca_file": str(tls.ca_file),
        "cert_file": str(own.cert),
        "key_file": str(own.key),
        "verify_server_hostname": True,
        "verify_https_client": True,
    }


_COMMON: dict[str, Any] = {
    "datacenter": DATACENTER,
    "disable_update_check": True,
    "log_level": "INFO",
    "acl": {"enabled": True},
    "consul": {"auto_advertise": False, "server_auto_join": False, "client_auto_join": False},
    "vault": {"enabled": False},
}


def _server_config(
    wd: Path,
    tls: NomadTLS,
    cert: CertKey,
    ports: tuple[int, int, int],
    *,
    bench: bool = False,
    event_buffer_size: int = 0,
) -> str:
    http, rpc, serf = ports
    server: dict[str, Any] = {"enabled": True, "bootstrap_expect": 1}
    if event_buffer_size:
        # docs/design/nomad.md, "Event stream"
        server["event_buffer_size"] = event_buffer_size
    if bench:
        # the benchmark's two clients declare equal room (devstack.nomad.bench_client): spread
        # places a burst on both instead of filling one first (binpack, Nomad's default)
        server["default_scheduler_config"] = {"scheduler_algorithm": "spread"}
    cfg = {
        **_COMMON,
        "name": "vkgate-nomad-server",
        "data_dir": str(wd / "data"),
        "bind_addr": "127.0.0.1",
        "ports": {"http": http, "rpc": rpc, "serf": serf},
        "advertise": {"http": "127.0.0.1", "rpc": "127.0.0.1", "serf": "127.0.0.1"},
        "server": server,
        "client": {"enabled": False},
        "tls": _tls_block(tls, cert),
    }
    if bench:
        cfg["log_level"] = "WARN"
    return json.dumps(cfg, indent=2)


def _client_config(
    wd: Path,
    tls: NomadTLS,
    cert: CertKey,
    node: NomadClientNode,
    *,
    interface: str,
    server_rpc: str,
    ports: tuple[int, int, int],
    docker_host: str | None,
    bench_allocs: int = 0,
) -> str:
    http, rpc, serf = ports
    plugins: dict[str, Any] = {"raw_exec": {"config": {"enabled": True}}}
    if "docker" in node.drivers and docker_host:
        plugins["docker"] = docker_plugin(docker_host)
        # a bridge-mode allocation's network namespace is held by this local image, never
        # Nomad's default (pulled from a registry)
        plugins["docker"]["config"]["infra_image"] = PAUSE_IMAGE
    bridge: dict[str, Any] = {"cni_path": str(CNI_PATH)}
    if node.bridge:
        bridge["bridge_network_name"] = node.bridge
    if node.bridge_subnet:
        bridge["bridge_network_subnet"] = node.bridge_subnet
    if node.cni_subnet:
        bridge["cni_config_dir"] = str(wd / "cni")
    cfg = {
        **_COMMON,
        "name": node.name,
        "data_dir": str(wd / "data"),
        "bind_addr": node.ip,
        "ports": {"http": http, "rpc": rpc, "serf": serf},
        "advertise": {"http": node.ip, "rpc": node.ip, "serf": node.ip},
        "server": {"enabled": False},
        "client": {
            "enabled": True,
            "servers": [server_rpc],
            "network_interface": interface,
            "node_class": node.node_class,
            "node_pool": node.node_pool,
            "meta": dict(node.meta),
            **(
                {
                    "host_volume": {
                        name: {"path": str(wd / "hv" / name), "read_only": False}
                        for name in node.host_volumes
                    }
                }
                if node.host_volumes
                else {}
            ),
            "alloc_dir": str(wd / "alloc"),
            "state_dir": str(wd / "client"),
            # Two clients on one host: each its own cgroup tree, or one would reconcile away the
            # other's task cgroups; and each cluster its own (parallel e2e workers run one each).
            "cgroup_parent": cgroup_parent(wd.parent, node),
            **bridge,
            "options": {
                "fingerprint.denylist": FINGERPRINT_DENYLIST,
                "driver.denylist": "java,qemu" + ("" if "docker" in plugins else ",docker"),
            },
        },
        "plugin": plugins,
        "tls": _tls_block(tls, cert),
    }
    if bench_allocs:
        bench_client(cfg, bench_allocs)
    return json.dumps(cfg, indent=2)


def _bootstrap_acl(address: str, tls: NomadTLS, timeout: float) -> str:
    """The bootstrap (management) token, once the server has a leader."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            result = _call(address, tls, "", "POST", "/v1/acl/bootstrap")
            secret: str = result["SecretID"]
            return secret
        except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
            last = str(exc)
            time.sleep(0.25)
    raise DevstackError(f"nomad ACL bootstrap did not succeed in {timeout:.0f} s: {last}")


def apply_policy(
    cluster_address: str, tls: NomadTLS, management: str, rules: str, *, name: str = POLICY_NAME
) -> str:
    """Apply ``rules`` as the policy ``name`` and return a new client token's secret (a test's
    own narrower or wider policy takes its own name, never the shipped one's)."""
    _call(
        cluster_address,
        tls,
        management,
        "POST",
        f"/v1/acl/policy/{name}",
        body={
            "Name": name,
            "Description": f"vkgate e2e ({name})",
            "Rules": rules,
        },
    )
    token = _call(
        cluster_address,
        tls,
        management,
        "POST",
        "/v1/acl/token",
        body={"Name": name, "Type": "client", "Policies": [name]},
    )
    secret: str = token["SecretID"]
    return secret


def _clients_ready(address: str, tls: NomadTLS, token: str, names: set[str]) -> bool:
    try:
        nodes = _call(address, tls, token, "GET", "/v1/nodes")
    except (urllib.error.URLError, OSError, ValueError):
        return False
    ready = {n.get("Name") for n in nodes if n.get("Status") == "ready"}
    return names <= ready


#: Client 1's host volumes: one per replica of the e2e StatefulSet.
HOST_VOLUMES = ("vkgate-e2e-0", "vkgate-e2e-1")


def default_clients() -> tuple[NomadClientNode, ...]:
    return (
        NomadClientNode(
            "vkgate-nomad-c1",
            CLIENT_IPS[0],
            "class-a",
            {"vkgate-client": "c1"},
            ("raw_exec", "docker"),
            bridge="vkbr1",
            bridge_subnet=BRIDGE_SUBNETS[0],
            cni_subnet=CNI_SUBNETS[0],
            host_volumes=HOST_VOLUMES,
        ),
        NomadClientNode(
            "vkgate-nomad-c2",
            CLIENT_IPS[1],
            "class-b",
            {"vkgate-client": "c2"},
            ("raw_exec",),
            node_pool="pool-b",
            bridge="vkbr2",
            bridge_subnet=BRIDGE_SUBNETS[1],
            cni_subnet=CNI_SUBNETS[1],
        ),
    )


def bench_clients() -> tuple[NomadClientNode, ...]:
    """The benchmark's two clients (bench/nomad_burst.py ``--cluster``): the e2e clients'
    addresses, both in the default node pool (so a burst lands on both), raw_exec only (the
    bench's tasks run on mock_driver, which needs no plugin block), no host volumes."""
    return tuple(
        NomadClientNode(
            f"vkgate-bench-c{i + 1}",
            ip,
            "bench",
            {"vkgate-client": f"c{i + 1}"},
            ("raw_exec",),
            bridge=f"vkbr{i + 1}",
            bridge_subnet=BRIDGE_SUBNETS[i],
        )
        for i, ip in enumerate(CLIENT_IPS)
    )


def launch_nomad_cluster(
    *,
    docker_host: str | None = None,
    clients: Sequence[NomadClientNode] | None = None,
    workdir: Path | None = None,
    timeout: float = 120.0,
    policy: str | None = None,
    bench_allocs: int = 0,
    event_buffer_size: int = 0,
) -> NomadCluster:
    """Start the server and the clients, bootstrap ACLs, apply the shipped policy and wait for
    every client to be ready; the caller must ``stop()`` it.  ``policy``: ACL rules for vkgate's
    token instead of the shipped file (a test of a narrower policy).  ``bench_allocs``: each
    client declares room for that many small mock_driver allocations
    (``devstack.nomad.bench_client``), the server spreads placements and every agent logs at
    WARN (bench/nomad_burst.py ``--cluster``, with ``bench_clients()``).
    ``event_buffer_size``: the server setting (0: Nomad's default, 100)."""
    if not netns.isolated():
        raise DevstackError(
            "the Nomad cluster needs the e2e network namespace for its client addresses "
            "(run as root through `python -m devstack.netns`)"
        )
    if os.geteuid() != 0:
        raise DevstackError("the Nomad cluster's clients run as root (cgroups, docker socket)")
    nodes = tuple(clients or default_clients())
    exe = binary("nomad")
    wd = workdir or Path(tempfile.mkdtemp(prefix="vkgate-nomad-cluster-"))
    procs: list[Proc] = []
    started = time.monotonic()
    try:
        tls, server_cert, client_certs = _make_pki(wd / "pki", [n.ip for n in nodes])
        env = dict(os.environ, CHECKPOINT_DISABLE="1")
        for key in [k for k in env if k.startswith("NOMAD_")]:
            del env[key]
        sports = _three(free_ports(3))
        swd = wd / "server"
        swd.mkdir(parents=True)
        (swd / "agent.json").write_text(
            _server_config(
                swd,
                tls,
                server_cert,
                sports,
                bench=bench_allocs > 0,
                event_buffer_size=event_buffer_size,
            )
        )
        server = Proc(
            "nomad server",
            [str(exe), "agent", f"-config={swd / 'agent.json'}"],
            log_file=swd / "nomad.log",
            env=env,
            cwd=swd,
        )
        procs.append(server)
        address = f"https://127.0.0.1:{sports[0]}"
        local = f"https://localhost:{sports[0]}"
        management = _bootstrap_acl(local, tls, timeout)
        token = apply_policy(local, tls, management, policy or POLICY_FILE.read_text())
        for i, (node, cert) in enumerate(zip(nodes, client_certs, strict=True)):
            iface = f"vkn{i + 1}"
            netns.add_veth_address(iface, node.ip)
            cwd = wd / node.name
            cwd.mkdir(parents=True)
            for name in node.host_volumes:
                (cwd / "hv" / name).mkdir(parents=True)
            if node.cni_subnet:
                (cwd / "cni").mkdir()
                conflist = cni_conflist(node, i, cwd / "cni")
                (cwd / "cni" / f"{CNI_NETWORK}.conflist").write_text(json.dumps(conflist))
            ports = _three(free_ports(3, node.ip))
            (cwd / "agent.json").write_text(
                _client_config(
                    cwd,
                    tls,
                    cert,
                    node,
                    interface=iface,
                    server_rpc=f"127.0.0.1:{sports[1]}",
                    ports=ports,
                    docker_host=docker_host,
                    bench_allocs=bench_allocs,
                )
            )
            procs.append(
                Proc(
                    f"nomad client {node.name}",
                    [str(exe), "agent", f"-config={cwd / 'agent.json'}"],
                    log_file=cwd / "nomad.log",
                    env=env,
                    cwd=cwd,
                )
            )
        names = {n.name for n in nodes}
        for proc in procs:
            if not proc.alive():
                raise DevstackError(f"{proc.name} exited: {proc.log_tail()}")
        wait_for(
            f"nomad clients {sorted(names)} ready",
            lambda: _clients_ready(local, tls, management, names),
            timeout=timeout,
            interval=0.25,
            proc=procs[-1],
        )
        return NomadCluster(
            workdir=wd,
            address=address,
            tls=tls,
            management_token=management,
            token=token,
            clients=nodes,
            server=server,
            client_procs=tuple(procs[1:]),
            ready_seconds=time.monotonic() - started,
            server_cert=server_cert,
        )
    except BaseException:
        for proc in reversed(procs):
            log.error("%s log tail:\n%s", proc.name, proc.log_tail(2000))
            proc.stop(timeout=5)
        if workdir is None:
            shutil.rmtree(wd, ignore_errors=True)
        raise
