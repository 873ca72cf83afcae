"""Shared helpers of the Nomad contract tests (a uniquely named module: every test folder has a
``conftest``, so tests import helpers from here): the fake Nomad address, the node the captured
jobs belong to, real Nomad JSON from the golden states (captured from a ``nomad agent -dev``),
and a recorder for retry sleeps."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import respx

from translators.base import ResolvedContainer, ResolvedPod
from translators.nomad import NomadTranslator

ADDRESS = "http://nomad.test:4646"
NODE = "vk-golden"  # the node the captured jobs belong to
STATES = Path(__file__).resolve().parents[2] / "golden" / "nomad" / "states"


def captured(name: str) -> dict[str, Any]:
    """A captured state file: {"job": stub, "allocations": [...], "pod": {...}, ...}."""
    doc: dict[str, Any] = json.loads((STATES / f"{name}.nomad.json").read_text())
    return doc


def mock_node(nomad: respx.MockRouter, alloc: dict[str, Any], http_addr: str) -> None:
    """``GET /v1/node/:id`` of the allocation's node, its client agent at ``http_addr`` (on a
    dev agent: the same agent as the server): exec goes there first (translators/nomad/exec.py)."""
    node = {"ID": alloc["NodeID"], "HTTPAddr": http_addr, "TLSEnabled": False, "Status": "ready"}
    nomad.get(f"/v1/node/{alloc['NodeID']}").mock(return_value=httpx.Response(200, json=node))


def pod(name: str = "web", uid: str = "0b7c1f2e-0000-4000-8000-000000000001") -> ResolvedPod:
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "app", "image": "busybox"}]},
    }
    return ResolvedPod(
        namespace="default",
        name=name,
        uid=uid,
        node_name=NODE,
        pod=raw,
        containers=(
            ResolvedContainer(
                name="app",
                image="busybox",
                command=("echo", "hi"),
                spec=raw["spec"]["containers"][0],
            ),
        ),
    )


class Sleeps(list[float]):
    """Records every delay the code under test asked for; returns at once."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


MakeTranslator = Callable[..., Awaitable[NomadTranslator]]
