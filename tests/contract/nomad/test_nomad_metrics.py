"""``NomadTranslator.usage()`` over HTTP: stats of every running allocation mapped to pod and
container usage, CPU core-seconds integrated between scrapes (fake clock), a failing allocation
left out without retries, calls in flight bounded by ``stats_concurrency``.

The Nomad JSON is the real capture in ``tests/golden/nomad/metrics/raw-exec-burn.nomad.json``
(a raw_exec pod with a busy ``app``, an idle ``idle`` and a finished init task ``setup``).
"""

from __future__ import annotations

import asyncio
import copy
import datetime as _dt
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from nomad_fixtures import ADDRESS, NODE, Sleeps

from tests.fake_time import FakeTime
from translators.base import BackendUnavailable, MetricsSource, TranslatorContext
from translators.nomad import NomadTranslator
from translators.nomad.metrics import START_CORE_SECONDS as F
from vkgate_core.clock import FakeClock

pytestmark = pytest.mark.contract

CAPTURE = json.loads(
    (
        Path(__file__).resolve().parents[2] / "golden/nomad/metrics/raw-exec-burn.nomad.json"
    ).read_text()
)
JOB: dict[str, Any] = CAPTURE["jobs"][0]
ALLOC: dict[str, Any] = CAPTURE["samples"][-1]["allocations"][0]
STATS: dict[str, Any] = CAPTURE["samples"][-1]["stats"][ALLOC["ID"]]
APP_STARTED = _dt.datetime(2026, 11, 22, 10, 3, 57, 915210, tzinfo=_dt.UTC)


def stats(app_percent: float, *, app_rss: int = 1658880) -> dict[str, Any]:
    out = copy.deepcopy(STATS)
    app = out["Tasks"]["app"]["ResourceUsage"]
    app["CpuStats"]["Percent"] = app_percent
    app["MemoryStats"]["RSS"] = app_rss
    return out


