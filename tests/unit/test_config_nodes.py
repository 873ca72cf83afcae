"""``[[nodes]]``: per-node entries over shared defaults, validated as whole settings, errors
named as written in the entry (docs/design/multinode.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway import config as cfg

SHARED = """
[node]
labels = { team = "ml" }
capacity = { pods = "50" }

[kubelet]
cert_file = "/etc/vkgate/kubelet.crt"
metrics_address = "127.0.0.1:10255"

[backend.nomad]
address = "http://127.0.0.1:4646"
token = "s3cr3t-token"
"""

TWO_NODES = (
    SHARED
    + """
[[nodes]]
name = "vk-dc1"
labels = { zone = "dc1" }
kubelet = { port = 10251 }
backend = { kind = "nomad", nomad = { datacenters = ["dc1"] } }

[[nodes]]
name = "vk-sim"
capacity = { pods = "7" }
[nodes.kubelet]
port = 10252
"""
)


def _load(tmp_path: Path, text: str) -> cfg.Settings:
    path = tmp_path / "vkgate.toml"
    path.write_text(text)
    return cfg.load(path, environ={})


def test_each_entry_is_laid_over_the_shared_sections(tmp_path: Path) -> None:
    s = _load(tmp_path, TWO_NODES)
    dc1, sim = s.units()
    assert [n.node.name for n in s.units()] == ["vk-dc1", "vk-sim"]
    assert dc1.node.labels == {"team": "ml", "zone": "dc1"}
    assert sim.node.labels == {"team": "ml"}
    assert (dc1.node.capacity, sim.node.capacity) == ({"pods": "50"}, {"pods": "7"})
    assert (dc1.kubelet.port, sim.kubelet.port) == (10251, 10252)
    assert dc1.kubelet.cert_file == sim.kubelet.cert_file == "/etc/vkgate/kubelet.crt"
    assert (dc1.backend.kind, sim.backend.kind) == ("nomad", "simulated")
    # the backend table merges the shared [backend.nomad] with the entry's own keys, and the
    # backend's own parser filled the effective settings
    assert dc1.backend.table() == {
        "address": "http://127.0.0.1:4646",
        "token": "s3cr3t-token",
        "datacenters": ["dc1"],
    }
    effective = {item.key: item.value for item in dc1.backend.effective}
    assert list(effective["backend.nomad.datacenters"]) == ["dc1"]
    assert sim.backend.effective  # the simulated parser ran too


def test_without_nodes_the_one_node_is_the_settings_themselves(tmp_path: Path) -> None:
    s = _load(tmp_path, SHARED)
    assert s.nodes == []
    assert s.units() == [s]


@pytest.mark.parametrize(
    ("entries", "key", "message"),
    [
        (
            '[[nodes]]\nname = "a"\n[[nodes]]\nname = "a"\nkubelet = { port = 2 }',
            "nodes[1].name",
            "already the name of nodes[0]",
        ),
        (
            '[[nodes]]\nname = "a"\nkubelet = { port = 7 }\n'
            '[[nodes]]\nname = "b"\nkubelet = { port = 7 }',
            "nodes[1].kubelet.port",
            "7 is already the kubelet port of nodes[0]",
        ),
        (
            '[[nodes]]\nname = "a"\nkubelet = { port = 1 }\n[[nodes]]\nname = "b"\n'
            'backend = { kind = "nomad", nomad = { address = "ftp://x" } }',
            "nodes[1].backend.nomad.address",
            "expected http(s)://host:port",
        ),
        (
            '[[nodes]]\nname = "a"\nbackend = { kind = "nomad", nomad = { adress = "x" } }',
            "nodes[0].backend.nomad.adress",
            "unknown",
        ),
        ('[[nodes]]\nname = "a"\nbackend = { kind = "nope" }', "nodes[0].backend.kind", "nope"),
        ('[[nodes]]\nname = "A_b"', "nodes[0].name", "DNS subdomain"),
        ("[[nodes]]\nlabels = {}", "nodes[0].name", "needs a name"),
        ('[[nodes]]\nname = "a"\nlabels = { "bad key" = "x" }', "nodes[0].labels.bad key", "label"),
        ('[[nodes]]\nname = "a"\ncapacity = { cpu = "lots" }', "nodes[0].capacity.cpu", ""),
        ('[[nodes]]\nname = "a"\nkubelet = { port = 0 }', "nodes[0].kubelet.port", "1..65535"),
        ('[[nodes]]\nname = "a"\nkubelet = { prot = 1 }', "nodes[0].kubelet.prot", "unknown"),
        (
            '[[nodes]]\nname = "a"\nkubelet = { metrics_address = ":1" }',
            "nodes[0].kubelet.metrics_address",
            "process-wide",
        ),
        ('[[nodes]]\nname = "a"\npods = { workers = 1 }', "nodes[0].pods", "not a per-node"),
        ('[[nodes]]\nname = "a"\nping_interval = 0', "nodes[0].ping_interval", "0.1.."),
        ('nodes = ["a"]', "nodes[0]", "expected a table"),
        ("nodes = []", "nodes", "non-empty list"),
    ],
)
def test_bad_entries_name_the_key_as_written_in_the_entry(
    tmp_path: Path, entries: str, key: str, message: str
) -> None:
    with pytest.raises(cfg.ConfigError) as info:
        _load(tmp_path, entries)
    assert info.value.key == key
    assert message in info.value.message


def test_an_inherited_bad_value_is_reported_for_the_node_that_uses_it(tmp_path: Path) -> None:
    text = (
        '[backend.nomad]\naddress = "nope"\n[[nodes]]\nname = "a"\n'
        '[[nodes]]\nname = "b"\nkubelet = { port = 2 }\nbackend = { kind = "nomad" }\n'
    )
    with pytest.raises(cfg.ConfigError) as info:
        _load(tmp_path, text)
    assert info.value.key == "nodes[1].backend.nomad.address"


def test_shared_sections_are_validated_once_for_all_nodes(tmp_path: Path) -> None:
    with pytest.raises(cfg.ConfigError) as info:
        _load(tmp_path, '[pods]\nworkers = 0\n[[nodes]]\nname = "a"\n')
    assert info.value.key == "pods.workers"


def test_environment_and_flags_override_the_shared_defaults(tmp_path: Path) -> None:
    path = tmp_path / "vkgate.toml"
    path.write_text(TWO_NODES)
    s = cfg.load(
        path,
        environ={"VKGATE_KUBE__QPS": "7"},
        overrides={"node": {"labels": {"extra": "yes"}}},
    )
    assert s.kube.qps == 7.0
    assert all(n.kube.qps == 7.0 for n in s.units())
    assert all(n.node.labels["extra"] == "yes" for n in s.units())


def test_config_check_prints_each_node_with_secrets_masked(tmp_path: Path) -> None:
    report = cfg.check_report(_load(tmp_path, TWO_NODES))
    assert "s3cr3t" not in report
    head, dc1, sim = report.split("# ---- nodes[")
    assert "[kube]" in head and "[node]" not in head and "[backend]" not in head
    assert dc1.startswith("0]: vk-dc1 (nomad) ----")
    assert 'name = "vk-dc1"' in dc1 and "port = 10251" in dc1
    assert 'datacenters = ["dc1"]' in dc1 and 'token = "*****"' in dc1
    assert 'zone = "dc1"' in dc1
    assert sim.startswith("1]: vk-sim (simulated) ----")
    assert 'kind = "simulated"' in sim and "port = 10252" in sim and 'pods = "7"' in sim


def test_to_toml_writes_nodes_as_an_array_of_tables_that_loads_back(tmp_path: Path) -> None:
    data = {
        "kubelet": {"metrics_address": "127.0.0.1:1"},
        "nodes": [
            {"name": "a", "kubelet": {"port": 11}, "labels": {"x": "1"}},
            {"name": "b", "kubelet": {"port": 12}, "backend": {"simulated": {"pods": 3}}},
        ],
    }
    s = _load(tmp_path, cfg.to_toml(data))
    a, b = s.units()
    assert (a.node.name, a.kubelet.port, a.node.labels) == ("a", 11, {"x": "1"})
    assert (b.node.name, b.kubelet.port, b.backend.table()) == ("b", 12, {"pods": 3})


def test_the_readme_example_loads(tmp_path: Path) -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    example = readme.split("### Several virtual nodes")[1].split("```toml")[1].split("```")[0]
    dc1, gpu = _load(tmp_path, example).units()
    assert (dc1.node.name, gpu.node.name) == ("vk-nomad-dc1", "vk-nomad-gpu")
    assert gpu.backend.table()["address"] == "http://127.0.0.1:4646"
    assert gpu.backend.table()["node_pool"] == "gpu"


def test_vkgate_config_check_cli_prints_every_node_or_names_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gateway import cli

    path = tmp_path / "vkgate.toml"
    path.write_text(TWO_NODES)
    assert cli.main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "# ---- nodes[0]: vk-dc1 (nomad) ----" in out
    assert "# ---- nodes[1]: vk-sim (simulated) ----" in out
    path.write_text(TWO_NODES.replace("port = 10252", "port = 10251"))
    assert cli.main(["config", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        "vkgate: config error: nodes[1].kubelet.port: 10251 is already the kubelet port of nodes[0]"
    )
