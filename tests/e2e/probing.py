"""What the probe e2e tests read of a pod: its status and a condition (through the control
plane's API; tests/e2e/test_nomad_probes.py, test_nomad_grpc_probe.py).  Its Events:
``waiting.events_about`` / ``waiting.wait_for_event``."""

from __future__ import annotations

from typing import Any


def pod_status(cp: Any, name: str) -> dict[str, Any]:
    """``status`` of pod ``default/name`` through the control plane's API ({} when gone)."""
    found: dict[str, Any] = (cp.get(f"/api/v1/namespaces/default/pods/{name}") or {}).get(
        "status", {}
    )
    return found


def condition(st: dict[str, Any], kind: str) -> str:
    """``True``/``False`` of the pod condition ``kind`` ("" when absent)."""
    return next((c["status"] for c in st.get("conditions") or [] if c["type"] == kind), "")
