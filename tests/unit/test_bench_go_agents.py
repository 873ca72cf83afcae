"""The burst benchmark's Go agents (bench/go_agents.py): selectable, honest about their limits,
and the upstream command refuses to run where it would listen on the host's interfaces.

No servers here: the agents run for real in ``python -m devstack.netns -- python -m
bench.pods_burst --agents ideal-kubelet,go-floor,go-vk-lib,go-vk-binary`` (bench/README.md).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import cast

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # bench/ is not an installed package

from bench import go_agents, pods_burst  # noqa: E402
from devstack import netns  # noqa: E402
from devstack.controlplane import ControlPlane  # noqa: E402

CP = cast(ControlPlane, object())  # the constructors only keep it for start()


@pytest.mark.parametrize("name", ["go-vk-lib", "go-floor", "go-vk-binary"])
def test_each_go_agent_can_be_chosen(name: str) -> None:
    args = pods_burst.parse_args(["--pods", "5", "--agents", f"ideal-kubelet,{name}"])
    assert args.agent_names == ["ideal-kubelet", name]


def test_an_unknown_agent_is_refused_with_the_known_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        pods_burst.parse_args(["--agents", "go-vk"])
    err = capsys.readouterr().err
    assert "go-vk" in err and "go-vk-lib" in err and "go-vk-binary" in err and "go-floor" in err


def test_the_upstream_command_refuses_to_start_outside_a_network_namespace(
    tmp_path: Path,
) -> None:
    if netns.isolated():
        pytest.skip("running inside the test network namespace: the refusal cannot show here")
    agent = go_agents.GoVkBinaryAgent(CP, tmp_path)
    with pytest.raises(RuntimeError, match="network namespace"):
        agent.start("n1")
    assert agent.proc is None and agent.pid is None
    assert list(tmp_path.iterdir()) == []  # no config written, nothing started


def test_the_upstream_command_reports_its_fixed_client_limit_and_no_own_counts(
    tmp_path: Path,
) -> None:
    agent = go_agents.GoVkBinaryAgent(CP, tmp_path)
    assert agent.rate_limit == (5.0, 10)
    assert agent.api_writes() is None  # the harness falls back to the API server's counters
    text = agent.describe()
    assert "qps=5/burst=10" in text and "mock provider" in text and "admin" in text


def test_the_library_agent_describes_its_limits_workers_and_delay(tmp_path: Path) -> None:
    agent = go_agents.GoVkLibAgent(CP, tmp_path, workers=7, start_delay=0.25)
    assert agent.rate_limit == (go_agents.GO_QPS, go_agents.GO_BURST) == (1000.0, 2000)
    assert agent.extra_args() == ["-start-delay", "0.25s"]
    text = agent.describe()
    for part in ("library", "0.25 s", "7 workers", "qps=1000.0/burst=2000", "lifted", "admin"):
        assert part in text, part


def test_the_floor_agent_describes_its_limits_and_workers(tmp_path: Path) -> None:
    agent = go_agents.GoFloorAgent(CP, tmp_path, qps=300.0, burst=600, workers=3)
    assert agent.rate_limit == (300.0, 600)
    assert agent.mode == "floor"
    text = agent.describe()
    for part in ("client-go", "3 workers", "qps=300.0/burst=600", "admin"):
        assert part in text, part
