"""A pod YAML file → the backend spec vkgate would send, with no cluster and no backend.

Shared by ``vkgate render``, ``vkgate templates check`` and the ConfigMap template source
(which validates a new template version against the sample pods before it serves).

The pod is resolved with the gateway's own rules (``gateway.pods.resolve.env`` /
``gateway.pods.resolve.volumes``), fed from the YAML alone:

* ConfigMap and Secret documents in the same file (same namespace as the pod, or none) answer
  ``configMapKeyRef``/``secretKeyRef``/``envFrom`` and configMap/secret volumes; Secret
  ``stringData`` is accepted as well as ``data``.
* An object the file does not contain is replaced by a *placeholder* whose referenced keys read
  ``<configmap NAME KEY>`` / ``<secret NAME KEY>`` (an ``envFrom`` or a volume of it without
  ``items`` contributes nothing), so a pod renders without its cluster; ``notes`` lists them.
* ``imagePullSecrets`` are resolved from the Secrets in the file (dockerconfigjson/dockercfg,
  as the live agent does); a pull secret the file does not contain is left out with a note.
* PersistentVolumeClaim and PersistentVolume documents answer persistentVolumeClaim volumes
  (the claim bound to its PV, as the live agent reads them: gateway.pods.resolve.claims); a claim or
  PV the file lacks is a mount failure, as it would be in the cluster.
* The team is the agent's (gateway.inputs.teamrule): ``templates.teams``, else a Namespace
  document's label ``vkgate.io/team`` where ``templates.team_label_namespaces`` lets that
  namespace choose (an ignored label is a note); ``--team`` overrides both (a what-if).
* Service link variables are not generated (there are no Services offline).

The spec is produced by the ``Renderable`` the backend's spec builds for offline use
(``BackendSpec.offline``: exactly what ``create`` sends, from settings alone — no I/O, no
credentials).  A backend that cannot be built offline is an error naming why, never a fallback.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import dataclasses
import logging
from collections.abc import Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from gateway.pods.resolve import Kind, Lookup, Resolver
from translators import plugins
from translators.base import (
    JSON,
    Executor,
    FeatureAware,
    Features,
    Renderable,
    ResolvedPod,
    TranslatorContext,
)
from translators.render.engine import TEAM_LABEL, Renderer
from vkgate_core.kubetypes import Pod, as_pod
from vkgate_core.settings import SettingsError

log = logging.getLogger("gateway.templating.offline")
T = TypeVar("T")


class OfflineError(ValueError):
    """The input file cannot be turned into a pod (not YAML, no Pod document, …)."""


def samples_dir() -> Path:
    import templates

    return Path(templates.__file__).resolve().parent / "samples"


# --------------------------------------------------------------------------- input


@dataclass
class Inputs:
    pod: Pod
    configmaps: dict[str, dict[str, Any]] = field(default_factory=dict)
    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Services the live agent would read for the pod's service-link variables: every Service
    #: of the pod's namespace, and ``default/kubernetes`` (``RefCache.services``).
    services: list[dict[str, Any]] = field(default_factory=list)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    volumes: dict[str, dict[str, Any]] = field(default_factory=dict)
    namespace: dict[str, Any] | None = None
    source: str = ""

    def secret_values(self) -> list[bytes]:
        """Every value of the file's Secret documents (what ``vkgate render`` masks besides
        the resolved pod's secrets: an error may name a value the pod never got)."""
        values: list[bytes] = []
        for secret in self.secrets.values():
            for raw in (secret.get("data") or {}).values():
                try:
                    values.append(base64.b64decode(str(raw)))
                except ValueError:
                    values.append(str(raw).encode())
        return [v for v in values if v]


