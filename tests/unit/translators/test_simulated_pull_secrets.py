"""The simulated backend records which imagePullSecret logins a pod got — never passwords."""

from __future__ import annotations

import json
from pathlib import Path

from translators.base import RegistryCredential, ResolvedContainer, ResolvedPod
from translators.simulated import SimulatedTranslator


async def test_state_file_records_servers_and_usernames_not_passwords(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    t = SimulatedTranslator(None, node_name="vk", state_file=str(state))
    pod = ResolvedPod(
        namespace="ns",
        name="p",
        uid="u-1",
        node_name="vk",
        pod={"metadata": {}, "spec": {}},
        containers=(ResolvedContainer(name="app", image="ghcr.io/x/app:1"),),
        registry_credentials=(
            RegistryCredential("ghcr.io", "gh-bot", "ghp-sim-password", auth_source="secret/r"),
        ),
    )
    await t.create(pod)
    text = state.read_text()
    assert "ghp-sim-password" not in text
    (rec,) = json.loads(text).values()
    assert rec["extra"]["registry_credentials"] == [
        {"server": "ghcr.io", "username": "gh-bot", "source": "secret/r"}
    ]
    await t.close()
