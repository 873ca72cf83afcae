"""The agents a burst benchmark can put under test, behind one small interface.

``Agent`` is what ``bench.pods_burst`` needs from a kubelet implementation: start it for a
node name (return once it is ready to receive pods), stop it, tell its pid (for RSS and CPU
from ``/proc``) and, if it can, report its own API write counters.  Two implementations here
(the Go ones, ``go-vk-lib``, ``go-vk-binary`` and ``go-floor``, are in ``bench.go_agents``):

* ``VkgateAgent`` — ``vkgate run`` as a child process (``devstack.agent``), simulated
  backend, writes read from its own ``/metrics`` (``vkgate_api_writes_total``);
* ``IdealKubeletAgent`` — ``bench.ideal_kubelet``, the baseline (one status PATCH and one
  final DELETE per pod), exposing the same metric.

Adding an agent means one more class with the same members and an entry in
``bench.pods_burst`` (``run_all.make`` and ``parse_args``).  An agent that cannot count its own writes returns None
from ``api_writes``; the harness still has the API server's view
(``apiserver_request_total``), which needs no cooperation from the agent.
"""

from __future__ import annotations

import os
import re
import sys
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from bench.report import REPO
from devstack.agent import GatewayProcess
from devstack.controlplane import ControlPlane
from devstack.process import Proc, free_port, wait_for

