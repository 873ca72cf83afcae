"""The kubelet API's /containerLogs served from Batch task files: the gateway's real
``KubeletServer`` (HTTPS on 127.0.0.1, anonymous + always-allow for the test) in front of the Batch
translator and the fake Batch service — the same path ``kubectl logs`` takes through the API
server."""

from __future__ import annotations

import httpx
import pytest
from batch_pods import make_pod
from fake_batch import Behaviour, FakeBatch

from gateway.config import KubeletSettings
from gateway.kubelet.service import KubeletServer

pytestmark = pytest.mark.contract


class Pods:
    def __init__(self, pod: dict) -> None:
        self.pod = pod

    def get_pod(self, namespace: str, name: str) -> dict | None:
        meta = self.pod["metadata"]
        return self.pod if (meta["namespace"], meta["name"]) == (namespace, name) else None

    def pods(self) -> list[dict]:
        return [self.pod]


@pytest.fixture
async def served(fake: FakeBatch, make_translator):
    fake.script("default/web/", Behaviour(stdout=b"hello\nfrom\nbatch\n", stderr=b"oops\n"))
    translator = make_translator()
    pod = make_pod("web")
    await translator.create(pod)
    raw = {
        "metadata": {"namespace": "default", "name": "web", "uid": pod.uid},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]},
    }
    server = KubeletServer(
        settings=KubeletSettings(
            address="127.0.0.1",
            port=0,
            anonymous=True,
            authorization="always-allow",
            metrics_address="",
        ),
        node_name="vk-batch",
        pods=Pods(raw),
        translator=translator,
        client=None,
    )
    await server.start()
    try:
        async with httpx.AsyncClient(
            base_url=f"https://127.0.0.1:{server.port}", verify=False, timeout=10
        ) as client:
            yield client
    finally:
        await server.stop()


async def test_logs_before_start_say_waiting(served: httpx.AsyncClient) -> None:
    resp = await served.get("/containerLogs/default/web/app")
    assert resp.status_code == 400
    assert 'container "app" in pod "web" is waiting to start' in resp.text


async def test_logs_tail_and_streams_through_the_kubelet_api(
    served: httpx.AsyncClient, fake: FakeBatch
) -> None:
    fake.settle()
    resp = await served.get("/containerLogs/default/web/app")
    assert resp.status_code == 200 and resp.text == "hello\nfrom\nbatch\noops\n"
    resp = await served.get("/containerLogs/default/web/app", params={"tailLines": "2"})
    assert resp.text == "batch\noops\n"
    resp = await served.get("/containerLogs/default/web/app", params={"limitBytes": "5"})
    assert resp.text == "hello"
    resp = await served.get("/containerLogs/default/web/app", params={"previous": "true"})
    assert resp.status_code == 400 and "previous" in resp.text


async def test_exec_is_refused_with_the_backend_named(served: httpx.AsyncClient) -> None:
    resp = await served.post("/exec/default/web/app", params={"command": "ls", "output": "1"})
    assert resp.status_code == 501
    assert "not supported by the batch backend" in resp.text
