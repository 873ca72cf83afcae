"""Contract harness of the Azure Batch backend: translators on the stateful Batch fake
(tests/contract/batch/fake_batch.py) through the real SDK pipeline (``httpx.MockTransport``,
SharedKey signing); their clock is the fake's time, with a sleep that only records.

One fake account and pool serve every node (each node is a Batch job of its own); a pod's
outcome is a fake ``Behaviour`` matched on its UID (``displayName`` carries it); ``settle()``
steps the fake; while unreachable every request fails to connect.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from batch_pods import Sleeps
from contract_harness import LOG_TEXT, NODE, FakeBackend, Made, Switch, make_pod
from fake_batch import Behaviour, FakeBatch

from tests.fake_time import FakeTime
from translators.api import Outcome, ResolvedPod, Translator, TranslatorContext
from translators.batch import BatchTranslator

#: settle() steps: a task is placed, prepares, runs one step and exits within three.
STEPS = 3


class BatchHarness(FakeBackend):
    kind = "batch"
    node_name = NODE
    capabilities = frozenset({"logs"})  # no exec, metrics or change feed in Batch
    survives_restart = True
    shared_by_nodes = True
    log_text = LOG_TEXT

    def __init__(self) -> None:
        self.fake = FakeBatch()
        self.fake.add_pool("pool-1", vm_size="standard_d4s_v3", slots=4, nodes=2)
        self.made = Made()
        self.gate, self.received = Switch(), self.fake.calls

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.gate.down:
            raise httpx.ConnectError("connection refused", request=request)
        return self.fake.handle(request)

    def _now(self) -> _dt.datetime:
        return self.fake.now

    async def translator(self, *, node: str = "") -> Translator:
        settings = {
            "endpoint": self.fake.endpoint,
            "account_name": self.fake.account,
            "account_key": self.fake.key,
            "pool_id": "pool-1",
            "submit_linger": 0,
        }
        clock = FakeTime(sleep=Sleeps(), now=self._now)
        t = BatchTranslator(
            TranslatorContext(node_name=node or self.node_name, settings=settings, clock=clock),
            http_client=httpx.AsyncClient(transport=httpx.MockTransport(self.handle)),
            environ={},
        )
        return await self.made.started(t)

    def pod(self, name: str, *, outcome: Outcome = "run", node: str = "") -> ResolvedPod:
        pod = make_pod(name, node=node or self.node_name)
        behaviour = Behaviour(
            exit_codes=[1 if outcome == "fail" else 0],
            stdout=LOG_TEXT + b"\n",
            forever=outcome == "run",
        )
        self.fake.script(lambda task: f"/{pod.uid}/" in str(task.get("displayName")), behaviour)
        return pod

    async def settle(self) -> None:
        self.fake.step(STEPS)

    def workloads(self, uid: str) -> int:
        return sum(
            1
            for tasks in self.fake.tasks.values()
            for rec in tasks.values()
            if f"/{uid}/" in str(rec.body.get("displayName"))
        )


@contextlib.asynccontextmanager
async def batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[object]:
    h = BatchHarness()
    try:
        yield h
    finally:
        await h.made.aclose()
