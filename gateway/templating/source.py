"""Templates from ConfigMaps, live: a platform team changes a template with ``kubectl apply``.

Watches ConfigMaps labelled ``vkgate.io/templates=true`` in ``templates.configmap_namespace``
and pushes their templates into the renderer's overlay (searched before the config dirs and
the packaged templates).  Each data key ending in ``.j2`` is one template; ConfigMap keys cannot
contain ``/``, so ``__`` stands for it (``nomad__job.j2`` → ``nomad/job.j2``).

**Whose templates a ConfigMap defines is the operator's decision** (``owner_of``,
docs/design/teams.md).  A ConfigMap of team ``ml`` — named so in ``templates.configmap_teams``,
or labelled ``vkgate.io/team: ml`` where ``templates.team_label_configmaps`` lets its label
choose (gateway.inputs.teamrule) — defines templates under ``teams/ml/`` only: its
``nomad__job.j2`` becomes the ml team's Nomad job, and the annotation
``vkgate.io/template-prefix`` may narrow that prefix (``teams/ml/nomad``), never leave it.  Only
the ConfigMaps named in ``templates.global_configmaps`` define templates outside ``teams/`` (the
global defaults every pod gets); any other ConfigMap is refused (``TemplateRejected``), and a
team label that does not count is a Warning Event ``TeamLabelIgnored`` on it.

**One template, one ConfigMap.**  A version that defines a template another accepted ConfigMap
defines is a conflict, never a silent last-wins: it is refused as a whole — the ConfigMap that
served the template keeps serving it, as the kubelet keeps a running pod's spec when a change
cannot be applied — with a Warning Event ``TemplateConflict`` on both ConfigMaps naming the
other, a log line naming both, and the metric
``vkgate_template_configmaps_refused_total{reason="conflict"}``.  During the first list (start-up: nothing served before) the older ConfigMap
(``creationTimestamp``) wins, so a restart keeps what served before it.  A refused ConfigMap is
considered again when the one it conflicts with changes or goes.

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
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from gateway.config import TemplateSettings
from gateway.inputs import Input, TeamRule
from gateway.kube.reflector import Reflector
from gateway.templating.configmaps import (
    LABEL,
    PREFIX_ANNOTATION,
    Owner,
    owner_of,
    templates_of,
)
from translators import plugins
from translators.base import TranslationError
from translators.render.engine import OverlayTemplate, Renderer
from translators.render.pool import RenderPool
from vkgate_core.clock import Clock, SystemClock

log = logging.getLogger("gateway.templates")

__all__ = [
    "LABEL",
    "PREFIX_ANNOTATION",
    "Owner",
    "TemplatesSource",
    "default_validator",
    "owner_of",
    "renderer_from_settings",
    "templates_of",
]

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
        rule: TeamRule | None = None,
        global_configmaps: Collection[str] = (),
    ) -> None:
        """``rule``/``global_configmaps``: the operator's decision of whose templates each
        ConfigMap defines (``TeamRule.configmaps``, ``templates.global_configmaps``); by
        default no ConfigMap is any team's or global, so none is loaded."""
        self.renderer = renderer
        self.namespace = namespace
        self.events = events
        self.validator = validator or default_validator(backend=backend, settings=backend_settings)
        self.rule = rule or TeamRule.configmaps(TemplateSettings())
        self.global_configmaps = frozenset(global_configmaps)
        self.reflector = reflector or Reflector(
            kube,
            f"/api/v1/namespaces/{namespace}/configmaps",
            params={"labelSelector": f"{LABEL}=true"},
            clock=clock or SystemClock(),
        )
        #: The start-up gate's view of the first list (gateway.inputs).
        self.input = Input.of_reflector(f"template ConfigMaps in {namespace}", self.reflector)
        #: ConfigMap key → its accepted templates, and the accepted version (for its Events).
        self.accepted: dict[str, dict[str, OverlayTemplate]] = {}
        self._objects: dict[str, dict[str, Any]] = {}
        #: ConfigMap key → (version, report) refused for a conflict: considered again when an
        #: accepted ConfigMap changes or goes.
        self._parked: dict[str, tuple[dict[str, Any], str]] = {}
        #: ConfigMap key → (metric reason, message) of its ignored team label.
        self._labels: dict[str, tuple[str, str]] = {}
        #: Versions refused, by reason: conflict, owner, invalid (vkgate_template_configmaps_refused).
        self.refused: Counter[str] = Counter()
        #: ConfigMap key → digest of the last version looked at (accepted or rejected).
        self._seen: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def from_settings(
        cls, kube: Any, renderer: Renderer, settings: TemplateSettings, **kwargs: Any
    ) -> TemplatesSource:
        """The source of ``templates.configmap_namespace``, with the operator's ownership rules."""
        return cls(
            kube,
            renderer,
            namespace=settings.configmap_namespace,
            rule=TeamRule.configmaps(settings),
            global_configmaps=settings.global_configmaps,
            **kwargs,
        )

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

    def ignored(self) -> Counter[str]:
        """How many ConfigMaps' team labels are ignored now, by reason (the metric)."""
        return Counter(reason for reason, _ in self._labels.values())

    async def handle(self, event: str, cm: dict[str, Any], old: dict[str, Any] | None) -> None:
        meta = cm.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        async with self._lock:
            if event == "DELETED":
                self._seen.pop(key, None)
                self._parked.pop(key, None)
                self._labels.pop(key, None)
                self._objects.pop(key, None)
                if self.accepted.pop(key, None) is not None:
                    self.renderer.set_overlay(self.overlay())
                    log.info("templates of ConfigMap %s removed", key)
                    await self._retry_parked()
                return
            digest = hashlib.sha256(
                repr(sorted((cm.get("data") or {}).items())).encode()
            ).hexdigest()
            digest += repr(sorted((meta.get("labels") or {}).items()))
            digest += str((meta.get("annotations") or {}).get(PREFIX_ANNOTATION, ""))
            if self._seen.get(key) == digest:
                return
            self._seen[key] = digest
            if await self._consider(key, cm):
                await self._retry_parked()

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

    async def _event(self, cm: Mapping[str, Any], etype: str, reason: str, message: str) -> None:
        if self.events is not None:
            await self.events.record(cm, type=etype, reason=reason, message=message)

    async def _note_label(self, key: str, cm: Mapping[str, Any], owner: Owner) -> None:
        """A team label that does not count: a log line and a Warning Event, once per change."""
        if not owner.ignored:
            self._labels.pop(key, None)
            return
        before = self._labels.get(key)
        self._labels[key] = (owner.ignored_reason, owner.ignored)
        if before is None or before[1] != owner.ignored:
            log.warning("%s", owner.ignored)
            await self._event(cm, "Warning", "TeamLabelIgnored", owner.ignored)

    async def _reject(
        self, key: str, cm: Mapping[str, Any], problems: Sequence[str], *, reason: str
    ) -> None:
        self.refused[reason] += 1
        keeps = "the previous version keeps serving" if key in self.accepted else "not loaded"
        message = f"template rejected ({keeps}): " + "; ".join(problems)
        log.warning("ConfigMap %s: %s", key, message)
        await self._event(cm, "Warning", "TemplateRejected", message)

    def _conflicts(
        self, key: str, templates: Mapping[str, OverlayTemplate]
    ) -> dict[str, list[str]]:
        """The other accepted ConfigMaps that define a template of ``templates``, and which."""
        out: dict[str, list[str]] = {}
        for other in sorted(self.accepted):
            if other != key and (same := sorted(set(templates) & set(self.accepted[other]))):
                out[other] = same
        return out

    async def _conflict(
        self,
        loser: tuple[str, dict[str, Any]],
        winner: tuple[str, Mapping[str, Any]],
        names: Sequence[str],
        *,
        reported: str = "",
    ) -> None:
        """The version ``loser`` (key, ConfigMap) defines ``names``, which ``winner`` serves:
        refused and parked, reported on both — unless this very conflict was ``reported``."""
        (key, cm), (other, other_cm) = loser, winner
        listed = ", ".join(names)
        keeps = "the previous version keeps serving" if key in self.accepted else "not loaded"
        message = (
            f"template conflict: {listed} also defined by ConfigMap {other}, which keeps serving "
            f"it; this version is refused ({keeps}) — one template, one ConfigMap"
        )
        self._parked[key] = (cm, message)
        if message == reported:
            return
        self.refused["conflict"] += 1
        log.warning(
            "template conflict: ConfigMaps %s and %s both define %s; %s keeps serving it, "
            "the version of %s is refused",
            other,
            key,
            listed,
            other,
            key,
        )
        await self._event(cm, "Warning", "TemplateConflict", message)
        await self._event(
            other_cm,
            "Warning",
            "TemplateConflict",
            f"template conflict: ConfigMap {key} also defines {listed}; refused — this "
            "ConfigMap keeps serving it",
        )

    async def _retry_parked(self) -> None:
        """After an accepted change: the ConfigMaps refused for a conflict, oldest first."""
        for key, (cm, message) in sorted(self._parked.items(), key=lambda kv: _age(kv[1][0])):
            if key in self._parked:  # not accepted meanwhile
                await self._consider(key, cm, reported=message)

    async def _consider(self, key: str, cm: dict[str, Any], *, reported: str = "") -> bool:
        """Accept ``cm`` or say why not; True when the overlay changed.  ``reported``: the
        conflict already reported for this version (a retry stays quiet if it persists)."""
        self._parked.pop(key, None)
        owner = owner_of(cm, rule=self.rule, global_configmaps=self.global_configmaps)
        await self._note_label(key, cm, owner)
        if owner.refused:
            await self._reject(key, cm, [owner.refused], reason="owner")
            return False
        templates, problems = templates_of(cm, prefix=owner.prefix)
        if problems:
            await self._reject(key, cm, problems, reason="invalid")
            return False
        conflicts = self._conflicts(key, templates)
        displaced: list[str] = []
        if conflicts:
            first = not self.reflector.synced.is_set()
            if first and all(_age(cm) < _age(self._objects[o]) for o in conflicts):
                displaced = sorted(conflicts)  # start-up: the older one served before
            else:
                winner = min(conflicts, key=lambda o: _age(self._objects[o]))
                await self._conflict(
                    (key, cm), (winner, self._objects[winner]), conflicts[winner], reported=reported
                )
                return False
        candidate = {k: v for k, v in self.accepted.items() if k != key and k not in displaced}
        candidate[key] = templates
        merged: dict[str, OverlayTemplate] = {}
        for k in sorted(candidate):
            merged.update(candidate[k])
        ctx = contextvars.copy_context()
        problems = await asyncio.to_thread(
            ctx.run, self.validator, self.renderer, merged, sorted(templates)
        )
        if problems:
            await self._reject(key, cm, problems, reason="invalid")
            return False
        for other in displaced:
            names = sorted(set(templates) & set(self.accepted.pop(other)))
            await self._conflict((other, self._objects.pop(other)), (key, cm), names)
        self.accepted[key] = templates
        self._objects[key] = cm
        self.renderer.set_overlay(self.overlay())
        loaded = ", ".join(sorted(templates)) or "(none)"
        log.info("ConfigMap %s: templates loaded: %s", key, loaded)
        for message in self._shadows_nothing(templates):
            log.warning("ConfigMap %s: %s", key, message)
            await self._event(cm, "Warning", "TemplateShadowsNothing", message)
        await self._event(cm, "Normal", "TemplatesLoaded", f"templates loaded: {loaded}")
        return True


def _age(cm: Mapping[str, Any]) -> str:
    """Sort key, oldest first: ``creationTimestamp`` (RFC 3339, UTC: text order is time
    order); one without it sorts last."""
    return str((cm.get("metadata") or {}).get("creationTimestamp") or "~")
