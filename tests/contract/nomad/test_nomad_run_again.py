"""A pod's workload run again under the same job ID (docs/design/nomad.md, "Run again"): what
the translator reports for the new job counts none of the earlier job's allocations as runs.

The gateway counts the loss itself (one restart per ``WorkloadLost``); an allocation of the
job it replaced counted again by the translator made the pod show two.  Two ways the earlier
job's allocations reach the new job's view: Nomad lists a purged job's allocations under its ID
until its garbage collection, and after a Nomad that lost its state (indexes start again) the
book still holds the dead job's view when the event stream reports the new one."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest
import respx
from fake_nomad import FakeNomad
from nomad_fixtures import ADDRESS, NODE, Sleeps, pod

from tests.fake_time import FakeTime
from translators.base import Phase, TranslatorContext, WorkloadState
from translators.nomad import NomadTranslator
from translators.nomad.status import workload_state
from translators.nomad.views import merge_alloc

pytestmark = pytest.mark.contract


@dataclass
class Harness:
    """The stateful fake Nomad (``fake``, replaceable: a Nomad that lost its state) and one
    translator on it whose clock is fake."""

    fake: FakeNomad = field(default_factory=FakeNomad)
    translators: list[NomadTranslator] = field(default_factory=list)

    async def translator(self) -> NomadTranslator:
        ctx = TranslatorContext(
            node_name=NODE, settings={"address": ADDRESS}, clock=FakeTime(sleep=Sleeps())
        )
        t = NomadTranslator(ctx, environ={})
        self.translators.append(t)
        await t.start()
        return t

    def handle(self, request: httpx.Request) -> httpx.Response:
        return self.fake.handle(request)  # whichever Nomad is up now

    async def settle(self) -> None:
        """One scheduler/client step, then the translator's background work."""
        self.fake.advance()
        for _ in range(20):
            await asyncio.sleep(0)


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = Harness()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as router:
        router.route().mock(side_effect=harness.handle)
        try:
            yield harness
        finally:
            for t in harness.translators:
                await t.close()
    assert harness.fake.unknown == []


async def _listed(t: NomadTranslator, uid: str) -> WorkloadState | None:
    return next((s for s in await t.list() if s.ref.uid == uid), None)


async def _running(h: Harness, t: NomadTranslator, uid: str) -> WorkloadState:
    for _ in range(5):
        await h.settle()
        state = await _listed(t, uid)
        if state is not None and state.phase is Phase.RUNNING:
            return state
    raise AssertionError(f"never Running: {await _listed(t, uid)}")


async def test_a_job_purged_outside_and_registered_again_counts_no_earlier_run(
    h: Harness,
) -> None:
    t = await h.translator()
    web = pod("web")
    await t.create(web)
    first = await _running(h, t, web.uid)
    assert first.containers[0].restart_count == 0
    [job] = h.fake.jobs_of(web.uid)
    # someone purges the job: Nomad stops its allocation and keeps listing it under the ID
    gone = h.fake.handle(httpx.Request("DELETE", f"{ADDRESS}/v1/job/{job['ID']}?purge=true"))
    assert gone.status_code == 200
    await h.settle()
    assert await _listed(t, web.uid) is None
    assert [a["ClientStatus"] for a in h.fake.allocs_of(web.uid)] == ["complete"]
    await t.create(web)  # the gateway runs the lost workload again
    again = await _running(h, t, web.uid)
    assert len(h.fake.allocs_of(web.uid)) == 2  # the purged job's allocation still listed
    assert again.containers[0].restart_count == 0
    assert again.containers[0].container_id != first.containers[0].container_id


async def test_after_a_nomad_state_loss_the_new_jobs_events_count_no_earlier_run(
    h: Harness,
) -> None:
    """Nomad comes back without its state, its indexes lower than before; the agent registers
    the pod's job again and the stream reports the new job and its allocation before the
    register call's reply is handled (a loaded machine): the state they make is of the new
    job alone."""
    t = await h.translator()
    web = pod("web")
    h.fake.index = 5000  # the old Nomad had run a while
    await t.create(web)
    await _running(h, t, web.uid)
    # kill -9 and a restart: a Nomad that knows nothing, its indexes from the start again
    fresh = FakeNomad()
    h.fake = fresh
    assert await _listed(t, web.uid) is None
    seen: list[WorkloadState] = []
    handle = fresh.handle

    def register_then_events(request: httpx.Request) -> httpx.Response:
        reply = handle(request)
        if request.method == "POST" and request.url.path == "/v1/jobs":
            # the stream's Job and Allocation events of this registration, merged while the
            # reply is on its way (what JobBook.apply_events does with them)
            [job] = fresh.jobs_of(web.uid)
            view = t.book.merge_job(copy.deepcopy(job), region="")
            assert view is not None
            for alloc in fresh.allocs_of(web.uid):
                merge_alloc(view, copy.deepcopy(alloc))
            seen.append(workload_state(view))
        return reply

    fresh.handle = register_then_events  # type: ignore[method-assign]
    await t.create(web)
    assert [s.containers[0].restart_count for s in seen] == [0]
    assert (await _running(h, t, web.uid)).containers[0].restart_count == 0
