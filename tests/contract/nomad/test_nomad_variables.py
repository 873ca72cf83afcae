"""A pod's files and Secret env values live in the job's Nomad Variable, never in the job spec
(docs/design/secrets.md): written before the job is registered, rewritten (without
re-registering) when a ConfigMap or Secret changes, removed when the job is purged."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import httpx
import pytest
import respx
from nomad_fixtures import ADDRESS, MakeTranslator, captured, pod

from translators.base import (
    EnvVar,
    PodRef,
    ResolvedPod,
    ResolvedVolume,
    VolumeFile,
    VolumeMount,
)

pytestmark = pytest.mark.contract

JOB_ID = "default-web-0b7c1f2e"
VAR = f"/v1/var/nomad/jobs/{JOB_ID}"
ENV_SECRET = 'env-canary "quoted" \\ ${NOMAD_TASK_DIR} {{ x }}'
FILE_SECRET = b"file-canary [[vkgate .e0 vkgate]] {{ .f0 }}\n"


def secret_pod(file_content: bytes = FILE_SECRET, env_value: str = ENV_SECRET) -> ResolvedPod:
    base = pod()
    c = dataclasses.replace(
        base.containers[0],
        env=(EnvVar("PLAIN", "visible"), EnvVar("DB_PASSWORD", env_value, secret=True)),
        mounts=(VolumeMount("creds", "/etc/creds", True),),
    )
    vol = ResolvedVolume(
        "creds", "secret", files=(VolumeFile("pw", file_content, mode=0o400, secret=True),)
    )
    return dataclasses.replace(base, containers=(c,), volumes=(vol,))


def sent(nomad: respx.MockRouter) -> list[tuple[str, str, Any]]:
    return [
        (c.request.method, c.request.url.path, json.loads(c.request.content or b"null"))
        for c in nomad.calls
    ]


async def test_create_writes_the_variable_first_and_the_job_carries_none_of_its_values(
    make_translator: MakeTranslator,
) -> None:
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        put = nomad.put(VAR).mock(return_value=httpx.Response(200, json={}))
        nomad.post("/v1/jobs").mock(return_value=httpx.Response(200, json={"EvalID": "e"}))
        await t.create(secret_pod())
        calls = sent(nomad)
    assert [(m, p) for m, p, _ in calls] == [("PUT", VAR), ("POST", "/v1/jobs")]
    variable, job = calls[0][2], calls[1][2]
    assert job["EnforceIndex"] is True and job["JobModifyIndex"] == 0  # only if new
    assert put.calls.last.request.url.params["namespace"] == "default"
    assert variable["Path"] == f"nomad/jobs/{JOB_ID}" and variable["Namespace"] == "default"
    # byte for byte: the env item is the go-envparse quoting of the value, the file as is
    assert variable["Items"] == {
        "f0": FILE_SECRET.decode(),
        "e0": json.dumps(ENV_SECRET)[1:-1],
    }
    text = json.dumps(job)
    for canary in ("env-canary", "file-canary"):
        assert canary not in text
    task = job["Job"]["TaskGroups"][0]["Tasks"][0]
    assert task["Env"] == {"PLAIN": "visible"}
    env_tmpl = next(x for x in task["Templates"] if x.get("Envvars"))
    assert env_tmpl["EmbeddedTmpl"] == (
        f'[[vkgate with nomadVar "nomad/jobs/{JOB_ID}" vkgate]]'
        'DB_PASSWORD="[[vkgate .e0 vkgate]]"\n[[vkgate end vkgate]]'
    )
    assert env_tmpl["ChangeMode"] == "noop"


async def test_a_pod_without_files_or_secret_env_writes_no_variable(
    make_translator: MakeTranslator,
) -> None:
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.post("/v1/jobs").mock(return_value=httpx.Response(200, json={"EvalID": "e"}))
        await t.create(pod())
        assert [m for m, _, _ in sent(nomad)] == ["POST"]


async def test_a_changed_secret_rewrites_the_variable_and_leaves_the_job_alone(
    make_translator: MakeTranslator,
) -> None:
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get(f"/v1/job/{JOB_ID}").mock(return_value=httpx.Response(404))
        nomad.put(VAR).mock(return_value=httpx.Response(200, json={}))
        register = nomad.post("/v1/jobs").mock(return_value=httpx.Response(200, json={}))
        state = await t.create(secret_pod())
        registered = json.loads(register.calls.last.request.content)["Job"]
        nomad.get(f"/v1/job/{JOB_ID}").mock(return_value=httpx.Response(200, json=registered))
        before = len(nomad.calls)
        assert await t.update(secret_pod(b"rotated-file", "rotated-env"), state) is True
        assert await t.update(secret_pod(b"rotated-file", "rotated-env"), state) is True
        calls = sent(nomad)[before:]
    assert [(m, p) for m, p, _ in calls] == [
        ("GET", f"/v1/job/{JOB_ID}"),
        ("PUT", VAR),  # once: the second update found the same items
        ("GET", f"/v1/job/{JOB_ID}"),
    ]
    assert calls[1][2]["Items"] == {"f0": "rotated-file", "e0": "rotated-env"}


async def test_the_purge_removes_the_variable(make_translator: MakeTranslator) -> None:
    doc = captured("running")
    job, alloc = doc["job"], doc["allocations"][0]
    done = {**alloc, "ClientStatus": "complete"}
    ref = PodRef("default", "running", job["Meta"]["k8s.uid"])
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get(f"/v1/job/{job['ID']}").mock(
            return_value=httpx.Response(200, json={**job, "Stop": True})
        )
        nomad.get(f"/v1/job/{job['ID']}/allocations").mock(
            return_value=httpx.Response(200, json=[done])
        )
        purge = nomad.delete(f"/v1/job/{job['ID']}").mock(return_value=httpx.Response(200))
        gone = nomad.delete(f"/v1/var/nomad/jobs/{job['ID']}").mock(
            return_value=httpx.Response(404)  # a pod that had none: nothing to remove
        )
        await t.delete(ref, grace_seconds=30)
    assert purge.called and purge.calls.last.request.url.params["purge"] == "true"
    assert gone.called
    assert gone.calls.last.request.url.params["namespace"] == job.get("Namespace", "default")


async def test_a_refused_variable_removal_does_not_hold_up_the_delete(
    make_translator: MakeTranslator, caplog: pytest.LogCaptureFixture
) -> None:
    """A token of a policy without ``destroy`` (written before Variables were used): the job is
    purged all the same, and the log names the grant that is missing."""
    doc = captured("running")
    job, alloc = doc["job"], doc["allocations"][0]
    ref = PodRef("default", "running", job["Meta"]["k8s.uid"])
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        nomad.get(f"/v1/job/{job['ID']}").mock(
            return_value=httpx.Response(200, json={**job, "Stop": True})
        )
        nomad.get(f"/v1/job/{job['ID']}/allocations").mock(
            return_value=httpx.Response(200, json=[{**alloc, "ClientStatus": "complete"}])
        )
        purge = nomad.delete(f"/v1/job/{job['ID']}").mock(return_value=httpx.Response(200))
        nomad.delete(f"/v1/var/nomad/jobs/{job['ID']}").mock(
            return_value=httpx.Response(403, text="Permission denied")
        )
        await t.delete(ref, grace_seconds=30)
    assert purge.called
    assert 'variables path "nomad/jobs/*" capability destroy' in caplog.text
