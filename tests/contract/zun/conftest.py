"""Fixtures for the Zun contract tests: the stateful fake OpenStack and translators bound to it.

One time source: the gateway's ``FakeClock`` drives both the fake (its transitions) and the
translator (its sleeps), so ``await clock.advance(s)`` moves the whole world.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from fake_zun import FakeOpenStack
from zun_upstream import zun_api_or_none

from translators.base import TranslatorContext
from translators.zun import ZunTranslator
from vkgate_core.clock import FakeClock

NODE = "vk-zun"


def os_env(fake: FakeOpenStack) -> dict[str, str]:
    return {
        "OS_AUTH_URL": fake.auth_url,
        "OS_USERNAME": fake.username,
        "OS_PASSWORD": fake.password,
        "OS_PROJECT_NAME": fake.project_name,
        "OS_USER_DOMAIN_NAME": "Default",
        "OS_PROJECT_DOMAIN_NAME": "Default",
        "OS_REGION_NAME": fake.region,
    }


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake(clock: FakeClock) -> Iterator[FakeOpenStack]:
    f = FakeOpenStack(clock=clock.monotonic, upstream=zun_api_or_none())
    yield f
    assert f.disagreements == [], "Zun's own API accepted what the fake rejected"


MakeTranslator = Callable[..., Awaitable[ZunTranslator]]


def set_os_environ(monkeypatch: pytest.MonkeyPatch, environ: dict[str, str]) -> None:
    """Replace every ``OS_*`` variable: openstacksdk's loader reads ``os.environ`` itself."""
    for key in [k for k in os.environ if k.startswith("OS_")]:
        monkeypatch.delenv(key)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
async def make_translator(
    fake: FakeOpenStack, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[MakeTranslator]:
    made: list[ZunTranslator] = []

    async def make(
        *, node: str = NODE, environ: dict[str, str] | None = None, **settings: Any
    ) -> ZunTranslator:
        settings.setdefault("retry_backoff", [0.1, 0.2])
        set_os_environ(monkeypatch, os_env(fake) if environ is None else environ)
        t = ZunTranslator(
            TranslatorContext(node_name=node, settings=settings, clock=clock),
            transport=fake.transport(),
            requests_session=fake.requests_session(),
        )
        await t.start()
        made.append(t)
        return t

    yield make
    for t in made:
        await t.close()


@pytest.fixture
async def zun(make_translator: MakeTranslator) -> ZunTranslator:
    return await make_translator()