def parse_inputs(text: str, *, source: str = "") -> Inputs:
    """The first Pod document of ``text`` plus the ConfigMaps/Secrets/Services/Namespace beside
    it (a Service without a namespace is in the pod's)."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise OfflineError(f"{source or 'input'}: not valid YAML: {exc}") from None
    pods = [d for d in docs if isinstance(d, dict) and d.get("kind") == "Pod"]
    if not pods:
        kinds = ", ".join(str(d.get("kind")) for d in docs if isinstance(d, dict)) or "nothing"
        raise OfflineError(f"{source or 'input'}: no Pod document (found {kinds})")
    pod = _with_defaults(pods[0])
    ns = pod["metadata"]["namespace"]
    inputs = Inputs(pod=pod, source=source)
    for d in docs:
        if not isinstance(d, dict):
            continue
        meta = d.get("metadata") or {}
        name = str(meta.get("name", ""))
        if d.get("kind") == "Service" and _service_link_source(d, ns):
            inputs.services.append(_in_namespace(d, ns))
            continue
        if meta.get("namespace", ns) != ns and d.get("kind") != "Namespace":
            continue
        if d.get("kind") == "ConfigMap":
            inputs.configmaps[name] = d
        elif d.get("kind") == "Secret":
            inputs.secrets[name] = _secret_data(d)
        elif d.get("kind") == "PersistentVolumeClaim":
            inputs.claims[name] = d
        elif d.get("kind") == "PersistentVolume":
            inputs.volumes[name] = d
        elif d.get("kind") == "Namespace" and name == ns:
            inputs.namespace = d
    return inputs


def _service_link_source(svc: Mapping[str, Any], ns: str) -> bool:
    """Whether the live agent reads this Service for a pod in ``ns``: every Service of ``ns``,
    and from ``default`` only ``kubernetes`` (``gateway.pods.resolve.RefCache.services``)."""
    meta = svc.get("metadata") or {}
    where = str(meta.get("namespace") or ns)
    return where == ns or (where == "default" and meta.get("name") == "kubernetes")


def _in_namespace(obj: Mapping[str, Any], ns: str) -> dict[str, Any]:
    meta = dict(obj.get("metadata") or {})
    meta.setdefault("namespace", ns)
    return {**obj, "metadata": meta}


def _with_defaults(pod: Mapping[str, Any]) -> Pod:
    out = dict(pod)
    meta = dict(out.get("metadata") or {})
    meta.setdefault("namespace", "default")
    meta.setdefault("name", "pod")
    meta.setdefault("uid", "00000000-0000-0000-0000-000000000000")
    out["metadata"] = meta
    out["spec"] = dict(out.get("spec") or {})
    return as_pod(out)


def _secret_data(secret: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(secret)
    data = dict(out.get("data") or {})
    for k, v in (out.pop("stringData", None) or {}).items():
        data[k] = base64.b64encode(str(v).encode()).decode()
    out["data"] = data
    return out


# --------------------------------------------------------------------------- resolution


@dataclass
class Resolved:
    #: None when the live agent would not start the pod (``errors`` says why).
    pod: ResolvedPod | None
    notes: list[str] = field(default_factory=list)
    #: Why the live agent would not start this pod (admission, CreateContainerConfigError,
    #: FailedMount); the rendered spec is then not what it would submit — there is none.
    errors: list[str] = field(default_factory=list)


def _references(pod: Mapping[str, Any]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Referenced ConfigMap/Secret names → the keys the pod names explicitly."""
    cms: dict[str, set[str]] = {}
    secrets: dict[str, set[str]] = {}
    spec = pod.get("spec") or {}
    for c in (*(spec.get("initContainers") or []), *(spec.get("containers") or [])):
        for src in c.get("envFrom") or []:
            if src.get("configMapRef"):
                cms.setdefault(str(src["configMapRef"].get("name", "")), set())
            if src.get("secretRef"):
                secrets.setdefault(str(src["secretRef"].get("name", "")), set())
        for var in c.get("env") or []:
            vf = var.get("valueFrom") or {}
            for key, table in (("configMapKeyRef", cms), ("secretKeyRef", secrets)):
                if vf.get(key):
                    table.setdefault(str(vf[key].get("name", "")), set()).add(
                        str(vf[key].get("key", ""))
                    )
    for vol in spec.get("volumes") or []:
        sources = [vol] + [
            {k: v for k, v in s.items()}
            for s in ((vol.get("projected") or {}).get("sources") or [])
        ]
        for s in sources:
            for key, name_key, table in (
                ("configMap", "name", cms),
                ("secret", "secretName", secrets),
            ):
                if s.get(key):
                    ref = s[key]
                    name = str(ref.get(name_key) or ref.get("name", ""))
                    keys = table.setdefault(name, set())
                    keys.update(str(i.get("key", "")) for i in ref.get("items") or [])
    return cms, secrets


