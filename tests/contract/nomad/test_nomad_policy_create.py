"""The node's policy holds on the agent's path: a job the policy refuses is never written to
Nomad — neither its Variable nor the register (translators/nomad/policy.py) — and a template
rendered in the agent's own process (``templates.render_workers = 0``) cannot forge what is
checked and written after it: the job ID, the Variable's items (issue row 3: with the template
holding the very ``backend_info`` vkgate checked against, a forged ID passed and the Variable
was written before the register that would have conflicted)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from nomad_fixtures import ADDRESS, NODE, pod

from translators.base import (
    ResolvedVolume,
    TranslationError,
    TranslatorContext,
    UnsupportedError,
    VolumeFile,
    VolumeMount,
)
from translators.nomad import NomadTranslator
from translators.render.engine import Renderer

pytestmark = pytest.mark.contract

TEAM = "b"
JOB_ID = "default-web-0b7c1f2e"
VICTIM = "default-victim-0b7c1f2e"


def translator(tmp_path: Path, body: str, **settings: Any) -> NomadTranslator:
    folder = tmp_path / "teams" / TEAM / "nomad"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.j2").write_text('{% extends "nomad/job.j2" %}\n' + body)
    # no pool: the render runs here, in this process (render_workers = 0)
    renderer = Renderer(extra_dirs=[tmp_path])
    table = {"address": ADDRESS, "mhz_per_core": 2000, **settings}
    return NomadTranslator(
        TranslatorContext(node_name=NODE, settings=table, renderer=renderer), environ={}
    )


def team_pod() -> Any:
    base = pod()
    c = dataclasses.replace(base.containers[0], mounts=(VolumeMount("cfg", "/etc/cfg", True),))
    vol = ResolvedVolume("cfg", "configMap", files=(VolumeFile("app.conf", b"mine\n"),))
    return dataclasses.replace(base, team=TEAM, containers=(c,), volumes=(vol,))


async def test_a_refused_job_writes_nothing_to_nomad(tmp_path: Path) -> None:
    body = '{% block config %}{"image": "busybox", "privileged": true}{% endblock %}'
    t = translator(tmp_path, body)
    try:
        with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
            nomad.route().mock(return_value=httpx.Response(200, json={}))
            with pytest.raises(UnsupportedError) as err:
                await t.create(team_pod())
            assert nomad.calls.call_count == 0
        assert err.value.reason == "PolicyRefused"
        assert err.value.field == "Job.TaskGroups[pod].Tasks[app].Config.privileged"
        assert f"teams/{TEAM}/nomad/job.j2" in str(err.value)
        assert 'add "privileged" to backend.nomad.allow_driver_config' in str(err.value)
    finally:
        await t.close()


async def test_the_same_job_is_registered_where_the_node_allows_it(tmp_path: Path) -> None:
    body = '{% block config %}{"image": "busybox", "privileged": true}{% endblock %}'
    t = translator(tmp_path, body, allow_driver_config=["privileged"])
    try:
        with respx.mock(base_url=ADDRESS) as nomad:
            nomad.put(f"/v1/var/nomad/jobs/{JOB_ID}").mock(return_value=httpx.Response(200))
            post = nomad.post("/v1/jobs").mock(return_value=httpx.Response(200, json={}))
            await t.create(team_pod())
        job = json.loads(post.calls.last.request.content)["Job"]
        assert job["TaskGroups"][0]["Tasks"][0]["Config"]["privileged"] is True
    finally:
        await t.close()


async def test_an_in_process_template_cannot_forge_the_job_id(tmp_path: Path) -> None:
    """The forged ID is another pod's: its Variable would be overwritten before the register."""
    body = (
        f'{{% set _ = backend_info.update({{"job_id": "{VICTIM}"}}) %}}'
        '{% set _ = backend_info.variable.update({"path": "nomad/jobs/' + VICTIM + '"}) %}'
    )
    t = translator(tmp_path, body)
    try:
        with respx.mock(base_url=ADDRESS, assert_all_called=False) as nomad:
            nomad.route().mock(return_value=httpx.Response(200, json={}))
            with pytest.raises(TranslationError, match=rf"Job\.ID must be '{JOB_ID}'"):
                await t.create(team_pod())
            assert nomad.calls.call_count == 0
    finally:
        await t.close()


async def test_an_in_process_template_cannot_forge_the_variables_items(tmp_path: Path) -> None:
    body = '{% set _ = backend_info.variable["items"].update({"f0": "forged\\n", "f9": "x"}) %}'
    t = translator(tmp_path, body)
    try:
        with respx.mock(base_url=ADDRESS) as nomad:
            put = nomad.put(f"/v1/var/nomad/jobs/{JOB_ID}").mock(return_value=httpx.Response(200))
            nomad.post("/v1/jobs").mock(return_value=httpx.Response(200, json={}))
            await t.create(team_pod())
        assert json.loads(put.calls.last.request.content)["Items"] == {"f0": "mine\n"}
        # what vkgate render shows is the same
        assert t.render_spec(team_pod())["Variable"]["Items"] == {"f0": "mine\n"}
    finally:
        await t.close()
