"""Admission of probe requests (gateway.pods.resolve.admission.probe_requests; docs/design/probes.md,
"What a probe may send, and where"): a path, header name or header value an HTTP client must
not send (a CR/LF would end the probe's request and start another) refuses the pod naming the
field, on every probe kind and httpGet hook; a ``host`` other than the pod's own address refuses
it naming the field and the setting that would allow it (``probes.allow_host``).

Pure rules through the resolver's admission first, then the pod controller on a fake API server
and the simulated backend: a refused pod is Failed, named in a Warning Event, never submitted;
then the setting, and ``vkgate render`` refusing the same pod with the same text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from controller_harness import ControllerHarness
from pods_fakes import run_for

from gateway import cli
from gateway import config as cfg
from gateway.pods.resolve import Resolver
from translators.base import Features

NODE = "vk-test"
SMUGGLED = "x\r\n\r\nDELETE /v1/job/victim HTTP/1.1\r\nX-Nomad-Token: s3cr3t"


def pod(container: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "nginx", **container}]},
        **({"status": status} if status else {}),
    }


def resolver(*, allow_probe_host: bool = False) -> Resolver:
    return Resolver(
        None,  # type: ignore[arg-type]  # admission does no I/O
        features=Features(routable_pod_ip=True),
        backend="nomad",
        node_name=NODE,
        host_ip=lambda: "127.0.0.9",
        allocatable=dict,
        allow_probe_host=allow_probe_host,
    )


def refusals(p: dict[str, Any], **kw: Any) -> list[tuple[str, str, str]]:
    return [(u.reason, u.field, u.message) for u in resolver(**kw).admission(p)]


@pytest.mark.parametrize("kind", ["readinessProbe", "livenessProbe", "startupProbe"])
@pytest.mark.parametrize(
    ("action", "sub"),
    [
        ({"httpHeaders": [{"name": "X-Probe", "value": SMUGGLED}]}, "httpHeaders[0].value"),
        (
            {"httpHeaders": [{"name": "A", "value": "1"}, {"name": "X-Probe:", "value": "y"}]},
            "httpHeaders[1].name",
        ),
        ({"httpHeaders": [{"name": "X-Probe", "value": "a\x00b"}]}, "httpHeaders[0].value"),
        ({"path": "/ready HTTP/1.1\r\n" + SMUGGLED}, "path"),
        ({"path": "/a b"}, "path"),
    ],
    ids=["header-value-crlf", "header-name-colon", "header-value-nul", "path-crlf", "path-space"],
)
def test_a_request_an_http_client_must_not_send_refuses_the_pod(
    kind: str, action: dict[str, Any], sub: str
) -> None:
    p = pod({kind: {"httpGet": {"port": 8080, **action}}})
    ((reason, field, message),) = refusals(p)
    assert reason == "InvalidProbeRequest"
    assert field == f"spec.containers[app].{kind}.httpGet.{sub}"
    assert message.startswith(field + ": ")
    assert "Go's net/http" in message
    assert "s3cr3t" not in message and "\r" not in message and "\n" not in message


def test_the_field_example_of_the_issue() -> None:
    p = pod(
        {
            "readinessProbe": {
                "httpGet": {"port": 80, "httpHeaders": [{"name": "X", "value": SMUGGLED}]}
            }
        }
    )
    ((_, field, message),) = refusals(p)
    assert field == "spec.containers[app].readinessProbe.httpGet.httpHeaders[0].value"
    assert "the control character U+000D is not allowed in a header value" in message


def test_httpget_hooks_and_sidecar_probes_are_checked_too() -> None:
    p = pod({"lifecycle": {"preStop": {"httpGet": {"port": 80, "path": "/drain\r\n" + SMUGGLED}}}})
    p["spec"]["initContainers"] = [
        {
            "name": "proxy",
            "restartPolicy": "Always",
            "readinessProbe": {
                "httpGet": {"port": 80, "httpHeaders": [{"name": "", "value": "v"}]}
            },
        }
    ]
    assert [f for r, f, _ in refusals(p) if r == "InvalidProbeRequest"] == [
        "spec.initContainers[proxy].readinessProbe.httpGet.httpHeaders[0].name",
        "spec.containers[app].lifecycle.preStop.httpGet.path",
    ]


def test_what_an_http_client_may_send_passes() -> None:
    fine = {
        "path": "/ready?x=1&y=%20é",
        "port": 8080,
        "httpHeaders": [
            {"name": "X-Probe", "value": "a\tb ü"},
            {"name": "Host", "value": "web.example"},
            {"name": "!#$%&'*+-.^_`|~", "value": ""},
        ],
    }
    assert refusals(pod({"readinessProbe": {"httpGet": fine}})) == []


@pytest.mark.parametrize(
    ("container", "field"),
    [
        (
            {"readinessProbe": {"httpGet": {"host": "127.0.0.1", "port": 4646}}},
            "readinessProbe.httpGet",
        ),
        (
            {"livenessProbe": {"tcpSocket": {"host": "nomad.service", "port": 4646}}},
            "livenessProbe.tcpSocket",
        ),
        (
            {"lifecycle": {"postStart": {"httpGet": {"host": "10.0.0.1", "port": 80}}}},
            "lifecycle.postStart.httpGet",
        ),
    ],
    ids=["httpGet", "tcpSocket", "hook"],
)
def test_a_host_other_than_the_pods_is_refused_unless_the_node_allows_it(
    container: dict[str, Any], field: str
) -> None:
    ((reason, where, message),) = refusals(pod(container))
    assert reason == "ProbeHostRefused"
    assert where == f"spec.containers[app].{field}.host"
    assert message.startswith(where + ": ") and "is not the pod's own address" in message
    assert "probes.allow_host" in message  # the setting that would allow it
    assert refusals(pod(container), allow_probe_host=True) == []


def test_the_pods_own_address_and_no_host_need_no_setting() -> None:
    own = {"readinessProbe": {"httpGet": {"host": "10.0.0.5", "port": 80}}}
    assert refusals(pod(own, podIP="10.0.0.5", podIPs=[{"ip": "10.0.0.5"}])) == []
    assert refusals(pod(own, podIPs=[{"ip": "fd00::1"}, {"ip": "10.0.0.5"}])) == []
    assert refusals(pod({"readinessProbe": {"httpGet": {"port": 80}}})) == []
    assert [r for r, _, _ in refusals(pod(own, podIP="10.0.0.6"))] == ["ProbeHostRefused"]


@pytest.mark.parametrize("host", ["evil\r\nX: y", "a b", "fe80::1%eth0", "-x", "x" * 254])
def test_a_host_that_is_not_an_address_or_a_name_is_refused_even_when_allowed(host: str) -> None:
    p = pod({"readinessProbe": {"tcpSocket": {"host": host, "port": 80}}})
    ((reason, field, message),) = refusals(p, allow_probe_host=True)
    assert (reason, field) == (
        "InvalidProbeRequest",
        "spec.containers[app].readinessProbe.tcpSocket.host",
    )
    assert message == f"{field}: not an IP address or a DNS name"


# -- the pod controller ----------------------------------------------------------------------


async def test_a_pod_whose_probe_header_holds_crlf_is_failed_and_never_submitted(
    tmp_path: Path,
) -> None:
    h = ControllerHarness(tmp_path, node=NODE)
    await h.start()
    try:
        header = {"name": "X-Probe", "value": SMUGGLED}
        h.kube.add(pod({"readinessProbe": {"httpGet": {"port": 80, "httpHeaders": [header]}}}))
        await run_for(h.clock, 5)
        p = h.kube.pod("web")
        assert p is not None and p["status"]["phase"] == "Failed"
        assert p["status"]["reason"] == "InvalidProbeRequest"
        field = "spec.containers[app].readinessProbe.httpGet.httpHeaders[0].value"
        assert p["status"]["message"].startswith(field + ": ")
        assert h.sim is not None and h.sim.calls.get("create", 0) == 0
        await run_for(h.clock, 3)  # Events trail the status write
        (event,) = h.kube.events("InvalidProbeRequest")
        assert event["type"] == "Warning" and event["message"].startswith(field)
    finally:
        await h.stop()


@pytest.mark.parametrize("allow", [False, True])
async def test_a_foreign_probe_host_runs_only_where_the_node_allows_it(
    tmp_path: Path, allow: bool
) -> None:
    h = ControllerHarness(tmp_path, node=NODE, allow_probe_host=allow)
    ctl = await h.start()
    try:
        # localhost is the agent itself; port 1 refuses at once when it is dialled
        h.kube.add(pod({"readinessProbe": {"tcpSocket": {"host": "localhost", "port": 1}}}))
        await run_for(h.clock, 5)
        p = h.kube.pod("web")
        assert p is not None and h.sim is not None
        if allow:
            assert p["status"]["phase"] == "Running"
            assert h.sim.calls.get("create", 0) == 1 and ctl.prober.workers == 1
        else:
            assert p["status"]["phase"] == "Failed"
            assert p["status"]["reason"] == "ProbeHostRefused"
            assert p["status"]["message"].startswith(
                "spec.containers[app].readinessProbe.tcpSocket.host: 'localhost' is not the "
                "pod's own address"
            )
            assert h.sim.calls.get("create", 0) == 0
    finally:
        await h.stop()


# -- the setting ------------------------------------------------------------------------------


def _load(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> cfg.Settings:
    path = tmp_path / "vkgate.toml"
    path.write_text(text)
    return cfg.load(path, environ=environ or {})


def test_probes_allow_host_defaults_to_false_and_reads_file_env_and_nodes(tmp_path: Path) -> None:
    assert cfg.Settings().probes.allow_host is False
    assert _load(tmp_path, "").probes.allow_host is False
    assert _load(tmp_path, "[probes]\nallow_host = true\n").probes.allow_host is True
    assert _load(tmp_path, "", {"VKGATE_PROBES__ALLOW_HOST": "true"}).probes.allow_host is True
    s = _load(
        tmp_path,
        '[[nodes]]\nname = "a"\n\n[[nodes]]\nname = "b"\nkubelet = { port = 10251 }\n'
        "probes = { allow_host = true }\n",
    )
    assert [u.probes.allow_host for u in s.units()] == [False, True]
    with pytest.raises(cfg.ConfigError) as err:
        _load(tmp_path, "[probes]\nallow_hosts = true\n")
    assert err.value.key == "probes.allow_hosts"


# -- vkgate render ---------------------------------------------------------------------------

RENDERED_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers:
    - name: app
      image: nginx:1.27
      readinessProbe:
        httpGet:
          port: 80
          httpHeaders: [{name: X-Probe, value: "x\\r\\nDELETE /v1/job/victim HTTP/1.1"}]
      livenessProbe: {tcpSocket: {host: "10.0.0.1", port: 4646}}
"""


def test_vkgate_render_refuses_the_pod_with_the_same_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "pod.yaml").write_text(RENDERED_POD)
    conf = tmp_path / "vkgate.toml"
    conf.write_text('[backend]\nkind = "nomad"\n')
    code = cli.main(["render", str(tmp_path / "pod.yaml"), "-c", str(conf)])
    err = capsys.readouterr().err
    assert code != 0
    assert (
        "vkgate render: the agent would not start this pod: spec.containers[app].readinessProbe."
        "httpGet.httpHeaders[0].value: the control character U+000D is not allowed" in err
    )
    assert "spec.containers[app].livenessProbe.tcpSocket.host: '10.0.0.1' is not the pod's" in err
    conf.write_text('[backend]\nkind = "nomad"\n\n[probes]\nallow_host = true\n')
    cli.main(["render", str(tmp_path / "pod.yaml"), "-c", str(conf)])
    err = capsys.readouterr().err
    assert "readinessProbe.httpGet.httpHeaders[0].value" in err  # never allowed
    assert "tcpSocket.host" not in err
