"""Fixtures for the Nomad contract tests: translators on a respx-mocked address whose retry
sleeps are recorded instead of slept (helpers live in ``nomad_fixtures``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from nomad_fixtures import ADDRESS, NODE, MakeTranslator, Sleeps

from tests.fake_time import FakeTime
from translators.base import TranslatorContext
from translators.nomad import NomadTranslator


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def make_translator(sleeps: Sleeps) -> AsyncIterator[MakeTranslator]:
    made: list[NomadTranslator] = []

    async def make(**settings: Any) -> NomadTranslator:
        table = {
            "address": ADDRESS,
            "mhz_per_core": 2000,
            "retry_backoff": [0.5, 1, 2],
            **settings,
        }
        clock = FakeTime(sleep=sleeps)
        t = NomadTranslator(
            TranslatorContext(node_name=NODE, settings=table, clock=clock), environ={}
        )
        made.append(t)
        return t

    yield make
    for t in made:
        await t.close()
