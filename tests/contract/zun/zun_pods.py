"""Build ``ResolvedPod`` objects from pod dicts for Zun tests (golden, contract, unit).

The gateway's resolver does this for real (env/volume resolution); tests only need literal
env values, pre-resolved ``valueFrom`` values and volume file contents.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from translators.base import (
    EnvVar,
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    VolumeFile,
    VolumeMount,
)

VOLUME_KINDS = (
    "configMap",
    "secret",
    "emptyDir",
    "projected",
    "downwardAPI",
    "hostPath",
    "persistentVolumeClaim",
)


def _container(c: Mapping[str, Any], role: str, resolved: Mapping[str, str]) -> ResolvedContainer:
    env: list[EnvVar] = []
    for e in c.get("env") or []:
        if "value" in e:
            env.append(EnvVar(e["name"], str(e["value"])))
        elif e["name"] in resolved:
            secret = "secretKeyRef" in (e.get("valueFrom") or {})
            env.append(EnvVar(e["name"], resolved[e["name"]], secret=secret))
    mounts = tuple(
        VolumeMount(m["name"], m["mountPath"], bool(m.get("readOnly")), m.get("subPath", ""))
        for m in c.get("volumeMounts") or []
    )
    return ResolvedContainer(
        name=c["name"],
        image=c["image"],
        command=tuple(c.get("command") or ()),
        args=tuple(c.get("args") or ()),
        env=tuple(env),
        mounts=mounts,
        working_dir=c.get("workingDir", ""),
        role=role,
        spec=copy.deepcopy(dict(c)),
    )


def resolved_pod(
    pod: Mapping[str, Any],
    *,
    node: str = "vk-zun",
    env: Mapping[str, Mapping[str, str]] | None = None,
    files: Mapping[str, Mapping[str, str]] | None = None,
    template: str = "",
) -> ResolvedPod:
    pod = copy.deepcopy(dict(pod))
    meta = pod.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", f"uid-{meta['name']}")
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    env = env or {}
    files = files or {}
    containers = tuple(
        _container(c, "main", env.get(c["name"], {})) for c in spec.get("containers") or []
    )
    inits = tuple(
        _container(
            c, "sidecar" if c.get("restartPolicy") == "Always" else "init", env.get(c["name"], {})
        )
        for c in spec.get("initContainers") or []
    )
    volumes = []
    for v in spec.get("volumes") or []:
        kind = next((k for k in VOLUME_KINDS if k in v), "unknown")
        body = v.get(kind) or {}
        vf = tuple(
            VolumeFile(path=p, content=t.encode(), secret=kind == "secret")
            for p, t in files.get(v["name"], {}).items()
        )
        volumes.append(
            ResolvedVolume(
                name=v["name"],
                kind=kind,
                files=vf,
                medium=str(body.get("medium", "")) if kind == "emptyDir" else "",
                size_limit=str(body.get("sizeLimit", "")) if kind == "emptyDir" else "",
            )
        )
    return ResolvedPod(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        node_name=node,
        pod=pod,
        containers=containers,
        init_containers=inits,
        volumes=tuple(volumes),
        template=template,
    )


def simple_pod(
    name: str,
    image: str = "busybox:1.36",
    *,
    namespace: str = "default",
    restart: str = "Never",
    command: list[str] | None = None,
    args: list[str] | None = None,
    **container: Any,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "app", "image": image, **container}
    if command:
        c["command"] = command
    if args:
        c["args"] = args
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"restartPolicy": restart, "containers": [c]},
    }
