"""Fixtures for the Azure Batch contract tier: the stateful fake, translators wired to it through
``httpx.MockTransport`` (the real SDK pipeline, signing included), and a resolved-pod builder."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from fake_batch import FakeBatch

from translators.base import EnvVar, ResolvedContainer, ResolvedPod, ResolvedVolume, VolumeMount
from translators.batch import BatchTranslator

pytestmark = pytest.mark.contract


class Sleeps:
    """An injected sleep that records delays and only yields (no real waiting)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


@pytest.fixture
def fake() -> FakeBatch:
    f = FakeBatch()
    f.add_pool("pool-1", vm_size="standard_d4s_v3", slots=4, nodes=2)
    return f


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def make_translator(
    fake: FakeBatch, sleeps: Sleeps
) -> AsyncIterator[Callable[..., BatchTranslator]]:
    made: list[BatchTranslator] = []

    def make(
        *,
        key: str | None = None,
        node_name: str = "vk-batch",
        now: Callable[[], Any] | None = None,
        **settings: Any,
    ) -> BatchTranslator:
        table: dict[str, Any] = {
            "endpoint": fake.endpoint,
            "account_name": fake.account,
            "account_key": key or fake.key,
            "pool_id": "pool-1",
            "submit_linger": 0,
            "node_name": node_name,
        }
        table.update(settings)

        def fake_now() -> Any:
            return fake.now

        def fake_monotonic() -> float:
            return fake.now.timestamp()

        client = httpx.AsyncClient(transport=httpx.MockTransport(fake.handle))
        t = BatchTranslator(
            http_client=client,
            sleep=sleeps,
            now=now or fake_now,
            monotonic=fake_monotonic,
            environ={},
            **table,
        )
        made.append(t)
        return t

    yield make
    for t in made:
        await t.close()


def container(
    name: str = "app",
    image: str = "busybox:1.36",
    *,
    command: tuple[str, ...] = (),
    args: tuple[str, ...] = (),
    env: tuple[EnvVar, ...] = (),
    mounts: tuple[VolumeMount, ...] = (),
    resources: dict[str, Any] | None = None,
    role: str = "main",
) -> ResolvedContainer:
    spec: dict[str, Any] = {"name": name, "image": image}
    if resources:
        spec["resources"] = resources
    return ResolvedContainer(
        name=name,
        image=image,
        command=command,
        args=args,
        env=env,
        mounts=mounts,
        role=role,
        spec=spec,
    )


def make_pod(
    name: str = "p1",
    *,
    namespace: str = "default",
    uid: str | None = None,
    restart: str = "Never",
    containers: tuple[ResolvedContainer, ...] | None = None,
    init: tuple[ResolvedContainer, ...] = (),
    volumes: tuple[ResolvedVolume, ...] = (),
    deadline: int | None = None,
    **kw: Any,
) -> ResolvedPod:
    uid = uid or str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}"))
    cs = containers if containers is not None else (container(**kw),)
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "nodeName": "vk-batch",
        "containers": [dict(c.spec) for c in cs],
    }
    if deadline:
        spec["activeDeadlineSeconds"] = deadline
    return ResolvedPod(
        namespace=namespace,
        name=name,
        uid=uid,
        node_name="vk-batch",
        pod={"metadata": {"namespace": namespace, "name": name, "uid": uid}, "spec": spec},
        containers=cs,
        init_containers=init,
        volumes=volumes,
    )
