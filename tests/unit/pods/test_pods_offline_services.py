"""``vkgate render`` reads Services from its input file like the live agent reads them from the
API, so the service-link variables of the rendered spec are the ones the agent submits: the
offline adapter (gateway/templating/offline.py) and the live RefCache go through the one real Resolver."""

from __future__ import annotations

from typing import Any

import yaml
from pods_fakes import FakeKube

from gateway.pods.resolve import RefCache, Resolver
from gateway.templating import offline
from translators.base import Features, ResolvedContainer
from vkgate_core.clock import FakeClock

FILE = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, uid: 6c1d2e3f-0000-4000-8000-000000000001}
spec:
  nodeName: vk
  restartPolicy: Always
  containers:
  - name: app
    image: busybox
    env:
    - {name: GREETING, valueFrom: {configMapKeyRef: {name: cfg, key: hello}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: shop}
data: {hello: world}
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: 10.96.0.20
  ports: [{name: pg, port: 5432, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: headless, namespace: shop}
spec: {clusterIP: None, ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: kubernetes, namespace: default}
spec:
  clusterIP: 10.96.0.1
  ports: [{name: https, port: 443, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: elsewhere, namespace: other}
spec: {clusterIP: 10.96.0.30, ports: [{port: 80}]}
"""

HOST_IP = "127.0.0.5"


def _env(containers: tuple[ResolvedContainer, ...]) -> dict[str, str]:
    (app,) = containers
    return {e.name: e.value for e in app.env}


async def _live(docs: list[dict[str, Any]]) -> tuple[ResolvedContainer, ...]:
    clock = FakeClock()
    kube = FakeKube(clock)
    stored = [kube.add(d) for d in docs]
    pod = next(o for o in stored if o.get("kind") == "Pod")
    resolver = Resolver(
        RefCache(kube, clock=clock),  # type: ignore[arg-type]
        features=Features(),
        backend="x",
        node_name="vk",
        host_ip=lambda: HOST_IP,
        allocatable=dict,
        enable_service_links=True,
    )
    res = await resolver.resolve(pod)  # type: ignore[arg-type]
    assert res.pod is not None, (res.unsupported, res.waiting)
    return res.pod.containers


async def test_render_output_has_the_service_links_the_agent_submits() -> None:
    docs = [d for d in yaml.safe_load_all(FILE) if d]
    for d in docs:  # the API server puts every namespaced object in a namespace
        d["metadata"].setdefault("namespace", "shop")
    live = _env(await _live(docs))

    rendered = offline.resolve(
        offline.parse_inputs(FILE, source="pod.yaml"), node_name="vk", backend="x", host_ip=HOST_IP
    )
    assert rendered.errors == [] and rendered.pod is not None
    got = _env(rendered.pod.containers)

    assert got == live
    # the checks above would pass on two empty lists: these names must be there
    assert got["GREETING"] == "world"
    assert got["DB_SERVICE_HOST"] == "10.96.0.20"
    assert got["DB_SERVICE_PORT_PG"] == "5432"
    assert got["DB_PORT_5432_TCP"] == "tcp://10.96.0.20:5432"
    assert got["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    assert not any(k.startswith(("ELSEWHERE_", "HEADLESS_")) for k in got)


def test_services_of_other_namespaces_are_not_read() -> None:
    inputs = offline.parse_inputs(FILE)
    names = sorted((s["metadata"]["namespace"], s["metadata"]["name"]) for s in inputs.services)
    assert names == [("default", "kubernetes"), ("shop", "db"), ("shop", "headless")]


def test_enable_service_links_false_keeps_only_the_kubernetes_service() -> None:
    text = FILE.replace("  nodeName: vk\n", "  nodeName: vk\n  enableServiceLinks: false\n")
    rendered = offline.resolve(offline.parse_inputs(text), node_name="vk", host_ip=HOST_IP)
    assert rendered.pod is not None
    got = _env(rendered.pod.containers)
    assert got["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    assert not any(k.startswith("DB_") for k in got)
