"""The network of ``vkgate dev``: the address the node and its pods have, and a Service over them.

Why: Kubernetes refuses loopback addresses in EndpointSlices, and the dev agent's client used to
be 127.0.0.1 — a Service over the demo's pods had no endpoints at all.  So the demo can put the
node on an address that is not loopback (docs/backends/nomad.md, "Pod networking"):

* ``--node-ip IP``: an address of this machine, named by the developer.  It must be the first
  IPv4 address of its interface, because that is the address the Nomad client fingerprints
  (``attr.unique.network.ip-address``) and gives the pods (host networking); the node's
  InternalIP and the kubelet API use it too.
* ``--netns``: a network namespace of its own (root; ``devstack.netns``) holding
  ``NETNS_IP`` (TEST-NET-2) on a veth, so nothing of the machine's network is used or exposed;
  the printed commands then enter that namespace with ``nsenter``.
* neither: 127.0.0.1 as before; the demo says why the Service has no endpoints.

The sample Deployment serves a page on ``SAMPLE_PORT`` (the Nomad client's static port, host
networking) and the ``hello-vkgate`` Service selects it; the demo waits for its EndpointSlice to
hold the pod's ``podIP:port`` ready and fetches the page from there.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from devstack import netns
from devstack.process import DevstackError

#: The node's address inside ``vkgate dev --netns`` (RFC 5737; exists only in that namespace).
NETNS_IP = "198.51.100.30"
NETNS_INTERFACE = "vkdev0"
#: The port the sample app serves on (a static port on the Nomad client: host networking).
SAMPLE_PORT = 18080
SERVICE = "hello-vkgate"
PAGE = "hello from vkgate over a Service"

Kubectl = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class NodeAddress:
    """Where the demo's node and pods live."""

    ip: str = "127.0.0.1"
    #: The interface whose first address ``ip`` is (the Nomad client's ``network_interface``).
    interface: str = "lo"
    #: The pid whose network namespace the demo runs in (``--netns``), else None.
    netns_pid: int | None = None

    @property
    def routable(self) -> bool:
        """Not loopback: Kubernetes accepts it in EndpointSlices."""
        return not ipaddress.ip_address(self.ip).is_loopback

    def enter(self) -> str:
        """The prefix that runs a printed command where the demo's network is."""
        return f"nsenter --net=/proc/{self.netns_pid}/ns/net " if self.netns_pid else ""

    def settings(self) -> dict[str, Any]:
        """The gateway settings that put the node on this address."""
        if not self.routable:
            return {}
        return {"node": {"internal_ip": self.ip}, "kubelet": {"address": self.ip}}


