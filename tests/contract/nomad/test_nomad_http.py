"""HTTP error paths real Nomad will not easily produce: 429 with Retry-After, 5xx retries,
ACL 403, 404 on delete, validation errors reported as 500 — all through the one mapping."""

from __future__ import annotations

import httpx
import pytest
import respx
from nomad_fixtures import ADDRESS, MakeTranslator, Sleeps, captured, pod

from translators.base import (
    BackendAuthError,
    BackendRejected,
    BackendUnavailable,
    PodRef,
)

pytestmark = pytest.mark.contract

JOB_ID = "default-web-0b7c1f2e"


async def test_429_is_retried_after_the_servers_retry_after(
    make_translator: MakeTranslator, sleeps: Sleeps
) -> None:
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get("/v1/status/leader").mock(
            side_effect=[
                httpx.Response(429, headers={"Retry-After": "7"}, text="rate limited"),
                httpx.Response(200, json="127.0.0.1:4647"),
            ]
        )
        await t.client.get("/status/leader")
    assert sleeps == [7.0]  # Retry-After (7 s) beats the first backoff step (0.5 s)


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_5xx_is_retried_with_the_backoff_steps(
    make_translator: MakeTranslator, sleeps: Sleeps, status: int
) -> None:
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        route = nomad.get("/v1/nodes").mock(
            side_effect=[
                httpx.Response(status, text="rpc error: leader unavailable"),
                httpx.Response(status, text="rpc error: leader unavailable"),
                httpx.Response(200, json=[]),
            ]
        )
        cap = await t.capacity()
    assert route.call_count == 3
    assert sleeps == [0.5, 1.0]
    assert cap.cpu_millis == 0 and cap.pods == 110


async def test_5xx_gives_up_after_the_last_step(
    make_translator: MakeTranslator, sleeps: Sleeps
) -> None:
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get("/v1/nodes").mock(return_value=httpx.Response(500, text="no cluster leader"))
        with pytest.raises(BackendUnavailable, match="no cluster leader"):
            await t.capacity()
    assert sleeps == [0.5, 1.0, 2.0]


async def test_connection_refused_is_unavailable_and_retried(
    make_translator: MakeTranslator, sleeps: Sleeps
) -> None:
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get("/v1/status/leader").mock(side_effect=httpx.ConnectError("refused"))
        with pytest.raises(BackendUnavailable, match="ConnectError"):
            await t.client.get("/status/leader")
    assert len(sleeps) == 3


async def test_the_ping_is_not_retried_the_health_loop_is_its_retry(
    make_translator: MakeTranslator, sleeps: Sleeps
) -> None:
    """Retries inside one ping would outlast node.ping_timeout and turn the backend's own error
    into "ping timed out"."""
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        leader = nomad.get("/v1/status/leader").mock(side_effect=httpx.ConnectError("refused"))
        with pytest.raises(BackendUnavailable, match="ConnectError"):
            await t.ping()
    assert leader.call_count == 1 and sleeps == []


async def test_acl_403_on_submit_is_an_auth_error_and_not_retried(
    make_translator: MakeTranslator, sleeps: Sleeps
) -> None:
    t = await make_translator(token="s3cret-token")
    with respx.mock(base_url=ADDRESS) as nomad:
        submit = nomad.post("/v1/jobs").mock(
            return_value=httpx.Response(403, text="Permission denied")
        )
        with pytest.raises(BackendAuthError, match="403 Permission denied"):
            await t.create(pod())
    assert submit.calls.last.request.headers["X-Nomad-Token"] == "s3cret-token"
    assert sleeps == []  # an ACL refusal is not retried blindly inside one call


async def test_job_validation_500_is_rejected_not_retried(
    make_translator: MakeTranslator, sleeps: Sleeps
) -> None:
    t = await make_translator()
    body = (
        "1 error occurred:\n\t* Task group pod validation failed: 1 error occurred:\n"
        '\t* Restart policy "delay" with 0 attempts is ambiguous'
    )
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.post("/v1/jobs").mock(return_value=httpx.Response(500, text=body))
        with pytest.raises(BackendRejected, match="validation failed") as err:
            await t.create(pod())
    assert err.value.retryable is False
    assert sleeps == []


async def test_delete_of_an_unknown_job_is_done(make_translator: MakeTranslator) -> None:
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get(f"/v1/job/{JOB_ID}").mock(return_value=httpx.Response(404, text="job not found"))
        await t.delete(
            PodRef("default", "web", "0b7c1f2e-0000-4000-8000-000000000001"), grace_seconds=30
        )
        assert not any(c.request.method == "DELETE" for c in nomad.calls)


