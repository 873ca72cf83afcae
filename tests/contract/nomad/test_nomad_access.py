"""The ping's ACL half (translators/nomad/access.py): a token that cannot list, read or submit
jobs makes the ping fail naming what is missing; submit is probed with a plan (a dry run) at the
first ping and again only while a refusal stands, so the node turns Ready once the policy is
fixed.  Answers as Nomad 1.6.3 gives them with ACLs on (measured: 403 ``Permission denied``;
``GET /v1/job/<missing>`` 404 when allowed; a plan 200 with nothing registered)."""

from __future__ import annotations

import json

import httpx
import pytest
import respx
from nomad_fixtures import ADDRESS, MakeTranslator, Sleeps, pod

from translators.base import BackendAuthError, BackendUnavailable
from translators.nomad.access import PROBE_JOB

pytestmark = pytest.mark.contract

DENIED = httpx.Response(403, text="Permission denied")
JOB_ID = "default-web-0b7c1f2e"


def nomad_routes(nomad: respx.MockRouter) -> dict[str, respx.Route]:
    nomad.get("/v1/status/leader").mock(return_value=httpx.Response(200, json="127.0.0.1:4647"))
    nomad.get("/v1/agent/health").mock(return_value=httpx.Response(200, json={}))
    return {
        "list": nomad.get("/v1/jobs").mock(return_value=httpx.Response(200, json=[])),
        "read": nomad.get(f"/v1/job/{PROBE_JOB}").mock(
            return_value=httpx.Response(404, text="job not found")
        ),
        "plan": nomad.post(f"/v1/job/{PROBE_JOB}/plan").mock(
            return_value=httpx.Response(200, json={"Annotations": {}})
        ),
    }


async def test_a_token_that_may_not_list_jobs_fails_the_ping_naming_list_jobs(
    make_translator: MakeTranslator, sleeps: Sleeps
) -> None:
    t = await make_translator(namespace="k8s")
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        routes = nomad_routes(nomad)
        routes["list"].mock(return_value=DENIED)
        with pytest.raises(BackendAuthError) as err:
            await t.ping()
    assert str(err.value) == (
        'nomad GET /v1/jobs: 403 Permission denied (needs namespace "k8s" capability list-jobs)'
    )
    assert routes["list"].calls.last.request.url.params["per_page"] == "1"
    assert sleeps == []  # probes are not retried: the health loop is the retry


async def test_every_missing_grant_is_named_in_one_line(make_translator: MakeTranslator) -> None:
    t = await make_translator()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        for route in nomad_routes(nomad).values():
            route.mock(return_value=DENIED)
        with pytest.raises(BackendAuthError) as err:
            await t.ping()
    assert str(err.value) == (
        'nomad GET /v1/jobs: 403 Permission denied (needs namespace "default" capability'
        ' list-jobs); also refused: read-job, submit-job in namespace "default"'
    )


async def test_the_submit_probe_is_a_dry_run_made_once_while_allowed(
    make_translator: MakeTranslator,
) -> None:
    t = await make_translator()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        routes = nomad_routes(nomad)
        register = nomad.post("/v1/jobs")
        await t.ping()
        await t.ping()
    assert routes["plan"].call_count == 1 and routes["list"].call_count == 2
    assert not register.called  # nothing is registered
    job = json.loads(routes["plan"].calls.last.request.content)["Job"]
    assert job["ID"] == PROBE_JOB and job["TaskGroups"][0]["Count"] == 0


async def test_a_refused_submit_fails_the_ping_until_the_policy_is_fixed(
    make_translator: MakeTranslator,
) -> None:
    """A real submit refused after a good start: the next ping probes submit again and fails;
    once the plan is allowed the node is healthy again, with no pod needing to retry."""
    t = await make_translator()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        routes = nomad_routes(nomad)
        await t.ping()
        nomad.get(f"/v1/job/{JOB_ID}").mock(return_value=httpx.Response(404, text="job not found"))
        nomad.post("/v1/jobs").mock(return_value=DENIED)
        with pytest.raises(BackendAuthError, match="capability submit-job"):
            await t.create(pod())
        routes["plan"].mock(return_value=DENIED)
        with pytest.raises(BackendAuthError) as err:
            await t.ping()
        assert str(err.value) == (
            f"nomad POST /v1/job/{PROBE_JOB}/plan: 403 Permission denied (needs namespace"
            ' "default" capability submit-job)'
        )
        routes["plan"].mock(return_value=httpx.Response(200, json={}))
        await t.ping()
        await t.ping()
    assert routes["plan"].call_count == 3  # first ping, while refused, the fix; then no more


async def test_an_inconclusive_plan_keeps_a_standing_refusal(
    make_translator: MakeTranslator,
) -> None:
    """Nomad validates a plan's job before its ACL check: a validation error says nothing about
    the grant, so a refusal seen on a real submit still stands."""
    t = await make_translator()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        routes = nomad_routes(nomad)
        nomad.get(f"/v1/job/{JOB_ID}").mock(return_value=httpx.Response(404, text="job not found"))
        nomad.post("/v1/jobs").mock(return_value=DENIED)
        with pytest.raises(BackendAuthError):
            await t.create(pod())
        routes["plan"].mock(return_value=httpx.Response(400, text="job validation failed"))
        with pytest.raises(BackendAuthError, match=r"^nomad POST /v1/jobs: 403 Permission denied"):
            await t.ping()


async def test_an_unreachable_agent_is_not_reported_as_a_refusal(
    make_translator: MakeTranslator,
) -> None:
    t = await make_translator()
    with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
        routes = nomad_routes(nomad)
        routes["list"].mock(return_value=httpx.Response(500, text="rpc error: no leader"))
        with pytest.raises(BackendUnavailable, match="no leader"):
            await t.ping()
