"""What the harnesses of the contract suite share: the pod they run, the bookkeeping of the
translators they make (each is closed when its test ends) and, for a backend that is a fake
server, its outage switch and request count (``FakeBackend``).

A harness module (``harness_<kind>.py``) exports an async context manager factory
``harness(tmp_path, monkeypatch)`` yielding a ``translators.contract.BackendHarness``; the
suite's conftest lists the factories, one line per backend.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator, Mapping, Sized
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol

import pytest

from translators.api import EnvVar, Outcome, ResolvedContainer, ResolvedPod, Translator

#: The harness pods' one container prints this and exits (``outcome`` decides the code).
LOG_TEXT = b"contract-hello"
COMMAND = ("echo", LOG_TEXT.decode())
NODE = "vk-contract"

HarnessFactory = Callable[[Path, pytest.MonkeyPatch], AbstractAsyncContextManager[Any]]


def make_pod(
    name: str,
    *,
    node: str,
    image: str = "busybox:1.36",
    command: tuple[str, ...] = COMMAND,
    annotations: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> ResolvedPod:
    """A one-container pod (restartPolicy Never) with a fresh UID, as the gateway resolves it."""
    uid = str(uuid.uuid4())
    container: dict[str, Any] = {"name": "app", "image": image, "command": list(command)}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": uid}
    if annotations:
        meta["annotations"] = dict(annotations)
    raw = {
        "metadata": meta,
        "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [container]},
    }
    return ResolvedPod(
        namespace="default",
        name=name,
        uid=uid,
        node_name=node,
        pod=raw,
        containers=(
            ResolvedContainer(
                name="app",
                image=image,
                command=command,
                env=tuple(EnvVar(k, v) for k, v in (env or {}).items()),
                spec=container,
            ),
        ),
    )


class Made:
    """The translators a harness made, closed in reverse order at the end of the test."""

    def __init__(self) -> None:
        self.translators: list[Translator] = []

    async def started(self, t: Translator) -> Translator:
        self.translators.append(t)
        await t.start()
        return t

    async def aclose(self) -> None:
        for t in reversed(self.translators):
            await t.close()


class Gate(Protocol):
    """A fake backend's switch: while ``down``, every request to the fake fails to connect."""

    down: bool


class Switch:
    """A ``Gate`` of its own, for a harness that gates its fake's handler itself."""

    down = False


class FakeBackend:
    """``requests()`` and ``unreachable()`` of a harness whose backend is a fake server: the
    harness sets ``gate`` (what makes the fake refuse connections) and ``received`` (what the
    fake logs, one item per request) in its ``__init__``."""

    gate: Gate
    received: Sized

    def requests(self) -> int | None:
        return len(self.received)

    @contextlib.contextmanager
    def _outage(self) -> Iterator[None]:
        self.gate.down = True
        try:
            yield
        finally:
            self.gate.down = False

    def unreachable(self) -> contextlib.AbstractContextManager[None] | None:
        return self._outage()


__all__ = [
    "LOG_TEXT",
    "NODE",
    "FakeBackend",
    "Gate",
    "HarnessFactory",
    "Made",
    "Outcome",
    "Switch",
    "make_pod",
]
