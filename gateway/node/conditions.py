"""Node conditions: what we report, and the one rule for their timestamps.

``lastHeartbeatTime`` moves on every write; ``lastTransitionTime`` moves only when a condition's
``status`` flips (a new reason or message alone is not a transition, as in the kubelet).  The
previous values are taken from the server's latest Node, so a restarted agent keeps the real
transition time instead of resetting it.

NetworkUnavailable: the kubelet itself never writes it (a CNI plugin or the route controller does),
but a virtual node states it (docs/design/kubelet-contract.md, "Node object").  Nobody else manages
networking for a virtual node — the backend does — so we own it: ``False`` with reason
``NetworkProvidedByBackend``.  Like the kubelet's conditions it is merged by ``type``, so conditions
written by others (e.g. a node-problem-detector) are never touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

READY = "Ready"

REASON_READY = "KubeletReady"
REASON_NOT_READY = "KubeletNotReady"
REASON_BACKEND_UNREACHABLE = "BackendUnreachable"
#: The backend answers but refuses vkgate's credentials (e.g. a Nomad token lacking a grant).
REASON_BACKEND_FORBIDDEN = "BackendForbidden"
#: Some input pod rendering reads has not loaded yet (gateway.inputs, docs/design/startup.md).
REASON_INPUTS_NOT_SYNCED = "InputsNotSynced"


@dataclass(frozen=True)
class Condition:
    """A condition without timestamps (what we *want*; time is added when written)."""

    type: str
    status: str
    reason: str
    message: str


def desired_conditions(
    *, ready: bool, backend_kind: str, not_ready_reason: str = "", not_ready_message: str = ""
) -> list[Condition]:
    """Our five conditions given the backend's health."""
    if ready:
        ready_cond = Condition(READY, "True", REASON_READY, "kubelet is posting ready status")
    else:
        ready_cond = Condition(
            READY,
            "False",
            not_ready_reason or REASON_NOT_READY,
            not_ready_message or "kubelet is not ready",
        )
    return [
        ready_cond,
        Condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        Condition(
            "DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"
        ),
        Condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        Condition(
            "NetworkUnavailable",
            "False",
            "NetworkProvidedByBackend",
            f"pod networking is provided by the {backend_kind} backend",
        ),
    ]


def with_times(
    desired: Iterable[Condition], current: Sequence[Mapping[str, Any]], now: str
) -> list[dict[str, Any]]:
    """JSON conditions: heartbeat = now; transition kept from ``current`` unless status flipped."""
    by_type = {str(c.get("type")): c for c in current}
    out: list[dict[str, Any]] = []
    for cond in desired:
        prev = by_type.get(cond.type)
        if (
            prev is not None
            and prev.get("status") == cond.status
            and prev.get("lastTransitionTime")
        ):
            transition = str(prev["lastTransitionTime"])
        else:
            transition = now
        out.append(
            {
                "type": cond.type,
                "status": cond.status,
                "reason": cond.reason,
                "message": cond.message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": transition,
            }
        )
    return out


def differs(desired: Iterable[Condition], current: Sequence[Mapping[str, Any]]) -> bool:
    """True when the server's conditions do not already say what we want (times ignored)."""
    by_type = {str(c.get("type")): c for c in current}
    for cond in desired:
        prev = by_type.get(cond.type)
        if prev is None:
            return True
        if (prev.get("status"), prev.get("reason"), prev.get("message")) != (
            cond.status,
            cond.reason,
            cond.message,
        ):
            return True
    return False
