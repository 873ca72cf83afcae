"""``kubectl port-forward`` and ``kubectl attach`` on Nomad tasks, all the way through: real
kubectl 1.37 → real kube-apiserver → vkgate's kubelet API → a raw_exec task on the e2e Nomad
cluster (ACLs, mTLS, two clients).

A raw_exec task runs on its client's network, so a process listening on ``0.0.0.0:<port>``
answers at the client's address — the pod's ``status.podIP`` — and vkgate forwards there.
The ``web`` pod makes 1 MiB of random bytes, prints their sha256 and serves them
(``busybox httpd``), and hashes what it is sent on a second port (``busybox nc -ll -e
sha256sum``: it reads until the client half-closes, then answers).  Every transfer is
checked against the pod's own hash: the bytes arrive byte for byte, both ways.

The task runs on its client's network (``network_mode = "host"``), so the pod's address is
the client's, where the client's Nomad agent serves its API too: ``web`` declares its ports
(Nomad reserves each), and port-forward reaches those and refuses the agent's
(docs/kubelet.md, "Port-forward").

What reaches vkgate is recorded too: kubectl's default WebSocket tunnel and its SPDY mode
(``KUBECTL_PORT_FORWARD_WEBSOCKETS=false``) both arrive as SPDY ``portforward.k8s.io`` (the
API server ends the tunnel); a WebSocket ``v4.channel.k8s.io`` client of the API server
arrives as a WebSocket.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import random
import re
import socket
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
from podjson import pod_json, pod_with
from waiting import wait_until

from devstack.agent import GatewayProcess

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024
CONCURRENT = 8


def free_port() -> int:
    """A port free on every address of this network namespace (the Nomad clients are in it)."""
    for _ in range(100):
        port = random.randint(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port")


def phase(kubectl: Any, name: str) -> str:
    return str(kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}", check=False).stdout)


@dataclass(frozen=True)
class Web:
    name: str
    uid: str
    pod_ip: str
    http: int  # GET /blob: 1 MiB
    digest: int  # sha256 of what it is sent, after the client half-closed
    quiet: int  # declared, nothing listens
    blob_sha: str


@pytest.fixture(scope="module")
def gateway(
    control_plane: Any, nomad_agent: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(
        control_plane,
        tmp_path_factory.mktemp("gateway"),
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_agent.backend_settings(), "template": "nomad/raw_exec.j2"},
            }
        },
    )
    try:
        yield gw.start()
    finally:
        gw.stop(timeout=15)
        print(f"----- {gw!r} log (tail) -----\n{gw.log_text()[-6000:]}")


@pytest.fixture(scope="module")
def web(gateway: GatewayProcess, kubectl: Any) -> Iterator[Web]:
    name = f"web-{uuid.uuid4().hex[:5]}"
    http, digest, quiet = free_port(), free_port(), free_port()
    script = (
        'd="$NOMAD_TASK_DIR/www"; mkdir -p "$d"; head -c 1048576 /dev/urandom > "$d/blob"; '
        'echo "blob $(sha256sum "$d/blob" | cut -d" " -f1)"; '
        f"busybox nc -ll -p {digest} -e sha256sum & "
        f'exec busybox httpd -f -p {http} -h "$d"'
    )
    container = {
        "name": "app",
        "command": ["/bin/sh", "-c", script],
        "ports": [
            {"name": "http", "containerPort": http},
            {"name": "digest", "containerPort": digest},
            {"name": "quiet", "containerPort": quiet},
        ],
    }
    kubectl("apply", "-f", "-", input=pod_with(name, gateway.node_name, container, policy="Never"))
    wait_until(f"{name} Running", lambda: phase(kubectl, name) == "Running")

    def blob_sha() -> str:
        m = re.search(r"^blob ([0-9a-f]{64})$", kubectl("logs", name, check=False).stdout, re.M)
        return m[1] if m else ""

    sha = wait_until(f"{name}'s hash in its log", blob_sha, timeout=20)
    got = kubectl("get", "pod", name, "-o", "jsonpath={.metadata.uid} {.status.podIP}").stdout
    uid, pod_ip = got.split()

    def listening() -> bool:
        for port in (http, digest):
            with contextlib.suppress(OSError), socket.create_connection((pod_ip, port), 1):
                continue
            return False
        return True

    wait_until(f"{name} listening on {pod_ip}", listening, timeout=20)
    yield Web(name, uid, pod_ip, http, digest, quiet, sha)
    kubectl("delete", "pod", name, "--wait=false", check=False)


# --------------------------------------------------------------------------- kubectl


class Lines:
    """A pipe read on a thread, line by line."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._run, args=(pipe,), daemon=True).start()

    def _run(self, pipe: IO[bytes]) -> None:
        for raw in iter(pipe.readline, b""):
            self.lines.put(raw.decode(errors="replace").rstrip("\n"))
        self.lines.put(None)

    def next(self, timeout: float) -> str | None:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout}s; so far: {self.seen}") from None
        if line is not None:
            self.seen.append(line)
        return line

    def drain(self, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        with contextlib.suppress(AssertionError):
            while time.monotonic() < deadline:
                if self.next(max(0.05, deadline - time.monotonic())) is None:
                    break
        return self.seen


def kubectl_env(websockets: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if websockets is not None:
        env["KUBECTL_PORT_FORWARD_WEBSOCKETS"] = websockets
    return env


@contextlib.contextmanager
def port_forward(
    control_plane: Any, kubectl_path: Path, pod: str, *ports: int, websockets: str | None = None
) -> Iterator[tuple[list[int], Lines]]:
    """``kubectl port-forward pod/<pod> :<port>…`` on 127.0.0.1; yields the local ports (in
    the order given) and kubectl's stderr."""
    cmd = [
        str(kubectl_path),
        f"--kubeconfig={control_plane.kubeconfig}",
        "port-forward",
        "--address=127.0.0.1",
        f"pod/{pod}",
        *(f":{p}" for p in ports),
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=kubectl_env(websockets)
    )
    assert proc.stdout is not None and proc.stderr is not None
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        local: dict[int, int] = {}
        while len(local) < len(ports):
            line = out.next(timeout=30)
            if line is None:
                raise AssertionError(f"kubectl exited: {err.drain(2)}")
            m = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)", line)
            if m:
                local[int(m[2])] = int(m[1])
        yield [local[p] for p in ports], err
    finally:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            pipe.close()


def http_get(port: int, path: str) -> bytes:
    """The body of ``GET path`` (HTTP/1.0: the server closes after it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: pod\r\n\r\n".encode())
        data = bytearray()
        while chunk := s.recv(1 << 16):
            data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    assert re.match(rb"HTTP/1\.[01] 200 ", head), head[:200]
    return body


def upload(port: int, payload: bytes) -> bytes:
    """Send ``payload``, half-close, return the answer (the pod's ``sha256sum`` line)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        answer = bytearray()
        while chunk := s.recv(1 << 16):
            answer += chunk
    return bytes(answer)


def kubelet_lines(gateway: GatewayProcess, pod: str, needle: str) -> list[str]:
    return [ln for ln in gateway.log_text().splitlines() if pod in ln and needle in ln]


# --------------------------------------------------------------------------- port-forward


@pytest.mark.parametrize("websockets", [None, "false"], ids=["default-websocket", "spdy"])
def test_port_forward_moves_a_mebibyte_both_ways_and_many_connections_at_once(
    gateway: GatewayProcess,
    web: Web,
    control_plane: Any,
    kubectl_path: Path,
    websockets: str | None,
) -> None:
    with port_forward(
        control_plane, kubectl_path, web.name, web.http, web.digest, websockets=websockets
    ) as ((http, digest), err):
        t0 = time.monotonic()
        body = http_get(http, "/blob")
        down_s = time.monotonic() - t0
        assert len(body) == MIB and hashlib.sha256(body).hexdigest() == web.blob_sha

        payload = os.urandom(MIB)
        t0 = time.monotonic()
        answer = upload(digest, payload)
        up_s = time.monotonic() - t0
        assert answer == f"{hashlib.sha256(payload).hexdigest()}  -\n".encode()

        # several connections at once on one kubectl, over both ports
        payloads = [os.urandom(MIB // 2 + i) for i in range(CONCURRENT // 2)]

        def one(i: int) -> bool:
            if i % 2:
                return hashlib.sha256(http_get(http, "/blob")).hexdigest() == web.blob_sha
            data = payloads[i // 2]
            return upload(digest, data) == f"{hashlib.sha256(data).hexdigest()}  -\n".encode()

        t0 = time.monotonic()
        with ThreadPoolExecutor(CONCURRENT) as pool:
            results = list(pool.map(one, range(CONCURRENT)))
        both_s = time.monotonic() - t0
        assert results == [True] * CONCURRENT
        moved = (CONCURRENT // 2) * MIB + sum(len(p) for p in payloads)
        assert not [ln for ln in err.drain(0.2) if "error" in ln.lower()], err.seen
    print(
        f"\nport-forward ({websockets or 'default'}): 1 MiB down {down_s:.2f}s "
        f"({1 / down_s:.1f} MiB/s), 1 MiB up {up_s:.2f}s ({1 / up_s:.1f} MiB/s); "
        f"{CONCURRENT} connections at once, {moved / MIB:.1f} MiB in {both_s:.2f}s "
        f"({moved / MIB / both_s:.1f} MiB/s)"
    )
    # what reached vkgate: SPDY portforward.k8s.io, whichever way kubectl started
    accesses = wait_until(
        "the port-forward in the kubelet's access log",
        lambda: kubelet_lines(gateway, web.name, "kubelet: POST /portForward/default/"),
        timeout=15,
    )
    assert all("upgrade=spdy/3.1" in ln for ln in accesses), accesses
    assert kubelet_lines(gateway, web.name, "SPDY/3.1, portforward.k8s.io")


def test_port_forward_to_a_closed_port_shows_the_kubelets_error(
    web: Web, control_plane: Any, kubectl_path: Path
) -> None:
    closed = web.quiet  # declared (Nomad reserved it for the pod), nothing listens
    with port_forward(control_plane, kubectl_path, web.name, closed) as ((local,), err):
        with socket.create_connection(("127.0.0.1", local), timeout=30) as s:
            s.settimeout(30)
            with contextlib.suppress(ConnectionResetError):
                assert s.recv(100) == b""  # closed without a byte
        # kubectl 1.37 logs the error stream's text, then gives up as with a real kubelet
        expected = (
            f'"An error occurred forwarding" err="error forwarding port {closed} to pod '
            f"default/{web.name}, uid {web.uid}: dial tcp {web.pod_ip}:{closed}: connect: "
            f'connection refused" localPort={local} remotePort={closed}'
        )
        lines = err.drain(10)
        assert any(ln.endswith(expected) for ln in lines), lines
        assert lines[-1] == "error: lost connection to pod", lines


def client_agent_port(nomad: Any, ip: str) -> int:
    """The HTTP port of the Nomad client agent at ``ip`` (its ``Node.HTTPAddr``)."""
    for stub in nomad.nodes():
        host, _, port = str(nomad.get(f"/v1/node/{stub['ID']}").get("HTTPAddr", "")).rpartition(":")
        if host == ip:
            return int(port)
    raise AssertionError(f"no Nomad client agent at {ip}")


@pytest.mark.parametrize("websockets", [None, "false"], ids=["default-websocket", "spdy"])
def test_port_forward_reaches_the_pods_ports_and_not_its_clients_agent(
    gateway: GatewayProcess,
    web: Web,
    nomad_agent: Any,
    control_plane: Any,
    kubectl_path: Path,
    websockets: str | None,
) -> None:
    """Host networking: the pod's address is its client's, where the client's Nomad agent
    serves its API.  A declared port is forwarded; the agent's port, which the pod did not
    declare and Nomad did not reserve for it, is refused without being dialled."""
    agent = client_agent_port(nomad_agent, web.pod_ip)
    assert agent not in (web.http, web.digest, web.quiet)
    with socket.create_connection((web.pod_ip, agent), timeout=5):
        pass  # the agent answers at the pod's address: what a dial would reach
    with port_forward(
        control_plane, kubectl_path, web.name, web.http, agent, websockets=websockets
    ) as ((http, local), err):
        body = http_get(http, "/blob")  # the declared port works
        assert hashlib.sha256(body).hexdigest() == web.blob_sha
        with socket.create_connection(("127.0.0.1", local), timeout=30) as s:
            s.settimeout(30)
            with contextlib.suppress(ConnectionResetError):
                assert s.recv(100) == b""  # closed without a byte of the agent's
        allowed = ", ".join(str(p) for p in sorted((web.http, web.digest, web.quiet)))
        expected = (
            f'"An error occurred forwarding" err="error forwarding port {agent} to pod '
            f"default/{web.name}, uid {web.uid}: port {agent} is not declared by the pod "
            "(host network: its address is its host's, and port-forward reaches only its "
            f'declared containerPorts and the ports reserved for it: {allowed})" '
            f"localPort={local} remotePort={agent}"
        )
        lines = err.drain(10)
        assert any(ln.endswith(expected) for ln in lines), lines
        assert lines[-1] == "error: lost connection to pod", lines
    refused = wait_until(
        "the refusal in vkgate's log",
        lambda: kubelet_lines(gateway, web.name, f"{agent}: port {agent} is not declared"),
        timeout=15,
    )
    assert refused


async def test_websocket_client_of_the_api_server_forwards_too(
    gateway: GatewayProcess, web: Web, control_plane: Any
) -> None:
    """The Python client's way: ``portforward?ports=`` over WebSocket ``v4.channel.k8s.io``,
    which the API server passes through to the kubelet unchanged."""
    from websockets.asyncio.client import connect
    from websockets.typing import Subprotocol

    ctx = ssl.create_default_context(cafile=str(control_plane.ca_file))
    ctx.load_cert_chain(str(control_plane.admin_cert), str(control_plane.admin_key))
    base = control_plane.url.replace("https://", "wss://")
    url = f"{base}/api/v1/namespaces/default/pods/{web.name}/portforward?ports={web.http}"
    channels: dict[int, bytearray] = {0: bytearray(), 1: bytearray()}
    v4 = Subprotocol("v4.channel.k8s.io")
    async with connect(url, ssl=ctx, subprotocols=[v4], proxy=None, compression=None) as ws:
        assert ws.subprotocol == "v4.channel.k8s.io"
        await ws.send(b"\x00GET /blob HTTP/1.0\r\nHost: pod\r\n\r\n")
        async for msg in ws:  # ends when the pod closed (HTTP/1.0) and vkgate closed
            assert isinstance(msg, bytes)
            channels[msg[0]] += msg[1:]
    port = web.http.to_bytes(2, "little")
    assert channels[0][:2] == port and channels[1] == port
    head, _, body = bytes(channels[0][2:]).partition(b"\r\n\r\n")
    assert re.match(rb"HTTP/1\.[01] 200 ", head), head[:200]
    assert hashlib.sha256(body).hexdigest() == web.blob_sha
    accesses = wait_until(
        "the WebSocket port-forward in the kubelet's access log",
        lambda: kubelet_lines(gateway, web.name, "kubelet: GET /portForward/default/"),
        timeout=15,
    )
    assert all("upgrade=websocket" in ln for ln in accesses), accesses


# --------------------------------------------------------------------------- attach


def test_attach_shows_output_from_the_attach_point_and_ends_with_the_task(
    gateway: GatewayProcess, control_plane: Any, kubectl_path: Path, kubectl: Any
) -> None:
    name = f"ticker-{uuid.uuid4().hex[:5]}"
    script = (
        "i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo tick $i; echo warn $i >&2; sleep 0.25; done"
    )
    kubectl(
        "apply", "-f", "-", input=pod_json(name, gateway.node_name, command=["sh", "-c", script])
    )
    wait_until(f"{name} Running", lambda: phase(kubectl, name) == "Running")

    def ticks() -> int:
        found = re.findall(r"^tick (\d+)$", kubectl("logs", name, check=False).stdout, re.M)
        return int(found[-1]) if found else 0

    before = wait_until("a few ticks written", lambda: (n := ticks()) >= 4 and n, timeout=20)
    proc = subprocess.Popen(
        [str(kubectl_path), f"--kubeconfig={control_plane.kubeconfig}", "attach", name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        rc = proc.wait(timeout=40)
    finally:
        proc.kill()
    lines, errors = out.drain(5), err.drain(5)  # both pipes read to their end
    proc.stdout.close()
    proc.stderr.close()
    numbers = [int(ln.split()[1]) for ln in lines if ln.startswith("tick ")]
    assert rc == 0, (lines, errors)
    # from the attach point on (not from the start), every line once, until the task ended
    assert numbers and numbers[0] >= before, (before, lines)
    assert numbers == list(range(numbers[0], 41)), lines
    assert [ln for ln in lines if not ln.startswith("tick ")] == []
    warns = [ln for ln in errors if ln.startswith("warn ")]
    assert warns and warns[-1] == "warn 40", errors  # stderr on kubectl's stderr
    print(f"\nattach: joined at tick {numbers[0]} (log had {before}), {len(numbers)} lines")
    kubectl("delete", "pod", name, "--wait=false", check=False)


def test_attach_with_stdin_is_refused_naming_the_backend(
    web: Web, control_plane: Any, kubectl_path: Path
) -> None:
    r = subprocess.run(
        [str(kubectl_path), f"--kubeconfig={control_plane.kubeconfig}", "attach", "-i", web.name],
        input="hello\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode != 0
    assert "attach with stdin (-i) is not supported by the nomad backend" in r.stderr, r.stderr
    assert "kubectl exec -i" in r.stderr
