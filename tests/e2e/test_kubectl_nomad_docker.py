"""The default template for real: Nomad's docker driver, seen through kubectl.

real kubectl → kube-apiserver → vkgate (``templates/nomad/job.j2``, the default) → a Nomad dev
agent whose docker driver talks to a private dockerd (``devstack.docker``) holding
``busybox:1.36`` imported from Debian's static busybox.  Nothing is pulled from anywhere: the
"missing image" names a registry on a closed loopback port.

Locally without root/dockerd/busybox-static these tests skip with one line; with ``CI=true``
they fail (``tests/e2e/conftest.py``).  Also here, on raw_exec: what ``kubectl get pods``
shows for a pod that can never be translated, and for a process that never started.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubeletapi import kubelet_client
from podjson import pod_json
from ttyexec import exec_it
from waiting import wait_for_event, wait_until

from devstack.agent import GatewayProcess
from devstack.docker import IMAGE_GREETING
from devstack.nomad_cluster import NomadCluster

pytestmark = pytest.mark.e2e

MISSING_IMAGE = "127.0.0.1:1/vkgate/missing:1"
#: Grows a shell variable past a 20 MiB limit.
HOG = "x=$(head -c 80000000 /dev/zero | tr '\\0' a); echo survived"
#: The hog as a child of PID 1, which exits with its status a second after the kill: Docker
#: 20.10 flags an OOM kill only when containerd's OOM event beats the container's exit event,
#: which races when PID 1 itself is killed (docs/design/nomad.md, "Task events").
HOG_CHILD = ["sh", "-c", 'sh -c "$1"; s=$?; sleep 1; exit $s', "sh", HOG]


def pod(kubectl: Any, name: str) -> dict[str, Any]:
    r = kubectl("get", "pod", name, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else {}


def app_status(kubectl: Any, name: str) -> dict[str, Any]:
    statuses = (pod(kubectl, name).get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def logs_of(kubectl: Any, name: str) -> str:
    """``kubectl logs`` of a finished docker container.  Nomad's docker log collector copies
    the container's output a moment after it ends: right after Succeeded the log can still be
    empty (observed), so wait a few seconds for the first bytes."""
    return str(wait_until(f"{name} logs", lambda: kubectl("logs", name).stdout, timeout=10))


def get_pods_status(kubectl: Any, name: str) -> str:
    """The STATUS column of ``kubectl get pods``."""
    out = kubectl("get", "pod", name, "--no-headers").stdout.split()
    return str(out[2])


def start(gw: GatewayProcess) -> GatewayProcess:
    try:
        return gw.start()
    except BaseException:
        print(f"----- {gw!r} log (tail) -----\n{gw.log_text()[-6000:]}")
        raise


def running_gateway(
    control_plane: Any, workdir: Path, nomad: dict[str, Any]
) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(control_plane, workdir, {"backend": {"kind": "nomad", "nomad": nomad}})
    try:
        yield start(gw)
    finally:
        gw.stop(timeout=15)
        print(f"----- {gw!r} log (tail) -----\n{gw.log_text()[-6000:]}")


@pytest.fixture(scope="module")
def docker_gateway(
    control_plane: Any, docker_nomad: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    # the default template, nomad/job.j2 (docker); quick restarts for the OOM test
    nomad = {
        **docker_nomad.backend_settings(),
        "restart_delay": "2s",
        "restart_attempts": 5,
        "restart_interval": "1m",
    }
    yield from running_gateway(control_plane, tmp_path_factory.mktemp("gateway-docker"), nomad)


@pytest.fixture(scope="module")
def raw_gateway(
    control_plane: Any, nomad_agent: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    nomad = {**nomad_agent.backend_settings(), "template": "nomad/raw_exec.j2"}
    yield from running_gateway(control_plane, tmp_path_factory.mktemp("gateway-raw"), nomad)


# --------------------------------------------------------------------------- docker


def test_docker_pod_runs_then_succeeds_or_fails_with_its_exit_code(
    docker_gateway: GatewayProcess, kubectl: Any
) -> None:
    node = docker_gateway.node_name
    ok, bad = f"d-ok-{uuid.uuid4().hex[:5]}", f"d-bad-{uuid.uuid4().hex[:5]}"
    kubectl("apply", "-f", "-", input=pod_json(ok, node, command=["sh", "-c", "echo hi; sleep 4"]))
    kubectl("apply", "-f", "-", input=pod_json(bad, node, command=["sh", "-c", "exit 3"]))
    running = wait_until(
        f"{ok} Running",
        lambda: "running" in ((s := app_status(kubectl, ok)).get("state") or {}) and s,
    )
    assert running["containerID"].startswith("nomad://")
    assert pod(kubectl, ok)["status"]["phase"] == "Running"
    wait_until(f"{ok} Succeeded", lambda: pod(kubectl, ok)["status"]["phase"] == "Succeeded")
    done = app_status(kubectl, ok)["state"]["terminated"]
    assert (done["exitCode"], done["reason"]) == (0, "Completed")
    assert logs_of(kubectl, ok) == "hi\n"
    wait_until(f"{bad} Failed", lambda: pod(kubectl, bad)["status"]["phase"] == "Failed")
    failed = app_status(kubectl, bad)["state"]["terminated"]
    assert (failed["exitCode"], failed["reason"]) == (3, "Error")
    assert get_pods_status(kubectl, bad) == "Error"
    kubectl("delete", "pod", ok, bad, "--wait=false")


def test_a_pod_without_command_runs_the_images_own_command(
    docker_gateway: GatewayProcess, kubectl: Any
) -> None:
    name = f"d-entry-{uuid.uuid4().hex[:5]}"
    kubectl("apply", "-f", "-", input=pod_json(name, docker_gateway.node_name))
    wait_until(f"{name} Succeeded", lambda: pod(kubectl, name)["status"]["phase"] == "Succeeded")
    assert logs_of(kubectl, name) == IMAGE_GREETING + "\n"
    kubectl("delete", "pod", name, "--wait=false")


def exec_sessions_logged(cluster: NomadCluster) -> str:
    """What the cluster's agents logged about exec sessions (``task exec session ended``, with
    the error when there was one): the only record of why a session ended without ``exited``
    (docs/design/nomad.md, "Exec WebSocket")."""
    lines = [
        line
        for log in sorted(cluster.workdir.rglob("nomad.log"))
        for line in log.read_text(errors="replace").splitlines()
        if "exec session" in line or "exec result" in line
    ]
    return "\n".join(lines[-20:])


def test_exec_and_exec_it_in_a_docker_container(
    docker_gateway: GatewayProcess,
    docker_nomad: NomadCluster,
    kubectl: Any,
    control_plane: Any,
    kubectl_path: Path,
) -> None:
    name = f"d-exec-{uuid.uuid4().hex[:5]}"
    kubectl(
        "apply",
        "-f",
        "-",
        input=pod_json(name, docker_gateway.node_name, command=["sleep", "600"], policy="Always"),
    )
    wait_until(f"{name} Running", lambda: pod(kubectl, name)["status"]["phase"] == "Running")
    r = kubectl("exec", name, "--", "sh", "-c", "cat /etc/passwd | head -1; exit 5", check=False)
    # the container's own root fs (the imported image), not the host's
    assert r.stdout == "root:x:0:0:root:/root:/bin/sh\n" and r.returncode == 5
    out, rc = exec_it(control_plane.kubeconfig, kubectl_path, name)
    lines = out.splitlines()
    assert any(line.startswith("/dev/pts/") for line in lines), out
    assert "30 100" in lines and "got hello" in lines, out
    if rc != 4:
        # Nomad 1.6.3's docker driver loses the code of an exec whose stdin is still open when
        # its command exits, at random (go-dockerclient's two stream goroutines race: docs/
        # design/nomad.md, "Exec WebSocket"; the raw_exec test holds the code to 4 every
        # time).  Then, and only when Nomad's agent logged exactly that for this session
        # (its error line names no exec_id: the one after the session's start, and no clean
        # end of it), vkgate must say the code is unknown, and kubectl exits 1.
        logged = exec_sessions_logged(docker_nomad).splitlines()
        starts = [i for i, ln in enumerate(logged) if "exit 4" in ln and "tty=true" in ln]
        assert starts, f"{out}\nNomad's agents on exec sessions:\n" + "\n".join(logged)
        exec_id = logged[starts[-1]].split("exec_id=")[1].split()[0]
        after = logged[starts[-1] + 1 :]
        lost = not any(f"session ended: exec_id={exec_id}" in ln for ln in after) and any(
            "ended with an error" in ln and "io: read/write on closed pipe" in ln for ln in after
        )
        assert lost and rc == 1, f"{out}\nNomad's agents on exec sessions:\n" + "\n".join(logged)
        assert "connection closed before the command exited (close code 1000)" in out, out
    kubectl("delete", "pod", name, "--wait=false")


def test_stats_show_the_containers_real_cpu_and_memory(
    docker_gateway: GatewayProcess, kubectl: Any, control_plane: Any
) -> None:
    name = f"d-burn-{uuid.uuid4().hex[:5]}"
    # a busy loop plus ~30 MB held in a shell variable
    burn = "x=$(head -c 30000000 /dev/zero | tr '\\0' a); while :; do :; done"
    kubectl(
        "apply",
        "-f",
        "-",
        input=pod_json(name, docker_gateway.node_name, command=["sh", "-c", burn], memory="200Mi"),
    )
    with kubelet_client(docker_gateway, control_plane) as c:

        def measured() -> dict[str, Any] | None:
            for p in c.get("/stats/summary").json()["pods"]:
                if p["podRef"]["name"] == name:
                    app = p["containers"][0]
                    # past the start-up (the 30 MB fill): the busy loop's steady rate
                    busy = app["cpu"].get("usageNanoCores", 0) > 50_000_000
                    if busy and app["memory"].get("workingSetBytes", 0) > 20_000_000:
                        found: dict[str, Any] = app
                        return found
            return None

        app = wait_until(f"{name} CPU and memory in /stats/summary", measured, timeout=90, every=1)
    print(f"\ndocker stats: {app['cpu']} {app['memory']}")
    assert 50_000_000 < app["cpu"]["usageNanoCores"] < 1_500_000_000
    assert 20_000_000 < app["memory"]["workingSetBytes"] < 200 * 2**20
    kubectl("delete", "pod", name, "--wait=false")


def test_memory_limit_exceeded_is_oomkilled_137_and_restarts_per_policy(
    docker_gateway: GatewayProcess, kubectl: Any
) -> None:
    node = docker_gateway.node_name
    never, again = f"d-oom-{uuid.uuid4().hex[:5]}", f"d-oom-r-{uuid.uuid4().hex[:5]}"
    for name, policy in ((never, "Never"), (again, "OnFailure")):
        kubectl(
            "apply",
            "-f",
            "-",
            input=pod_json(name, node, command=HOG_CHILD, policy=policy, memory="20Mi"),
        )
    wait_until(f"{never} Failed", lambda: pod(kubectl, never)["status"]["phase"] == "Failed")
    t = app_status(kubectl, never)["state"]["terminated"]
    assert (t["reason"], t["exitCode"]) == ("OOMKilled", 137)
    assert get_pods_status(kubectl, never) == "OOMKilled"
    # OnFailure: restarted, the killed run in lastState
    restarted = wait_until(
        f"{again} restarted after OOM",
        lambda: (s := app_status(kubectl, again)).get("restartCount", 0) >= 1 and s,
        timeout=60,
    )
    last = restarted["lastState"]["terminated"]
    assert (last["reason"], last["exitCode"]) == ("OOMKilled", 137)
    assert not last["startedAt"].startswith("0001")
    assert pod(kubectl, again)["status"]["phase"] != "Failed"
    kubectl("delete", "pod", never, again, "--wait=false")


def test_missing_image_is_errimagepull_then_imagepullbackoff_with_nomads_words(
    docker_gateway: GatewayProcess, kubectl: Any
) -> None:
    name = f"d-noimg-{uuid.uuid4().hex[:5]}"
    kubectl(
        "apply",
        "-f",
        "-",
        input=pod_json(name, docker_gateway.node_name, image=MISSING_IMAGE, policy="Always"),
    )
    seen: list[str] = []

    def backoff() -> dict[str, Any] | None:
        waiting = (app_status(kubectl, name).get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and (not seen or seen[-1] != waiting["reason"]):
            seen.append(waiting["reason"])
        return waiting if waiting.get("reason") == "ImagePullBackOff" else None

    waiting = wait_until(f"{name} ImagePullBackOff", backoff, timeout=90, every=0.2)
    assert "ErrImagePull" in seen and seen.index("ErrImagePull") < seen.index("ImagePullBackOff")
    assert waiting["message"].startswith(f"Driver Failure: Failed to pull `{MISSING_IMAGE}`")
    assert get_pods_status(kubectl, name) == "ImagePullBackOff"
    assert pod(kubectl, name)["status"]["phase"] == "Pending"
    # Events are written after the status (their own queue and budget): wait for it
    wait_for_event(
        f"{name}'s Failed Event naming the pull",
        kubectl,
        "default",
        name,
        "Failed",
        event_type="Warning",
        match=lambda e: "Driver Failure: Failed to pull" in e["message"],
        timeout=15,
    )
    kubectl("delete", "pod", name, "--wait=false")


# --------------------------------------------------------------------------- raw_exec


def test_translation_failure_shows_in_kubectl_get_pods(
    raw_gateway: GatewayProcess, kubectl: Any
) -> None:
    name = f"r-nocmd-{uuid.uuid4().hex[:5]}"  # raw_exec and no command: cannot be translated
    kubectl("apply", "-f", "-", input=pod_json(name, raw_gateway.node_name))
    wait_until(
        f"{name} TranslationFailed", lambda: get_pods_status(kubectl, name) == "TranslationFailed"
    )
    waiting = app_status(kubectl, name)["state"]["waiting"]
    assert "has no command" in waiting["message"]
    kubectl("delete", "pod", name, "--wait=false")


def test_a_process_that_never_started_is_not_exit_code_1(
    raw_gateway: GatewayProcess, kubectl: Any
) -> None:
    name = f"r-nobin-{uuid.uuid4().hex[:5]}"
    kubectl(
        "apply",
        "-f",
        "-",
        input=pod_json(name, raw_gateway.node_name, command=["/nonexistent/bin"]),
    )
    wait_until(
        f"{name} Failed", lambda: pod(kubectl, name).get("status", {}).get("phase") == "Failed"
    )
    p = pod(kubectl, name)
    t = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (t["reason"], t["exitCode"]) == ("StartError", 128)
    assert 'binary "/nonexistent/bin" could not be found' in t["message"]
    assert "could not be found" in p["status"]["message"]  # Nomad's words, not "Failed tasks"
    assert get_pods_status(kubectl, name) == "StartError"
    failed = wait_for_event(
        f"{name}'s Failed Event",
        kubectl,
        "default",
        name,
        "Failed",
        event_type="Warning",
        timeout=15,
    )
    assert "Driver Failure: failed to launch command" in failed["message"]
    kubectl("delete", "pod", name, "--wait=false")
