"""The prober at scale (docs/design/probes.md): N running containers, each with a readiness
probe every P seconds, against local listeners — the CPU the prober costs and how long a
readiness change takes to reach the pod sync.

    python -m bench.probes --pods 1000 --period 10 --seconds 60 --handler tcpSocket

``--handler grpc`` probes a grpcio health server (bench extra; in a process of its own, so the
figure is the prober's alone) with
vkgate's h2 client (gateway.probes.grpc); ``--handler grpc-grpcio`` does the same attempts with
grpcio's own client (a channel per attempt, as the kubelet dials per attempt), to compare.

Real clock, real sockets (``host: 127.0.0.1`` in each probe: the simulated backend's pod
addresses are not routable), the production ``Prober``/``Worker``/``Handlers``; the status
write after the queued sync is the pod sync's cost, measured by ``bench.pods_burst``.  The
baseline is the same process idle for the same time.  Latency: the listener is closed (then
reopened); for each container, the time from the flip to its verdict reaching the queue.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import statistics
import sys
import time
from typing import Any, cast

from gateway.kube.events import EventRecorder
from gateway.probes.handlers import Handlers, Result, Target
from gateway.probes.manager import Prober
from translators.base import ContainerState, Phase, PodRef, WorkloadState
from vkgate_core.clock import SystemClock
from vkgate_core.kubetypes import Pod


class _Events:
    async def record(self, obj: Any, **kw: Any) -> None:
        return None


_GRPC_SERVER = """
import asyncio, grpc, sys
from grpc_health.v1 import health, health_pb2_grpc

async def main():
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    await server.start()
    await server.wait_for_termination()

asyncio.run(main())
"""


class _GrpcServer:
    """A grpcio health server (overall health SERVING) in a process of its own, so the CPU
    measured is the prober's alone (grpcio's server costs more than the attempt)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def stop(self, grace: Any) -> None:
        self.proc.kill()
        await self.proc.wait()


async def _grpc_listen(holder: dict[str, Any]) -> int:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _GRPC_SERVER, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    port = int((await proc.stdout.readline()).decode())
    holder["server"] = _GrpcServer(proc)
    return port


async def _grpcio_attempt(action: Any, target: Target, limit: float) -> Result:
    """One attempt with grpcio's client: a channel per attempt, as the kubelet dials."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with grpc.aio.insecure_channel(f"{target.pod_ip}:{action['port']}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            resp = await stub.Check(
                health_pb2.HealthCheckRequest(service=action.get("service", "")), timeout=limit
            )
        except grpc.aio.AioRpcError as exc:
            return Result(False, f"error: health rpc probe failed: {exc.code()}")
    return Result(resp.status == health_pb2.HealthCheckResponse.SERVING, "")


async def _cpu_over(seconds: float) -> float:
    c0, t0 = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    return (time.process_time() - c0) / (time.monotonic() - t0)


async def main(pods: int, period: float, seconds: float, handler: str) -> dict[str, Any]:
    port_holder: dict[str, Any] = {}
    grpc_server = handler.startswith("grpc")

    async def listen(port: int = 0) -> int:
        if grpc_server:
            return await _grpc_listen(port_holder)

        async def answer(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            if handler == "httpGet":
                await r.readuntil(b"\r\n\r\n")
                w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                await w.drain()
            w.close()

        server = await asyncio.start_server(answer, "127.0.0.1", port, backlog=4096)
        port_holder["server"] = server
        return int(server.sockets[0].getsockname()[1])

    port = await listen()
    baseline = await _cpu_over(min(10.0, seconds))
    changes: dict[str, list[tuple[float, bool]]] = {}

    def set_readiness(uid: str, container: str, ready: bool) -> bool:
        prev = changes.setdefault(uid, [])
        if prev and prev[-1][1] == ready:
            return False
        prev.append((time.monotonic(), ready))
        return True

    # the probes dial the harness's listener by host, past the pod address (probes.allow_host)
    handlers = Handlers(executor=None, allow_host=True)
    if handler == "grpc-grpcio":
        handlers.grpc = _grpcio_attempt  # type: ignore[method-assign]
    prober = Prober(
        handlers,
        cast(EventRecorder, _Events()),
        clock=SystemClock(),
        set_readiness=set_readiness,
        queue=lambda key: None,
    )
    action: dict[str, Any] = {"host": "127.0.0.1", "port": port}
    if grpc_server:
        action = {"port": port}  # a grpc probe has no host: the pod address, 127.0.0.1 here
    if handler == "httpGet":
        action["path"] = "/ready"
    now = _dt.datetime.now(_dt.UTC)
    for i in range(pods):
        uid = f"u{i}"
        pod = cast(
            Pod,
            {
                "metadata": {"namespace": "bench", "name": f"p{i}", "uid": uid},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "readinessProbe": {
                                handler.removesuffix("-grpcio"): action,
                                "periodSeconds": period,
                                "failureThreshold": 1,
                            },
                        }
                    ]
                },
            },
        )
        state = WorkloadState(
            ref=PodRef("bench", f"p{i}", uid),
            backend_id=uid,
            phase=Phase.RUNNING,
            pod_ip="127.0.0.1" if grpc_server else "192.0.2.1",
            containers=(ContainerState("app", state="running", started_at=now, ready=True),),
        )
        prober.sync(pod, state)
        # pods arrive over one period, as a burst of creates spreads them
        await asyncio.sleep(period / pods)
    await asyncio.sleep(period)  # every pod probed at least once
    ready_all = sum(1 for v in changes.values() if v and v[-1][1])
    cpu = await _cpu_over(seconds)
    # flip: stop listening; every container should turn unready within one period
    server = port_holder["server"]
    if grpc_server:
        await server.stop(None)
    else:
        server.close()
        await server.wait_closed()
    flip = time.monotonic()
    await asyncio.sleep(period + 2)
    lat = sorted(t - flip for v in changes.values() for t, r in v if not r and t >= flip)
    unready_all = sum(1 for v in changes.values() if v and not v[-1][1])
    prober.stop()
    await prober.handlers.aclose()
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")  # noqa: E731
    return {
        "pods": pods,
        "period_s": period,
        "handler": handler,
        "probes_per_s": pods / period,
        "cpu_baseline_cores": round(baseline, 4),
        "cpu_cores": round(cpu, 4),
        "cpu_per_probe_ms": round((cpu - baseline) / (pods / period) * 1000, 3),
        "ready_after_first_round": ready_all,
        "unready_after_flip": unready_all,
        "flip_to_verdict_s": {
            "p50": round(p(0.5), 3),
            "p99": round(p(0.99), 3),
            "max": round(lat[-1], 3) if lat else None,
            "mean": round(statistics.fmean(lat), 3) if lat else None,
        },
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--period", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument(
        "--handler", choices=("tcpSocket", "httpGet", "grpc", "grpc-grpcio"), default="tcpSocket"
    )
    args = ap.parse_args()
    print(
        json.dumps(asyncio.run(main(args.pods, args.period, args.seconds, args.handler)), indent=1)
    )
