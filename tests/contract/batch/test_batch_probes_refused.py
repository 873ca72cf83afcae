"""Azure Batch has no pod address vkgate can dial and no exec into a task: every probe (each
kind, each handler; an httpGet/tcpSocket with an explicit ``host`` excepted, which is dialled as
it is: tests/unit/pods/test_pods_probe_host.py) and every lifecycle hook is refused with
``UnsupportedPodFeature`` naming the field, before anything reaches Batch — unless the node lists the field in
``node.ignore_pod_fields``, and then the pod runs on Batch without it and a Warning Event names
it (docs/design/probes.md, "Per backend").  The agent's own admission (``Resolver``, through
``gateway.templating.offline.resolve``) with the live ``BatchTranslator``'s features."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from fake_batch import FakeBatch

from gateway.templating import offline
from translators.base import Executor, Phase
from translators.batch import BatchTranslator

pytestmark = pytest.mark.contract

KINDS = ("startupProbe", "readinessProbe", "livenessProbe")
PROBE_HANDLERS = {
    "exec": ({"command": ["cat", "/tmp/ready"]}, "exec probes need exec into the container"),
    "httpGet": ({"port": 8080, "path": "/healthz"}, "gives pods no address vkgate can probe"),
    "tcpSocket": ({"port": 8080}, "gives pods no address vkgate can probe"),
    "grpc": ({"port": 9090}, "gives pods no address vkgate can probe"),
}
HOOK_HANDLERS = {
    "exec": {"command": ["touch", "/tmp/started"]},
    "httpGet": {"port": 8080, "path": "/drain"},
    "sleep": {"seconds": 5},
}


def pod_yaml(name: str, container: dict[str, Any]) -> str:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "nodeName": "vk-batch",
            "restartPolicy": "Never",
            "containers": [
                {"name": "app", "image": "busybox:1.36", "command": ["true"], **container}
            ],
        },
    }
    return yaml.safe_dump(pod)


def admit(t: BatchTranslator, text: str, ignore: list[str] | None = None) -> offline.Resolved:
    return offline.resolve(
        offline.parse_inputs(text),
        node_name="vk-batch",
        features=t.features,
        backend=t.kind,
        can_exec=isinstance(t, Executor),
        ignore_pod_fields=ignore or [],
    )


CASES = [
    (kind, handler, action, why)
    for kind in KINDS
    for handler, (action, why) in PROBE_HANDLERS.items()
] + [
    (f"lifecycle.{hook}", handler, action, "lifecycle hooks are not run on the batch backend")
    for hook in ("postStart", "preStop")
    for handler, action in HOOK_HANDLERS.items()
]


def container_with(kind: str, handler: str, action: dict[str, Any]) -> dict[str, Any]:
    if kind.startswith("lifecycle."):
        return {"lifecycle": {kind.split(".", 1)[1]: {handler: action}}}
    return {kind: {handler: action}}


@pytest.mark.parametrize(("kind", "handler", "action", "why"), CASES)
async def test_every_probe_and_hook_is_refused_naming_the_field(
    fake: FakeBatch,
    make_translator: Callable[..., BatchTranslator],
    kind: str,
    handler: str,
    action: dict[str, Any],
    why: str,
) -> None:
    t = make_translator()
    assert not isinstance(t, Executor) and not t.features.routable_pod_ip
    before = len(fake.calls)
    res = admit(t, pod_yaml("probed", container_with(kind, handler, action)))
    assert res.pod is None
    (error,) = res.errors
    field = f"spec.containers[app].{kind}"
    if not kind.startswith("lifecycle."):
        field += f".{handler}"
    assert error.startswith(f"{field}: "), error
    assert why in error and "batch" in error
    assert len(fake.calls) == before  # nothing was sent to Batch


async def test_the_refusal_is_the_agents_unsupported_pod_feature(
    make_translator: Callable[..., BatchTranslator],
) -> None:
    from gateway.pods.resolve import features as featmod

    t = make_translator()
    pod = yaml.safe_load(pod_yaml("p", {"readinessProbe": {"grpc": {"port": 9090}}}))
    (u,) = featmod.check_probes(pod, t.features, can_exec=False, backend=t.kind)
    assert u.reason == "UnsupportedPodFeature"
    assert u.field == "spec.containers[app].readinessProbe.grpc"


async def test_ignored_by_the_node_the_pod_runs_on_batch_without_them(
    fake: FakeBatch, make_translator: Callable[..., BatchTranslator]
) -> None:
    t = make_translator()
    text = pod_yaml(
        "ignored",
        {
            "readinessProbe": {"httpGet": {"port": 8080}},
            "livenessProbe": {"exec": {"command": ["true"]}},
            "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
        },
    )
    res = admit(t, text, ignore=["readinessProbe", "livenessProbe.exec", "lifecycle.preStop"])
    assert res.errors == [] and res.pod is not None
    warnings = [n for n in res.notes if n.startswith("PodFieldIgnored: ")]
    assert [w.split(": ", 2)[1] for w in warnings] == [
        "spec.containers[app].readinessProbe.httpGet",
        "spec.containers[app].livenessProbe.exec",
        "spec.containers[app].lifecycle.preStop",
    ]
    pod = dataclasses.replace(res.pod, template="batch/task.j2")
    state = await t.create(pod)
    assert state.phase is Phase.PENDING
    assert len(fake.all_tasks(t.job_id)) == 1
