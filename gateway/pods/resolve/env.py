"""Container environment resolution — pure functions, the only place these rules live.

Given a pod, one of its containers and the already-fetched data it references (``EnvSources``),
``resolve_container_env`` returns the environment a kubelet would give that container, plus the
Events to record and, for a missing *mandatory* reference, the error that keeps the pod in
``CreateContainerConfigError``.  Nothing here does I/O, so every rule is a table-driven unit test.

Rules (docs/design/kubelet-contract.md, "Environment resolution"; the kubelet's
``makeEnvironmentVariables``):

1. ``envFrom`` in order; optional ``prefix``; later keys win; names that are not valid
   environment variable names are skipped with one ``InvalidEnvironmentVariableNames`` event
   per source.  Validation is the *relaxed* rule that is GA since Kubernetes 1.34 (any printable
   ASCII except ``=``); ``strict_names=True`` gives the old C-identifier-like rule.
2. ``env`` in order, later wins.  Literal values expand ``$(VAR)`` against the variables defined
   so far, then the service variables; ``$$`` is an escaped ``$``; unknown references stay
   verbatim (the Go ``expansion`` package, reproduced exactly).  ``command``/``args`` expand the
   same way against the final environment.
3. Service link variables (``<SVC>_SERVICE_HOST`` …, Docker-style ``<SVC>_PORT_…``) for
   ``default/kubernetes`` always, plus same-namespace services when ``enableServiceLinks``;
   they fill only names the container did not set.
4. The output keeps declaration order (kubelet returns map order; we do better): envFrom keys,
   then ``env`` entries, then service variables; a redefinition updates the value in place.

``valueFrom``: ``configMapKeyRef``/``secretKeyRef`` (secret bytes decoded; such variables — and
literals that expand one — are marked ``secret`` so translators keep them out of metadata),
``fieldRef`` (every path validation allows; ``status.podIP(s)``/``status.hostIP(s)`` come from
``EnvSources`` — how those addresses are chosen before the backend assigned one is decided in
``gateway.pods.resolve``), ``resourceFieldRef`` (ceil(quantity / divisor); an unset limit is the
node's allocatable).

Missing references — event reasons as Go virtual-kubelet names them.  Optional
misses are *Normal* events (nothing is wrong: the pod said the value is optional);
mandatory misses are *Warning* events and set ``error``.  A read error (not a 404) is a Warning
and sets ``error`` even for an optional reference: the value may exist, so the container must
not start without it (kubelet and Go VK behave the same); the controller retries.

Internal to the resolver (``gateway.pods.resolve``, which exports ``Lookup`` and ``ReadError``).
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.pods.events import Event
from translators.base import EnvVar, ResolvedContainer, VolumeMount
from vkgate_core.quantity import cpu_millis, parse_quantity


@dataclass(frozen=True)
class ReadError:
    """Reading a referenced object failed for a reason other than "not found"."""

    message: str


#: A referenced object as the resolver found it: the object, None (404), or a read error.
Lookup = Mapping[str, Any] | None | ReadError


@dataclass(frozen=True)
class EnvSources:
    """Everything env resolution may read, fetched beforehand (by name, never cluster-wide)."""

    configmaps: Mapping[str, Lookup] = field(default_factory=dict)
    secrets: Mapping[str, Lookup] = field(default_factory=dict)
    #: Services of the pod's namespace and ``default/kubernetes`` (full objects); a
    #: ``ReadError`` when they could not be listed.
    services: Sequence[Mapping[str, Any]] | ReadError = ()
    pod_ips: tuple[str, ...] = ()
    host_ips: tuple[str, ...] = ()
    #: Node allocatable quantities (``cpu``, ``memory``, ``ephemeral-storage`` …).
    allocatable: Mapping[str, str] = field(default_factory=dict)
    #: ``pods.enable_service_links``: False drops same-namespace service variables for every
    #: pod (``default/kubernetes`` ones stay, as with the pod field).
    enable_service_links: bool = True
    strict_names: bool = False


@dataclass
class EnvResult:
    container: str
    env: tuple[EnvVar, ...] = ()
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    events: list[Event] = field(default_factory=list)
    #: Set when a mandatory reference is missing: the CreateContainerConfigError message.
    error: str = ""


# --------------------------------------------------------------------------- $(VAR)

_OP, _OPEN, _CLOSE = "$", "(", ")"


def expand(text: str, mapping: Callable[[str], str | None]) -> str:
    """Kubernetes ``$(VAR)`` expansion (third_party/forked/golang/expansion).

    ``mapping`` returns None for an unknown name, which is then kept verbatim as ``$(name)``.
    """
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    n = len(text)
    while cursor < n:
        if text[cursor] == _OP and cursor + 1 < n:
            out.append(text[checkpoint:cursor])
            nxt = text[cursor + 1]
            if nxt == _OP:  # escaped operator
                out.append(_OP)
                advance = 1
            elif nxt == _OPEN:
                close = text.find(_CLOSE, cursor + 2)
                if close == -1:  # incomplete reference: keep "$(" and go on after it
                    out.append(_OP + _OPEN)
                    advance = 1
                else:
                    name = text[cursor + 2 : close]
                    value = mapping(name)
                    out.append(f"$({name})" if value is None else value)
                    advance = close - cursor
            else:
                out.append(_OP + nxt)
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


# --------------------------------------------------------------------------- names

_STRICT_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def valid_env_name(name: str, *, strict: bool = False) -> bool:
    if strict:
        return bool(_STRICT_NAME.match(name))
    return bool(name) and all(32 <= ord(c) <= 126 and c != "=" for c in name)


# --------------------------------------------------------------------------- services


def _svc_var(name: str) -> str:
    return name.upper().replace("-", "_")


def _ip_set(svc: Mapping[str, Any]) -> bool:
    ip = (svc.get("spec") or {}).get("clusterIP") or ""
    return ip not in ("", "None")


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def service_env(
    namespace: str, services: Sequence[Mapping[str, Any]], *, enable_service_links: bool
) -> dict[str, str]:
    """Service link variables as the kubelet computes them (``envvars.FromServices``)."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for svc in services:
        if not _ip_set(svc):
            continue
        meta = svc.get("metadata") or {}
        name = str(meta.get("name", ""))
        ns = str(meta.get("namespace", ""))
        if ns == "default" and name == "kubernetes":
            chosen.setdefault(name, svc)
        elif ns == namespace and enable_service_links:
            chosen[name] = svc
    out: dict[str, str] = {}
    for name in sorted(chosen):
        spec = chosen[name].get("spec") or {}
        ports = spec.get("ports") or []
        if not ports:
            continue
        ip = str(spec["clusterIP"])
        prefix = _svc_var(name)
        out[f"{prefix}_SERVICE_HOST"] = ip
        out[f"{prefix}_SERVICE_PORT"] = str(int(ports[0].get("port", 0)))
        for p in ports:
            if p.get("name"):
                out[f"{prefix}_SERVICE_PORT_{_svc_var(str(p['name']))}"] = str(int(p["port"]))
        for i, p in enumerate(ports):
            proto = str(p.get("protocol") or "TCP")
            port = int(p.get("port", 0))
            url = f"{proto.lower()}://{_join_host_port(ip, port)}"
            if i == 0:
                out[f"{prefix}_PORT"] = url
            pp = f"{prefix}_PORT_{port}_{proto.upper()}"
            out[pp] = url
            out[f"{pp}_PROTO"] = proto.lower()
            out[f"{pp}_PORT"] = str(port)
            out[f"{pp}_ADDR"] = ip
    return out


