"""Restarting one container (``Restarter``, a failed liveness or startup probe): Nomad's
``POST /v1/client/allocation/:id/restart`` with the task, against the API as Nomad speaks it
(respx, captured allocations)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx
from nomad_fixtures import ADDRESS, MakeTranslator, captured

from translators.base import BackendRejected, PodRef, Restarter

pytestmark = pytest.mark.contract


def ref_of(doc: dict[str, Any]) -> PodRef:
    meta = doc["job"]["Meta"]
    return PodRef(meta["k8s.namespace"], meta["k8s.name"], meta["k8s.uid"])


def mock_job(nomad: respx.MockRouter, doc: dict[str, Any]) -> None:
    job = doc["job"]
    nomad.get(f"/v1/job/{job['ID']}").mock(return_value=httpx.Response(200, json=job))
    nomad.get(f"/v1/job/{job['ID']}/allocations").mock(
        return_value=httpx.Response(200, json=doc["allocations"])
    )


async def test_restart_posts_the_task_to_the_running_allocation(
    make_translator: MakeTranslator,
) -> None:
    doc = captured("running")
    alloc = doc["allocations"][0]
    t = await make_translator()
    assert isinstance(t, Restarter)
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, doc)
        restart = nomad.post(f"/v1/client/allocation/{alloc['ID']}/restart").mock(
            return_value=httpx.Response(200, json={})
        )
        await t.restart_container(ref_of(doc), "app")
    assert restart.call_count == 1
    sent = restart.calls[0].request
    assert json.loads(sent.content) == {"TaskName": "app"}
    assert sent.url.params["namespace"] == doc["job"]["Namespace"]


async def test_restart_of_a_finished_pod_is_rejected(make_translator: MakeTranslator) -> None:
    doc = captured("succeeded")
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, doc)
        with pytest.raises(BackendRejected, match="not running"):
            await t.restart_container(ref_of(doc), "app")


async def test_kill_signals_sigterm_to_the_task_then_sigkill_after_the_grace(
    make_translator: MakeTranslator,
) -> None:
    """``Killer`` (restartPolicy Never: a failed liveness probe or postStart hook kills the
    container without a restart): SIGTERM to the task, SIGKILL once the grace passed — the
    job's restart policy (``Attempts: 0``) keeps it dead."""
    import asyncio

    from translators.base import Killer

    doc = captured("running")
    alloc = doc["allocations"][0]
    t = await make_translator()
    assert isinstance(t, Killer)
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, doc)
        signal = nomad.post(f"/v1/client/allocation/{alloc['ID']}/signal").mock(
            return_value=httpx.Response(200, json={})
        )
        await t.kill_container(ref_of(doc), "app", grace_seconds=0)
        for _ in range(50):
            if signal.call_count >= 2:
                break
            await asyncio.sleep(0.01)
    sent = [json.loads(c.request.content) for c in signal.calls]
    assert sent == [
        {"Task": "app", "Signal": "SIGTERM"},
        {"Task": "app", "Signal": "SIGKILL"},
    ]
    await t.close()


async def test_kill_of_a_finished_pod_is_rejected(make_translator: MakeTranslator) -> None:
    doc = captured("succeeded")
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, doc)
        with pytest.raises(BackendRejected, match="not running"):
            await t.kill_container(ref_of(doc), "app", grace_seconds=5)