def first_ipv4_addresses() -> dict[str, str]:
    """interface → its first IPv4 address, from ``ip -o -4 addr show``."""
    exe = shutil.which("ip")
    if exe is None:
        raise DevstackError("the `ip` command (iproute2) is needed to find --node-ip's interface")
    out = subprocess.run(
        [exe, "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet":
            found.setdefault(fields[1].split("@")[0], fields[3].split("/")[0])
    return found


def interface_of(ip: str, addresses: dict[str, str] | None = None) -> str:
    """The interface whose first IPv4 address is ``ip``; DevstackError saying why not."""
    try:
        if ipaddress.ip_address(ip).version != 4:
            raise ValueError
    except ValueError:
        raise DevstackError(f"--node-ip {ip!r}: expected an IPv4 address of this machine") from None
    addresses = first_ipv4_addresses() if addresses is None else addresses
    for name, first in addresses.items():
        if first == ip:
            return name
    raise DevstackError(
        f"--node-ip {ip}: no interface has it as its first IPv4 address (the Nomad client "
        f"takes an interface's first address as its own); first addresses here: "
        + (", ".join(f"{n} {a}" for n, a in sorted(addresses.items())) or "none")
    )


def reexec_in_netns(argv: Sequence[str]) -> NoReturn:
    """Run ``vkgate dev`` again inside a network namespace of its own (root only)."""
    command = [sys.executable, "-m", "devstack.netns", "--require", "--"]
    os.execvp(command[0], [*command, sys.executable, "-m", "gateway.cli", *argv])


def choose(node_ip: str | None, use_netns: bool) -> NodeAddress:
    """The node's address for ``--node-ip`` / ``--netns`` (inside the namespace already)."""
    if use_netns:
        if not netns.isolated():
            raise DevstackError("--netns: not inside the namespace vkgate dev made")
        netns.add_veth_address(NETNS_INTERFACE, NETNS_IP)
        return NodeAddress(NETNS_IP, NETNS_INTERFACE, os.getpid())
    if node_ip:
        return NodeAddress(node_ip, interface_of(node_ip))
    return NodeAddress()


def server_script(python: str = sys.executable) -> str:
    """Shell lines that serve ``PAGE`` on the pod's address, ``SAMPLE_PORT`` (raw_exec runs the
    host's Python; ``POD_IP`` comes from a ``status.podIP`` fieldRef)."""
    return (
        f'mkdir -p www && echo "{PAGE}" > www/index.html && '
        f'exec {shlex.quote(python)} -m http.server {SAMPLE_PORT} --bind "$POD_IP" '
        "--directory www"
    )


def sample_service(selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": "default"},
        "spec": {"selector": selector, "ports": [{"port": 80, "targetPort": "http"}]},
    }


def ready_endpoint(cp: Any) -> tuple[str, int] | None:
    """(address, port) of a ready endpoint in the Service's EndpointSlices, else None."""
    found = cp.get(
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
        f"?labelSelector=kubernetes.io%2Fservice-name%3D{SERVICE}"
    )
    for s in (found or {}).get("items") or []:
        ports = [p.get("port") for p in s.get("ports") or [] if p.get("port")]
        for e in s.get("endpoints") or []:
            if ports and (e.get("conditions") or {}).get("ready") and e.get("addresses"):
                return str(e["addresses"][0]), int(ports[0])
    return None


def fetch(url: str, timeout: float = 3.0) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return str(resp.read().decode(errors="replace"))
    except OSError as exc:
        return f"<{exc}>"


def service_step(
    cp: Any, k: Kubectl, addr: NodeAddress, selector: dict[str, str], say: Callable[[str], None]
) -> str:
    """Apply the Service; on a routable node, wait for its EndpointSlice and fetch the page from
    ``podIP:port``.  "" or what failed."""
    import json

    res = k("apply", "-f", "-", input=json.dumps(sample_service(selector)))
    if res.returncode != 0:
        return f"kubectl apply of Service {SERVICE} failed: {res.stderr.strip()}"
    if not addr.routable:
        say(
            f"Service {SERVICE}: no endpoints on {addr.ip} — Kubernetes refuses loopback "
            "addresses in EndpointSlices; run `vkgate dev --node-ip <an address of this "
            "machine>` or `vkgate dev --netns` (root) to see it work"
        )
        return ""
    deadline = time.monotonic() + 60
    endpoint = None
    while time.monotonic() < deadline and endpoint is None:
        endpoint = ready_endpoint(cp)
        if endpoint is None:
            time.sleep(0.5)
    if endpoint is None:
        return f"Service {SERVICE} got no ready endpoint in 60 s"
    ip, port = endpoint
    page = ""
    while time.monotonic() < deadline and PAGE not in page:
        page = fetch(f"http://{ip}:{port}/")
        if PAGE not in page:
            time.sleep(0.5)
    if PAGE not in page:
        return f"Service {SERVICE}'s endpoint {ip}:{port} does not answer: {page.strip()}"
    say(f"Service {SERVICE}: EndpointSlice endpoint {ip}:{port} (ready) answers: {page.strip()}")
    return ""


def try_lines(addr: NodeAddress, kubectl_cmd: str) -> list[str]:
    """The Service lines of the summary."""
    pre = addr.enter()
    lines = [
        f"    {pre}{kubectl_cmd} get endpointslices -l kubernetes.io/service-name={SERVICE}",
    ]
    if addr.routable:
        lines.append(f"    {pre}curl http://{addr.ip}:{SAMPLE_PORT}/   # the pod's address")
    else:
        lines.append(f"    # no endpoints on {addr.ip}: vkgate dev --node-ip <address> or --netns")
    return lines
