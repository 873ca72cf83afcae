"""PersistentVolumeClaims → Nomad volume requests (docs/backends/nomad.md, "Persistent volumes").

The gateway reads each claim and the PersistentVolume bound to it (``ResolvedVolume.claim``,
``.persistent_volume``); what that PV is decides the Nomad volume, or the pod is refused naming
the claim:

=================================================  ============================================
PV annotated ``nomad.vkgate.io/host-volume: <n>``  group ``Volumes[<vol>] {Type: host, Source:
                                                   <n>}``: the ``host_volume "<n>"`` of a client
                                                   (Nomad 1.6 host volumes are static client
                                                   configuration; the scheduler only places the
                                                   job on a client that has it)
PV with ``spec.csi``                               ``{Type: csi, Source: volumeHandle}`` — the ID
                                                   of a volume registered in Nomad (``nomad
                                                   volume register``) whose plugin is
                                                   ``spec.csi.driver``; AccessMode from the PV's
                                                   accessModes, AttachmentMode ``file-system``
anything else (hostPath, local, nfs, …)            refused (``UnsupportedVolume``)
``volumeMode: Block``                              refused (no ``volumeDevices``)
=================================================  ============================================

Each container's ``volumeMounts`` on a claim become task ``VolumeMounts {Volume, Destination:
mountPath, ReadOnly}`` (read-only when the mount or the pod's ``persistentVolumeClaim.readOnly``
says so); ``subPath`` is refused naming the mount, since a Nomad volume mount has no sub-path.
The raw_exec driver cannot mount anything (no filesystem isolation): a rendered job whose task
carries a claim on raw_exec is refused (``check_rendered``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from translators.base import ResolvedContainer, ResolvedVolume, TranslationError, UnsupportedError

CLAIM = "persistentVolumeClaim"
HOST_VOLUME_ANNOTATION = "nomad.vkgate.io/host-volume"
REASON = "UnsupportedVolume"

#: PV accessModes → Nomad CSI access mode (writable mount), first match wins.
_WRITE_MODES = (
    ("ReadWriteOncePod", "single-node-writer"),
    ("ReadWriteOnce", "single-node-writer"),
    ("ReadWriteMany", "multi-node-multi-writer"),
)


def _where(vol: ResolvedVolume) -> str:
    return f"spec.volumes[{vol.name}].persistentVolumeClaim"


def _access_mode(modes: list[str], *, read_only: bool, vol: ResolvedVolume) -> str:
    if read_only:
        single = {"ReadWriteOnce", "ReadWriteOncePod"} & set(modes) and "ReadOnlyMany" not in modes
        return "single-node-reader-only" if single else "multi-node-reader-only"
    for k8s, nomad in _WRITE_MODES:
        if k8s in modes:
            return nomad
    raise UnsupportedError(
        f'claim "{vol.claim}": PersistentVolume accessModes {modes} allow no writer and the '
        "claim is mounted read-write (set persistentVolumeClaim.readOnly)",
        reason=REASON,
        field=_where(vol),
    )


def group_volume(vol: ResolvedVolume) -> dict[str, Any]:
    """The Nomad ``VolumeRequest`` of one claim volume, or ``UnsupportedError`` naming it."""
    pv: Mapping[str, Any] = vol.persistent_volume or {}
    meta = pv.get("metadata") or {}
    spec = pv.get("spec") or {}
    pv_name = str(meta.get("name", ""))
    said = f'claim "{vol.claim}" (PersistentVolume "{pv_name}")'
    if spec.get("volumeMode") == "Block":
        raise UnsupportedError(
            f"{said}: volumeMode Block is not supported by the Nomad backend",
            reason=REASON,
            field=_where(vol),
        )
    host = str((meta.get("annotations") or {}).get(HOST_VOLUME_ANNOTATION) or "")
    if host:
        return {"Name": vol.name, "Type": "host", "Source": host, "ReadOnly": vol.claim_read_only}
    csi = spec.get("csi") or {}
    if csi.get("volumeHandle"):
        read_only = vol.claim_read_only or bool(csi.get("readOnly"))
        modes = [str(m) for m in spec.get("accessModes") or []]
        return {
            "Name": vol.name,
            "Type": "csi",
            "Source": str(csi["volumeHandle"]),
            "ReadOnly": read_only,
            "AccessMode": _access_mode(modes, read_only=read_only, vol=vol),
            "AttachmentMode": "file-system",
        }
    kinds = [k for k in spec if k not in _PV_COMMON] or ["no source"]
    raise UnsupportedError(
        f"{said}: a {kinds[0]} PersistentVolume has no Nomad volume; the Nomad backend mounts a "
        f"PersistentVolume annotated {HOST_VOLUME_ANNOTATION} (a client host_volume) or a csi "
        "one whose volumeHandle is a Nomad CSI volume",
        reason=REASON,
        field=_where(vol),
    )


_PV_COMMON = frozenset(
    {
        "accessModes",
        "capacity",
        "claimRef",
        "mountOptions",
        "nodeAffinity",
        "persistentVolumeReclaimPolicy",
        "storageClassName",
        "volumeMode",
        "volumeAttributesClassName",
    }
)


def group_volumes(volumes: Mapping[str, ResolvedVolume]) -> dict[str, dict[str, Any]]:
    return {name: group_volume(v) for name, v in sorted(volumes.items()) if v.kind == CLAIM}


def task_mounts(
    c: ResolvedContainer, volumes: Mapping[str, ResolvedVolume]
) -> list[dict[str, Any]]:
    """The container's ``VolumeMounts`` on claim volumes."""
    out: list[dict[str, Any]] = []
    for m in c.mounts:
        vol = volumes.get(m.volume)
        if vol is None or vol.kind != CLAIM:
            continue
        if m.sub_path:
            raise UnsupportedError(
                f'claim "{vol.claim}": a Nomad volume mount has no sub-path; mount the volume'
                " whole",
                reason=REASON,
                field=f"spec.containers[{c.name}].volumeMounts[{m.mount_path}].subPath",
            )
        out.append(
            {
                "Volume": vol.name,
                "Destination": m.mount_path,
                "ReadOnly": m.read_only or vol.claim_read_only,
            }
        )
    return out


