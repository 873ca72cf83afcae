"""Contract harness of the OpenStack Zun backend: translators on the stateful fake OpenStack
(tests/contract/zun/fake_zun.py), every Zun request replayed through Zun's own API code
(zun_upstream.py) whose rejections win, on one fake clock that ``settle()`` moves.

One project serves every node (each lists its own by the node label); a pod's outcome is the
fake's ``Script`` for its image; while unreachable Keystone and Zun both refuse connections.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from contract_harness import LOG_TEXT, NODE, FakeBackend, Made, make_pod
from fake_zun import FakeOpenStack
from zun_upstream import zun_api_or_none

from translators.api import Outcome, ResolvedPod, Translator, TranslatorContext
from translators.zun import ZunTranslator
from translators.zun.spec import LABEL_UID
from vkgate_core.clock import FakeClock

IMAGES: dict[Outcome, str] = {
    "run": "contract/run:1",
    "succeed": "contract/succeed:1",
    "fail": "contract/fail:1",
}
#: settle(): this many fake seconds, in steps (a stop, then the delete, then Zun's removal).
SECONDS, STEP = 6.0, 0.5


class Refused(httpx.ConnectError, requests.exceptions.ConnectionError):
    """A refused connection as both clients see one: httpx (Zun) and requests (Keystone)."""


class GatedOpenStack(FakeOpenStack):
    """The fake, behind a switch that makes every request fail to connect."""

    down = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise Refused("connection refused", request=request)
        return super().handle(request)


class ZunHarness(FakeBackend):
    kind = "zun"
    node_name = NODE
    capabilities = frozenset({"logs", "exec"})  # Zun pushes nothing and reports no usage
    survives_restart = True
    shared_by_nodes = True
    log_text = LOG_TEXT

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.clock = FakeClock()
        self.fake = GatedOpenStack(clock=self.clock.monotonic, upstream=zun_api_or_none())
        self.gate, self.received = self.fake, self.fake.requests
        self.fake.script(IMAGES["run"], logs=(LOG_TEXT.decode(),))
        self.fake.script(IMAGES["succeed"], run_seconds=1, exit_code=0, logs=(LOG_TEXT.decode(),))
        self.fake.script(IMAGES["fail"], run_seconds=1, exit_code=1, logs=(LOG_TEXT.decode(),))
        self.made = Made()
        # openstacksdk's loader reads os.environ itself
        for key in [k for k in os.environ if k.startswith("OS_")]:
            monkeypatch.delenv(key)
        for key, value in {
            "OS_AUTH_URL": self.fake.auth_url,
            "OS_USERNAME": self.fake.username,
            "OS_PASSWORD": self.fake.password,
            "OS_PROJECT_NAME": self.fake.project_name,
            "OS_USER_DOMAIN_NAME": "Default",
            "OS_PROJECT_DOMAIN_NAME": "Default",
            "OS_REGION_NAME": self.fake.region,
        }.items():
            monkeypatch.setenv(key, value)

    async def translator(self, *, node: str = "") -> Translator:
        settings: dict[str, Any] = {"retry_backoff": []}  # retries would wait on the fake clock
        t = ZunTranslator(
            TranslatorContext(
                node_name=node or self.node_name, settings=settings, clock=self.clock
            ),
            transport=self.fake.transport(),
            requests_session=self.fake.requests_session(),
        )
        return await self.made.started(t)

    def pod(self, name: str, *, outcome: Outcome = "run", node: str = "") -> ResolvedPod:
        return make_pod(name, node=node or self.node_name, image=IMAGES[outcome])

    async def settle(self) -> None:
        for _ in range(int(SECONDS / STEP)):
            await self.clock.advance(STEP)
        self.fake.sync()

    def workloads(self, uid: str) -> int:
        objects = [*self.fake.containers.values(), *self.fake.capsules.values()]
        return sum(1 for o in objects if (o.get("labels") or {}).get(LABEL_UID) == uid)


@contextlib.asynccontextmanager
async def zun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[object]:
    h = ZunHarness(monkeypatch)
    try:
        yield h
    finally:
        await h.made.aclose()
    assert h.fake.disagreements == [], "Zun's own API accepted what the fake rejected"
