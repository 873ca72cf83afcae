"""Templates from ConfigMaps, live: a platform team changes a template with ``kubectl apply``.

Watches ConfigMaps labelled ``vkgate.io/templates=true`` in ``templates.configmap_namespace``
and pushes their templates into the renderer's overlay (searched before the config dirs and
the packaged templates).  Each data key ending in ``.j2`` is one template; ConfigMap keys cannot
contain ``/``, so ``__`` stands for it (``nomad__job.j2`` → ``nomad/job.j2``).  A ConfigMap
labelled ``vkgate.io/team: ml`` (or annotated ``vkgate.io/template-prefix: teams/ml``) puts its
templates under ``teams/ml/`` — so its ``nomad__job.j2`` becomes the ml team's Nomad job.

A new ConfigMap version is **validated before it serves**: with the candidate overlay in a
``Renderer.trial``, every template of the ConfigMap must compile, and every entry template of
the agent's backend must render the sample pods (``templates/samples``) at least as well as the
current overlay does.  A broken version is rejected — the previous version of that ConfigMap
keeps serving — and the rejection is a Warning Event ``TemplateRejected`` on the ConfigMap
(message: ``template:line: what``) plus a log line; an accepted one gets a Normal
``TemplatesLoaded`` Event.  Deleting the ConfigMap removes its templates.

Renders that failed with ``TranslationError`` can be retried on change: the renderer's
``version`` grows and its ``subscribe`` callbacks run after every accepted change.

Start-up: ``start()`` returns at once; the first list — every ConfigMap in it validated and
accepted or rejected — is ``input``, an input of every node's start-up gate (gateway.inputs,
docs/design/startup.md): no pod is synced before it, however long the list takes or fails
(forbidden, API slow), because a pod rendered without its team's template keeps the default
for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gateway.config import TemplateSettings
from gateway.inputs import Input
from gateway.kube.reflector import Reflector
from translators import plugins
from translators.base import TranslationError
from translators.render.engine import TEAM_LABEL, OverlayTemplate, Renderer
from translators.render.pool import RenderPool
from vkgate_core.clock import Clock, SystemClock

log = logging.getLogger("gateway.templates")

LABEL = "vkgate.io/templates"
PREFIX_ANNOTATION = "vkgate.io/template-prefix"

#: validate(renderer, candidate overlay, names this ConfigMap changes) → problems ([] = accept).
Validator = Callable[[Renderer, Mapping[str, OverlayTemplate], Sequence[str]], list[str]]


def renderer_from_settings(
    settings: TemplateSettings,
    *,
    extra_dirs: Sequence[str | Path] = (),
    kinds: Sequence[str] = (),
) -> Renderer:
    """The renderer the agent (and ``vkgate render``) uses, from ``[templates]``; the packaged
    templates of the backends ``kinds`` (their specs' ``templates_dir``) come last.  It renders
    in ``templates.render_workers`` worker processes (started on first use; ``Renderer.close``
    stops them)."""
    backend_dirs: list[Path] = []
    for kind in kinds:
        with contextlib.suppress(plugins.PluginError):  # reported where the backend is used
            folder = plugins.load(kind).templates_dir
            if folder is not None and folder not in backend_dirs:
                backend_dirs.append(folder)
    pool = None
    if settings.render_workers > 0:
        pool = RenderPool(
            workers=settings.render_workers, max_memory=settings.render_memory * 2**20
        )
    return Renderer(
        extra_dirs=[*extra_dirs, *settings.dirs],
        backend_dirs=backend_dirs,
        allowed=settings.allowed,
        teams=settings.teams,
        defaults=settings.default,
        pool=pool,
    )


def templates_of(cm: Mapping[str, Any]) -> tuple[dict[str, OverlayTemplate], list[str]]:
    """The templates a ConfigMap provides, and the problems with its key names."""
    meta = cm.get("metadata") or {}
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    prefix = str(annotations.get(PREFIX_ANNOTATION, "")).strip("/")
    if not prefix and labels.get(TEAM_LABEL):
        prefix = f"teams/{labels[TEAM_LABEL]}"
    out: dict[str, OverlayTemplate] = {}
    problems: list[str] = []
    for key, source in sorted((cm.get("data") or {}).items()):
        if not key.endswith(".j2"):
            continue
        tname = key.replace("__", "/")
        if prefix:
            tname = f"{prefix}/{tname}"
        parts = tname.split("/")
        if any(p in ("", ".", "..") for p in parts):
            problems.append(f"key {key!r}: {tname!r} is not a valid template name")
            continue
        out[tname] = OverlayTemplate(str(source), origin=f"configmap {ns}/{name} key {key}")
    return out, problems


def default_validator(*, backend: str, settings: Mapping[str, Any] | None = None) -> Validator:
    """Compile the ConfigMap's templates; render the backend's entry templates against the
    sample pods (through the backend's ``render_spec`` when it has one, built from
    ``settings``) and reject what newly fails compared with the live overlay."""
    from gateway.templating.offline import check_templates, load_samples

    samples = load_samples()
    baseline: dict[int, set[tuple[str, str]]] = {}

    def failures(renderer: Renderer) -> dict[tuple[str, str], str]:
        try:
            if not plugins.load(backend).default_template:
                return {}  # a backend without templates
        except plugins.PluginError:
            return {}
        results = check_templates(
            renderer, backends=[backend], samples=samples, settings={backend: dict(settings or {})}
        )
        return {(r.template, r.sample): r.message for r in results if r.status == "failed"}

    def validate(
        renderer: Renderer, overlay: Mapping[str, OverlayTemplate], names: Sequence[str]
    ) -> list[str]:
        if renderer.version not in baseline:
            baseline.clear()
            baseline[renderer.version] = set(failures(renderer))
        before = baseline[renderer.version]
        problems: list[str] = []
        with renderer.trial(overlay):
            for name in names:
                try:
                    renderer.check(name)
                except TranslationError as exc:
                    problems.append(str(exc))
            if problems:
                return problems
            for (template, sample), message in sorted(failures(renderer).items()):
                # a team's version is held to the template it replaces: a sample that the
                # default cannot render either (raw_exec and a container without a command)
                # is no new failure
                if (template, sample) not in before and (_replaced(template), sample) not in before:
                    problems.append(f"{message} (sample pod {sample!r})")
        return problems

    return validate


def _replaced(template: str) -> str:
    """``teams/<team>/<name>`` -> ``<name>``, the template a team template is used instead of."""
    parts = template.split("/")
    return "/".join(parts[2:]) if len(parts) > 2 and parts[0] == "teams" else template


class TemplatesSource:
    """Keeps ``renderer``'s overlay equal to the accepted templates of the labelled ConfigMaps."""

    def __init__(
        self,
        kube: Any,
        renderer: Renderer,
        *,
        namespace: str,
        events: Any = None,
        validator: Validator | None = None,
        backend: str = "",
        backend_settings: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
        reflector: Any = None,
    ) -> None:
        self.renderer = renderer
        self.namespace = namespace
        self.events = events
        self.validator = validator or default_validator(backend=backend, settings=backend_settings)
        self.reflector = reflector or Reflector(
            kube,
            f"/api/v1/namespaces/{namespace}/configmaps",
            params={"labelSelector": f"{LABEL}=true"},
            clock=clock or SystemClock(),
        )
        #: The start-up gate's view of the first list (gateway.inputs).
        self.input = Input.of_reflector(f"template ConfigMaps in {namespace}", self.reflector)
        #: ConfigMap key → its accepted templates.
        self.accepted: dict[str, dict[str, OverlayTemplate]] = {}
        #: ConfigMap key → digest of the last version looked at (accepted or rejected).
        self._seen: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Start listing and watching; returns at once (pod syncs wait for ``input``)."""
        self._task = asyncio.create_task(self.reflector.run(self.handle), name="templates-source")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def overlay(self) -> dict[str, OverlayTemplate]:
        merged: dict[str, OverlayTemplate] = {}
        for key in sorted(self.accepted):
            merged.update(self.accepted[key])
        return merged

    async def handle(self, event: str, cm: dict[str, Any], old: dict[str, Any] | None) -> None:
        meta = cm.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        async with self._lock:
            if event == "DELETED":
                self._seen.pop(key, None)
                if self.accepted.pop(key, None) is not None:
                    self.renderer.set_overlay(self.overlay())
                    log.info("templates of ConfigMap %s removed", key)
                return
            digest = hashlib.sha256(
                repr(sorted((cm.get("data") or {}).items())).encode()
            ).hexdigest()
            digest += repr(sorted((meta.get("labels") or {}).items()))
            digest += str((meta.get("annotations") or {}).get(PREFIX_ANNOTATION, ""))
            if self._seen.get(key) == digest:
                return
            self._seen[key] = digest
            await self._consider(key, cm)

    def _shadows_nothing(self, templates: Mapping[str, OverlayTemplate]) -> list[str]:
        """A team template ``teams/<team>/<name>`` is used instead of ``<name>`` — the template
        the backend would otherwise pick (its *active* default, ``templates.default``, or one it
        includes).  When no ``<name>`` exists the team template is never selected: say so."""
        out = []
        for tname in sorted(templates):
            parts = tname.split("/")
            if len(parts) < 4 or parts[0] != "teams":
                continue
            base = "/".join(parts[2:])
            if not self.renderer.exists(base):
                active = self.renderer.defaults.get(parts[2], "")
                hint = f"; the active default for {parts[2]} is {active!r}" if active else ""
                out.append(
                    f"team template {tname} shadows nothing: no template {base} exists, so it is "
                    f"never used (name it after the template it replaces{hint})"
                )
        return out

    async def _consider(self, key: str, cm: dict[str, Any]) -> None:
        templates, problems = templates_of(cm)
        candidate = {k: v for k, v in self.accepted.items() if k != key}
        candidate[key] = templates
        merged: dict[str, OverlayTemplate] = {}
        for k in sorted(candidate):
            merged.update(candidate[k])
        if not problems:
            ctx = contextvars.copy_context()
            problems = await asyncio.to_thread(
                ctx.run, self.validator, self.renderer, merged, sorted(templates)
            )
        if problems:
            keeps = "the previous version keeps serving" if key in self.accepted else "not loaded"
            message = f"template rejected ({keeps}): " + "; ".join(problems)
            log.warning("ConfigMap %s: %s", key, message)
            if self.events is not None:
                await self.events.record(
                    cm, type="Warning", reason="TemplateRejected", message=message
                )
            return
        self.accepted[key] = templates
        self.renderer.set_overlay(self.overlay())
        names = ", ".join(sorted(templates)) or "(none)"
        log.info("ConfigMap %s: templates loaded: %s", key, names)
        for message in self._shadows_nothing(templates):
            log.warning("ConfigMap %s: %s", key, message)
            if self.events is not None:
                await self.events.record(
                    cm, type="Warning", reason="TemplateShadowsNothing", message=message
                )
        if self.events is not None:
            await self.events.record(
                cm, type="Normal", reason="TemplatesLoaded", message=f"templates loaded: {names}"
            )
