"""The Containerfile, built offline on a base made from Debian packages (mmdebstrap), run as
the gateway with the deploy/ ServiceAccount's token in the in-cluster environment — token and
CA where a pod has them, KUBERNETES_SERVICE_HOST/PORT — read-only root filesystem, non-root;
a pod goes Running through it (docs/design/image.md)."""

from __future__ import annotations

import json
import re
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import unavailable
from waiting import wait_until

from devstack import image
from devstack.process import BinaryUnavailable, free_port
from gateway.config import to_toml

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

#: The head of a record of the agent's text log (``log.format = "text"``, the default;
#: gateway/logging_setup.py): ``2026-05-01 04:20:13,403 WARNING gateway.pods [node]: ``.
RECORD_HEAD = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ +[\w.-]+(?: \[[^\]\n]*\])?: ", re.M
)
#: A 403 answer in a record's message: an API error as ``ApiError`` words it ("403 Forbidden:
#: …", "403: …" without a Status body; gateway/kube/errors.py), also in a traceback, and the
#: kubelet server's access line ("-> 403 (", gateway/kubelet/service.py).  A standalone token:
#: never the digits inside a UUID, a name or a number.
STATUS_403 = re.compile(r"(?<![\w.,:-])403(?: [A-Z][A-Za-z]*)?: |-> 403\b")


def log_messages(text: str) -> list[str]:
    """Every record's message, its traceback lines included, without the time, level and
    logger in front of it (what comes before the first record is one more message)."""
    heads = list(RECORD_HEAD.finditer(text))
    ends = [h.start() for h in heads[1:]] + [len(text)]
    before = text[: heads[0].start()] if heads else text
    return [
        m for m in [before, *(text[h.end() : e] for h, e in zip(heads, ends, strict=True))] if m
    ]


@pytest.fixture(scope="module")
def vkgate_image(dockerd: Any) -> str:
    try:
        return image.build_image(dockerd)
    except BinaryUnavailable as exc:
        unavailable(f"image tier: {exc}")


# The image build runs in this test's setup (module fixture) and dockerd's vfs storage copies the
# whole image for a new container: on 2 cores that is minutes, not the tier's 300 s default.
@pytest.mark.timeout(1200)
@pytest.mark.budget(
    180, "its container starts from a copy of the whole image (dockerd's vfs storage): ~26 s alone"
)
def test_the_image_runs_the_gateway_in_cluster_as_the_service_account(
    dockerd: Any,
    vkgate_image: str,
    control_plane: Any,
    kubectl: Any,
    deploy_service_account: Any,
    tmp_path: Path,
) -> None:
    meta = json.loads(dockerd.docker("image", "inspect", vkgate_image).stdout)[0]
    config = meta["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["vkgate"] and config["Cmd"][0] == "run"
    assert config["Labels"]["org.opencontainers.image.title"] == "vkgate"
    assert config["Labels"]["org.opencontainers.image.base.name"].startswith("vkgate-base:")
    print(f"vkgate image size: {meta['Size'] / 1e6:.1f} MB")

    # The dev stack is not part of the agent (docs/design/devstack.md): not importable, no Go
    # build modules anywhere in the image, and `vkgate dev` says to use a source checkout.
    probe = dockerd.docker(
        "run", "--rm", "--network=none", "--entrypoint", "/opt/vkgate/bin/python", vkgate_image,
        "-c",
        "import importlib.util, os, subprocess; "
        "dev = subprocess.run(['/opt/vkgate/bin/vkgate', 'dev', '--no-wait'], capture_output=True); "
        "print(importlib.util.find_spec('gateway') is not None, "
        "importlib.util.find_spec('devstack') is not None, "
        "sum(f in ('go.mod', 'go.sum') or f.endswith('.go') "
        "for _, _, fs in os.walk('/opt/vkgate') for f in fs), "
        "dev.returncode, b'source checkout' in dev.stderr)",
        timeout=300,
    )  # fmt: skip
    assert probe.stdout.decode().split() == ["True", "False", "0", "2", "True"], probe

    node = f"vk-img-{uuid.uuid4().hex[:6]}"
    sa = tmp_path / "sa"
    sa.mkdir(mode=0o755)
    (sa / "token").write_text(deploy_service_account.token)
    (sa / "ca.crt").write_bytes(Path(control_plane.ca_file).read_bytes())
    (sa / "namespace").write_text("vkgate-system")
    client_ca = tmp_path / "client-ca.crt"
    client_ca.write_bytes(Path(control_plane.kubelet_client_ca_file).read_bytes())
    for f in [*sa.iterdir(), client_ca]:
        f.chmod(0o644)
    metrics_port = free_port()
    settings = {
        "node": {"name": node},
        "kube": {"kubeconfig": ""},
        "kubelet": {
            "address": "127.0.0.1",
            "port": free_port(),
            "client_ca_file": "/etc/vkgate/client-ca.crt",
            "metrics_address": f"127.0.0.1:{metrics_port}",
        },
        "backend": {"kind": "simulated", "simulated": {"state_file": "/tmp/state.json"}},
        "log": {"level": "info"},
    }
    cfg = tmp_path / "vkgate.toml"
    cfg.write_text(to_toml(settings))
    cfg.chmod(0o644)
    api = urllib.parse.urlsplit(control_plane.url)
    name = f"vkgate-{node}"

    def logs() -> str:
        out = dockerd.docker("logs", name)
        return (out.stdout + out.stderr).decode(errors="replace")

    dockerd.docker(
        "run", "-d", "--name", name, "--network=host", "--read-only", "--tmpfs", "/tmp",
        "-e", f"KUBERNETES_SERVICE_HOST={api.hostname}",
        "-e", f"KUBERNETES_SERVICE_PORT={api.port}",
        "-v", f"{sa}:{SA_DIR}:ro",
        "-v", f"{cfg}:/etc/vkgate/vkgate.toml:ro",
        "-v", f"{client_ca}:/etc/vkgate/client-ca.crt:ro",
        vkgate_image,
        timeout=600,
    )  # fmt: skip
    try:

        def ready() -> bool:
            got = kubectl("get", "node", node, "-o", "json", check=False)
            if got.returncode != 0:
                return False
            conds = json.loads(got.stdout)["status"].get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

        wait_until(f"node {node} Ready (logs: see below)", ready, timeout=90)
        ns = f"img-{uuid.uuid4().hex[:6]}"
        kubectl("create", "namespace", ns)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {
                "nodeName": node,
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {"name": "app", "image": "busybox:1.36", "command": ["sleep", "60"]}
                ],
            },
        }
        kubectl("apply", "-f", "-", input=json.dumps(pod))
        wait_until(
            "the pod Running",
            lambda: (
                kubectl("get", "pod", "-n", ns, "web", "-o", "jsonpath={.status.phase}").stdout
                == "Running"
            ),
        )
        text = logs()
        assert RECORD_HEAD.search(text), f"not the agent's text log:\n{text[-3000:]}"
        # no request answered 403: looked for in each record's message, never in its time
        # (whose milliseconds may well be 403)
        forbidden = [m for m in log_messages(text) if STATUS_403.search(m)]
        assert not forbidden, forbidden
        assert "forbidden" not in text.lower(), text[-3000:]
        state = dockerd.docker("inspect", name).stdout
        inspected = json.loads(state)[0]
        assert inspected["State"]["Running"] is True
        assert inspected["HostConfig"]["ReadonlyRootfs"] is True
    finally:
        print(f"----- container {name} log -----")
        try:
            print(logs()[-6000:])
        finally:
            dockerd.docker("rm", "-f", name)
