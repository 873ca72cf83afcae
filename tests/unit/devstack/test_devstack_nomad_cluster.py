"""The e2e Nomad cluster's pieces that need no agent: each client's bridge networking and the
release of its CNI address leases (docs/design/nomad.md, "The e2e cluster")."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from devstack import nomad_cluster as nc
from devstack.certs import CertKey
from devstack.docker import PAUSE_IMAGE

OWNER, NODE = "vkgate.io/owner", "vkgate.node"  # the literal keys vkgate's jobs carry


def _config(tmp_path: Path, node: nc.NomadClientNode) -> dict[str, object]:
    tls = nc.NomadTLS(tmp_path / "ca.pem", tmp_path / "c.pem", tmp_path / "c.key")
    cert = CertKey(tmp_path / "a.pem", tmp_path / "a.key")
    text = nc._client_config(
        tmp_path,
        tls,
        cert,
        node,
        interface="vkn1",
        server_rpc="127.0.0.1:1",
        ports=(1, 2, 3),
        docker_host="unix:///tmp/d.sock",
    )
    out: dict[str, object] = json.loads(text)
    return out


def test_each_client_has_its_own_bridge_and_subnet_in_test_net_3(tmp_path: Path) -> None:
    c1, c2 = nc.default_clients()
    one, two = (_config(tmp_path, c)["client"] for c in (c1, c2))
    assert isinstance(one, dict) and isinstance(two, dict)
    assert one["cni_path"] == two["cni_path"] == "/usr/lib/cni"
    assert (one["bridge_network_name"], two["bridge_network_name"]) == ("vkbr1", "vkbr2")
    nets = [ipaddress.IPv4Network(c["bridge_network_subnet"]) for c in (one, two)]
    assert not nets[0].overlaps(nets[1])
    assert all(n.subnet_of(ipaddress.IPv4Network("203.0.113.0/24")) for n in nets)


def test_each_client_has_the_cni_network_on_its_own_bridge_and_subnet(tmp_path: Path) -> None:
    c1, c2 = nc.default_clients()
    one, two = (nc.cni_conflist(c, i, tmp_path / f"c{i}") for i, c in enumerate((c1, c2)))
    assert one["name"] == two["name"] == nc.CNI_NETWORK
    b1, b2 = (c["plugins"][1] for c in (one, two))
    assert (b1["bridge"], b2["bridge"]) == ("vknet1", "vknet2")
    assert b1["ipam"]["dataDir"] == str(tmp_path / "c0" / "leases")  # not the host's /var/lib
    subnets = [ipaddress.IPv4Network(b["ipam"]["ranges"][0][0]["subnet"]) for b in (b1, b2)]
    every = subnets + [ipaddress.IPv4Network(s) for s in nc.BRIDGE_SUBNETS]
    assert all(a == b or not a.overlaps(b) for a in every for b in every)
    cfg = _config(tmp_path, c1)["client"]
    assert isinstance(cfg, dict) and cfg["cni_config_dir"] == str(tmp_path / "cni")


def test_the_docker_client_holds_bridge_namespaces_with_the_local_pause_image(
    tmp_path: Path,
) -> None:
    plugins = _config(tmp_path, nc.default_clients()[0])["plugin"]
    assert isinstance(plugins, dict)
    assert plugins["docker"]["config"]["infra_image"] == PAUSE_IMAGE


def test_only_the_clusters_own_leases_are_released(tmp_path: Path) -> None:
    leases = tmp_path / "nomad"
    leases.mkdir()
    (leases / "203.0.113.2").write_text("alloc-mine\neth0")
    (leases / "203.0.113.3").write_text("alloc-other-run\neth0")
    (leases / "last_reserved_ip.0").write_text("203.0.113.3")
    (leases / "lock").write_text("")
    removed = nc.release_leases({"alloc-mine", "alloc-gone"}, leases)
    assert removed == [leases / "203.0.113.2"]
    assert sorted(p.name for p in leases.iterdir()) == [
        "203.0.113.3",
        "last_reserved_ip.0",
        "lock",
    ]
    assert nc.release_leases(set(), leases) == []
    assert nc.release_leases({"x"}, tmp_path / "missing") == []


def test_the_bench_cluster_declares_room_on_both_clients_and_spreads(tmp_path: Path) -> None:
    """bench/nomad_burst.py --cluster: two clients in the default pool, each declaring room for
    its share of small mock_driver allocations; the server spreads a burst over both, keeps the
    asked event buffer, and every agent logs at WARN."""
    nodes = nc.bench_clients()
    assert len(nodes) == 2 and {n.node_pool for n in nodes} == {"default"}
    assert len({n.ip for n in nodes}) == 2 and len({n.bridge for n in nodes}) == 2
    tls = nc.NomadTLS(tmp_path / "ca.pem", tmp_path / "c.pem", tmp_path / "c.key")
    cert = CertKey(tmp_path / "a.pem", tmp_path / "a.key")
    client = json.loads(
        nc._client_config(
            tmp_path,
            tls,
            cert,
            nodes[0],
            interface="vkn1",
            server_rpc="127.0.0.1:1",
            ports=(1, 2, 3),
            docker_host=None,
            bench_allocs=2500,
        )
    )
    assert client["client"]["memory_total_mb"] >= 2500 * 16
    assert client["client"]["gc_max_allocs"] >= 2500
    assert client["log_level"] == "WARN" and client["acl"] == {"enabled": True}
    server = json.loads(
        nc._server_config(tmp_path, tls, cert, (1, 2, 3), bench=True, event_buffer_size=10_000)
    )
    assert server["server"]["default_scheduler_config"] == {"scheduler_algorithm": "spread"}
    assert server["server"]["event_buffer_size"] == 10_000 and server["log_level"] == "WARN"
    plain = json.loads(nc._server_config(tmp_path, tls, cert, (1, 2, 3)))
    assert plain["server"] == {"enabled": True, "bootstrap_expect": 1}
    assert plain["log_level"] == "INFO"


def test_purge_takes_only_vkgate_jobs_of_nodes_no_gateway_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [
        {"Namespace": "default", "ID": "kept", "Meta": {OWNER: "vkgate", NODE: "live"}},
        {"Namespace": "team-a", "ID": "gone/1", "Meta": {OWNER: "vkgate", NODE: "stopped"}},
        {"Namespace": "default", "ID": "other", "Meta": {NODE: "stopped"}},  # not vkgate's
        {"Namespace": "default", "ID": "no-meta", "Meta": None},
    ]
    calls: list[tuple[str, str]] = []

    def call(address: str, tls: object, token: str, method: str, path: str, **kw: object) -> object:
        assert token == "mgmt"
        calls.append((method, path))
        return jobs if method == "GET" else {}

    monkeypatch.setattr(nc, "_call", call)
    tls = nc.NomadTLS(tmp_path / "ca.pem", tmp_path / "c.pem", tmp_path / "c.key")
    cluster = nc.NomadCluster(
        workdir=tmp_path,
        address="https://127.0.0.1:1",
        tls=tls,
        management_token="mgmt",
        token="policy",
        clients=(),
        server=None,  # type: ignore[arg-type]
        client_procs=(),
    )
    assert cluster.purge_vkgate_jobs(keep={"live"}) == ["team-a/gone/1"]
    assert calls == [
        ("GET", "/v1/jobs?namespace=*&meta=true"),
        ("DELETE", "/v1/job/gone%2F1?purge=true&namespace=team-a"),
    ]


def test_live_node_names_are_those_of_running_gateway_processes(tmp_path: Path) -> None:
    from devstack import agent

    class Alive:
        node_names = ["a", "b"]

        def alive(self) -> bool:
            return True

    class Dead:
        node_names = ["c"]

        def alive(self) -> bool:
            return False

    keep = [Alive(), Dead()]
    for gw in keep:
        agent._STARTED.add(gw)  # type: ignore[arg-type]
    assert {"a", "b"} <= agent.live_node_names()
    assert "c" not in agent.live_node_names()
