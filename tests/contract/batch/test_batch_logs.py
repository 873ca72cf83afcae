"""Logs from task files: streams, tailLines/limitBytes over byte ranges, follow by polling, and
the answers for what Batch cannot do."""

from __future__ import annotations

import asyncio

import pytest
from batch_pods import Sleeps, make_pod
from fake_batch import Behaviour, FakeBatch, iter_calls

from translators.base import BackendNotFound, BackendRejected, LogOptions, PodRef

pytestmark = pytest.mark.contract


async def read(t, ref: PodRef, container: str = "app", **options) -> bytes:
    return b"".join([c async for c in t.logs(ref, container, LogOptions(**options))])


@pytest.fixture
async def finished(fake: FakeBatch, make_translator):
    lines = b"".join(f"line {i}\n".encode() for i in range(20_000))  # ~190 KB: several ranges
    fake.script("default/chatty/", Behaviour(stdout=lines, stderr=b"warn 1\nwarn 2\n"))
    t = make_translator()
    pod = make_pod("chatty")
    await t.create(pod)
    fake.settle()
    return t, pod.ref, lines


async def test_streams(finished) -> None:
    t, ref, lines = finished
    assert await read(t, ref, stream="Stdout") == lines
    assert await read(t, ref, stream="Stderr") == b"warn 1\nwarn 2\n"
    assert await read(t, ref) == lines + b"warn 1\nwarn 2\n"


async def test_tail_lines_reads_backwards_with_ranges(fake: FakeBatch, finished) -> None:
    t, ref, _ = finished
    assert (
        await read(t, ref, stream="Stdout", tail_lines=3) == b"line 19997\nline 19998\nline 19999\n"
    )
    ranged = [c for c in fake.received if c.url.path.endswith("stdout.txt") and c.method == "GET"]
    assert all(r.headers["ocp-range"].startswith("bytes=") for r in ranged)
    assert await read(t, ref, tail_lines=3) == b"line 19999\nwarn 1\nwarn 2\n"
    assert await read(t, ref, tail_lines=0) == b""
    big = await read(t, ref, stream="Stdout", tail_lines=10_000)
    assert big.count(b"\n") == 10_000 and big.startswith(b"line 10000\n")


async def test_limit_bytes(finished) -> None:
    t, ref, lines = finished
    assert await read(t, ref, stream="Stdout", limit_bytes=10) == lines[:10]
    assert await read(t, ref, limit_bytes=len(lines) + 3) == lines + b"war"


async def test_follow_polls_the_growing_file_until_completion(
    fake: FakeBatch, make_translator, sleeps: Sleeps
) -> None:
    fake.script(
        "default/follow/",
        Behaviour(stdout=b"start\n", stdout_chunks=[b"one\n", b"two\n", b"three\n"], run_steps=4),
    )
    t = make_translator(log_poll_seconds=1.5)
    pod = make_pod("follow")
    await t.create(pod)
    fake.step(2)  # running, "start" written

    stepping = sleeps.__call__

    async def sleep_and_step(seconds: float) -> None:  # the clock moves while we poll
        fake.step()
        await stepping(seconds)

    t.log_reader._sleep = sleep_and_step
    got = await asyncio.wait_for(read(t, pod.ref, stream="Stdout", follow=True), 10)
    assert got == b"start\none\ntwo\nthree\n"
    assert set(sleeps.delays) == {1.5}
    assert fake.all_tasks(t.job_id)[0]["state"] == "completed"


async def test_before_start_the_container_is_waiting(fake: FakeBatch, make_translator) -> None:
    t = make_translator()
    pod = make_pod("queued")
    await t.create(pod)
    with pytest.raises(BackendRejected) as err:
        await read(t, pod.ref)
    assert str(err.value) == 'container "app" in pod "queued" is waiting to start'


async def test_unknown_container_and_pod(fake: FakeBatch, make_translator) -> None:
    t = make_translator()
    pod = make_pod("known")
    await t.create(pod)
    with pytest.raises(BackendNotFound, match='container "nope" is not valid for pod "known"'):
        await read(t, pod.ref, "nope")
    with pytest.raises(BackendNotFound):
        await read(t, PodRef("default", "ghost", "0000"))


@pytest.mark.parametrize(
    "option",
    [
        {"previous": True},
        {"timestamps": True},
        {"since": __import__("datetime").datetime(2026, 1, 1)},
    ],
)
async def test_unsupported_options_are_refused_clearly(finished, option) -> None:
    t, ref, _ = finished
    with pytest.raises(BackendRejected, match="not available"):
        await read(t, ref, **option)


async def test_logs_after_restart_find_the_task(fake: FakeBatch, make_translator, finished) -> None:
    _, ref, _ = finished
    fresh = make_translator()
    assert await read(fresh, ref, stream="Stderr") == b"warn 1\nwarn 2\n"
    assert list(iter_calls(fake, "GET", "/tasks/" + fake.all_tasks(fresh.job_id)[0]["id"]))