def check_rendered(job: Mapping[str, Any], info: Mapping[str, Any], *, template: str) -> None:
    """A template must carry every claim: the group's ``Volumes`` and each task's
    ``VolumeMounts``, on a driver that can mount (not raw_exec)."""
    wanted: Mapping[str, Any] = info.get("volumes") or {}
    if not wanted:
        return
    for group in job.get("TaskGroups") or []:
        have = (group or {}).get("Volumes") or {}
        for name in wanted:
            if name not in have:
                raise TranslationError(
                    f"the template dropped the group volume {name!r} of a claim",
                    template=template,
                    field=f"spec.volumes[{name}]",
                )
        for task in (group or {}).get("Tasks") or []:
            expected = (info["tasks"].get(task.get("Name")) or {}).get("volume_mounts") or []
            if not expected:
                continue
            first = expected[0]["Volume"]
            if task.get("Driver") == "raw_exec":
                raise UnsupportedError(
                    f"container {task.get('Name')!r} mounts the claim volume {first!r}, and the "
                    "raw_exec driver cannot mount volumes (no filesystem isolation); use the "
                    "docker template",
                    reason=REASON,
                    field=f"spec.volumes[{first}]",
                )
            mounts = task.get("VolumeMounts") or []
            for m in expected:
                if m not in mounts:
                    raise TranslationError(
                        f"the template dropped the mount of volume {m['Volume']!r} at "
                        f"{m['Destination']!r}",
                        template=template,
                        field=f"spec.containers[{task.get('Name')}].volumeMounts",
                    )