async def test_delete_racing_a_purge_404_is_done(make_translator: MakeTranslator) -> None:
    doc = captured("running")
    job, alloc = doc["job"], doc["allocations"][0]
    ref = PodRef("default", "running", job["Meta"]["k8s.uid"])
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get(f"/v1/job/{job['ID']}").mock(return_value=httpx.Response(200, json=job))
        nomad.get(f"/v1/job/{job['ID']}/allocations").mock(
            return_value=httpx.Response(200, json=[alloc])
        )
        stop = nomad.delete(f"/v1/job/{job['ID']}").mock(
            return_value=httpx.Response(404, text="job not found")
        )
        await t.delete(ref, grace_seconds=30)
    assert stop.called


async def test_delete_purges_at_once_and_forgets_the_job_once_allocations_ended(
    make_translator: MakeTranslator,
) -> None:
    """One purging deregister; Nomad still stops the allocation (SIGTERM, KillTimeout) and
    lists it under the job's ID: the job's view stays until it has ended, then the Variable
    goes."""
    doc = captured("running")
    job, alloc = doc["job"], doc["allocations"][0]
    ref = PodRef("default", "running", job["Meta"]["k8s.uid"])
    stopping = {**alloc, "DesiredStatus": "stop", "ModifyIndex": alloc["ModifyIndex"] + 2}
    done = {**stopping, "ClientStatus": "complete", "ModifyIndex": alloc["ModifyIndex"] + 5}
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get(f"/v1/job/{job['ID']}").mock(return_value=httpx.Response(200, json=job))
        nomad.get(f"/v1/job/{job['ID']}/allocations").mock(
            side_effect=[
                httpx.Response(200, json=[alloc]),  # locate
                httpx.Response(200, json=[stopping]),  # after the purge: still running
                httpx.Response(200, json=[done], headers={"X-Nomad-Index": "900"}),  # the wait
            ]
        )
        purge = nomad.delete(f"/v1/job/{job['ID']}").mock(
            return_value=httpx.Response(200, json={"EvalID": "e"})
        )
        variable = nomad.delete(f"/v1/var/nomad/jobs/{job['ID']}").mock(
            return_value=httpx.Response(200)
        )
        await t.delete(ref, grace_seconds=30)
        assert [v.ref.uid for v in t.book.views.values()] == [ref.uid]  # still stopping
        assert variable.call_count == 0
        await next(iter(t._purges.pending.values()))
    requests = [c.request for c in purge.calls]
    assert [r.url.params.get("purge") for r in requests] == ["true"]
    assert not t.book.views  # ended: forgotten
    assert variable.call_count == 1  # the job's Variable goes once its allocations ended


async def test_a_purged_job_whose_allocations_cannot_be_read_is_not_finished_blind(
    make_translator: MakeTranslator,
) -> None:
    """The read after the purge fails: the pod is not taken as ended (its containers may still
    run their grace period); the background wait asks again and finishes it once they ended."""
    doc = captured("running")
    job, alloc = doc["job"], doc["allocations"][0]
    ref = PodRef("default", "running", job["Meta"]["k8s.uid"])
    done = {**alloc, "ClientStatus": "complete", "ModifyIndex": alloc["ModifyIndex"] + 5}
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get(f"/v1/job/{job['ID']}/allocations").mock(
            side_effect=[
                httpx.Response(403, text="Permission denied"),  # after the purge
                httpx.Response(200, json=[done], headers={"X-Nomad-Index": "900"}),  # the wait
            ]
        )
        nomad.delete(f"/v1/job/{job['ID']}").mock(return_value=httpx.Response(200, json={}))
        nomad.delete(f"/v1/var/nomad/jobs/{job['ID']}").mock(return_value=httpx.Response(200))
        view = t.book.merge_job(job, region="")
        assert view is not None
        view.allocs = {}  # placed, but no event seen yet
        await t.delete(ref, grace_seconds=30)
        assert list(t.book.views.values()) == [view]  # not finished on an unread state
        await next(iter(t._purges.pending.values()))
    assert not t.book.views


async def test_token_never_appears_in_error_messages(make_translator: MakeTranslator) -> None:
    t = await make_translator(token="very-secret-token")
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get("/v1/status/leader").mock(
            return_value=httpx.Response(403, text="ACL token not found")
        )
        with pytest.raises(BackendAuthError) as err:
            await t.ping()
    assert "very-secret-token" not in str(err.value)
