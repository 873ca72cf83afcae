"""Contract harness of the Nomad backend: translators on a respx-mocked Nomad whose answers
are the stateful ``fake_nomad.FakeNomad`` (Nomad's captured JSON); their clock is a fake one
that ``settle()`` moves, whose sleeps are recorded, not slept.

One Nomad serves every node (each lists its own jobs by the ``vkgate.node`` meta); a pod's
outcome is kept by the fake per pod UID; ``settle()`` is one scheduler/client step, then the
translator's background work (the purge after a stop) runs; while unreachable every request
fails to connect.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import respx
from contract_harness import LOG_TEXT, NODE, FakeBackend, Made, make_pod
from fake_nomad import FakeNomad
from nomad_fixtures import ADDRESS, Sleeps

from tests.fake_time import FakeTime
from translators.api import Outcome, ResolvedPod, Translator, TranslatorContext
from translators.nomad import NomadTranslator
from vkgate_core.clock import FakeClock

#: Fake seconds per settle() (a scheduler/client step).
STEP = 1.0


class NomadHarness(FakeBackend):
    kind = "nomad"
    node_name = NODE
    capabilities = frozenset({"notifier", "logs", "exec", "metrics"})
    survives_restart = True
    shared_by_nodes = True
    log_text = LOG_TEXT

    def __init__(self) -> None:
        self.fake = FakeNomad()
        self.fake.stdout = LOG_TEXT + b"\n"
        self.gate, self.received = self.fake, self.fake.requests
        self.clock = FakeClock()
        self.made = Made()

    async def translator(self, *, node: str = "") -> Translator:
        clock = FakeTime(sleep=Sleeps(), now=self.clock.now)
        t = NomadTranslator(
            TranslatorContext(
                node_name=node or self.node_name, settings={"address": ADDRESS}, clock=clock
            ),
            environ={},
        )
        return await self.made.started(t)

    def pod(self, name: str, *, outcome: Outcome = "run", node: str = "") -> ResolvedPod:
        pod = make_pod(name, node=node or self.node_name)
        self.fake.outcomes[pod.uid] = outcome
        return pod

    async def settle(self) -> None:
        await self.clock.advance(STEP)
        self.fake.advance()
        for _ in range(20):  # the translator's background tasks (purge after a stop)
            await asyncio.sleep(0)

    def workloads(self, uid: str) -> int:
        return len(self.fake.jobs_of(uid))


@contextlib.asynccontextmanager
async def nomad(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[object]:
    h = NomadHarness()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as router:
        router.route().mock(side_effect=h.fake.handle)
        try:
            yield h
        finally:
            await h.made.aclose()
    assert h.fake.unknown == [], "the translator called what the fake Nomad does not serve"
