"""Run ``vkgate run`` as a child process against a devstack control plane.

Why a subprocess and not ``App`` in-process: the e2e tier must see what an operator sees — the
real CLI, the real config file, real signals (SIGTERM for a clean stop, SIGKILL for a crash),
a restart that re-reads state.  It also keeps the test process free of the agent's event loop.

``GatewayProcess.start()`` writes ``vkgate.toml`` (defaults below, merged with the caller's
settings), starts ``python -m gateway.cli run -c <toml>``, and returns once the agent has
touched its Node: the Node exists and either it or the node's Lease changed since before the
start (so a restart waits for the *new* process, not the old Node).

Defaults: simulated backend with a state file (restarts adopt their workloads), admin
credentials, kubelet on 127.0.0.1 with a free port and a serving cert the API server trusts,
the API server's kubelet-client CA as the kubelet's client CA, metrics on a free port.  With
``nodes`` (``[[nodes]]``, docs/design/multinode.md) every entry gets its own free kubelet port
and serving certificate, and ``start()`` waits for every node.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devstack.controlplane import ControlPlane
from devstack.process import DevstackError, Proc, free_port, wait_for
from gateway.config import to_toml
from vkgate_core.settings import merge_tables


def serving_ips(settings: Mapping[str, Any]) -> tuple[str, ...]:
    """The IP SANs a gateway's serving certificate needs: 127.0.0.1, the configured
    ``kubelet.address`` and ``node.internal_ip`` (the address the API server and
    metrics-server dial).  A wildcard listen address names no peer and is left out."""
    found = ["127.0.0.1"]
    for value in (
        (settings.get("kubelet") or {}).get("address"),
        (settings.get("node") or {}).get("internal_ip"),
    ):
        try:
            ip = ipaddress.ip_address(str(value or ""))
        except ValueError:
            continue
        if not ip.is_unspecified and str(ip) not in found:
            found.append(str(ip))
    return tuple(found)


def default_settings(cp: ControlPlane, workdir: Path, node_name: str) -> dict[str, Any]:
    """Defaults under the caller's settings; the serving certificate is issued after the merge
    (``GatewayProcess``) so that it covers the addresses finally configured."""
    return {
        "node": {"name": node_name},
        "kube": {"kubeconfig": str(cp.kubeconfig)},
        "kubelet": {
            "address": "127.0.0.1",
            "port": free_port(),
            "client_ca_file": str(cp.kubelet_client_ca_file),
            "metrics_address": f"127.0.0.1:{free_port()}",
        },
        "log": {"level": "debug"},
        "backend": {
            "kind": "simulated",
            "simulated": {"state_file": str(workdir / "simulated-state.json"), "start_delay": 0.2},
        },
    }


#: Every ``GatewayProcess`` started in this interpreter (``live_node_names``).
_STARTED: weakref.WeakSet[GatewayProcess] = weakref.WeakSet()


def live_node_names() -> set[str]:
    """The virtual nodes a gateway process started here still serves (its process is alive):
    a shared backend's clean-up between tests leaves their workloads alone."""
    return {n for gw in list(_STARTED) if gw.alive() for n in gw.node_names}


