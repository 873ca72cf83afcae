"""A real Nomad dev agent (server + client in one process) on loopback, raw_exec enabled.

Why a config file on top of ``-dev``: dev mode alone would use fixed ports 4646-4648 (parallel
sessions collide), run the update check, and let the cloud fingerprinters probe 169.254.169.254.
The file (docs/design/nomad.md, "Dev agent") sets free ports on 127.0.0.1, turns the update check
off (plus ``CHECKPOINT_DISABLE=1``), denies the ``env_*`` fingerprinters and the docker/java/qemu
drivers, enables raw_exec explicitly and puts all state under our temp dir.

Root and cgroups: as root Nomad must create its own cgroup and treats failure as fatal; as
non-root it turns cgroups off and raw_exec still works.  ``launch_nomad(run_as=...)`` handles
both: on the build host (cgroup v1, root) the plain root agent works and creates ``/nomad``
cgroups; where that fails, ``auto`` retries as ``nobody``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from devstack.controlplane import binary
from devstack.process import DevstackError, Proc, free_ports, kill_processes_under, wait_for

log = logging.getLogger("vkgate.devstack.nomad")

DATACENTER = "dc1"
FINGERPRINT_DENYLIST = "env_aws,env_gce,env_azure,env_digitalocean"
DRIVER_DENYLIST = "docker,java,qemu"


def docker_plugin(docker_host: str) -> dict[str, Any]:
    """The docker driver pointed at a private dockerd (``devstack.docker``).

    ``gc.image = false``: Nomad would otherwise delete the locally imported test image a few
    minutes after its last task, and the next task would try to pull it.  Images whose tag is
    not ``latest`` and that exist locally are never pulled (``force_pull`` false)."""
    return {
        "config": {
            "endpoint": docker_host,
            "gc": {"image": False, "container": True},
            "volumes": {"enabled": True},
            "allow_privileged": False,
        }
    }


def _config(
    *,
    workdir: Path,
    http: int,
    rpc: int,
    serf: int,
    docker_host: str | None = None,
    network_interface: str = "lo",
    bench_allocs: int = 0,
    event_buffer_size: int = 0,
) -> str:
    # HCL is a superset of JSON: the agent reads a .json config file directly.
    cfg: dict[str, Any] = {
        "datacenter": DATACENTER,
        "bind_addr": "127.0.0.1",
        "data_dir": str(workdir / "data"),
        "disable_update_check": True,
        "log_level": "INFO",
        "ports": {"http": http, "rpc": rpc, "serf": serf},
        "advertise": {"http": "127.0.0.1", "rpc": "127.0.0.1", "serf": "127.0.0.1"},
        "client": {
            "enabled": True,
            # its first address is the client's: the pods' address with host networking
            "network_interface": network_interface,
            "alloc_dir": str(workdir / "alloc"),
            "state_dir": str(workdir / "client"),
            "options": {
                "fingerprint.denylist": FINGERPRINT_DENYLIST,
                "driver.denylist": DRIVER_DENYLIST if docker_host is None else "java,qemu",
            },
        },
        "plugin": {
            "raw_exec": {"config": {"enabled": True}},
            **({"docker": docker_plugin(docker_host)} if docker_host else {}),
        },
        "consul": {"auto_advertise": False, "server_auto_join": False, "client_auto_join": False},
        "vault": {"enabled": False},
    }
    if bench_allocs:
        bench_client(cfg, bench_allocs)
    if event_buffer_size:
        # index batches a server keeps for event-stream subscribers (Nomad's default: 100);
        # one further behind is dropped (docs/design/nomad.md, "Event stream")
        cfg["server"] = {"event_buffer_size": event_buffer_size}
    return json.dumps(cfg, indent=2)


#: What one bench allocation may hold at most (``bench_client``): 10 MHz, 16 MB, 16 MB disk.
BENCH_ALLOC_MHZ, BENCH_ALLOC_MB, BENCH_ALLOC_DISK_MB = 10, 16, 16


def bench_client(cfg: dict[str, Any], allocs: int) -> None:
    """A client that declares room for ``allocs`` small allocations (bench/nomad_burst.py).

    The benchmark's tasks use ``mock_driver`` (registered in Nomad builds without the
    ``release`` tag, as ours: helper/pluginutils/catalog/register_testing.go), which runs in the
    agent's process and uses no CPU or memory of its own, so the client *declares* the capacity
    (``cpu_total_compute``, ``memory_total_mb``, ``disk_total_mb``) instead of fingerprinting
    the machine's.  ``gc_max_allocs`` is raised so the client does not garbage-collect
    (and slow down) while it holds thousands of allocations; the agent's log at WARN.  The
    e2e cluster's clients take the same settings for the benchmark
    (``devstack.nomad_cluster.launch_nomad_cluster(bench_allocs=N)``)."""
    client = cfg["client"]
    client["cpu_total_compute"] = max(4000, allocs * BENCH_ALLOC_MHZ * 2)
    client["memory_total_mb"] = max(4096, allocs * BENCH_ALLOC_MB * 2)
    client["disk_total_mb"] = max(4096, allocs * BENCH_ALLOC_DISK_MB * 2)
    client["disk_free_mb"] = client["disk_total_mb"]
    client["gc_max_allocs"] = max(50, allocs * 2)
    cfg["log_level"] = "WARN"


@dataclass
class NomadAgent:
    """A running ``nomad agent -dev``."""

    workdir: Path
    address: str
    proc: Proc
    datacenter: str = DATACENTER
    ready_seconds: float = 0.0
    _stopped: bool = field(default=False, repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.address + path, timeout=5) as resp:
            return json.loads(resp.read())

    def nodes(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.get("/v1/nodes")
        return result

    def backend_settings(self) -> dict[str, Any]:
        """``[backend.nomad]`` keys for a vkgate node on this agent (no ACLs, plain HTTP)."""
        return {"address": self.address}

    def http_client(self, *, timeout: float = 10.0) -> httpx.Client:
        """An httpx client on the agent's HTTP API."""
        return httpx.Client(base_url=self.address, timeout=timeout, trust_env=False)

    def restart_after_crash(self, *, timeout: float = 90.0) -> float:
        """``kill -9`` the agent (and its tasks), start it again on the same ports and wait for
        a leader and a ready node; returns the seconds that took.  A dev agent keeps its state
        in memory: the new one knows no jobs (backend state loss)."""
        self.proc.kill()
        self.proc.stop(timeout=0)  # reap, and SIGKILL what is left of its session (tasks)
        self.proc = self.proc.respawn()
        started = time.monotonic()
        wait_for(
            "nomad leader and a ready node",
            lambda: _ready_node(self.address),
            timeout=timeout,
            interval=0.25,
            proc=self.proc,
        )
        return time.monotonic() - started

    def stop(self) -> None:
        """Stop the agent (its whole process group: raw_exec tasks too) and remove its dirs."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.proc.stop(timeout=15)
        finally:
            for what in kill_processes_under(self.workdir):
                log.warning("killed a process the stopped Nomad agent left: %s", what)
            unmount_under(self.workdir)
            shutil.rmtree(self.workdir, ignore_errors=True)


def mounts_under(path: Path, mountinfo: str) -> list[str]:
    """Mount points strictly below ``path`` in a ``/proc/<pid>/mountinfo`` text, deepest first."""
    prefix = str(path).rstrip("/") + "/"
    found = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
            if point.startswith(prefix):
                found.append(point)
    return sorted(found, key=lambda m: (-m.count("/"), m))


def unmount_under(path: Path) -> int:
    """Detach what a root Nomad client left mounted below ``path``: each task's ``secrets``
    and ``private`` tmpfs, unmounted only when the client destroys the allocation (garbage
    collection), so a stopped agent with allocations left behind leaves two mounts per
    allocation that ``rmtree`` cannot remove (measured: 1,060 after a 1,000-pod bench run).
    Returns how many were detached; not root or nothing mounted: 0."""
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return 0
    points = mounts_under(path, text)
    if not points or os.geteuid() != 0:
        return 0
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    mnt_detach = 2
    done = 0
    for point in points:
        if libc.umount2(point.encode(), mnt_detach) == 0:
            done += 1
        else:
            log.warning("could not unmount %s: errno %d", point, ctypes.get_errno())
    return done


def _ready_node(agent_address: str) -> dict[str, Any] | None:
    def get(path: str) -> Any:
        with urllib.request.urlopen(agent_address + path, timeout=5) as resp:
            return json.loads(resp.read())

    try:
        if not get("/v1/status/leader"):
            return None
        for node in get("/v1/nodes"):
            if node.get("Status") == "ready":
                found: dict[str, Any] = node
                return found
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return None


def _unprivileged_ids() -> tuple[int, int]:
    try:
        pw = pwd.getpwnam(os.environ.get("VKGATE_NOMAD_USER") or "nobody")
    except KeyError as exc:
        raise DevstackError(f"no unprivileged user to run Nomad as: {exc}") from exc
    return pw.pw_uid, pw.pw_gid


def _chown_tree(path: Path, uid: int, gid: int, *, skip: Path) -> None:
    """chown everything under ``path`` except ``skip`` (a hard link into the shared cache)."""
    os.chown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            p = Path(root) / name
            if p != skip and skip not in p.parents:
                os.chown(p, uid, gid)


def _start_once(
    exe: Path,
    wd: Path,
    timeout: float,
    ids: tuple[int, int] | None,
    *,
    docker_host: str | None = None,
    network_interface: str = "lo",
    bench_allocs: int = 0,
    event_buffer_size: int = 0,
) -> NomadAgent:
    http, rpc, serf = free_ports(3)
    conf = wd / "agent.json"
    conf.write_text(
        _config(
            workdir=wd,
            http=http,
            rpc=rpc,
            serf=serf,
            docker_host=docker_host,
            network_interface=network_interface,
            bench_allocs=bench_allocs,
            event_buffer_size=event_buffer_size,
        )
    )
    env = dict(os.environ, CHECKPOINT_DISABLE="1")
    if ids is not None:
        # The cache under $HOME is usually not traversable for `nobody`: link (or copy) the
        # binary into the work dir; it stays root-owned and world-executable.
        local = wd / "bin" / exe.name
        if not local.exists():
            local.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(exe, local)
            except OSError:
                shutil.copy2(exe, local)
        exe = local
        _chown_tree(wd, *ids, skip=local)
        env["HOME"] = str(wd)
    address = f"http://127.0.0.1:{http}"
    started = time.monotonic()
    proc = Proc(
        "nomad" if ids is None else f"nomad (uid {ids[0]})",
        [str(exe), "agent", "-dev", f"-config={conf}"],
        log_file=wd / "nomad.log",
        env=env,
        cwd=wd,
        user=ids[0] if ids else None,
        group=ids[1] if ids else None,
    )
    try:
        wait_for(
            "nomad leader and a ready node",
            lambda: _ready_node(address),
            timeout=timeout,
            interval=0.25,
            proc=proc,
        )
    except BaseException:
        proc.stop(timeout=5)
        raise
    return NomadAgent(
        workdir=wd, address=address, proc=proc, ready_seconds=time.monotonic() - started
    )


def launch_nomad(
    *,
    workdir: Path | None = None,
    timeout: float = 90.0,
    run_as: str = "",
    docker_host: str | None = None,
    network_interface: str = "lo",
    bench_allocs: int = 0,
    event_buffer_size: int = 0,
) -> NomadAgent:
    """Start the dev agent and wait for a leader and a ready node; the caller must stop it.

    ``run_as`` (default ``$VKGATE_NOMAD_RUN_AS`` or ``auto``): ``root`` keeps the current user;
    ``unprivileged`` runs the agent as ``nobody`` (``$VKGATE_NOMAD_USER``) when we are root, so
    Nomad turns cgroups off; ``auto`` tries root first and falls back to unprivileged when the
    agent dies on a cgroup error (cgroup v2 in a container: ``subtree_control: device or
    resource busy``).  Measured here (cgroup v1, root): root works, cgroups under ``/nomad``.
    ``docker_host`` (``unix://…`` of a private dockerd) enables the docker driver; the agent
    then runs as root (the socket is root's).  ``network_interface``: the interface whose first
    address the client fingerprints as its own (``vkgate dev --node-ip``/``--netns``).
    ``bench_allocs``: a client declaring room for that many small mock_driver allocations
    (``bench_client``; bench/nomad_burst.py).  ``event_buffer_size``: the server setting
    (0: Nomad's default, 100).
    """
    mode = run_as or os.environ.get("VKGATE_NOMAD_RUN_AS", "auto")
    if mode not in {"auto", "root", "unprivileged"}:
        raise DevstackError(f"run_as must be auto, root or unprivileged, got {mode!r}")
    exe = binary("nomad")
    wd = workdir or Path(tempfile.mkdtemp(prefix="vkgate-nomad-"))
    is_root = os.geteuid() == 0
    try:
        if mode == "unprivileged" and is_root and docker_host is None:
            return _start_once(
                exe,
                wd,
                timeout,
                _unprivileged_ids(),
                network_interface=network_interface,
                bench_allocs=bench_allocs,
                event_buffer_size=event_buffer_size,
            )
        try:
            return _start_once(
                exe,
                wd,
                timeout,
                None,
                docker_host=docker_host,
                network_interface=network_interface,
                bench_allocs=bench_allocs,
                event_buffer_size=event_buffer_size,
            )
        except DevstackError as exc:
            if docker_host or not (mode == "auto" and is_root and "cgroup" in str(exc).lower()):
                raise
            log.warning("nomad as root failed on cgroups; retrying as an unprivileged user")
            for leftover in ("data", "alloc", "client"):
                shutil.rmtree(wd / leftover, ignore_errors=True)
            return _start_once(
                exe,
                wd,
                timeout,
                _unprivileged_ids(),
                network_interface=network_interface,
                bench_allocs=bench_allocs,
                event_buffer_size=event_buffer_size,
            )
    except BaseException:
        if workdir is None:
            shutil.rmtree(wd, ignore_errors=True)
        raise


@contextlib.contextmanager
def start_nomad(*, workdir: Path | None = None, timeout: float = 90.0) -> Iterator[NomadAgent]:
    agent = launch_nomad(workdir=workdir, timeout=timeout)
    try:
        yield agent
    finally:
        agent.stop()
