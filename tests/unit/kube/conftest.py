"""The loopback fake API server (tests/kube_loopback.py) as a fixture: ``await loopback(handler)``
starts one per call, and every one is closed when the test ends."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.kube_loopback import Handler, LoopbackApi, StartApi


@pytest.fixture
async def loopback() -> AsyncIterator[StartApi]:
    started: list[LoopbackApi] = []

    async def start(handler: Handler) -> LoopbackApi:
        api = await LoopbackApi(handler).start()
        started.append(api)
        return api

    yield start
    for api in started:
        await api.aclose()
