"""Template rendering: a sandboxed, resource-limited Jinja environment that turns a resolved pod
into the JSON a backend client sends.

The API backends use (stable; everything else here is additive)::

    renderer = Renderer(extra_dirs=[...])
    spec = renderer.render("nomad/job.j2", pod_context(pod, backend="nomad", settings=table))

``render`` parses the output (JSON; YAML for ``*.yaml.j2``/``*.yml.j2``) and validates it against
the output schema of ``context["backend"]`` (``translators.render.schemas``).  Every failure — syntax,
undefined variable, runtime error in an included/extended template, sandbox violation, a
``RenderLimits`` bound, unparsable output, schema violation — raises ``TranslationError`` with
the real template name and line (and ``field`` for schema errors).

**Where a render runs**: with a ``pool`` (``translators.render.pool``, what the agent and
``vkgate render`` use), in a worker process with hard memory and CPU limits — the text is
rendered and parsed there, validated here; without one, here in a watchdog thread.  Both run
the same functions (``render_text_in``, ``parse_in``, ``check_in``) on the same environment
(``make_env``), so results and errors are the same (docs/design/template-safety.md).

**Sources**, first match wins: the *overlay* (templates pushed at run time, e.g. from
ConfigMaps, via ``set_overlay``), the ``extra_dirs`` from config, the packaged ``templates/``.
``trial(overlay)`` renders against a candidate overlay without touching the live one, which is
how a new ConfigMap version is validated before it serves.

**Which template a pod gets** (``select``; shown by ``vkgate render --explain``):

1. the ``vkgate.io/template`` annotation (or ``ResolvedPod.template``), if the pod's team may
   use that name (``allowed``: team → glob patterns, ``"*"`` for everyone; a team may always
   use its own ``teams/<team>/…`` and the backend default);
2. the team's version of the backend default, ``teams/<team>/<default>``, where the team is
   ``ResolvedPod.team`` — the operator's decision, resolved by the gateway: its namespace → team
   map, else the namespace label ``vkgate.io/team`` only where the operator lets that namespace
   choose (docs/design/teams.md) — or, for a pod resolved without one, the config namespace →
   team map;
3. the backend default.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import copy
import dataclasses
import fnmatch
import functools
import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import jinja2
import jinja2.meta
from jinja2.exceptions import SecurityError

from translators import plugins
from translators.base import (
    OWNER_KEY,
    OWNER_VALUE,
    ResolvedContainer,
    ResolvedPod,
    TranslationError,
)
from translators.render import schemas
from translators.render.filters import FILTERS
from translators.render.masking import mask_secrets
from translators.render.output import parse_output
from translators.render.pool import RemoteEnv, RenderPool, map_line
from translators.render.sandbox import LimitedSandbox, LimitExceeded, RenderLimits, run_limited

__all__ = [
    "ANNOTATION",
    "TEAM_LABEL",
    "RenderLimits",
    "Renderer",
    "TemplateChoice",
    "backend_of",
    "mask_secrets",
    "packaged_templates_dir",
    "pod_context",
]

#: Pod annotation naming the template a pod asks for.
ANNOTATION = "vkgate.io/template"
#: Namespace label naming the team that owns a namespace.
TEAM_LABEL = "vkgate.io/team"
ANNOTATION_FIELD = f"metadata.annotations[{ANNOTATION}]"


def packaged_templates_dir() -> Path:
    """The ``templates/`` directory shipped in the wheel (a sibling package of translators)."""
    import templates  # the package itself; works for editable and non-editable installs

    return Path(templates.__file__).resolve().parent


def backend_of(name: str) -> str:
    """The backend a template renders for: ``nomad/job.j2`` and ``teams/ml/nomad/job.j2`` →
    ``nomad``; ``""`` when the name has no backend directory."""
    parts = name.split("/")
    if len(parts) >= 4 and parts[0] == "teams":
        parts = parts[2:]
    return parts[0] if len(parts) >= 2 and parts[0] in plugins.kinds() else ""


def is_entry_template(name: str) -> bool:
    """Templates rendered on their own; ``_partial.j2`` and ``_dir/…`` are for include/extends."""
    return (
        name.endswith(".j2")
        and bool(backend_of(name))
        and not any(p.startswith("_") for p in name.split("/"))
    )


def _check_name(name: str) -> None:
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise jinja2.TemplateNotFound(name)


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True, slots=True)
class OverlayTemplate:
    source: str
    #: Where it came from, for --explain and error messages (e.g. "configmap ns/name key k").
    origin: str = "overlay"


class _SourcesLoader(jinja2.BaseLoader):
    """overlay → extra dirs → packaged.  The reported filename is the template *name*, so
    tracebacks and errors show ``nomad/job.j2:12`` whatever the source."""

    def __init__(self, overlay: Mapping[str, OverlayTemplate], dirs: Sequence[Path]) -> None:
        self.overlay = dict(overlay)
        self.dirs = list(dirs)

    def locate(self, name: str) -> tuple[str, Path | None]:
        """(origin, path) of the template that would serve ``name``; ("", None) if none."""
        if name in self.overlay:
            return self.overlay[name].origin, None
        for d in self.dirs:
            path = d / name
            if path.is_file():
                return str(path), path
        return "", None

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str | None, Callable[[], bool] | None]:
        _check_name(template)
        found = self.overlay.get(template)
        if found is not None:
            return found.source, template, lambda: self.overlay.get(template) is found
        _origin, path = self.locate(template)
        if path is None:
            raise jinja2.TemplateNotFound(template)
        mtime = path.stat().st_mtime
        return path.read_text(encoding="utf-8"), template, lambda: _mtime(path) == mtime

    def list_templates(self) -> list[str]:
        names = set(self.overlay)
        for d in self.dirs:
            if d.is_dir():
                names.update(
                    p.relative_to(d).as_posix()
                    for p in d.rglob("*.j2")
                    if p.is_file() and "__pycache__" not in p.parts
                )
        return sorted(names)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


# --------------------------------------------------------------------------- selection


@dataclass(frozen=True, slots=True)
class TemplateChoice:
    """Which template a pod renders with, and why (``steps`` is the --explain trace)."""

    name: str
    #: "annotation", "override", "team" or "default".
    reason: str
    team: str
    origin: str
    steps: tuple[str, ...]


# --------------------------------------------------------------------------- renderer


class Renderer:
    """Renders templates from the overlay, extra dirs and the packaged templates.

    Thread-safe; ``render`` blocks for at most ``limits.timeout`` (+1 s) — async callers that
    mind use ``arender``.  ``version`` grows with every overlay change and ``subscribe``
    callbacks run after it, so a pod that failed to translate can be retried when templates
    change instead of in a loop.
    """

    def __init__(
        self,
        *,
        extra_dirs: Sequence[str | Path] = (),
        backend_dirs: Sequence[str | Path] = (),
        overlay: Mapping[str, OverlayTemplate | str] | None = None,
        limits: RenderLimits | None = None,
        validate: bool = True,
        allowed: Mapping[str, Sequence[str]] | None = None,
        teams: Mapping[str, str] | None = None,
        defaults: Mapping[str, str] | None = None,
        pool: RenderPool | None = None,
    ) -> None:
        packaged = packaged_templates_dir()
        #: Search order: extra dirs, the packaged templates, then third-party backends' own.
        self.dirs = [Path(d) for d in extra_dirs] + [packaged]
        self.dirs += [Path(d) for d in backend_dirs if Path(d) != packaged]
        self.limits = limits or RenderLimits()
        self.validate = validate
        #: team → glob patterns of template names the team's pods may ask for ("*": everyone).
        self.allowed = {k: list(v) for k, v in (allowed or {}).items()}
        #: namespace → team, used when the gateway did not resolve a team from a label.
        self.teams = dict(teams or {})
        #: backend → default template name, overriding the translator's own default.
        self.defaults = dict(defaults or {})
        #: Render in these worker processes (``None``: in this process, in a thread).
        self.pool = pool
        self._executor: ThreadPoolExecutor | None = None
        self._remotes: dict[int, tuple[LimitedSandbox, RemoteEnv]] = {}
        self.version = 0
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._overlay = _normalize(overlay or {})
        self.env = self._make_env(self._overlay)
        self._trial: contextvars.ContextVar[LimitedSandbox | None] = contextvars.ContextVar(
            "vkgate_trial_env", default=None
        )
        self._unrestricted: contextvars.ContextVar[bool] = contextvars.ContextVar(
            "vkgate_unrestricted", default=False
        )

    # -- sources ----------------------------------------------------------------------

    def _make_env(self, overlay: Mapping[str, OverlayTemplate]) -> LimitedSandbox:
        return make_env(overlay, self.dirs, self.limits)

    def _remote(self, env: LimitedSandbox) -> RemoteEnv:
        """``env`` as a render worker rebuilds it (made once per environment)."""
        remote = self._remotes.get(id(env))
        if remote is None or remote[0] is not env:
            loader = env.loader
            assert isinstance(loader, _SourcesLoader)
            spec = {
                "dirs": [str(d) for d in loader.dirs],
                "overlay": {n: t.source for n, t in sorted(loader.overlay.items())},
                "limits": dataclasses.asdict(self.limits),
            }
            key = hashlib.sha256(repr(spec).encode()).hexdigest()
            remote = (env, RemoteEnv(key, spec))
            with self._lock:
                if len(self._remotes) > 8:
                    self._remotes.clear()
                self._remotes[id(env)] = remote
        return remote[1]

    def start(self) -> None:
        """Start the render workers ahead of the first render (no-op without a pool)."""
        if self.pool is not None:
            self.pool.start()

    def close(self) -> None:
        """Stop the render workers of the pool this renderer was given."""
        if self.pool is not None:
            self.pool.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def current_env(self) -> LimitedSandbox:
        """The environment renders use now: a trial one inside ``trial()``, else the live one."""
        return self._trial.get() or self.env

    @property
    def overlay(self) -> dict[str, OverlayTemplate]:
        return dict(self._overlay)

    def set_overlay(self, overlay: Mapping[str, OverlayTemplate | str]) -> None:
        """Replace the live overlay (all run-time templates at once) and notify subscribers."""
        new = _normalize(overlay)
        with self._lock:
            if new == self._overlay:
                return
            self._overlay = new
            self.env = self._make_env(new)
            self.version += 1
            listeners = list(self._listeners)
        for callback in listeners:
            callback()

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` after every overlay change; returns an unsubscribe function."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    @contextlib.contextmanager
    def trial(self, overlay: Mapping[str, OverlayTemplate | str]) -> Iterator[None]:
        """Within the block (this thread/task only), render against ``overlay`` instead of
        the live one."""
        token = self._trial.set(self._make_env(_normalize(overlay)))
        try:
            yield
        finally:
            self._trial.reset(token)

    @contextlib.contextmanager
    def unrestricted(self) -> Iterator[None]:
        """Within the block (this thread/task only), every template may be selected: for
        checking templates, where the allow-list is not the question."""
        token = self._unrestricted.set(True)
        try:
            yield
        finally:
            self._unrestricted.reset(token)

    def _loader(self) -> _SourcesLoader:
        loader = self.current_env.loader
        assert isinstance(loader, _SourcesLoader)
        return loader

    def exists(self, name: str) -> bool:
        try:
            _check_name(name)
        except jinja2.TemplateNotFound:
            return False
        return bool(self._loader().locate(name)[0])

    def origin(self, name: str) -> str:
        """Where ``name`` is served from: an overlay origin, a file path, or ``""``."""
        return self._loader().locate(name)[0]

    def list_templates(self) -> list[str]:
        return self._loader().list_templates()

    # -- selection --------------------------------------------------------------------

    def team_of(self, pod: ResolvedPod) -> str:
        return pod.team or self.teams.get(pod.namespace, "")

    def is_allowed(self, team: str, name: str, *, default: str = "") -> bool:
        if self._unrestricted.get():
            return True
        if name == default or (team and name.startswith(f"teams/{team}/")):
            return True
        patterns = self.allowed.get("*", []) + (self.allowed.get(team, []) if team else [])
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)

    def select(
        self, pod: ResolvedPod, *, backend: str, default: str, override: str = ""
    ) -> TemplateChoice:
        """The template ``pod`` renders with (lookup order in the module docstring).

        ``override`` (``vkgate render --template``) bypasses the allow-list.  A requested
        template that is not allowed or does not exist raises ``TranslationError`` with
        ``field`` = the annotation: falling back silently would deploy the wrong spec.
        """
        default = self.defaults.get(backend) or default
        team = self.team_of(pod)
        steps: list[str] = []
        if pod.team:
            source = pod.team_source or f"the namespace label {TEAM_LABEL}"
        else:
            source = "the team map in config (templates.teams)"
        steps.append(f"team: {team!r} (from {source})" if team else "team: none")
        annotations = (pod.pod.get("metadata", {}) or {}).get("annotations", {}) or {}
        requested = override or pod.template or annotations.get(ANNOTATION, "")
        if requested:
            how = "--template" if override else f"annotation {ANNOTATION}"
            if not override and not self.is_allowed(team, requested, default=default):
                raise TranslationError(
                    f"template {requested!r} is not allowed for team {team or '(none)'} "
                    "(config templates.allowed)",
                    template=requested,
                    field=ANNOTATION_FIELD,
                )
            if not self.exists(requested):
                raise TranslationError(
                    f"template {requested!r} requested by {how} does not exist",
                    template=requested,
                    field=ANNOTATION_FIELD if not override else "",
                )
            steps.append(f"1. {how} = {requested!r}: used")
            reason = "override" if override else "annotation"
            return TemplateChoice(requested, reason, team, self.origin(requested), tuple(steps))
        steps.append(f"1. annotation {ANNOTATION}: not set")
        if team:
            candidate = f"teams/{team}/{default}"
            if self.exists(candidate):
                steps.append(f"2. team template {candidate!r}: used")
                return TemplateChoice(candidate, "team", team, self.origin(candidate), tuple(steps))
            steps.append(f"2. team template {candidate!r}: not found")
        else:
            steps.append("2. team template: no team")
        steps.append(f"3. backend default {default!r}: used")
        return TemplateChoice(default, "default", team, self.origin(default), tuple(steps))

    # -- rendering --------------------------------------------------------------------

    def render_text(self, template: str, context: Mapping[str, Any]) -> str:
        """Render to text under the sandbox limits; errors → ``TranslationError``."""
        env = self.current_env
        if self.pool is not None:
            text: str = self._call(env, "text", template, context)
            return text
        return render_text_in(env, template, _own_copy(context), self.limits)

    def render(
        self, template: str, context: Mapping[str, Any], *, schema: str | None = None
    ) -> Any:
        """Render, parse and validate.  ``schema`` defaults to ``context["backend"]``;
        ``""`` skips validation (as does ``Renderer(validate=False)``)."""
        env = self.current_env
        if self.pool is not None:
            spec = self._call(env, "render", template, context)
        else:
            spec = parse_in(
                template,
                render_text_in(env, template, _own_copy(context), self.limits),
                self.limits,
            )
        kind = str(context.get("backend", "")) if schema is None else schema
        if self.validate and kind:
            try:
                schemas.validate_spec(kind, spec)
            except schemas.SchemaError as exc:
                raise TranslationError(
                    f"output does not match the {kind} schema: {exc}",
                    template=template,
                    field=exc.path,
                ) from exc
        return spec

    async def arender(
        self, template: str, context: Mapping[str, Any], *, schema: str | None = None
    ) -> Any:
        """``render`` off the event loop.  With a pool, on threads of this renderer's own (one per
        worker): renders queue there instead of holding the loop's default executor, which the
        rest of the agent needs (DNS lookups, other blocking calls) while a bomb is killed."""
        import asyncio

        ctx = contextvars.copy_context()
        call = functools.partial(ctx.run, self.render, template, context, schema=schema)
        if self.pool is None:
            return await asyncio.to_thread(call)
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self.pool.workers, thread_name_prefix="vkgate-render-wait"
                )
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def check(self, template: str) -> None:
        """Compile ``template`` and everything it statically extends/includes; raise
        ``TranslationError`` on a syntax error."""
        env = self.current_env
        if self.pool is not None:
            self._call(env, "check", template)
        else:
            check_in(env, template, self.limits)

    def _call(self, env: LimitedSandbox, op: str, template: str, *args: Any) -> Any:
        assert self.pool is not None
        return self.pool.call(
            self._remote(env),
            op,
            (template, *args),
            template=template,
            timeout=self.limits.timeout,
        )


# --------------------------------------------------------------------------- one render
#
# What a render is, wherever it runs: here in a thread (no pool) or in a render worker
# (translators/render/worker.py), which builds the same environment from a ``RemoteEnv``.


def make_env(
    overlay: Mapping[str, OverlayTemplate], dirs: Sequence[Path], limits: RenderLimits
) -> LimitedSandbox:
    """The sandboxed environment over ``overlay`` → ``dirs``, with the helper filters."""
    env = LimitedSandbox(
        loader=_SourcesLoader(overlay, dirs),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        limits=limits,
    )
    env.filters.update(FILTERS)
    env.guard_filters()
    return env


def _own_copy(context: Mapping[str, Any]) -> dict[str, Any]:
    """What a template rendered in the agent's own process (no render workers) is given: a
    copy, since the sandbox lets a template change a dict it holds (``x.update(…)``), and what
    vkgate computed for the pod stays vkgate's, for every backend's checks after rendering
    (docs/design/threat-model.md, "Render, then admit").  A render worker gets its own copy
    through the pipe."""
    return copy.deepcopy(dict(context))


def render_text_in(
    env: LimitedSandbox, template: str, context: Mapping[str, Any], limits: RenderLimits
) -> str:
    """Render ``template`` to text under ``limits``; errors → ``TranslationError``."""
    max_output = limits.max_output

    def work() -> str:
        gen = env.get_template(template).generate(**context)
        pieces: list[str] = []
        size = 0
        try:
            for piece in gen:
                size += len(piece)
                if size > max_output:
                    raise LimitExceeded(f"output exceeds {max_output} characters")
                pieces.append(piece)
        finally:
            close = getattr(gen, "close", None)
            if close is not None:
                close()
        return "".join(pieces)

    try:
        return run_limited(work, limits)
    except TranslationError:
        raise
    except Exception as exc:
        raise _translation_error(exc, template) from exc


def parse_in(template: str, text: str, limits: RenderLimits) -> Any:
    """Rendered text → data (``translators.render.output``) under ``limits``."""
    try:
        return run_limited(
            lambda: parse_output(
                template,
                text,
                max_size=limits.max_output,
                max_depth=limits.max_depth,
                max_nodes=limits.max_nodes,
            ),
            limits,
        )
    except TranslationError:
        raise
    except Exception as exc:
        raise _translation_error(exc, template) from exc


def check_in(env: LimitedSandbox, template: str, limits: RenderLimits) -> None:
    """Compile ``template`` and what it statically extends/includes."""

    def work() -> None:
        seen: set[str] = set()
        todo = [template]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            source = env.loader.get_source(env, name)[0] if env.loader else ""
            ast = env.parse(source, name)
            env.get_template(name)
            todo.extend(n for n in jinja2.meta.find_referenced_templates(ast) if isinstance(n, str))

    try:
        run_limited(work, limits)
    except Exception as exc:
        raise _translation_error(exc, template) from exc


def _normalize(overlay: Mapping[str, OverlayTemplate | str]) -> dict[str, OverlayTemplate]:
    out: dict[str, OverlayTemplate] = {}
    for name, value in overlay.items():
        _check_name(name)
        out[name] = value if isinstance(value, OverlayTemplate) else OverlayTemplate(value)
    return out


def _translation_error(exc: BaseException, template: str) -> TranslationError:
    """Map any render failure to ``TranslationError`` with the innermost template location."""
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return TranslationError(
            f"syntax error: {exc.message}", template=exc.name or template, line=exc.lineno
        )
    name, line = _template_location(exc.__traceback__)
    name = name or template
    if isinstance(exc, jinja2.TemplateNotFound):
        missing = exc.name if isinstance(exc.name, str) else str(exc)
        if missing == template and not line:
            return TranslationError(f"template not found: {missing}", template=template)
        return TranslationError(f"included template not found: {missing}", template=name, line=line)
    if isinstance(exc, SecurityError):
        message = f"sandbox: {exc}"
    elif isinstance(exc, jinja2.UndefinedError):
        message = f"undefined: {exc}"
    elif isinstance(exc, LimitExceeded):
        message = f"limit: {exc}"
    elif isinstance(exc, RecursionError):
        message = "recursion too deep (an include/extends/macro loop?)"
    elif isinstance(exc, MemoryError):
        message = "limit: out of memory"
    elif isinstance(exc, jinja2.TemplateError):
        message = str(exc)
    else:
        message = f"{type(exc).__name__}: {exc}"
    return TranslationError(message, template=name, line=line)


def _template_location(tb: TracebackType | None) -> tuple[str, int | None]:
    """(template, line) of the innermost template frame of a traceback.

    Two kinds of frames: those Jinja rewrote for a failed render (``__jinja_exception__`` in
    their globals; the line is already the template's) and raw compiled-template frames (a
    timeout or limit raised outside Jinja's handling; mapped through ``debug_info``).
    """
    name, line = "", None
    while tb is not None:
        g = tb.tb_frame.f_globals
        if "__jinja_exception__" in g:
            name, line = str(g.get("__file__") or ""), tb.tb_lineno
        elif "debug_info" in g and "environment" in g and isinstance(g.get("name"), str):
            name, line = g["name"], map_line(str(g["debug_info"]), tb.tb_lineno)
        tb = tb.tb_next
    return name, line


# --------------------------------------------------------------------------- context


def _container_dict(c: ResolvedContainer) -> dict[str, Any]:
    spec = dict(c.spec)
    return {
        "name": c.name,
        "image": c.image,
        "command": list(c.command),
        "args": list(c.args),
        "env": {e.name: e.value for e in c.env},
        "env_list": [{"name": e.name, "value": e.value, "secret": e.secret} for e in c.env],
        "mounts": [
            {
                "volume": m.volume,
                "mount_path": m.mount_path,
                "read_only": m.read_only,
                "sub_path": m.sub_path,
            }
            for m in c.mounts
        ],
        "working_dir": c.working_dir,
        "role": c.role,
        "resources": {
            "requests": dict(spec.get("resources", {}).get("requests", {}) or {}),
            "limits": dict(spec.get("resources", {}).get("limits", {}) or {}),
        },
        "ports": list(spec.get("ports", []) or []),
        "image_pull_policy": spec.get("imagePullPolicy", ""),
        "spec": spec,
    }


def pod_context(
    pod: ResolvedPod,
    *,
    backend: str,
    settings: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
    node: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The context every backend template receives (documented in templates/README.md).

    ``pod`` is the raw pod JSON; ``containers``/``init_containers``/``sidecars`` are resolved
    (env values, expanded command/args); ``volumes`` carry file contents as text (``content``)
    and base64 (``content_b64``); ``settings`` is the backend's config table; ``extra`` lets a
    backend add its own computed values (e.g. Nomad's MHz per core) under ``backend_info``;
    ``node`` adds node facts (labels, …) to ``node``.
    """
    meta = pod.pod.get("metadata", {}) or {}
    spec = pod.pod.get("spec", {}) or {}
    inits = [c for c in pod.init_containers if c.role != "sidecar"]
    sidecars = [c for c in pod.init_containers if c.role == "sidecar"]
    return {
        "pod": pod.pod,
        "meta": {
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
            "labels": dict(meta.get("labels", {}) or {}),
            "annotations": dict(meta.get("annotations", {}) or {}),
        },
        "spec": spec,
        "node": {"name": pod.node_name, "host_ip": pod.host_ip, **dict(node or {})},
        "owner": {"key": OWNER_KEY, "value": OWNER_VALUE},
        "containers": [_container_dict(c) for c in pod.containers],
        "init_containers": [_container_dict(c) for c in inits],
        "sidecars": [_container_dict(c) for c in sidecars],
        "volumes": [
            {
                "name": v.name,
                "kind": v.kind,
                "medium": v.medium,
                "size_limit": v.size_limit,
                "secret": any(f.secret for f in v.files),
                "files": [
                    {
                        "path": f.path,
                        "content": f.content.decode("utf-8", errors="replace"),
                        "content_b64": base64.b64encode(f.content).decode(),
                        "mode": f"{f.mode:04o}",
                        "secret": f.secret,
                    }
                    for f in v.files
                ],
            }
            for v in pod.volumes
        ],
        "restart_policy": spec.get("restartPolicy", "Always"),
        "team": pod.team,
        "template": pod.template,
        "backend": backend,
        "settings": dict(settings),
        "backend_info": dict(extra or {}),
    }