def pod_copy(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The captured job and allocation as the n-th pod of the node (distinct IDs and names)."""
    job, alloc = copy.deepcopy(JOB), copy.deepcopy(ALLOC)
    job["ID"] = alloc["JobID"] = f"{JOB['ID']}-{n}"
    job["Meta"]["k8s.name"] = f"burner-{n}"
    job["Meta"]["k8s.uid"] = f"uid-{n}"
    alloc["ID"] = f"{ALLOC['ID'][:-4]}{n:04d}"
    return job, alloc


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(APP_STARTED + _dt.timedelta(seconds=20))


@pytest.fixture
async def make(clock: FakeClock) -> AsyncIterator[Callable[..., NomadTranslator]]:
    made: list[NomadTranslator] = []

    def factory(
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        at: FakeClock | None = None,
        **settings: Any,
    ) -> NomadTranslator:
        table = {"address": ADDRESS, "mhz_per_core": 2000, "retry_backoff": [0.5, 1, 2]}
        time = FakeTime(sleep=Sleeps(), now=(at or clock).now)
        t = NomadTranslator(
            TranslatorContext(node_name=NODE, settings={**table, **settings}, clock=time),
            environ={},
            transport=transport,
        )
        made.append(t)
        return t

    yield factory
    for t in made:
        await t.close()


def listing(
    nomad: respx.MockRouter, jobs: list[dict[str, Any]], allocs: list[dict[str, Any]]
) -> None:
    nomad.get("/v1/jobs").mock(return_value=httpx.Response(200, json=jobs))
    nomad.get("/v1/allocations").mock(return_value=httpx.Response(200, json=allocs))


async def test_the_translator_is_a_metrics_source(make: Callable[..., NomadTranslator]) -> None:
    assert isinstance(make(), MetricsSource)


async def test_stats_map_to_running_containers_and_cpu_is_integrated(
    make: Callable[..., NomadTranslator], clock: FakeClock
) -> None:
    t = make()
    with respx.mock(base_url=ADDRESS) as nomad:
        listing(nomad, [JOB], [ALLOC])
        route = nomad.get(f"/v1/client/allocation/{ALLOC['ID']}/stats").mock(
            side_effect=[
                httpx.Response(200, json=stats(100.0)),
                httpx.Response(200, json=stats(50.0, app_rss=4 << 20)),
            ]
        )
        first = await t.usage()
        await clock.advance(10)
        second = await t.usage()
    assert route.call_count == 2
    (pod,) = first.pods
    assert (pod.ref.namespace, pod.ref.name, pod.ref.uid) == (
        "default",
        "burner",
        "5f1c2a9e-0000-4000-8000-00000000b001",
    )
    # the finished init task "setup" still has (stale) figures in the reply: not a container
    app, idle = pod.containers
    assert (app.name, idle.name) == ("app", "idle")
    assert app.started_at == APP_STARTED
    # Percent is per core: 100 = one core busy
    assert app.cpu_nano_cores == 1_000_000_000
    # first sample: one core since the task started 20 s ago
    assert app.cpu_core_seconds == pytest.approx(F + 20.0)
    # process-based stats measure RSS only: the working set is the RSS
    assert app.memory_working_set_bytes == app.memory_rss_bytes == 1658880
    # idle is 20 s old and reads 0 %: a real reading, not "unknown"; its counter is the start
    # floor, never 0 (metrics-server drops a pod whose CPU counter reads 0)
    assert idle.cpu_nano_cores == 0 and idle.cpu_core_seconds == pytest.approx(F)
    # the node: the pods' cumulative CPU (20 + 0); memory and rate are summed by the kubelet
    assert first.cpu_core_seconds == pytest.approx(20.0 + 2 * F)
    assert first.cpu_nano_cores is None and first.memory_working_set_bytes is None
    (app2, _) = second.pods[0].containers
    # 10 s later at half a core: 20 + 0.5 x 10
    assert app2.cpu_nano_cores == 500_000_000
    assert app2.cpu_core_seconds == pytest.approx(F + 25.0)
    assert app2.memory_working_set_bytes == 4 << 20
    assert second.time - first.time == _dt.timedelta(seconds=10)


async def test_a_zero_right_after_start_is_unknown_not_idle(
    make: Callable[..., NomadTranslator],
) -> None:
    """Nomad primes its CPU tracker for ~10 s after a task starts and reports 0 meanwhile."""
    t = make(at=FakeClock(APP_STARTED + _dt.timedelta(seconds=4)))
    with respx.mock(base_url=ADDRESS) as nomad:
        listing(nomad, [JOB], [ALLOC])
        nomad.get(f"/v1/client/allocation/{ALLOC['ID']}/stats").mock(
            return_value=httpx.Response(200, json=stats(0.0))
        )
        usage = await t.usage()
    app, idle = usage.pods[0].containers
    # the rate is unknown, but the counter exists from the first read (the start floor)
    assert app.cpu_nano_cores is None and app.cpu_core_seconds == pytest.approx(F)
    assert idle.cpu_nano_cores is None and idle.cpu_core_seconds == pytest.approx(F)
    assert app.memory_working_set_bytes == 1658880  # memory is measured from the start


@pytest.mark.parametrize(
    "failure",
    [
        httpx.Response(500, text="rpc error: unknown allocation"),
        httpx.Response(404, text="Unknown allocation"),
        httpx.ConnectTimeout("timed out"),
    ],
    ids=["500", "404", "timeout"],
)
async def test_a_failing_allocation_is_left_out_and_not_retried(
    make: Callable[..., NomadTranslator], clock: FakeClock, failure: Any
) -> None:
    (job1, alloc1), (job2, alloc2) = pod_copy(1), pod_copy(2)
    t = make()
    with respx.mock(base_url=ADDRESS) as nomad:
        listing(nomad, [job1, job2], [alloc1, alloc2])
        flaky = nomad.get(f"/v1/client/allocation/{alloc1['ID']}/stats").mock(
            side_effect=[
                httpx.Response(200, json=stats(100.0)),
                failure,
                httpx.Response(200, json=stats(50.0)),
            ]
        )
        nomad.get(f"/v1/client/allocation/{alloc2['ID']}/stats").mock(
            return_value=httpx.Response(200, json=stats(100.0))
        )
        first = await t.usage()
        await clock.advance(5)
        failed = await t.usage()
        assert flaky.call_count == 2  # no retry: the next scrape is the retry
        await clock.advance(5)
        later = await t.usage()
    assert [p.ref.name for p in failed.pods] == ["burner-2"]
    assert sorted(p.ref.name for p in later.pods) == ["burner-1", "burner-2"]

    def app_seconds(usage: Any) -> float:
        (pod,) = [p for p in usage.pods if p.ref.name == "burner-1"]
        value: float = pod.containers[0].cpu_core_seconds
        return value

    # the counter went on across the gap (20 s at one core, then 10 s at half a core); starting
    # over from the start time would give 0.5 x 30 = 15, a decrease metrics-server rejects
    assert app_seconds(first) == pytest.approx(F + 20.0)
    assert app_seconds(later) == pytest.approx(F + 25.0)
    # the node's counter keeps the left-out pod's last value: it never goes down
    assert first.cpu_core_seconds == pytest.approx(40.0 + 4 * F)  # two pods of two tasks
    # burner-2 went on: 25 + burner-1 20
    assert failed.cpu_core_seconds == pytest.approx(45.0 + 4 * F)
    assert later.cpu_core_seconds == pytest.approx(55.0 + 4 * F)  # 30 + 25


async def test_stats_calls_in_flight_are_bounded(
    make: Callable[..., NomadTranslator], clock: FakeClock
) -> None:
    pods = [pod_copy(n) for n in range(12)]
    in_flight = peak = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        path = request.url.path
        if path == "/v1/jobs":
            return httpx.Response(200, json=[j for j, _ in pods])
        if path == "/v1/allocations":
            return httpx.Response(200, json=[a for _, a in pods])
        assert path.endswith("/stats"), path
        in_flight += 1
        peak = max(peak, in_flight)
        for _ in range(5):  # an answer that takes a few loop turns, not real time
            await asyncio.sleep(0)
        in_flight -= 1
        return httpx.Response(200, json=stats(100.0))

    t = make(httpx.MockTransport(handler), stats_concurrency=3)
    usage = await t.usage()
    assert len(usage.pods) == 12
    assert peak == 3


async def test_nomad_down_while_listing_is_a_backend_error(
    make: Callable[..., NomadTranslator],
) -> None:
    """Without any known job the scrape lists first; an unreachable Nomad is an error (the
    kubelet serves resource_scrape_error 1), not an empty node that looks idle."""
    t = make(retry_backoff=[])
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get("/v1/jobs").mock(side_effect=httpx.ConnectError("refused"))
        with pytest.raises(BackendUnavailable):
            await t.usage()


async def test_allocations_that_are_not_running_are_not_scraped(
    make: Callable[..., NomadTranslator],
) -> None:
    done = copy.deepcopy(ALLOC)
    done["ClientStatus"] = "complete"
    for ts in done["TaskStates"].values():
        ts["State"] = "dead"
    t = make()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        listing(nomad, [JOB], [done])
        route = nomad.get(f"/v1/client/allocation/{ALLOC['ID']}/stats")
        usage = await t.usage()
    assert usage.pods == () and route.call_count == 0
