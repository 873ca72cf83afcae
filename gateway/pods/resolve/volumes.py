"""Pod volumes turned into data a translator can place — pure functions.

The kubelet mounts ConfigMaps, Secrets and downward-API files from the node; a backend such as
Nomad or Zun cannot read Kubernetes, so the gateway resolves those volumes to *file contents*
(``ResolvedVolume`` with ``VolumeFile`` entries) and the translator writes them into the
workload (Nomad templates, Zun/Batch file injection …).

Kinds resolved here: ``configMap``, ``secret`` (``items`` / all keys, ``mode``/``defaultMode``,
``optional``), ``emptyDir`` (medium and size limit only), ``downwardAPI`` (fieldRef and
resourceFieldRef items), ``projected`` (configMap, secret, downwardAPI, serviceAccountToken).
A ``serviceAccountToken`` source is filled from a TokenRequest the resolver made beforehand
(``tokens``); ``resolve.RefCache`` requests a new one at 80 % of its lifetime, as the
kubelet does, and the update carries it to the running workload.
Every other kind (hostPath, persistentVolumeClaim, csi, nfs, ephemeral, image, …) — and the
projected ``clusterTrustBundle``/``podCertificate`` sources — is *unsupported* unless the
translator lists the kind in ``Features.volume_kinds``; then it is passed through without files
and the translator reads the details from the pod spec.

A missing non-optional object or key is an ``error`` (the kubelet's ``FailedMount``: the pod stays
ContainerCreating and the controller retries); optional ones yield empty/partial volumes.

Internal to the resolver (``gateway.pods.resolve``): only the resolver module imports it.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.pods.events import Event
from gateway.pods.resolve.env import (
    EnvSources,
    FieldPathError,
    ReadError,
    field_value,
    find_container,
    resource_value,
)
from translators.base import ResolvedVolume, VolumeFile

DEFAULT_MODE = 0o644
_UNSUPPORTED_PROJECTIONS = ("clusterTrustBundle", "podCertificate")

#: (audience, expirationSeconds, serviceAccountName) -> token or ReadError
TokenKey = tuple[str, int, str]


@dataclass
class VolumeResult:
    volumes: tuple[ResolvedVolume, ...] = ()
    events: list[Event] = field(default_factory=list)
    #: First mandatory miss (FailedMount message); empty when all volumes resolved.
    error: str = ""
    #: ``(volume name, kind)`` of volumes the backend cannot provide.
    unsupported: list[tuple[str, str]] = field(default_factory=list)


def volume_kind(volume: Mapping[str, Any]) -> str:
    for key in volume:
        if key != "name":
            return str(key)
    return "emptyDir"  # a volume with no source is an emptyDir (API default)


class _MountError(Exception):
    pass


def _mode(value: Any, default: int) -> int:
    return int(value) if value is not None else default


def _object_files(
    obj_name: str,
    lookup: Mapping[str, Any] | ReadError | None,
    *,
    secret: bool,
    items: list[Mapping[str, Any]] | None,
    optional: bool,
    default_mode: int,
) -> list[VolumeFile]:
    kind = "secret" if secret else "configmap"
    if isinstance(lookup, ReadError):
        raise _MountError(f'failed to read {kind} "{obj_name}": {lookup.message}')
    if lookup is None:
        if optional:
            return []
        raise _MountError(f'{kind} "{obj_name}" not found')
    data: dict[str, bytes] = {}
    if secret:
        for k, v in (lookup.get("data") or {}).items():
            data[k] = base64.b64decode(v)
    else:
        for k, v in (lookup.get("data") or {}).items():
            data[k] = str(v).encode()
        for k, v in (lookup.get("binaryData") or {}).items():
            data[k] = base64.b64decode(v)
    files: list[VolumeFile] = []
    if items:
        for item in items:
            key = str(item.get("key", ""))
            if key not in data:
                if optional:
                    continue
                what = "secret key" if secret else "config key"
                raise _MountError(f'{kind} "{obj_name}" references non-existent {what}: {key}')
            files.append(
                VolumeFile(
                    path=str(item.get("path") or key),
                    content=data[key],
                    mode=_mode(item.get("mode"), default_mode),
                    secret=secret,
                )
            )
    else:
        files = [
            VolumeFile(path=k, content=data[k], mode=default_mode, secret=secret)
            for k in sorted(data)
        ]
    return files


def _downward_files(
    pod: Mapping[str, Any],
    items: list[Mapping[str, Any]],
    sources: EnvSources,
    default_mode: int,
) -> list[VolumeFile]:
    files: list[VolumeFile] = []
    for item in items:
        path = str(item.get("path", ""))
        try:
            if item.get("fieldRef"):
                value = field_value(
                    pod,
                    str(item["fieldRef"].get("fieldPath", "")),
                    pod_ips=sources.pod_ips,
                    host_ips=sources.host_ips,
                )
            elif item.get("resourceFieldRef"):
                ref = item["resourceFieldRef"]
                target = find_container(pod, str(ref.get("containerName", "")))
                if target is None:
                    raise FieldPathError(
                        f"resourceFieldRef names unknown container {ref.get('containerName')!r}"
                    )
                value = resource_value(
                    target,
                    str(ref.get("resource", "")),
                    ref.get("divisor"),
                    allocatable=sources.allocatable,
                )
            else:
                raise FieldPathError(
                    f"downwardAPI item {path!r} has no fieldRef or resourceFieldRef"
                )
        except (FieldPathError, ValueError) as exc:
            raise _MountError(str(exc)) from None
        files.append(
            VolumeFile(
                path=path, content=value.encode(), mode=_mode(item.get("mode"), default_mode)
            )
        )
    return files


def _projected(
    pod: Mapping[str, Any],
    vol: Mapping[str, Any],
    sources: EnvSources,
    tokens: Mapping[TokenKey, str | ReadError],
) -> tuple[list[VolumeFile], str]:
    """Files of a projected volume, and the name of an unsupported source kind (or "")."""
    spec = vol.get("projected") or {}
    default_mode = _mode(spec.get("defaultMode"), DEFAULT_MODE)
    files: list[VolumeFile] = []
    sa = str((pod.get("spec") or {}).get("serviceAccountName") or "default")
    for src in spec.get("sources") or []:
        if src.get("configMap") is not None:
            cm = src["configMap"]
            name = str(cm.get("name", ""))
            files += _object_files(
                name,
                sources.configmaps.get(name, ReadError("not fetched")),
                secret=False,
                items=cm.get("items"),
                optional=bool(cm.get("optional")),
                default_mode=default_mode,
            )
        elif src.get("secret") is not None:
            sec = src["secret"]
            name = str(sec.get("name", ""))
            files += _object_files(
                name,
                sources.secrets.get(name, ReadError("not fetched")),
                secret=True,
                items=sec.get("items"),
                optional=bool(sec.get("optional")),
                default_mode=default_mode,
            )
        elif src.get("downwardAPI") is not None:
            files += _downward_files(
                pod, src["downwardAPI"].get("items") or [], sources, default_mode
            )
        elif src.get("serviceAccountToken") is not None:
            tok = src["serviceAccountToken"]
            key = token_key(tok, sa)
            value = tokens.get(key, ReadError("token was not requested"))
            if isinstance(value, ReadError):
                raise _MountError(
                    f'failed to fetch token for service account "{sa}": {value.message}'
                )
            files.append(
                VolumeFile(
                    path=str(tok.get("path", "token")),
                    content=value.encode(),
                    mode=default_mode,
                    secret=True,
                )
            )
        else:
            for kind in _UNSUPPORTED_PROJECTIONS:
                if src.get(kind) is not None:
                    return files, kind
            return files, next(iter(src), "unknown")
    return files, ""


def token_key(tok: Mapping[str, Any], service_account: str) -> TokenKey:
    return (
        str(tok.get("audience") or ""),
        int(tok.get("expirationSeconds") or 3600),
        service_account,
    )


def token_requests(pod: Mapping[str, Any]) -> list[TokenKey]:
    """The TokenRequests the pod's projected volumes need."""
    spec = pod.get("spec") or {}
    sa = str(spec.get("serviceAccountName") or "default")
    out: list[TokenKey] = []
    for vol in spec.get("volumes") or []:
        for src in (vol.get("projected") or {}).get("sources") or []:
            if src.get("serviceAccountToken") is not None:
                key = token_key(src["serviceAccountToken"], sa)
                if key not in out:
                    out.append(key)
    return out