class GatewayProcess:
    """One ``vkgate run`` child process with its config file and log."""

    def __init__(
        self,
        cp: ControlPlane,
        workdir: Path,
        settings: Mapping[str, Any] | None = None,
        *,
        node_name: str | None = None,
        ready_timeout: float = 60.0,
    ) -> None:
        self.cp = cp
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        entries = list((settings or {}).get("nodes") or [])
        name = (
            node_name
            or (entries[0]["name"] if entries else "")
            or (settings or {}).get("node", {}).get("name")
            or _unique_name()
        )
        self.settings = merge_tables(default_settings(cp, workdir, name), settings or {})
        self.settings["node"]["name"] = name
        if entries:  # [[nodes]]: every node its own kubelet port and serving certificate
            self.settings["nodes"] = [self._node_entry(cp, e) for e in entries]
        else:
            self._serving_cert(cp, name, self.settings["kubelet"], serving_ips(self.settings))
        #: Every virtual node this process serves (``[[nodes]]`` or the one ``[node]``).
        self.node_names: list[str] = [e["name"] for e in entries] or [name]
        self.node_name: str = name
        self.config_path = workdir / "vkgate.toml"
        self.config_path.write_text(to_toml(self.settings))
        self.log_path = workdir / "gateway.log"
        self.ready_timeout = ready_timeout
        self.proc: Proc | None = None
        self.starts = 0

    def _node_entry(self, cp: ControlPlane, entry: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(entry)
        kubelet = out["kubelet"] = {"port": free_port(), **(entry.get("kubelet") or {})}
        merged = merge_tables(self.settings, {"node": out, "kubelet": kubelet})
        self._serving_cert(cp, str(entry["name"]), kubelet, serving_ips(merged))
        return out

    @staticmethod
    def _serving_cert(
        cp: ControlPlane, name: str, kubelet: dict[str, Any], ips: tuple[str, ...]
    ) -> None:
        if not kubelet.get("cert_file"):
            serving = cp.kubelet_serving_cert(name, ips=ips)
            kubelet["cert_file"], kubelet["key_file"] = str(serving.cert), str(serving.key)

    def kubelet_settings(self, node: str = "") -> dict[str, Any]:
        """The effective ``[kubelet]`` table of ``node`` (default: the first)."""
        node = node or self.node_name
        entries: list[dict[str, Any]] = self.settings.get("nodes") or []
        entry = next((e for e in entries if e["name"] == node), {})
        return merge_tables(self.settings.get("kubelet") or {}, entry.get("kubelet") or {})

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, *, wait: bool = True) -> GatewayProcess:
        if self.proc is not None and self.proc.alive():
            raise DevstackError(
                f"gateway {self.node_name} is already running (pid {self.proc.pid})"
            )
        before = self._fingerprint()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.starts += 1
        with self.log_path.open("a") as fh:
            fh.write(f"----- start #{self.starts} at {time.strftime('%H:%M:%S')} -----\n")
        _STARTED.add(self)
        self.proc = Proc(
            f"vkgate[{self.node_name}]",
            [sys.executable, "-m", "gateway.cli", "run", "-c", str(self.config_path)],
            log_file=self.log_path,
            env=env,
            cwd=self.workdir,
        )
        if wait:
            self.wait_ready(before)
        return self

    def wait_ready(self, before: tuple[str, ...] | None = None) -> None:
        """Block until the Node exists, the agent has written it or its Lease, and the agent
        its kubelet port accepts connections — the Node is registered before the kubelet
        server starts, so the Node alone is not "ready" for kubelet tests."""

        def running(node: str) -> bool:
            kubelet = self.kubelet_settings(node)
            if str(kubelet.get("enabled", True)).lower() in {"false", "0", "no"}:
                return True
            address = str(kubelet.get("address") or "127.0.0.1")
            try:
                with socket.create_connection((address, int(kubelet.get("port", 10250))), 0.5):
                    return True
            except OSError:
                return False

        def touched() -> bool:
            now = self._fingerprint()
            return (
                all(node_rv for node_rv in now[::2])
                and (before is None or now != before)
                and all(running(n) for n in self.node_names)
            )

        wait_for(
            f"gateway {self.node_name} to register its Node"
            + (f"s ({', '.join(self.node_names)})" if len(self.node_names) > 1 else ""),
            touched,
            timeout=self.ready_timeout,
            interval=0.2,
            proc=self.proc,
        )

    def _fingerprint(self) -> tuple[str, ...]:
        """(Node resourceVersion, Lease resourceVersion) of every node, "" where missing."""
        out: list[str] = []
        for name in self.node_names:
            node = self.cp.get(f"/api/v1/nodes/{name}")
            lease = self.cp.get(
                f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
            )
            out.append((node or {}).get("metadata", {}).get("resourceVersion", ""))
            out.append((lease or {}).get("metadata", {}).get("resourceVersion", ""))
        return tuple(out)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (clean shutdown), SIGKILL after ``timeout``; returns the exit code."""
        if self.proc is None:
            return None
        return self.proc.stop(timeout=timeout)

    def kill(self) -> int | None:
        """SIGKILL: a crash, no shutdown code runs."""
        if self.proc is None:
            return None
        self.proc.kill()
        return self.proc.stop(timeout=1)

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.alive():
            os.kill(self.proc.pid, sig)

    def restart(self, *, wait: bool = True) -> GatewayProcess:
        self.stop()
        return self.start(wait=wait)

    # -- inspection --------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc is not None else None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __repr__(self) -> str:
        return f"GatewayProcess(node={self.node_name!r}, pid={self.pid}, config={self.config_path})"


def _unique_name() -> str:
    return f"vk-e2e-{uuid.uuid4().hex[:6]}"


def run_cli(args: list[str], *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``vkgate <args>`` in a child interpreter (for CLI-level tests)."""
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
