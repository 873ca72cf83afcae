"""persistentVolumeClaim volumes: the claim and the PersistentVolume bound to it — pure functions.

The kubelet reads a pod's claim and mounts the volume bound to it; vkgate reads the same two
objects (by name: ``get`` on ``persistentvolumeclaims`` in the pod's namespace and on
``persistentvolumes``) and hands the translator the bound PV (``ResolvedVolume.persistent_volume``),
which decides what the backend mounts or refuses the pod naming the claim (Nomad:
translators/nomad/claims.py).  Until the claim exists, is ``Bound`` and its PV is readable, the
pod waits as a kubelet's would: a ``FailedMount`` Warning Event and ``ContainerCreating``, retried.

Internal to the resolver (``gateway.pods.resolve``): only the resolver module imports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.pods.events import Event
from gateway.pods.resolve.env import Lookup, ReadError
from translators.base import ResolvedVolume

KIND = "persistentVolumeClaim"


def claim_names(pod: Mapping[str, Any]) -> dict[str, str]:
    """volume name → claim name of the pod's persistentVolumeClaim volumes."""
    out: dict[str, str] = {}
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        src = vol.get(KIND)
        if src is not None:
            out[str(vol.get("name", ""))] = str((src or {}).get("claimName", ""))
    return out


def bound_volume(claim: Lookup) -> str:
    """The PersistentVolume name a Bound claim points at, else ""."""
    if not isinstance(claim, Mapping):
        return ""
    if (claim.get("status") or {}).get("phase") != "Bound":
        return ""
    return str((claim.get("spec") or {}).get("volumeName") or "")


@dataclass
class ClaimResult:
    volumes: tuple[ResolvedVolume, ...] = ()
    events: list[Event] = field(default_factory=list)
    #: The first FailedMount message; empty when every claim resolved.
    error: str = ""


def _problem(claim: str, found: Lookup, pv_name: str, pv: Lookup) -> str:
    if isinstance(found, ReadError):
        return f'failed to read persistentvolumeclaim "{claim}": {found.message}'
    if found is None:
        return f'persistentvolumeclaim "{claim}" not found'
    if not pv_name:
        phase = (found.get("status") or {}).get("phase") or "Pending"
        return f'persistentvolumeclaim "{claim}" is not bound (phase {phase})'
    if isinstance(pv, ReadError):
        return f'failed to read persistentvolume "{pv_name}": {pv.message}'
    if pv is None:
        return f'persistentvolume "{pv_name}" of claim "{claim}" not found'
    return ""


def resolve_claims(
    pod: Mapping[str, Any],
    volumes: Sequence[ResolvedVolume],
    claims: Mapping[str, Lookup],
    pvs: Mapping[str, Lookup],
) -> ClaimResult:
    """``volumes`` with each persistentVolumeClaim volume carrying its claim and bound PV."""
    names = claim_names(pod)
    spec_vols = {str(v.get("name", "")): v for v in (pod.get("spec") or {}).get("volumes") or []}
    out = ClaimResult()
    resolved: list[ResolvedVolume] = []
    for vol in volumes:
        if vol.kind != KIND:
            resolved.append(vol)
            continue
        claim = names.get(vol.name, "")
        found = claims.get(claim, ReadError("not fetched"))
        pv_name = bound_volume(found)
        pv = pvs.get(pv_name, ReadError("not fetched")) if pv_name else None
        problem = _problem(claim, found, pv_name, pv)
        if problem:
            msg = f'MountVolume.SetUp failed for volume "{vol.name}" : {problem}'
            out.events.append(Event("Warning", "FailedMount", msg))
            out.error = out.error or msg
            continue
        assert isinstance(pv, Mapping)
        read_only = bool((spec_vols.get(vol.name, {}).get(KIND) or {}).get("readOnly"))
        resolved.append(
            replace(vol, claim=claim, claim_read_only=read_only, persistent_volume=dict(pv))
        )
    out.volumes = tuple(resolved)
    return out
