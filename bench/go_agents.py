"""The Go agents of the burst benchmark: the virtual-kubelet library, the upstream command and a
raw client-go floor.

All three are built from one pinned module, ``vkbench`` (its Go sources and pins in bench/go/;
``python -m devstack.build vkbench virtual-kubelet``), like every other binary of the
dev stack; docs/design/control-plane.md, "Go virtual-kubelet", has the facts from the source.

* ``GoVkLibAgent`` (``go-vk-lib``): ``vkbench -mode vk-lib``, the virtual-kubelet v1.13 library
  (``node.NewPodController`` + ``node.NewNodeController`` with a v1 Lease, Events through the
  library's recorder) over an in-memory provider that reaches Running after ``start_delay``,
  with the three work-queue rate limiters lifted and its client-go client at ``qps``/``burst``;
* ``GoFloorAgent`` (``go-floor``): ``vkbench -mode floor``, ``bench/ideal_kubelet.py`` written
  with client-go (one status PATCH and one final DELETE per pod, no Node, Lease or Events);
* ``GoVkBinaryAgent`` (``go-vk-binary``): the upstream ``virtual-kubelet`` command with its mock
  provider, every setting at its default.  It listens on all interfaces, so it runs only inside
  the network namespace of ``python -m devstack.netns``; it cannot count its own writes
  (``api_writes`` is None, the harness uses the API server's counters).

The two ``vkbench`` modes expose ``vkgate_api_writes_total`` on a loopback ``/metrics``, counted
in their client-go transport.  Every Go agent talks to the API server with the admin
credentials of ``ControlPlane.kubeconfig`` (as the ideal kubelet does): the library's informers
list Secrets, ConfigMaps and Services cluster-wide, which a node identity may not do.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bench.agents import ChildAgent, ScrapedAgent, Writes, wait_healthz
from devstack import build, netns
from devstack.components import VK_VERSION
from devstack.controlplane import ControlPlane
from devstack.process import Proc, free_port, wait_for

#: The upstream command's client: ``nodeutil.ClientsetFromEnv`` leaves ``rest.Config.QPS`` and
#: ``Burst`` at zero, so client-go's defaults apply (docs/design/control-plane.md).
VK_BINARY_RATE_LIMIT = (5.0, 10)
#: Client-go rate limit of ``vkbench`` (both modes): high enough that the client is not what
#: is measured (the upstream command's 5/10 is).
GO_QPS, GO_BURST = 1000.0, 2000
#: Capacity of the mock provider's node: enough for the largest burst.
MOCK_CAPACITY = {"cpu": "10000", "memory": "10Ti", "pods": "10000"}


class _VkbenchAgent(ScrapedAgent):
    """``vkbench -mode <mode>`` as a child process, ready when its ``/healthz`` answers."""

    name = ""
    mode = ""

    def extra_args(self) -> list[str]:
        return []

    def start(self, node_name: str) -> None:
        self.metrics_address = f"127.0.0.1:{free_port()}"
        argv = [
            str(build.ensure("vkbench")),
            "-mode",
            self.mode,
            "-kubeconfig",
            str(self.cp.kubeconfig),
            "-node",
            node_name,
            "-metrics-addr",
            self.metrics_address,
            "-qps",
            str(self.qps),
            "-burst",
            str(self.burst),
            "-workers",
            str(self.workers),
            *self.extra_args(),
        ]
        self.proc = Proc(
            f"{self.name}[{node_name}]", argv, log_file=self.workdir / f"{node_name}.log"
        )
        wait_healthz(f"{self.name} /healthz", self.metrics_address, proc=self.proc)


class GoVkLibAgent(_VkbenchAgent):
    """The Go virtual-kubelet v1.13 library, in-memory provider, queue limits lifted."""

    name = "go-vk-lib"
    mode = "vk-lib"

    def __init__(
        self,
        cp: ControlPlane,
        workdir: Path,
        *,
        qps: float = GO_QPS,
        burst: int = GO_BURST,
        workers: int = 10,
        start_delay: float = 0.05,
    ) -> None:
        super().__init__(cp, workdir, qps=qps, burst=burst, workers=workers)
        self.start_delay = start_delay

    def extra_args(self) -> list[str]:
        return ["-start-delay", f"{self.start_delay}s"]

    def describe(self) -> str:
        return (
            f"virtual-kubelet v{VK_VERSION} library (node.PodController "
            f"+ NodeController with a v1 Lease, Events via its recorder), in-memory provider "
            f"(Running {self.start_delay} s after CreatePod, NotifyPods), work-queue rate "
            f"limiters lifted (5 ms base per-item backoff kept, no shared bucket), "
            f"{self.workers} workers, client-go qps={self.qps}/burst={self.burst}, admin "
            "credentials"
        )


class GoFloorAgent(_VkbenchAgent):
    """``bench.ideal_kubelet`` in client-go: the Go floor."""

    name = "go-floor"
    mode = "floor"

    def describe(self) -> str:
        return (
            f"vkbench -mode floor: client-go informer + one status PATCH and one final DELETE "
            f"per pod (bench/ideal_kubelet.py in Go), no Node, Lease or Events, {self.workers} "
            f"workers, client-go qps={self.qps}/burst={self.burst}, admin credentials"
        )


class GoVkBinaryAgent(ChildAgent):
    """The upstream ``virtual-kubelet`` command, mock provider, its own defaults."""

    name = "go-vk-binary"
    rate_limit = VK_BINARY_RATE_LIMIT

    def __init__(self, cp: ControlPlane, workdir: Path) -> None:
        self.cp = cp
        self.workdir = workdir
        self.proc: Proc | None = None
        self.port = 0

    def start(self, node_name: str) -> None:
        if not netns.isolated():
            raise RuntimeError(
                "go-vk-binary listens on all interfaces (its address is not settable): run the "
                "benchmark inside a network namespace, `python -m devstack.netns -- "
                "python -m bench.pods_burst ...`"
            )
        config = self.workdir / f"{node_name}.mock.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({node_name: MOCK_CAPACITY}))
        serving = self.cp.kubelet_serving_cert(node_name)
        self.port = free_port()
        env = dict(
            os.environ,
            KUBECONFIG=str(self.cp.kubeconfig),
            KUBELET_PORT=str(self.port),
            VKUBELET_POD_IP="127.0.0.1",
            APISERVER_CERT_LOCATION=str(serving.cert),
            APISERVER_KEY_LOCATION=str(serving.key),
        )
        self.proc = Proc(
            f"{self.name}[{node_name}]",
            [
                str(build.ensure("virtual-kubelet")),
                "--nodename",
                node_name,
                "--provider",
                "mock",
                "--provider-config",
                str(config),
                "--disable-taint",
            ],
            log_file=self.workdir / f"{node_name}.log",
            env=env,
        )
        wait_for(
            f"{self.name}: node {node_name} Ready",
            lambda: self._node_ready(node_name),
            timeout=60,
            proc=self.proc,
        )

    def _node_ready(self, node_name: str) -> bool:
        node = self.cp.get(f"/api/v1/nodes/{node_name}")
        conditions = (node or {}).get("status", {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def api_writes(self) -> Writes | None:
        return None

    def describe(self) -> str:
        qps, burst = self.rate_limit
        return (
            f"upstream virtual-kubelet v{VK_VERSION} command, "
            f"mock provider, its defaults: client-go qps={qps:g}/burst={burst} (fixed), work "
            "queues at client-go's default limiter (10 qps / burst 100 shared bucket), 10 pod "
            "sync workers, --disable-taint, admin credentials; in a network namespace"
        )
