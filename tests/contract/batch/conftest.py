"""Fixtures for the Azure Batch contract tier: the stateful fake, translators wired to it through
``httpx.MockTransport`` (the real SDK pipeline, signing included), their clock the fake's time
with a recording sleep.  Pod builders live in ``batch_pods``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from batch_pods import Sleeps
from fake_batch import FakeBatch

from tests.fake_time import FakeTime
from translators.base import TranslatorContext
from translators.batch import BatchTranslator


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
        }
        table.update(settings)

        def fake_now() -> Any:
            return fake.now

        clock = FakeTime(now=now or fake_now, sleep=sleeps)
        client = httpx.AsyncClient(transport=httpx.MockTransport(fake.handle))
        t = BatchTranslator(
            TranslatorContext(node_name=node_name, settings=table, clock=clock),
            http_client=client,
            environ={},
        )
        made.append(t)
        return t

    yield make
    for t in made:
        await t.close()