def _placeholder(kind: str, name: str, keys: set[str]) -> dict[str, Any]:
    if kind == "secret":
        data = {k: base64.b64encode(f"<secret {name} {k}>".encode()).decode() for k in keys}
    else:
        data = {k: f"<configmap {name} {k}>" for k in keys}
    return {"kind": kind, "metadata": {"name": name}, "data": data}


class FileLookups:
    """The offline adapter of the resolver's ``Lookups`` port: objects from the input file.

    A ConfigMap or Secret the pod's env or volumes reference but the file lacks is a
    placeholder whose referenced keys read ``<configmap NAME KEY>`` / ``<secret NAME KEY>`` (a
    note says so); a pull secret the file lacks is not found, as it would be in the cluster.
    The Services are the file's (``Inputs.services``: those the live agent would list for the
    service-link variables); a projected ServiceAccount token reads ``<serviceaccount token>``."""

    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.notes: list[str] = []
        self._referenced = dict(
            zip(("configmaps", "secrets"), _references(inputs.pod), strict=True)
        )

    async def get(self, kind: Kind, namespace: str, name: str) -> Lookup:
        if kind == "persistentvolumeclaims":
            return self.inputs.claims.get(name)
        table = self.inputs.configmaps if kind == "configmaps" else self.inputs.secrets
        if name in table:
            return table[name]
        keys = self._referenced[kind].get(name)
        if keys is None:
            return None
        singular = kind[:-1]
        self.notes.append(f"{singular} {name!r} is not in the file: placeholder values")
        return _placeholder(singular, name, keys)

    async def services(self, namespace: str) -> list[dict[str, Any]]:
        return list(self.inputs.services)

    async def persistent_volume(self, name: str) -> Lookup:
        return self.inputs.volumes.get(name)

    async def team(self, namespace: str) -> str:
        labels = ((self.inputs.namespace or {}).get("metadata") or {}).get("labels") or {}
        return str(labels.get(TEAM_LABEL, ""))

    async def token(self, pod: Mapping[str, Any], key: Any) -> str:
        return "<serviceaccount token>"


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from sync code, also when called inside an event loop (the
    ConfigMap validator runs in the agent's loop): then in a thread with a loop of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def resolve(
    inputs: Inputs,
    *,
    node_name: str,
    team: str = "",
    features: Features | None = None,
    backend: str = "",
    host_ip: str = "127.0.0.1",
    allocatable: Mapping[str, str] | None = None,
    teams: Mapping[str, str] | None = None,
    team_label_namespaces: Collection[str] = (),
    daemonsets: str = "refuse",
    can_exec: bool = False,
    ignore_pod_fields: Collection[str] = (),
    allow_probe_host: bool = False,
) -> Resolved:
    """Resolve ``inputs`` with the agent's own ``Resolver`` (see ``FileLookups``).

    ``teams`` and ``team_label_namespaces`` are the config's (the agent's rule: the map, else
    the Namespace document's label where the namespace may choose); ``team`` (``--team``)
    overrides what they give; ``host_ip``, ``allocatable``, ``daemonsets``, ``can_exec`` (the
    backend runs commands in containers: ``SpecRenderer.can_exec``), ``ignore_pod_fields`` and
    ``allow_probe_host`` (``probes.allow_host``) stand for the node's."""
    pod = inputs.pod
    lookups = FileLookups(inputs)
    resolver = Resolver(
        lookups,
        features=features or Features(),
        backend=backend or "selected",
        node_name=str((pod.get("spec") or {}).get("nodeName") or node_name),
        host_ip=lambda: host_ip,
        allocatable=lambda: dict(allocatable or {}),
        teams=teams,
        team_label_namespaces=team_label_namespaces,
        daemonsets=daemonsets,
        can_exec=can_exec,
        ignore_pod_fields=ignore_pod_fields,
        allow_probe_host=allow_probe_host,
    )
    res = _run(resolver.resolve(pod))
    notes = list(dict.fromkeys(lookups.notes))
    notes += [f"{e.reason}: {e.message}" for e in res.events]
    errors = [u.message for u in res.unsupported]
    errors += [f"container {c}: {reason}: {msg}" for c, (reason, msg) in res.waiting.items()]
    if res.mount_error:
        errors.append(f"FailedMount: {res.mount_error}")
    resolved = res.pod
    if resolved is not None and team:
        resolved = dataclasses.replace(resolved, team=team, team_source="--team")
    return Resolved(resolved, notes, errors)