def resolve_volumes(
    pod: Mapping[str, Any],
    sources: EnvSources,
    *,
    supported_kinds: frozenset[str],
    tokens: Mapping[TokenKey, str | ReadError] | None = None,
) -> VolumeResult:
    result = VolumeResult()
    resolved: list[ResolvedVolume] = []
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        name = str(vol.get("name", ""))
        kind = volume_kind(vol)
        if kind not in supported_kinds:
            result.unsupported.append((name, kind))
            continue
        try:
            if kind in ("configMap", "secret"):
                secret = kind == "secret"
                spec = vol[kind] or {}
                obj = str(spec.get("secretName" if secret else "name", ""))
                found = (sources.secrets if secret else sources.configmaps).get(
                    obj, ReadError("not fetched")
                )
                files = _object_files(
                    obj,
                    found,
                    secret=secret,
                    items=spec.get("items"),
                    optional=bool(spec.get("optional")),
                    default_mode=_mode(spec.get("defaultMode"), DEFAULT_MODE),
                )
                resolved.append(ResolvedVolume(name=name, kind=kind, files=tuple(files)))
            elif kind == "emptyDir":
                spec = vol.get("emptyDir") or {}
                resolved.append(
                    ResolvedVolume(
                        name=name,
                        kind=kind,
                        medium=str(spec.get("medium") or ""),
                        size_limit=str(spec.get("sizeLimit") or ""),
                    )
                )
            elif kind == "downwardAPI":
                spec = vol["downwardAPI"] or {}
                files = _downward_files(
                    pod,
                    spec.get("items") or [],
                    sources,
                    _mode(spec.get("defaultMode"), DEFAULT_MODE),
                )
                resolved.append(ResolvedVolume(name=name, kind=kind, files=tuple(files)))
            elif kind == "projected":
                files, bad = _projected(pod, vol, sources, tokens or {})
                if bad and f"projected.{bad}" not in supported_kinds:
                    result.unsupported.append((name, f"projected {bad}"))
                    continue
                resolved.append(ResolvedVolume(name=name, kind=kind, files=tuple(files)))
            else:  # declared by the translator: it reads the details from the pod spec
                resolved.append(ResolvedVolume(name=name, kind=kind))
        except _MountError as exc:
            msg = f'MountVolume.SetUp failed for volume "{name}" : {exc}'
            result.events.append(Event("Warning", "FailedMount", msg))
            if not result.error:
                result.error = msg
    result.volumes = tuple(resolved)
    return result


def referenced_objects(pod: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """ConfigMap and Secret names the pod's volumes reference."""
    cms: set[str] = set()
    secrets: set[str] = set()
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        if vol.get("configMap") is not None:
            cms.add(str(vol["configMap"].get("name", "")))
        if vol.get("secret") is not None:
            secrets.add(str(vol["secret"].get("secretName", "")))
        for src in (vol.get("projected") or {}).get("sources") or []:
            if src.get("configMap") is not None:
                cms.add(str(src["configMap"].get("name", "")))
            if src.get("secret") is not None:
                secrets.add(str(src["secret"].get("name", "")))
    return cms, secrets
