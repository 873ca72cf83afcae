"""Fixtures for node tests: a fake clock, the stateful fake API (node_fakes.FakeApi), a client."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from node_fakes import FakeApi

from gateway.kube.client import KubeClient, KubeConfig, RetryPolicy
from vkgate_core.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def make_client(clock: FakeClock) -> Callable[[FakeApi], KubeClient]:
    def make(api: FakeApi) -> KubeClient:
        return KubeClient(
            KubeConfig(server="https://kube.test"),
            transport=httpx.MockTransport(api.handler),
            clock=clock,
            qps=0,
            retry=RetryPolicy(delays=()),
        )

    return make