# --------------------------------------------------------------------------- rendering


class SpecRenderer:
    """Renders a resolved pod for one backend exactly as its ``create`` would: through the
    ``Renderable`` its spec's ``offline`` builds from settings alone (no I/O, no credentials).

    ``OfflineError`` when the backend is not installed, has no templates, or its settings are
    invalid (the message names the key) — never a fallback that renders without the values
    the backend computes."""

    def __init__(
        self,
        renderer: Renderer,
        *,
        backend: str,
        settings: Mapping[str, Any],
        node_name: str = "vkgate",
    ) -> None:
        self.renderer = renderer
        self.backend = backend
        self.settings = dict(settings)
        try:
            spec = plugins.load(backend)
        except plugins.PluginError as exc:
            raise OfflineError(str(exc)) from None
        if spec.offline is None or not spec.default_template:
            raise OfflineError(f"backend {backend!r} has no templates to render")
        ctx = TranslatorContext(node_name=node_name, settings=self.settings, renderer=renderer)
        try:
            self.translator: Renderable = spec.offline(ctx)
        except SettingsError as exc:
            raise OfflineError(str(exc)) from None
        configured = self.settings.get("template")
        self.default_template = (
            configured if isinstance(configured, str) and configured else spec.default_template
        )
        self.features: Features = (
            self.translator.features if isinstance(self.translator, FeatureAware) else spec.features
        )
        #: The live translator runs commands in containers (an ``Executor``: exec probes run);
        #: an offline stand-in that is not one says so with a ``can_exec`` attribute.
        self.can_exec: bool = isinstance(self.translator, Executor) or bool(
            getattr(self.translator, "can_exec", False)
        )

    @property
    def via(self) -> str:
        return f"{type(self.translator).__name__}.render_spec"

    def render(self, pod: ResolvedPod) -> JSON:
        """``pod.template`` must be set (``Renderer.select`` picks it)."""
        return self.translator.render_spec(pod)


def render_pod(
    spec_renderer: SpecRenderer, resolved: ResolvedPod, *, override: str = ""
) -> tuple[JSON, Any]:
    """Select the template for ``resolved`` and render it → (spec, TemplateChoice)."""
    choice = spec_renderer.renderer.select(
        resolved,
        backend=spec_renderer.backend,
        default=spec_renderer.default_template,
        override=override,
    )
    pod = dataclasses.replace(resolved, template=choice.name, team=choice.team)
    # The backend's render_spec selects again from pod.template; an explicit --template
    # bypassed the allow-list above and must there too.
    unrestricted = choice.reason == "override"
    with spec_renderer.renderer.unrestricted() if unrestricted else contextlib.nullcontext():
        return spec_renderer.render(pod), choice


# --------------------------------------------------------------------------- samples

#: A template containing this text (in a comment) is not a pod template: only compiled.
PARTIAL_MARKER = "vkgate:partial"


