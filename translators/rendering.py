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

from translators.base import TranslationError

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
