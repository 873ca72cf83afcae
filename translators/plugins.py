"""The open backend seam: every backend — built-in or a third-party package — is one ``BackendSpec``.

A backend publishes its spec under the entry-point group ``vkgate.translators``, named by its
kind::

    [project.entry-points."vkgate.translators"]
    acme = "vkgate_acme:SPEC"

The spec carries everything vkgate needs to know about the backend, so neither the gateway nor
the shared translator code names one:

* ``factory`` builds the live translator (it may need credentials and the network);
* ``settings`` validates ``[backend.<kind>]`` (plus the environment variables the backend reads
  by convention) and returns the effective settings for ``vkgate config check`` — it raises
  ``vkgate_core.settings.SettingsError`` naming the key;
* ``offline`` builds a ``Renderable`` from settings alone — no I/O and no credentials — for
  ``vkgate render`` and ``vkgate templates check``;
* ``default_template``, ``templates_dir`` (a folder holding ``<kind>/…`` templates) and
  ``schema`` (the output schema, ``translators.render.schemas`` language) describe its templates;
  a backend without templates (the simulated one) leaves them empty;
* ``features`` is what the backend supports before it is started (a live translator may refine
  them after negotiating with its service).

Loading imports only the backend asked for (others may lack their optional dependencies);
listing the installed kinds imports nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from translators.base import Features, Renderable, Translator, TranslatorContext
from vkgate_core.settings import Setting

GROUP = "vkgate.translators"
#: The backend a settings file without ``[backend] kind`` runs (the built-in test double).
DEFAULT_KIND = "simulated"

#: ``settings(table, environ, node_name)`` → the effective settings; ``SettingsError`` if bad.
SettingsParser = Callable[[Mapping[str, Any], Mapping[str, str], str], list[Setting]]


@dataclass(frozen=True)
class BackendSpec:
    """What one backend publishes (see the module docstring)."""

    kind: str
    factory: Callable[[TranslatorContext], Translator]
    settings: SettingsParser
    offline: Callable[[TranslatorContext], Renderable] | None = None
    default_template: str = ""
    templates_dir: Path | None = None
    schema: Mapping[str, Any] | None = None
    features: Features = field(default_factory=Features)


class PluginError(LookupError):
    """No usable backend of that kind is installed; the message says what to do."""


@functools.cache
def _kinds() -> tuple[str, ...]:
    return tuple(sorted({ep.name for ep in entry_points(group=GROUP)}))


def kinds() -> list[str]:
    """Installed backend kinds (entry-point names), sorted; imports nothing."""
    return list(_kinds())


@functools.cache
def load(kind: str) -> BackendSpec:
    """The spec of ``kind``; ``PluginError`` when it is not installed or cannot be imported."""
    found = entry_points(group=GROUP, name=kind)
    if not found:
        raise PluginError(
            f"no backend {kind!r} is installed (installed: {', '.join(kinds()) or 'none'}; "
            f"a backend registers under the entry-point group {GROUP!r})"
        )
    ep = next(iter(found))
    try:
        spec = ep.load()
    except ImportError as exc:
        raise PluginError(
            f"backend {kind!r}: cannot import {ep.value} ({exc}); "
            f"install its extra (pip install 'vkgate[{kind}]') or its package"
        ) from exc
    if not isinstance(spec, BackendSpec):
        raise PluginError(
            f"backend {kind!r}: {ep.value} is a {type(spec).__name__}, not a "
            "translators.plugins.BackendSpec"
        )
    if spec.kind != kind:
        raise PluginError(f"backend {kind!r}: {ep.value} describes kind {spec.kind!r}")
    return spec