def _is_partial(renderer: Renderer, name: str) -> bool:
    env = renderer.current_env
    try:
        source = env.loader.get_source(env, name)[0] if env.loader else ""
    except Exception:
        return False
    return PARTIAL_MARKER in source


@dataclass(frozen=True)
class Sample:
    name: str
    inputs: Inputs


def load_samples(folder: Path | None = None) -> list[Sample]:
    folder = folder or samples_dir()
    return [
        Sample(p.stem, parse_inputs(p.read_text(), source=str(p)))
        for p in sorted(folder.glob("*.yaml"))
    ]


@dataclass(frozen=True)
class CheckResult:
    template: str
    sample: str
    #: "ok", "failed" or "unsupported" (the backend refuses that kind of pod: not a template
    #: bug)
    status: str
    message: str = ""


def check_templates(
    renderer: Renderer,
    *,
    backends: Sequence[str],
    samples: Sequence[Sample],
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    names: Sequence[str] | None = None,
    node_name: str = "vkgate",
) -> list[CheckResult]:
    """Render every entry template (of ``names``, default all) for ``backends`` against every
    sample; also compile every non-entry template so a broken partial is reported."""
    from translators.base import PolicyRefused, TranslationError, UnsupportedError
    from translators.render.engine import backend_of, is_entry_template

    results: list[CheckResult] = []
    all_names = list(names) if names is not None else renderer.list_templates()
    partials = {n for n in all_names if n.endswith(".j2") and _is_partial(renderer, n)}
    for name in all_names:
        if (not is_entry_template(name) or name in partials) and name.endswith(".j2"):
            try:
                renderer.check(name)
            except TranslationError as exc:
                results.append(CheckResult(name, "-", "failed", str(exc)))
    spec_renderers: dict[str, SpecRenderer | OfflineError] = {}
    for name in all_names:
        backend = backend_of(name)
        if not is_entry_template(name) or name in partials or backend not in backends:
            continue
        if backend not in spec_renderers:
            try:
                spec_renderers[backend] = SpecRenderer(
                    renderer,
                    backend=backend,
                    settings=(settings or {}).get(backend, {}),
                    node_name=node_name,
                )
            except OfflineError as exc:
                spec_renderers[backend] = exc
        sr = spec_renderers[backend]
        if isinstance(sr, OfflineError):
            # A template that cannot be rendered as it would be sent has not been checked.
            results.append(CheckResult(name, "-", "failed", f"cannot render for {backend}: {sr}"))
            continue
        team = name.split("/")[1] if name.startswith("teams/") else ""
        for sample in samples:
            res = resolve(
                sample.inputs, node_name=node_name, team=team, features=sr.features, backend=backend
            )
            if res.pod is None:  # the agent itself refuses this pod for this backend
                results.append(CheckResult(name, sample.name, "unsupported", "; ".join(res.errors)))
                continue
            pod = dataclasses.replace(res.pod, template=name, team=team)
            try:
                with renderer.unrestricted():
                    sr.render(pod)
            except PolicyRefused as exc:  # the template asks for what the node forbids
                # a team's template is the team's to fix; a packaged or global one the node's
                # policy excludes (raw_exec on a docker-only node) is one this node cannot run
                status = "failed" if name.startswith("teams/") else "unsupported"
                results.append(CheckResult(name, sample.name, status, str(exc)))
            except UnsupportedError as exc:
                results.append(CheckResult(name, sample.name, "unsupported", str(exc)))
            except TranslationError as exc:
                # A field of the pod (``spec.…``): this sample is not a pod the template takes
                # (raw_exec needs a command); a template bug names the output or its own line.
                status = "unsupported" if exc.field.startswith("spec.") else "failed"
                results.append(CheckResult(name, sample.name, status, str(exc)))
            except Exception as exc:  # a translator bug is a failure too, never a crash
                results.append(
                    CheckResult(name, sample.name, "failed", f"{type(exc).__name__}: {exc}")
                )
            else:
                results.append(CheckResult(name, sample.name, "ok"))
    return results