Writes = Counter[tuple[str, str]]
_WRITE_LINE = re.compile(r"^vkgate_api_writes_total\{([^}]*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_EVENT_LINE = re.compile(r'^vkgate_events_total\{outcome="([^"]*)"\} (\S+)$')


class Agent(Protocol):
    """A kubelet implementation under test."""

    #: Short name used in reports ("vkgate", "ideal-kubelet", "go-vk-lib", ...).
    name: str

    def start(self, node_name: str) -> None:
        """Start serving ``node_name``; return once pods bound to it will be picked up."""

    def stop(self) -> None:
        """Stop the agent and everything it started (idempotent)."""

    @property
    def pid(self) -> int | None:
        """The process whose RSS/CPU is reported (None when not running)."""

    def api_writes(self) -> Writes | None:
        """Cumulative API writes by (verb, resource[/subresource]) as the agent counts them, or
        None when it cannot tell (the harness then relies on the API server's counters)."""

    def describe(self) -> str:
        """One line: version and the settings that matter for the numbers."""

    # Optional: ``rate_limit: tuple[float, int]`` (client qps, burst) lets the report show
    # how much of a phase the agent's own rate limit alone accounts for.


def scrape_writes(address: str, *, timeout: float = 10.0) -> Writes:
    """``vkgate_api_writes_total`` from a plain-HTTP ``/metrics`` at ``host:port``."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout) as resp:
        return parse_writes(resp.read().decode())


def scrape_event_outcomes(address: str, *, timeout: float = 10.0) -> Counter[str]:
    """``vkgate_events_total`` by outcome (posted, aggregated, failed, dropped)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout) as resp:
        return parse_event_outcomes(resp.read().decode())


def parse_event_outcomes(text: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for line in text.splitlines():
        m = _EVENT_LINE.match(line)
        if m:
            out[m.group(1)] += int(float(m.group(2)))
    return out


def parse_writes(text: str) -> Writes:
    """``vkgate_api_writes_total`` samples by (verb, resource), whatever the label order
    (prometheus_client sorts labels by name: ``resource`` comes first)."""
    out: Writes = Counter()
    for line in text.splitlines():
        m = _WRITE_LINE.match(line)
        if m:
            labels = dict(_LABEL.findall(m.group(1)))
            out[(labels.get("verb", ""), labels.get("resource", ""))] += int(float(m.group(2)))
    return out


def _healthz(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}/healthz", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def wait_healthz(what: str, address: str, *, proc: Proc | None, timeout: float = 60) -> None:
    """Wait until the plain-HTTP ``/healthz`` at ``address`` answers 200 (``proc`` exiting or
    the timeout raises ``DevstackError`` with the tail of its log)."""
    wait_for(what, lambda: _healthz(address), timeout=timeout, proc=proc)


class ChildAgent:
    """The members every agent that is one child process (``self.proc``) shares."""

    proc: Proc | None = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=10)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.alive() else None

    def log_tail(self) -> str:
        return self.proc.log_tail(4000) if self.proc is not None else ""


class ScrapedAgent(ChildAgent):
    """A child process with a client rate limit and a worker count that serves
    ``vkgate_api_writes_total`` on ``metrics_address``."""

    def __init__(
        self, cp: ControlPlane, workdir: Path, *, qps: float, burst: int, workers: int
    ) -> None:
        self.cp = cp
        self.workdir = workdir
        self.qps, self.burst, self.workers = qps, burst, workers
        self.rate_limit = (qps, burst)
        self.proc: Proc | None = None
        self.metrics_address = ""

    def api_writes(self) -> Writes | None:
        return scrape_writes(self.metrics_address)


class VkgateAgent:
    """``vkgate run`` (simulated backend) as a child process."""

    name = "vkgate"

    def __init__(self, cp: ControlPlane, workdir: Path, settings: Mapping[str, Any]) -> None:
        self.cp = cp
        self.workdir = workdir
        self.settings = dict(settings)
        self.gw: GatewayProcess | None = None
        kube = self.settings.get("kube", {})
        self.rate_limit = (float(kube.get("qps", 50.0)), int(kube.get("burst", 100)))

    def start(self, node_name: str) -> None:
        self.gw = GatewayProcess(
            self.cp, self.workdir / node_name, self.settings, node_name=node_name
        )
        self.gw.start()
        wait_healthz(
            "vkgate /healthz on its metrics address",
            self.metrics_address,
            proc=self.gw.proc,
            timeout=30,
        )

    @property
    def metrics_address(self) -> str:
        assert self.gw is not None
        return str(self.gw.settings["kubelet"]["metrics_address"])

    def stop(self) -> None:
        if self.gw is not None:
            self.gw.stop(timeout=20)

    @property
    def pid(self) -> int | None:
        return self.gw.pid if self.gw is not None and self.gw.alive() else None

    def api_writes(self) -> Writes | None:
        return scrape_writes(self.metrics_address)

    def event_outcomes(self) -> Counter[str]:
        """Events posted / aggregated / failed / dropped so far (``vkgate_events_total``)."""
        return scrape_event_outcomes(self.metrics_address)

    def describe(self) -> str:
        s = self.settings
        sim = s.get("backend", {}).get("simulated", {})
        return (
            f"vkgate (this commit), simulated backend start_delay={sim.get('start_delay')} s, "
            f"notify_interval={sim.get('notify_interval')} s, no state file; "
            f"pods.workers={s.get('pods', {}).get('workers', 10)}, "
            f"kube.qps={s.get('kube', {}).get('qps', 50.0)}/burst={s.get('kube', {}).get('burst', 100)}, "
            f"log level {s.get('log', {}).get('level')}"
        )

    def log_tail(self) -> str:
        return self.gw.log_text()[-4000:] if self.gw is not None else ""


class IdealKubeletAgent(ScrapedAgent):
    """``bench.ideal_kubelet`` as a child process: the baseline."""

    name = "ideal-kubelet"

    def start(self, node_name: str) -> None:
        self.metrics_address = f"127.0.0.1:{free_port()}"
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
        )
        self.proc = Proc(
            f"ideal-kubelet[{node_name}]",
            [
                sys.executable,
                "-m",
                "bench.ideal_kubelet",
                "--kubeconfig",
                str(self.cp.kubeconfig),
                "--node",
                node_name,
                "--metrics-address",
                self.metrics_address,
                "--workers",
                str(self.workers),
                "--qps",
                str(self.qps),
                "--burst",
                str(self.burst),
            ],
            log_file=self.workdir / f"{node_name}.log",
            env=env,
            cwd=REPO,
        )
        wait_healthz("ideal kubelet /healthz", self.metrics_address, proc=self.proc)

    def describe(self) -> str:
        return (
            f"bench.ideal_kubelet: one status PATCH + one final DELETE per pod, "
            f"{self.workers} workers, kube.qps={self.qps}/burst={self.burst} (same client as vkgate)"
        )


AgentFactory = Callable[[], Agent]
