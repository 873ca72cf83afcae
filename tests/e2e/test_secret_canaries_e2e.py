"""Secrets stay secret, end to end on real Nomad at debug log level: a pod with an env value
from a Secret, envFrom a Secret, a Secret volume, a projected service-account token and an image
pull Secret runs, is exec'd into and its logs are read, with the Nomad ACL token set — every
value a canary.  Then the gateway's whole log, the pod's Events and status, the gateway's and
the kubelet API's metrics, and Nomad's own objects as the management token reads them (the job,
every job version, its evaluations and allocations) are searched for the canaries
(docs/design/secrets.md); the job's Variable, which holds them, is gone after the delete.  The
exec proves the values arrived, by digest only."""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.error
import uuid
from typing import Any

import httpx
import pytest
from waiting import wait_until

pytestmark = pytest.mark.e2e


#: This file's waits: up to 90 s, polling every 0.5 s (waiting.wait_until: 60 s, every 0.3 s).
WAIT = 90.0
POLL = 0.5


def md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def test_no_canary_leaks_through_a_full_lifecycle_at_debug(
    kubectl: Any, nomad_agent: Any, start_gateway: Any
) -> None:
    tag = uuid.uuid4().hex[:10]
    # The Nomad token is a real one (ACLs are on): a new token of the shipped policy, whose
    # secret is searched for everywhere below.
    token = nomad_agent.request(
        "POST",
        "/v1/acl/token",
        body={"Name": f"canary-{tag}", "Type": "client", "Policies": ["vkgate"]},
    )["SecretID"]
    canary = {
        "token": token,
        "env": f"canary-env-{tag}",
        "file": f"canary-file-{tag}",
        "pull": f"canary-pull-{tag}",
        "envfrom": f"canary-envfrom-{tag}",
    }
    ns = f"canary-{tag[:6]}"
    kubectl("create", "namespace", ns)
    gw = start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {
                    **nomad_agent.backend_settings(),
                    "template": "nomad/raw_exec.j2",
                    "token": canary["token"],
                    # a pod with imagePullSecrets runs only where the node says how to pull;
                    # "job" puts the login into the job (raw_exec ignores it)
                    "registry_auth": "job",
                },
            },
            "log": {"level": "debug"},
        }
    )
    auth = base64.b64encode(f"bot:{canary['pull']}".encode()).decode()
    docker = {
        "auths": {"registry.example": {"username": "bot", "password": canary["pull"], "auth": auth}}
    }
    objs = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds", "namespace": ns},
            "stringData": {"env": canary["env"], "file": canary["file"]},
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "app", "namespace": ns},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "bulk", "namespace": ns},
            "stringData": {"FROM_SECRET": canary["envfrom"]},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "pull", "namespace": ns},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": json.dumps(docker)},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "app", "namespace": ns},
            "spec": {
                "nodeName": gw.node_name,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "tolerations": [{"operator": "Exists"}],
                "imagePullSecrets": [{"name": "pull"}],
                "serviceAccountName": "app",
                "volumes": [
                    {"name": "creds", "secret": {"secretName": "creds"}},
                    {
                        "name": "api",
                        "projected": {
                            "sources": [
                                {
                                    "serviceAccountToken": {
                                        "path": "token",
                                        "expirationSeconds": 3600,
                                    }
                                }
                            ]
                        },
                    },
                ],
                "containers": [
                    {
                        "name": "app",
                        "image": "registry.example/app:1",
                        "command": ["/bin/sh", "-c", "echo started; exec sleep 300"],
                        "env": [
                            {
                                "name": "CANARY",
                                "valueFrom": {"secretKeyRef": {"name": "creds", "key": "env"}},
                            }
                        ],
                        "envFrom": [{"secretRef": {"name": "bulk"}}],
                        "volumeMounts": [
                            {"name": "creds", "mountPath": "/etc/creds"},
                            {"name": "api", "mountPath": "/var/run/api"},
                        ],
                    }
                ],
            },
        },
    ]
    kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
    )

    def pod() -> dict[str, Any]:
        result: dict[str, Any] = json.loads(
            kubectl("get", "pod", "-n", ns, "app", "-o", "json").stdout
        )
        return result

    try:
        wait_until(
            "the pod Running",
            lambda: pod()["status"].get("phase") == "Running",
            timeout=WAIT,
            every=POLL,
        )
    except AssertionError as exc:
        events = kubectl("get", "events", "-n", ns, check=False).stdout
        raise AssertionError(f"{exc}\nstatus: {pod()['status']}\nevents:\n{events}") from None
    # exec: the values arrived (compared by digest, so the command line carries no canary).
    # The files are searched for in this task's own directory: an exec on raw_exec starts in
    # "/", where other tests' task directories hold files of the same name.
    task = '"${NOMAD_TASK_DIR:?}/.."'
    script = (
        'echo "env=$(printf %s "$CANARY" | md5sum)"; '
        'echo "envfrom=$(printf %s "$FROM_SECRET" | md5sum)"; '
        f'f=$(find {task} -path "*vkgate/creds/file" | head -1); echo "file=$(md5sum < "$f")"'
    )
    out = kubectl("exec", "-n", ns, "app", "--", "/bin/sh", "-c", script, timeout=30)
    assert f"env={md5(canary['env'])}" in out.stdout, out.stdout
    assert f"envfrom={md5(canary['envfrom'])}" in out.stdout, out.stdout
    assert f"file={md5(canary['file'])}" in out.stdout, out.stdout
    # the projected token: read once (the test must know it to search for it), a JWT of the pod
    token_out = kubectl(
        "exec",
        "-n",
        ns,
        "app",
        "--",
        "/bin/sh",
        "-c",
        f'cat "$(find {task} -path "*vkgate/api/token" | head -1)"',
        timeout=30,
    ).stdout
    assert token_out.count(".") == 2, "a JWT"
    claims = json.loads(base64.urlsafe_b64decode(token_out.split(".")[1] + "=="))
    assert claims["kubernetes.io"]["pod"]["name"] == "app"
    canary["sa-token"] = token_out
    logs = kubectl("logs", "-n", ns, "app", timeout=30)
    assert logs.stdout == "started\n"

    # every place a value could leak to
    places: dict[str, str] = {
        "gateway log": gw.log_text(),
        "events": kubectl("get", "events", "-n", ns, "-o", "json").stdout,
        "pod status": json.dumps(pod()["status"]),
        "kubectl logs": logs.stdout,
    }
    metrics_address = gw.settings["kubelet"]["metrics_address"]
    places["gateway metrics"] = httpx.get(f"http://{metrics_address}/metrics", timeout=10).text
    for path in ("metrics/resource", "stats/summary", "metrics"):
        raw = kubectl("get", "--raw", f"/api/v1/nodes/{gw.node_name}/proxy/{path}", check=False)
        places[f"kubelet {path}"] = raw.stdout + raw.stderr
    # Nomad's objects, as an operator with read-job (here: the management token) sees them
    jobs = nomad_agent.request("GET", "/v1/jobs?namespace=*&prefix=" + f"{ns}-app-")
    assert len(jobs) == 1, jobs
    jid, job_ns = jobs[0]["ID"], jobs[0]["Namespace"]
    q = f"?namespace={job_ns}"
    places["nomad job"] = json.dumps(nomad_agent.request("GET", f"/v1/job/{jid}{q}"))
    places["nomad job versions"] = json.dumps(
        nomad_agent.request("GET", f"/v1/job/{jid}/versions{q}")
    )
    places["nomad evaluations"] = json.dumps(
        nomad_agent.request("GET", f"/v1/job/{jid}/evaluations{q}")
    )
    allocs = nomad_agent.request("GET", f"/v1/job/{jid}/allocations{q}")
    places["nomad allocations"] = json.dumps(
        [nomad_agent.request("GET", f"/v1/allocation/{a['ID']}{q}") for a in allocs]
    )
    # the values are in the job's Variable (docs/backends/nomad.md "Secrets and Nomad Variables")
    variable = json.dumps(nomad_agent.request("GET", f"/v1/var/nomad/jobs/{jid}{q}"))
    assert canary["env"] in variable and canary["sa-token"] in variable
    kubectl("delete", "pod", "-n", ns, "app", "--wait=true", timeout=60)
    places["gateway log"] = gw.log_text()  # the delete too

    def variable_gone() -> bool:
        try:
            nomad_agent.request("GET", f"/v1/var/nomad/jobs/{jid}{q}")
        except urllib.error.HTTPError as exc:
            return exc.code == 404
        return False

    wait_until("the job's Variable removed with its purge", variable_gone, timeout=60, every=POLL)

    assert "DEBUG" in places["gateway log"]  # it really ran at debug
    assert all(places.values()), [k for k, v in places.items() if not v]
    leaks = {
        (what, where)
        for what, value in canary.items()
        for where, text in places.items()
        if value in text
    }
    leaks |= {
        (f"{what} (base64)", where)
        for what, value in canary.items()
        for where, text in places.items()
        if base64.b64encode(value.encode()).decode() in text
    }
    assert leaks == set()
    print(
        f"\nsecret canaries: none of {len(canary)} values in {len(places)} places "
        f"({sum(len(t) for t in places.values())} characters searched)"
    )
    kubectl("delete", "namespace", ns, "--wait=false", check=False)
