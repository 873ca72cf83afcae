"""Template rendering: a sandboxed Jinja environment that turns a resolved pod into backend JSON.

Minimal first version (the templates issue grows it: filters, lookup order, ConfigMap sources,
schema validation, render limits).  The API that backends use is stable:

    renderer = Renderer(extra_dirs=[...])
    spec = renderer.render("nomad/job.j2", context)   # -> parsed JSON (dict)

Templates are looked up in the extra directories first, then in the packaged ``templates/``.
Errors raise ``TranslationError`` naming the template and line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from translators.base import (
    OWNER_KEY,
    OWNER_VALUE,
    ResolvedContainer,
    ResolvedPod,
    TranslationError,
)

PACKAGED_TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def packaged_templates_dir() -> Path:
    """The ``templates/`` directory shipped in the wheel (a sibling package of translators)."""
    import templates  # the package itself; works for editable and non-editable installs

    return Path(templates.__file__).resolve().parent


class Renderer:
    def __init__(self, *, extra_dirs: Sequence[str | Path] = ()) -> None:
        dirs = [str(d) for d in extra_dirs] + [str(packaged_templates_dir())]
        self.env = SandboxedEnvironment(
            loader=jinja2.FileSystemLoader(dirs),
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            keep_trailing_newline=True,
        )
        self.env.filters["tojson"] = json.dumps

    def render_text(self, template: str, context: Mapping[str, Any]) -> str:
        try:
            return self.env.get_template(template).render(**context)
        except jinja2.TemplateNotFound as exc:
            raise TranslationError(f"template not found: {exc.name}", template=template) from exc
        except jinja2.TemplateSyntaxError as exc:
            raise TranslationError(
                exc.message or str(exc), template=exc.name or template, line=exc.lineno
            ) from exc
        except jinja2.UndefinedError as exc:
            raise TranslationError(str(exc), template=template, line=_line_of(exc)) from exc
        except jinja2.TemplateError as exc:
            raise TranslationError(str(exc), template=template, line=_line_of(exc)) from exc

    def render(self, template: str, context: Mapping[str, Any]) -> Any:
        text = self.render_text(template, context)
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise TranslationError(
                f"output is not valid JSON: {exc.msg} (output line {exc.lineno})",
                template=template,
            ) from exc


def _line_of(exc: BaseException) -> int | None:
    """Best-effort template line from the traceback of a runtime template error."""
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if (
            tb.tb_frame.f_code.co_filename.endswith(".j2")
            or "template" in tb.tb_frame.f_code.co_name
        ):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


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
) -> dict[str, Any]:
    """The context every backend template receives (documented in templates/README.md).

    ``pod`` is the raw pod JSON; ``containers``/``init_containers``/``sidecars`` are resolved
    (env values, expanded command/args); ``volumes`` carry file contents as text (``content``)
    and base64 (``content_b64``); ``settings`` is the backend's config table; ``extra`` lets a
    backend add its own computed values (e.g. Nomad's MHz per core) under ``backend_info``.
    """
    import base64

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
        "node": {"name": pod.node_name, "host_ip": pod.host_ip},
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
        "backend": backend,
        "settings": dict(settings),
        "backend_info": dict(extra or {}),
    }
