"""The Nomad Secret and ACL policy of deploy/: deploy/README.md, Kustomize and the Helm chart
name the same Secret keys and wire each to the same variable and file, every variable is one
the agent reads (translators/nomad/config.py), and the chart's copy of the ACL policy is the
shipped file byte for byte."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from deploy_render import (
    CHART,
    DEPLOY,
    Wire,
    env_of,
    helm_template,
    kustomize,
    one,
    overlay,
    rendered,
    secret_wiring,
)

from translators.nomad.config import ENV_KEYS

README = DEPLOY / "README.md"
SECRET = "vkgate-nomad"
POLICY = DEPLOY / "nomad" / "vkgate-policy.hcl"
CHART_POLICY = CHART / "files" / "nomad-policy.hcl"


def readme_create_secret_keys() -> set[str]:
    """The keys of ``kubectl create secret generic vkgate-nomad …`` in deploy/README.md."""
    text = README.read_text().replace("\\\n", " ")
    commands = [
        line for line in text.splitlines() if f"create secret generic {SECRET}" in line.strip()
    ]
    assert len(commands) == 1, commands
    keys = set()
    for arg in shlex.split(commands[0]):
        if arg.startswith(("--from-literal=", "--from-file=")):
            keys.add(arg.split("=", 2)[1])
    return keys


def readme_table() -> dict[str, Wire]:
    """Key → variable and file, from the README's table of the Secret's keys."""
    out: dict[str, Wire] = {}
    for line in README.read_text().splitlines():
        m = re.match(r"\| `([\w.-]+)` \| (?:`([^`]+)`, )?env `(\w+)` \|", line)
        if m:
            out[m.group(1)] = Wire(m.group(3), m.group(2) or "")
    return out


FULL = {
    "NOMAD_TOKEN": Wire("NOMAD_TOKEN"),
    "ca.pem": Wire("NOMAD_CACERT", "/etc/vkgate/nomad-tls/ca.pem"),
    "client.pem": Wire("NOMAD_CLIENT_CERT", "/etc/vkgate/nomad-tls/client.pem"),
    "client-key.pem": Wire("NOMAD_CLIENT_KEY", "/etc/vkgate/nomad-tls/client-key.pem"),
}
CA_ONLY = {k: FULL[k] for k in ("NOMAD_TOKEN", "ca.pem")}
TOKEN_ONLY = {"NOMAD_TOKEN": FULL["NOMAD_TOKEN"]}


def test_the_readme_names_the_keys_it_documents_and_wires_them_like_the_manifests() -> None:
    assert readme_create_secret_keys() == set(FULL)
    assert readme_table() == FULL


def test_every_variable_the_secret_feeds_is_one_the_agent_reads() -> None:
    read = set(ENV_KEYS.values())
    assert {w.env for w in FULL.values()} <= read
    assert "NOMAD_TLS_SERVER_NAME" in read  # set by the chart's nomad.tls.serverName


@pytest.mark.parametrize(
    ("components", "wanted"),
    [((), TOKEN_ONLY), (("components/nomad-tls",), CA_ONLY), (("components/nomad-mtls",), FULL)],
    ids=["base", "nomad-tls", "nomad-mtls"],
)
def test_kustomize_wires_the_secret_keys(
    tmp_path: Path, components: tuple[str, ...], wanted: dict[str, Wire]
) -> None:
    docs = kustomize(overlay(tmp_path, resources=("base",), components=components))
    deployment = one(docs, "Deployment", "vkgate")
    assert secret_wiring(deployment, SECRET) == wanted
    if components:  # the files are the agent's group's, not world-readable
        spec = deployment["spec"]["template"]["spec"]
        assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsGroup"]
        (volume,) = [v for v in spec["volumes"] if "secret" in v]
        assert volume["secret"]["defaultMode"] == 0o440


def test_the_single_node_overlay_verifies_nomad_with_the_secrets_ca() -> None:
    docs = kustomize(DEPLOY / "overlays" / "single-node")
    assert secret_wiring(one(docs, "Deployment", "vkgate"), SECRET) == CA_ONLY
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and "NOMAD_ADDR" in d.get("data", {})]
    assert config["data"]["NOMAD_ADDR"].startswith("https://")


@pytest.mark.parametrize(
    ("sets", "wanted"),
    [
        ((), TOKEN_ONLY),
        (("--set=nomad.tls.enabled=true",), CA_ONLY),
        (("--set=nomad.tls.enabled=true", "--set=nomad.tls.clientCert=true"), FULL),
    ],
    ids=["default", "tls", "mtls"],
)
def test_helm_wires_the_same_secret_keys(
    tmp_path: Path, sets: tuple[str, ...], wanted: dict[str, Wire]
) -> None:
    docs = rendered(tmp_path, *sets)
    deployment = one(docs, "Deployment", "vkgate")
    assert secret_wiring(deployment, SECRET) == wanted
    assert not [d for d in docs if d["kind"] == "Secret"], "the operator's Secret is used as is"


def test_helm_sets_the_tls_server_name_only_when_asked(tmp_path: Path) -> None:
    tls = ("--set=nomad.tls.enabled=true",)
    plain = env_of(one(rendered(tmp_path, *tls), "Deployment"))
    assert "NOMAD_TLS_SERVER_NAME" not in plain
    named = rendered(tmp_path, *tls, "--set=nomad.tls.serverName=server.global.nomad")
    assert env_of(one(named, "Deployment"))["NOMAD_TLS_SERVER_NAME"] == "server.global.nomad"


def test_helm_makes_the_secret_from_values_with_the_same_keys(tmp_path: Path) -> None:
    pem = {"ca": "CA PEM\n", "cert": "CERT PEM\n", "key": "KEY PEM\n"}
    docs = rendered(
        tmp_path,
        "--set=nomad.existingSecret=",
        "--set=nomad.token=s3cr3t",
        "--set=nomad.tls.enabled=true",
        "--set=nomad.tls.clientCert=true",
        *(f"--set=nomad.tls.{k}={v}" for k, v in pem.items()),
    )
    secret = one(docs, "Secret", "vkgate-nomad")
    assert secret["stringData"] == {
        "NOMAD_TOKEN": "s3cr3t",
        "ca.pem": "CA PEM\n",
        "client.pem": "CERT PEM\n",
        "client-key.pem": "KEY PEM\n",
    }
    deployment = one(docs, "Deployment")
    assert secret_wiring(deployment, "vkgate-nomad") == FULL
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/secret" in annotations  # a new token or certificate rolls the pods


def test_helm_refuses_tls_without_a_ca(tmp_path: Path) -> None:
    out = helm_template(
        tmp_path, "--set=nomad.existingSecret=", "--set=nomad.tls.enabled=true", check=False
    )
    assert out.returncode != 0 and "nomad.tls.ca" in out.stderr


# --------------------------------------------------------------------------- the ACL policy


def test_the_charts_policy_is_the_shipped_policy_byte_for_byte() -> None:
    assert POLICY.is_file(), f"{POLICY.relative_to(DEPLOY.parent)} is missing"
    assert CHART_POLICY.read_bytes() == POLICY.read_bytes(), (
        f"copy {POLICY.relative_to(DEPLOY.parent)} to {CHART_POLICY.relative_to(DEPLOY.parent)}"
    )


def test_helm_renders_the_policy_for_nomad_acl_policy_apply(tmp_path: Path) -> None:
    policy = one(rendered(tmp_path), "ConfigMap", "vkgate-nomad-policy")
    assert policy["data"]["vkgate-policy.hcl"] == POLICY.read_text()
    off = rendered(tmp_path, "--set=nomad.policy=false")
    assert not [d for d in off if d["metadata"]["name"] == "vkgate-nomad-policy"]
