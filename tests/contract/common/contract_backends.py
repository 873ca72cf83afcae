"""The backends of the contract suite: kind → ``"module:factory"`` of its harness, an async
context manager factory taking ``tmp_path`` and ``monkeypatch`` (contract_harness.py).  One
line per backend; ``test_every_installed_backend_has_a_harness`` fails for an installed backend
that has none."""

from __future__ import annotations

HARNESSES: dict[str, str] = {
    "simulated": "harness_simulated:simulated",
    "acme": "harness_simulated:acme",
    "nomad": "harness_nomad:nomad",
    "zun": "harness_zun:zun",
    "batch": "harness_batch:batch",
}
