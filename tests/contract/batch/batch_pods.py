"""Helpers shared by the Batch contract tests (a unique module name: ``conftest`` is ambiguous
when several tiers run in one session): an injected sleep that only records, and builders of
resolved pods."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from translators.base import EnvVar, ResolvedContainer, ResolvedPod, ResolvedVolume, VolumeMount


class Sleeps:
    """An injected sleep that records delays and only yields (no real waiting)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


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
