"""What the probe e2e tests read of a pod: its status, a condition, its Events (through the
control plane's API; tests/e2e/test_nomad_probes.py, test_nomad_grpc_probe.py)."""

from __future__ import annotations

import urllib.parse
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


def pod_events(cp: Any, name: str, reason: str) -> list[dict[str, Any]]:
    """The Events of pod ``default/name`` with ``reason``."""
    sel = urllib.parse.quote(f"involvedObject.name={name},reason={reason}")
    found = cp.get(f"/api/v1/namespaces/default/events?fieldSelector={sel}") or {}
    return list(found.get("items") or [])
