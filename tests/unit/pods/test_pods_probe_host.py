"""A probe with an explicit ``host`` is dialled as it is, like the kubelet does: it needs no
routable pod address, so a backend without one still runs it (gateway/pods/resolve/features.py)."""

from __future__ import annotations

from typing import Any

from gateway.pods.resolve.features import check_probes
from translators.base import Features


def _pod(probe: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "app", "readinessProbe": probe}]}}


def test_an_explicit_host_needs_no_pod_address() -> None:
    features = Features(routable_pod_ip=False)
    for handler in ("tcpSocket", "httpGet"):
        with_host = _pod({handler: {"host": "127.0.0.1", "port": 8080}})
        assert check_probes(with_host, features, can_exec=False, backend="simulated") == []
        without = _pod({handler: {"port": 8080}})
        (refused,) = check_probes(without, features, can_exec=False, backend="simulated")
        assert refused.field == f"spec.containers[app].readinessProbe.{handler}"
        assert "gives pods no address vkgate can probe" in refused.message
