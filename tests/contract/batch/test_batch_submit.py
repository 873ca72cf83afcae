"""Burst submission (add-task-collection limits), adoption after restart, throttling backoff and
SharedKey authentication against the fake Batch service."""

from __future__ import annotations

import asyncio

import pytest
from batch_pods import Sleeps, make_pod
from fake_batch import FakeBatch, iter_calls

from translators.base import (
    BackendAuthError,
    BackendRejected,
    BackendThrottled,
    EnvVar,
    Phase,
)

pytestmark = pytest.mark.contract


async def test_burst_of_250_pods_takes_3_collection_calls(fake: FakeBatch, make_translator) -> None:
    t = make_translator()
    states = await asyncio.gather(*(t.create(make_pod(f"p{i}")) for i in range(250)))
    assert all(s.phase is Phase.PENDING for s in states)
    assert fake.count("POST", "/addtaskcollection") == 3
    assert fake.count("POST", "/tasks") == 0  # never one call per task
    assert len(fake.all_tasks(t.job_id)) == 250
    assert len({s.ref.uid for s in await t.list()}) == 250


async def test_body_budget_splits_chunks_before_sending(fake: FakeBatch, make_translator) -> None:
    t = make_translator(max_collection_bytes=20_000)
    big = (EnvVar("BLOB", "x" * 3000),)
    await asyncio.gather(*(t.create(make_pod(f"big{i}", env=big)) for i in range(20)))
    sizes = [c.body_bytes for c in iter_calls(fake, "POST", "/addtaskcollection")]
    assert len(sizes) >= 4 and all(s <= 20_000 for s in sizes)
    assert len(fake.all_tasks(t.job_id)) == 20


async def test_request_body_too_large_is_split_and_retried(
    fake: FakeBatch, make_translator
) -> None:
    fake.max_collection_bytes = 30_000  # stricter than the client's 1 MB budget
    t = make_translator()
    big = (EnvVar("BLOB", "y" * 3000),)
    states = await asyncio.gather(*(t.create(make_pod(f"b{i}", env=big)) for i in range(30)))
    assert len(states) == 30
    sizes = [c.body_bytes for c in iter_calls(fake, "POST", "/addtaskcollection")]
    assert sizes[0] > 30_000  # the first try was refused with 413 ...
    assert len(sizes) > 2  # ... and split
    assert len(fake.all_tasks(t.job_id)) == 30  # nothing lost, nothing doubled


async def test_single_task_larger_than_the_limit_is_rejected(
    fake: FakeBatch, make_translator
) -> None:
    fake.max_collection_bytes = 5_000
    t = make_translator()
    with pytest.raises(BackendRejected) as err:
        await t.create(make_pod("huge", env=(EnvVar("BLOB", "z" * 8000),)))
    assert err.value.reason == "RequestBodyTooLarge"
    assert not fake.all_tasks(t.job_id)


async def test_task_exists_after_restart_is_adopted(fake: FakeBatch, make_translator) -> None:
    first = make_translator()
    pod = make_pod("adopt-me")
    await first.create(pod)
    fake.step(2)  # running now

    restarted = make_translator()  # a new gateway process: empty caches
    state = await restarted.create(pod)
    assert len(fake.all_tasks(restarted.job_id)) == 1  # no duplicate
    assert state.phase is Phase.RUNNING  # the real task's state, not a fresh "Queued"
    (listed,) = await restarted.list()
    assert listed.ref == pod.ref


@pytest.mark.parametrize(
    ("status", "code", "retry_after", "expected"),
    [
        (429, "TooManyRequests", "7", [7.0, 7.0]),
        (503, "ServerBusy", None, [1.0, 2.0]),
        (500, "OperationTimedOut", None, [1.0, 2.0]),
        (429, "TooManyRequests", "500", [60.0, 60.0]),  # capped by max_retry_after
    ],
)
async def test_throttling_backs_off_and_honours_retry_after(
    fake: FakeBatch, make_translator, sleeps: Sleeps, status, code, retry_after, expected
) -> None:
    t = make_translator()
    await t.start()
    fake.fail_next(
        "POST", "addtaskcollection$", status=status, code=code, times=2, retry_after=retry_after
    )
    state = await t.create(make_pod("throttled"))
    assert state.phase is Phase.PENDING
    assert sleeps.delays == expected
    assert fake.count("POST", "/addtaskcollection") == 3
    assert len(fake.all_tasks(t.job_id)) == 1


async def test_throttling_gives_up_with_backend_throttled(fake: FakeBatch, make_translator) -> None:
    t = make_translator(retry_delays=[0.5, 0.5])
    await t.start()
    fake.fail_next("GET", "/tasks$", status=429, times=5, retry_after="3")
    with pytest.raises(BackendThrottled) as err:
        await t.list()
    assert err.value.retry_after == 3.0
    assert fake.count("GET", "/tasks") == 3


async def test_wrong_account_key_is_rejected_by_signature_check(
    fake: FakeBatch, make_translator
) -> None:
    import base64

    wrong = base64.b64encode(b"not the key" * 3).decode()
    t = make_translator(key=wrong)
    with pytest.raises(BackendAuthError) as err:
        await t.ping()
    assert "AuthenticationFailed" in str(err.value)
    assert fake.auth_failures == 1
    await make_translator().ping()  # the right key passes the same check
    assert fake.auth_failures == 1


async def test_stale_request_date_is_rejected(fake: FakeBatch, make_translator) -> None:
    import datetime as dt

    t = make_translator(now=lambda: fake.now - dt.timedelta(hours=1))
    with pytest.raises(BackendAuthError):
        await t.ping()


async def test_job_deleted_behind_our_back_is_recreated(fake: FakeBatch, make_translator) -> None:
    t = make_translator()
    await t.create(make_pod("one"))
    fake.jobs.clear()
    fake.tasks.clear()
    await t.create(make_pod("two"))
    assert fake.count("POST", "/jobs") == 2
    assert [task["displayName"].split("/")[1] for task in fake.all_tasks(t.job_id)] == ["two"]