# --------------------------------------------------------------------------- downward API


def go_quote(s: str) -> str:
    """Go's ``%q`` for the common cases (used when formatting whole label/annotation maps)."""
    out = ['"']
    for ch in s:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def format_map(m: Mapping[str, str]) -> str:
    return "\n".join(f"{k}={go_quote(str(m[k]))}" for k in sorted(m))


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


class FieldPathError(ValueError):
    """A fieldRef path this resolver does not know (validation should have refused it)."""


def field_value(
    pod: Mapping[str, Any],
    path: str,
    *,
    pod_ips: Sequence[str] = (),
    host_ips: Sequence[str] = (),
) -> str:
    """The value of a downward-API ``fieldRef`` path (env and downwardAPI volumes)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    m = _SUBSCRIPT.match(path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    simple: dict[str, Callable[[], str]] = {
        "metadata.name": lambda: str(meta.get("name", "")),
        "metadata.namespace": lambda: str(meta.get("namespace", "")),
        "metadata.uid": lambda: str(meta.get("uid", "")),
        "metadata.labels": lambda: format_map(meta.get("labels") or {}),
        "metadata.annotations": lambda: format_map(meta.get("annotations") or {}),
        "spec.nodeName": lambda: str(spec.get("nodeName", "")),
        "spec.serviceAccountName": lambda: str(spec.get("serviceAccountName", "")),
        "status.podIP": lambda: pod_ips[0] if pod_ips else "",
        "status.podIPs": lambda: ",".join(pod_ips),
        "status.hostIP": lambda: host_ips[0] if host_ips else "",
        "status.hostIPs": lambda: ",".join(host_ips),
    }
    getter = simple.get(path)
    if getter is None:
        raise FieldPathError(f"unsupported fieldRef path {path!r}")
    return getter()


_NODE_DEFAULTED = ("cpu", "memory", "ephemeral-storage")


def find_container(pod: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    spec = pod.get("spec") or {}
    for c in (*(spec.get("initContainers") or []), *(spec.get("containers") or [])):
        if c.get("name") == name:
            return dict(c)
    return None


def resource_value(
    container: Mapping[str, Any],
    resource: str,
    divisor: str | int | None,
    *,
    allocatable: Mapping[str, str],
) -> str:
    """``resourceFieldRef``: ceil(quantity / divisor); unset limits fall back to allocatable."""
    kind, _, res = resource.partition(".")
    if kind not in ("limits", "requests") or not res:
        raise FieldPathError(f"unsupported resourceFieldRef resource {resource!r}")
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(res)
    if value is None and kind == "limits" and res in _NODE_DEFAULTED:
        value = allocatable.get(res)
    if value is None:
        value = "0"
    div = divisor if divisor not in (None, "", 0, "0") else "1"
    assert div is not None
    if res == "cpu":
        return str(math.ceil(cpu_millis(value) / cpu_millis(div)))
    return str(math.ceil(math.ceil(parse_quantity(value)) / math.ceil(parse_quantity(div))))


# --------------------------------------------------------------------------- resolution


def decode_secret_value(raw: str) -> str:
    return base64.b64decode(raw).decode("utf-8", errors="replace")


def _lookup_data(
    obj: Mapping[str, Any], *, secret: bool
) -> dict[str, str]:  # key -> decoded string
    if secret:
        return {k: decode_secret_value(v) for k, v in (obj.get("data") or {}).items()}
    data = {k: str(v) for k, v in (obj.get("data") or {}).items()}
    # binaryData is not usable as env (kubelet only reads .data) — keep parity.
    return data


class _Missing(Exception):
    def __init__(self, event: Event, error: str) -> None:
        super().__init__(error)
        self.event = event
        self.error = error


def _kind_words(secret: bool) -> tuple[str, str]:
    return ("Secret", "secret") if secret else ("ConfigMap", "configmap")


def _fetch_source(
    sources: EnvSources,
    name: str,
    *,
    secret: bool,
    optional: bool,
    where: str,
    field_path: str,
) -> dict[str, str] | None:
    """The decoded data of a referenced object; None when an optional one is missing (an event
    is then due, returned via ``_Missing`` with an empty error)."""
    table = sources.secrets if secret else sources.configmaps
    Kind, kind = _kind_words(secret)
    found = table.get(name, ReadError(f"{kind} {name!r} was not fetched"))
    level = "Optional" if optional else "Mandatory"
    etype = "Normal" if optional else "Warning"
    if isinstance(found, ReadError):
        # Even an optional reference blocks on a read error (kubelet and Go VK agree): the
        # value may exist, so skipping it would silently start the container without it.
        msg = f'failed to read {kind} "{name}": {found.message} ({where})'
        raise _Missing(Event("Warning", f"FailedToRead{level}{Kind}", msg, field_path), msg)
    if found is None:
        msg = f'{kind} "{name}" not found ({where})'
        raise _Missing(
            Event(etype, f"{level}{Kind}NotFound", msg, field_path), "" if optional else msg
        )
    return _lookup_data(found, secret=secret)


def resolve_container_env(
    pod: Mapping[str, Any], container: Mapping[str, Any], sources: EnvSources
) -> EnvResult:
    """The environment (and expanded command/args) of one container."""
    cname = str(container.get("name", ""))
    role = "initContainers" if _is_init(pod, cname) else "containers"
    field_path = f"spec.{role}{{{cname}}}"
    result = EnvResult(container=cname)
    namespace = str((pod.get("metadata") or {}).get("namespace", ""))

    if isinstance(sources.services, ReadError):
        result.error = (
            f"failed to list services for service link variables: {sources.services.message}"
        )
        result.events.append(Event("Warning", "FailedToListServices", result.error, field_path))
        return result
    svc_env = service_env(
        namespace,
        sources.services,
        enable_service_links=_enable_links(pod, sources.enable_service_links),
    )

    env: dict[str, str] = {}
    secret_names: set[str] = set()

    def put(name: str, value: str, *, secret: bool) -> None:
        env[name] = value
        if secret:
            secret_names.add(name)
        else:
            secret_names.discard(name)

    # 1. envFrom
    for i, src in enumerate(container.get("envFrom") or []):
        prefix = str(src.get("prefix") or "")
        ref = src.get("configMapRef") or src.get("secretRef")
        if not ref:
            result.events.append(
                Event(
                    "Warning",
                    "UnsupportedEnvFrom",
                    f"envFrom[{i}] has no configMapRef or secretRef",
                    field_path,
                )
            )
            continue
        is_secret = "secretRef" in src and src.get("secretRef") is not None
        name = str(ref.get("name", ""))
        optional = bool(ref.get("optional"))
        _, kind = _kind_words(is_secret)
        try:
            data = _fetch_source(
                sources,
                name,
                secret=is_secret,
                optional=optional,
                where=f"envFrom in container {cname}",
                field_path=field_path,
            )
        except _Missing as miss:
            result.events.append(miss.event)
            if miss.error and not result.error:
                result.error = miss.error
            continue
        assert data is not None
        invalid: list[str] = []
        for key in sorted(data):
            var = prefix + key
            if not valid_env_name(var, strict=sources.strict_names):
                invalid.append(var)
                continue
            put(var, data[key], secret=is_secret)
        if invalid:
            result.events.append(
                Event(
                    "Warning",
                    "InvalidEnvironmentVariableNames",
                    f"Keys [{', '.join(sorted(invalid))}] from the EnvFrom {kind} {namespace}/{name} "
                    "were skipped since they are considered invalid environment variable names.",
                    field_path,
                )
            )

    # 2. env
    def literal_mapping(used: set[str]) -> Callable[[str], str | None]:
        def look(name: str) -> str | None:
            if name in env:
                used.add(name)
                return env[name]
            return svc_env.get(name)

        return look

    for var in container.get("env") or []:
        name = str(var.get("name", ""))
        value = var.get("value")
        value_from = var.get("valueFrom")
        if value:
            used: set[str] = set()
            expanded = expand(str(value), literal_mapping(used))
            put(name, expanded, secret=bool(used & secret_names))
            continue
        if not value_from:
            put(name, "", secret=False)
            continue
        try:
            resolved = _value_from(
                pod,
                container,
                name=name,
                value_from=value_from,
                sources=sources,
                cname=cname,
                field_path=field_path,
            )
        except _Missing as miss:
            result.events.append(miss.event)
            if miss.error and not result.error:
                result.error = miss.error
            continue
        except FieldPathError as exc:
            msg = f"env {name} in container {cname}: {exc}"
            result.events.append(Event("Warning", "UnsupportedFieldRef", msg, field_path))
            if not result.error:
                result.error = msg
            continue
        put(name, resolved[0], secret=resolved[1])

    # 3. service variables fill unset names
    for k, v in svc_env.items():
        if k not in env:
            env[k] = v

    result.env = tuple(EnvVar(name=k, value=v, secret=k in secret_names) for k, v in env.items())

    def final(name: str) -> str | None:
        return env.get(name)

    result.command = tuple(expand(str(a), final) for a in container.get("command") or [])
    result.args = tuple(expand(str(a), final) for a in container.get("args") or [])
    return result


def _value_from(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    name: str,
    value_from: Mapping[str, Any],
    sources: EnvSources,
    cname: str,
    field_path: str,
) -> tuple[str, bool]:
    where = f"env {name} in container {cname}"
    if value_from.get("fieldRef"):
        path = str(value_from["fieldRef"].get("fieldPath", ""))
        return (
            field_value(pod, path, pod_ips=sources.pod_ips, host_ips=sources.host_ips),
            False,
        )
    if value_from.get("resourceFieldRef"):
        ref = value_from["resourceFieldRef"]
        target_name = str(ref.get("containerName") or cname)
        target = find_container(pod, target_name)
        if target is None:
            raise FieldPathError(f"resourceFieldRef names unknown container {target_name!r}")
        try:
            value = resource_value(
                target,
                str(ref.get("resource", "")),
                ref.get("divisor"),
                allocatable=sources.allocatable,
            )
        except ValueError as exc:
            raise FieldPathError(str(exc)) from None
        return value, False
    for key_ref, is_secret in (("configMapKeyRef", False), ("secretKeyRef", True)):
        ref = value_from.get(key_ref)
        if not ref:
            continue
        obj_name = str(ref.get("name", ""))
        key = str(ref.get("key", ""))
        optional = bool(ref.get("optional"))
        data = _fetch_source(
            sources,
            obj_name,
            secret=is_secret,
            optional=optional,
            where=where,
            field_path=field_path,
        )
        assert data is not None
        if key not in data:
            Kind, kind = _kind_words(is_secret)
            level = "Optional" if optional else "Mandatory"
            msg = f'key "{key}" does not exist in {kind} "{obj_name}" ({where})'
            ev = Event(
                "Normal" if optional else "Warning", f"{level}{Kind}KeyNotFound", msg, field_path
            )
            raise _Missing(ev, "" if optional else msg)
        return data[key], is_secret
    kinds = ", ".join(sorted(value_from)) or "nothing"
    raise FieldPathError(f"unsupported valueFrom source ({kinds})")


def _is_init(pod: Mapping[str, Any], name: str) -> bool:
    return any(c.get("name") == name for c in (pod.get("spec") or {}).get("initContainers") or [])


def _enable_links(pod: Mapping[str, Any], allowed: bool) -> bool:
    """``spec.enableServiceLinks`` (API default true), unless the gateway turned links off."""
    value = (pod.get("spec") or {}).get("enableServiceLinks")
    return allowed and (True if value is None else bool(value))


def referenced_objects(pod: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """Names of ConfigMaps and Secrets the pod's env/envFrom reference (same namespace)."""
    cms: set[str] = set()
    secrets: set[str] = set()
    spec = pod.get("spec") or {}
    for c in (*(spec.get("initContainers") or []), *(spec.get("containers") or [])):
        for src in c.get("envFrom") or []:
            if src.get("configMapRef"):
                cms.add(str(src["configMapRef"].get("name", "")))
            if src.get("secretRef"):
                secrets.add(str(src["secretRef"].get("name", "")))
        for var in c.get("env") or []:
            vf = var.get("valueFrom") or {}
            if vf.get("configMapKeyRef"):
                cms.add(str(vf["configMapKeyRef"].get("name", "")))
            if vf.get("secretKeyRef"):
                secrets.add(str(vf["secretKeyRef"].get("name", "")))
    return cms, secrets


def container_role(c: Mapping[str, Any], group: str) -> str:
    """``main``, ``init`` or ``sidecar`` (an init container with restartPolicy Always)."""
    if group != "initContainers":
        return "main"
    return "sidecar" if c.get("restartPolicy") == "Always" else "init"


def resolved_container(c: Mapping[str, Any], result: EnvResult, role: str) -> ResolvedContainer:
    """The translator-facing container: resolved env and expanded command/args plus mounts."""
    return ResolvedContainer(
        name=str(c.get("name", "")),
        image=str(c.get("image", "")),
        command=result.command,
        args=result.args,
        env=result.env,
        mounts=tuple(
            VolumeMount(
                volume=str(m.get("name", "")),
                mount_path=str(m.get("mountPath", "")),
                read_only=bool(m.get("readOnly")),
                sub_path=str(m.get("subPath") or ""),
            )
            for m in c.get("volumeMounts") or []
        ),
        working_dir=str(c.get("workingDir") or ""),
        role=role,
        spec=dict(c),
    )
