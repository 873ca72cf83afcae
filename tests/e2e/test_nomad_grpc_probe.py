"""A grpc readiness probe on Nomad (raw_exec, host networking; docs/design/probes.md): vkgate
calls grpc.health.v1.Health/Check on the pod's address itself.  The task is a real gRPC health
server (grpcio's servicer, python from the test's venv: the test extra has grpcio)."""

from __future__ import annotations

import sys
import time
import uuid
from typing import Any

import pytest
from hostports import host_port_base
from podjson import pod_with
from probing import condition, pod_status
from waiting import wait_for_event, wait_until

from devstack.nomad_cluster import NomadCluster
from vkgate_core.timeparse import parse_rfc3339

pytestmark = pytest.mark.e2e

#: NOT_SERVING at first; the overall health turns SERVING after $LATE seconds, "shop" never.
SERVER = """
import asyncio, os
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

async def main():
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port("0.0.0.0:" + os.environ["PORT"])
    await servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    await servicer.set("shop", health_pb2.HealthCheckResponse.NOT_SERVING)
    await server.start()
    print("serving on", os.environ["PORT"], flush=True)
    await asyncio.sleep(float(os.environ["LATE"]))
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    print("SERVING", flush=True)
    await server.wait_for_termination()

asyncio.run(main())
"""


def _pod(name: str, node: str, port: int, service: str, late: float) -> str:
    probe: dict[str, Any] = {"grpc": {"port": port}, "periodSeconds": 1}
    if service:
        probe["grpc"]["service"] = service
    return pod_with(
        name,
        node,
        {
            "name": "app",
            "command": [sys.executable, "-c", SERVER],
            "env": [
                {"name": "PORT", "value": str(port)},
                {"name": "LATE", "value": str(late)},
            ],
            "ports": [{"name": "grpc", "containerPort": port}],
            "readinessProbe": probe,
        },
    )


_status, _cond = pod_status, condition


def test_a_grpc_readiness_probe_follows_the_servers_health(
    start_gateway: Any, control_plane: Any, kubectl: Any, nomad_cluster: NomadCluster
) -> None:
    gw = start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_cluster.backend_settings(), "template": "nomad/raw_exec.j2"},
            }
        }
    )
    tag = uuid.uuid4().hex[:5]
    base = host_port_base(tag, 2)
    late, never = f"late-grpc-{tag}", f"never-grpc-{tag}"
    kubectl("apply", "-f", "-", input=_pod(late, gw.node_name, base, "", 8))
    kubectl("apply", "-f", "-", input=_pod(never, gw.node_name, base + 1, "shop", 0))
    try:
        for name in (late, never):
            wait_until(
                f"{name} Running",
                lambda n=name: _status(control_plane, n).get("phase") == "Running",
                90,
            )  # type: ignore[misc]
        # the late server: unready while NOT_SERVING, Ready once SERVING (8 s after its start)
        st = wait_until(
            f"{late} Ready",
            lambda: (s := _status(control_plane, late)) and _cond(s, "Ready") == "True" and s,
            60,
        )
        started = parse_rfc3339(st["containerStatuses"][0]["state"]["running"]["startedAt"])
        became = parse_rfc3339(
            next(c for c in st["conditions"] if c["type"] == "Ready")["lastTransitionTime"]
        )
        assert (became - started).total_seconds() >= 8, st
        # failed attempts before it served: NOT_SERVING (and connection refused while the
        # interpreter was starting), each an Unhealthy Event with the kubelet's words
        not_serving = 'Readiness probe failed: service unhealthy (responded with "NOT_SERVING")'
        wait_for_event(
            f"{late} Unhealthy NOT_SERVING",
            control_plane,
            "default",
            late,
            "Unhealthy",
            match=lambda e: e["message"] == not_serving,
            timeout=60,
        )
        # the "shop" service never serves: the pod stays Running and unready
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            st = _status(control_plane, never)
            assert st.get("phase") == "Running" and _cond(st, "Ready") == "False", st
            time.sleep(0.5)
        ev = wait_for_event(
            f"{never} Unhealthy NOT_SERVING",
            control_plane,
            "default",
            never,
            "Unhealthy",
            match=lambda e: e["message"] == not_serving,
            timeout=60,
        )
        assert ev["type"] == "Warning"
        assert ev["involvedObject"]["fieldPath"] == "spec.containers{app}"
    finally:
        kubectl("delete", "pod", late, never, "--wait=false", check=False)
