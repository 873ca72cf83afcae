"""The harness itself: a real API server and Nomad come up, are usable, and leave nothing behind."""

from __future__ import annotations

import contextlib
import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import unavailable

from devstack import build, netns
from devstack.components import NOMAD_VERSION
from devstack.controlplane import ControlPlane, start_control_plane
from devstack.nomad import start_nomad
from devstack.nomad_cluster import NomadCluster


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it is not running any more.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


def test_apiserver_is_ready_and_kubectl_works(control_plane: ControlPlane, kubectl) -> None:
    with urllib.request.urlopen(
        control_plane.url + "/readyz", context=control_plane.ssl_context(), timeout=10
    ) as resp:
        assert resp.status == 200
        assert resp.read() == b"ok"

    version = json.loads(kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == f"v{build.K8S_VERSION}"
    assert version["clientVersion"]["gitVersion"].startswith("v1.37.")

    names = set(kubectl("get", "ns", "-o", "name").stdout.split())
    assert {"namespace/default", "namespace/kube-system", "namespace/kube-node-lease"} <= names


def test_admin_is_system_masters_and_rbac_is_enforced(control_plane: ControlPlane, kubectl) -> None:
    whoami = json.loads(kubectl("auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == "admin"
    assert "system:masters" in whoami["status"]["userInfo"]["groups"]

    node_kc = control_plane.node_kubeconfig("vk-harness")
    me = json.loads(kubectl("--kubeconfig", str(node_kc), "auth", "whoami", "-o", "json").stdout)
    assert me["status"]["userInfo"]["username"] == "system:node:vk-harness"
    assert "system:nodes" in me["status"]["userInfo"]["groups"]
    # RBAC (not AlwaysAllow): a node identity may not list Secrets cluster-wide.
    denied = kubectl("--kubeconfig", str(node_kc), "get", "secrets", "-A", check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()


def test_pods_are_admitted_without_service_accounts(kubectl) -> None:
    """ServiceAccount admission is off: no controller-manager creates `default` SAs here."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "harness-sa-check", "namespace": "default"},
        "spec": {
            "nodeName": "nowhere",
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(pod))
    try:
        got = json.loads(kubectl("get", "pod", "harness-sa-check", "-o", "json").stdout)
        assert got["spec"]["nodeName"] == "nowhere"
        assert "serviceAccountName" not in got["spec"] or got["spec"]["serviceAccountName"]
    finally:
        kubectl("delete", "pod", "harness-sa-check", "--grace-period=0", "--force", check=False)


def test_dev_nomad_agent_has_a_ready_node_with_raw_exec() -> None:
    """The ``-dev`` agent of ``vkgate dev``: one node, raw_exec, no cloud fingerprinting."""
    with start_nomad() as nomad_agent:
        assert nomad_agent.address.startswith("http://127.0.0.1:")
        assert nomad_agent.get("/v1/status/leader")
        nodes = nomad_agent.nodes()
        ready = [n for n in nodes if n["Status"] == "ready"]
        assert len(ready) == 1
        assert ready[0]["Datacenter"] == nomad_agent.datacenter
        node = nomad_agent.get(f"/v1/node/{ready[0]['ID']}")
        assert node["Attributes"]["nomad.version"] == NOMAD_VERSION
        raw_exec = node["Drivers"]["raw_exec"]
        assert raw_exec["Detected"] and raw_exec["Healthy"]
        # Denied drivers and cloud fingerprinters never ran.
        assert not node["Drivers"].get("docker", {}).get("Detected", False)
        assert not any(
            k.startswith(("platform.aws", "platform.gce", "unique.platform"))
            for k in node["Attributes"]
        )


def test_e2e_nomad_cluster_runs_as_production_does(nomad_cluster: NomadCluster) -> None:
    """One server, two clients on their own addresses, ACLs on, mutual TLS; vkgate's token is
    the shipped policy's and no more (docs/design/nomad.md, "The e2e cluster")."""
    c = nomad_cluster
    assert c.address.startswith("https://127.0.0.1:")
    assert c.get("/v1/status/leader")
    nodes = {n["Name"]: c.get(f"/v1/node/{n['ID']}") for n in c.nodes() if n["Status"] == "ready"}
    assert set(nodes) == {cl.name for cl in c.clients}
    for cl in c.clients:
        node = nodes[cl.name]
        assert node["Attributes"]["nomad.version"] == NOMAD_VERSION
        assert node["HTTPAddr"].rsplit(":", 1)[0] == cl.ip
        assert node["Attributes"]["unique.network.ip-address"] == cl.ip
        assert node["NodeClass"] == cl.node_class
        assert node["NodePool"] == cl.node_pool
        assert node["Meta"]["vkgate-client"] == cl.meta["vkgate-client"]
        assert node["TLSEnabled"] is True
        assert bool(node["Drivers"].get("docker", {}).get("Healthy")) == ("docker" in cl.drivers)
        assert node["Drivers"]["raw_exec"]["Healthy"]
        # bridge networking fingerprinted on the client's own bridge ("Pod networking")
        bridges = [n for n in node["NodeResources"]["NodeNetworks"] if n["Mode"] == "bridge"]
        assert [b["Device"] for b in bridges] == [cl.bridge], node["NodeResources"]
    # ACLs: anonymous is refused; the policy's token lists jobs but cannot manage ACLs.
    with pytest.raises(urllib.error.HTTPError) as anon:
        c.request("GET", "/v1/jobs", token="00000000-0000-0000-0000-000000000000")
    assert anon.value.code == 403
    assert isinstance(c.request("GET", "/v1/jobs", token=c.token), list)
    with pytest.raises(urllib.error.HTTPError) as acl:
        c.request("GET", "/v1/acl/tokens", token=c.token)
    assert acl.value.code == 403
    # TLS: plain HTTP is not served, and a client without a certificate is refused.
    plain = c.address.replace("https", "http") + "/v1/status/leader"
    with pytest.raises(urllib.error.HTTPError) as http:  # Go answers 400 to plain HTTP on TLS
        urllib.request.urlopen(plain, timeout=5).close()
    http.value.close()
    bare = ssl.create_default_context(cafile=str(c.tls.ca_file))
    # TLS 1.3: the server's "certificate required" alert arrives with the first read.
    with pytest.raises((urllib.error.URLError, ssl.SSLError)) as no_cert:
        urllib.request.urlopen(c.local_address + "/v1/status/leader", timeout=5, context=bare)
    assert "certificate" in str(no_cert.value).lower(), no_cert.value


def test_control_plane_teardown_leaves_no_process_or_dir() -> None:
    with start_control_plane() as cp:
        pids = cp.pids()
        workdir = cp.workdir
        assert all(not _gone(p) for p in pids)
        assert (workdir / "admin.kubeconfig").exists()
    assert all(_gone(p) for p in pids), pids
    assert not workdir.exists()


def test_control_plane_teardown_happens_when_the_body_fails() -> None:
    pids: list[int] = []
    workdir = Path()
    try:
        with start_control_plane() as cp:
            pids, workdir = cp.pids(), cp.workdir
            raise RuntimeError("test body failed")
    except RuntimeError:
        pass
    assert pids and all(_gone(p) for p in pids)
    assert not workdir.exists()


def test_nomad_teardown_kills_agent_and_its_raw_exec_tasks(tmp_path: Path) -> None:
    marker = tmp_path / "task-pid"
    job = {
        "Job": {
            "ID": "harness-sleeper",
            "Name": "harness-sleeper",
            "Type": "batch",
            "Datacenters": ["*"],
            "TaskGroups": [
                {
                    "Name": "g",
                    "Count": 1,
                    "Tasks": [
                        {
                            "Name": "t",
                            "Driver": "raw_exec",
                            "Config": {
                                "command": "/bin/sh",
                                "args": ["-c", f"echo $$ > {marker}; exec sleep 600"],
                            },
                            "Resources": {"CPU": 50, "MemoryMB": 32},
                        }
                    ],
                }
            ],
        }
    }
    with start_nomad() as agent:
        agent_pid, workdir = agent.pid, agent.workdir
        req = urllib.request.Request(
            agent.address + "/v1/jobs",
            data=json.dumps(job).encode(),
            headers={"Content-Type": "application/json"},
            method="PUT",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text().strip()):
            assert time.monotonic() < deadline, agent.proc.log_tail()
            time.sleep(0.2)
        task_pid = int(marker.read_text())
        assert not _gone(task_pid)
    assert _gone(agent_pid)
    assert _gone(task_pid), "raw_exec task survived the agent's teardown"
    assert not workdir.exists()


def test_start_gateway_registers_its_node_and_stops_cleanly(start_gateway, kubectl) -> None:
    gw = start_gateway()
    node = json.loads(kubectl("get", "node", gw.node_name, "-o", "json").stdout)
    assert node["metadata"]["name"] == gw.node_name
    assert gw.alive()
    pid = gw.pid
    assert gw.stop() == 0  # SIGTERM → clean shutdown, exit code 0
    assert pid is not None and _gone(pid)
    assert gw.node_name in gw.log_text()  # the agent's own log was captured


def test_vkgate_dev_simulated_runs_the_sample_deployment_and_cleans_up(tmp_path: Path) -> None:
    """`vkgate dev --backend-dev simulated --no-wait`: the newcomer's demo, end to end — a
    whole cluster, a Deployment placed by the real scheduler, its logs and an exec."""
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "dev", "--backend-dev", "simulated", "--no-wait"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=tmp_path,
        env=_from_the_checkout(),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert re.search(r"pod default/hello-vkgate-\S+ is Running on vkgate-dev \(placed by", out), out
    assert "hello from vkgate" in out and "exec works" in out, out
    assert "top pod" in out
    kubeconfig = next(
        line.split("kubeconfig:", 1)[1].strip()
        for line in out.splitlines()
        if "kubeconfig:" in line
    )
    assert "stopped everything" in out
    workdir = str(Path(kubeconfig).parent)
    assert not Path(workdir).exists(), "vkgate dev left its control plane directory behind"
    leftovers = [p for p in _cmdlines() if workdir in p]
    assert not leftovers, f"vkgate dev left processes behind: {leftovers}"


def _cmdlines() -> list[str]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                out.append(
                    Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
    return out


def _from_the_checkout() -> dict[str, str]:
    """`vkgate dev` runs from a source checkout (docs/design/devstack.md): the tox env installs
    vkgate as a wheel, which holds no devstack/, so the checkout goes on the path as an
    editable install would put it."""
    repo = str(Path(__file__).resolve().parents[2])
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])),
    }


def _vkgate_dev(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "dev",
            "--backend-dev",
            "simulated",
            "--no-wait",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=tmp_path,
        env=_from_the_checkout(),
    )


def test_vkgate_dev_on_a_routable_node_address(
    tmp_path: Path, routable_ips: tuple[str, ...]
) -> None:
    """The serving certificate names the configured addresses: logs and exec through the API
    server work on a non-loopback node address (they failed with an x509 error before)."""
    ip = routable_ips[0]
    proc = _vkgate_dev(
        tmp_path, "--set", f"node.internal_ip={ip}", "--set", f"kubelet.address={ip}"
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "hello from vkgate" in out and "exec works" in out, out


def test_vkgate_dev_in_a_namespace_of_its_own_shows_a_service_that_answers(
    tmp_path: Path,
) -> None:
    """`vkgate dev --netns` (Nomad): the node and its pods on a non-loopback address, so the
    sample Service's EndpointSlice holds the pod's podIP:port ready and it answers; the summary
    offers the Service lines (docs/backends/nomad.md, "Pod networking")."""
    if not netns.isolated():
        unavailable("needs the e2e network namespace (its veth stays inside it)")
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "dev", "--netns", "--no-wait"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
        env=_from_the_checkout(),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "pods on 198.51.100.30" in out, out
    assert (
        "Service hello-vkgate: EndpointSlice endpoint 198.51.100.30:18080 (ready) answers: "
        "hello from vkgate over a Service"
    ) in out, out
    assert "get endpointslices -l kubernetes.io/service-name=hello-vkgate" in out
    assert "curl http://198.51.100.30:18080/" in out
    assert "stopped everything" in out


def test_vkgate_dev_fails_loudly_when_logs_do_not_work(tmp_path: Path) -> None:
    """A demo that cannot show logs is a broken install: non-zero exit with the reason."""
    proc = _vkgate_dev(tmp_path, "--set", "kubelet.enabled=false")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "DEMO FAILED: kubectl logs" in out, out
    assert "stopped everything" in out
