"""``vkgate render`` and ``vkgate templates check``: see a template's result before deploying it.

Both work offline (no cluster, no backend): the pod comes from a YAML file and is resolved by
``gateway.templating.offline`` with the agent's own env/volume rules.

``vkgate render POD.yaml [--backend B] [--team T] [--template NAME] [--explain]
[--show-secrets] [-c vkgate.toml]`` prints the backend request body exactly as ``create`` would
send it (indented JSON on stdout) — for
Nomad the job body plus, under ``"Variable"``, the Nomad Variable written before it, which holds
the pod's files and Secret env values (docs/design/secrets.md).  Unless ``--show-secrets``,
everything it prints (the spec, errors, ``--explain``) has every encoding of every secret value
masked as ``*****`` (``translators.render.masking``: raw, JSON-, HCL-, YAML- and shell-escaped,
``repr``, base64): the pod's and every value of the file's Secret documents.
``--explain`` writes the lookup trace (team, annotation, team template, default, source file),
resolution notes and the pod fields the spec does not carry (probes and lifecycle hooks: run by
vkgate, ignored by the node or refused, gateway.pods.resolve.features.not_carried) to stderr, so stdout
stays the spec.  Exit status: 0 rendered, 1 the
template/schema/pod failed (the message names ``template:line`` and the field), 2 usage.

``vkgate templates check [DIR] [--backend B]`` renders every entry template — packaged and
those in DIR (same layout: ``nomad/job.j2``, ``teams/<team>/nomad/job.j2``; ``_*`` files are
partials) — against the sample pods in ``templates/samples`` and prints one line per failure,
per backend the probe and hook fields no template carries with their fate on that backend, and
a summary.  Exit 1 on any failure, so a team can run it in CI on its template repository.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from gateway import config as cfg
from gateway.pods.resolve import features as featmod
from gateway.templating.offline import (
    OfflineError,
    SpecRenderer,
    check_templates,
    load_samples,
    parse_inputs,
    render_pod,
    resolve,
)
from translators import plugins
from translators import securitycontext as scmod
from translators.base import Features, TranslationError, TranslatorError, UnsupportedError
from translators.render.engine import Renderer
from translators.render.masking import Masker
from vkgate_core.settings import SettingsError


def renderer_for(
    settings: cfg.Settings, *, extra_dirs: list[str] | None = None, kinds: list[str]
) -> Renderer:
    """A renderer configured like the agent's, without the ConfigMap overlay.  A render worker
    killed for a stuck render is already in the one line the command prints: the pool's own
    warning about it is not printed too."""
    from gateway.templating.source import renderer_from_settings

    logging.getLogger("translators.render.pool").setLevel(logging.ERROR)

    return renderer_from_settings(settings.templates, extra_dirs=extra_dirs or [], kinds=kinds)


def has_templates(kind: str) -> bool:
    try:
        return bool(plugins.load(kind).default_template)
    except plugins.PluginError:
        return False


def template_backends() -> tuple[list[str], list[str]]:
    """Installed backends that have templates, and one problem line per backend that is
    installed but cannot be loaded."""
    kinds: list[str] = []
    problems: list[str] = []
    for kind in plugins.kinds():
        try:
            spec = plugins.load(kind)
        except plugins.PluginError as exc:
            problems.append(str(exc))
            continue
        if spec.default_template:
            kinds.append(kind)
    return kinds, problems


def _settings(path: str | None) -> cfg.Settings:
    path = path or os.environ.get("VKGATE_CONFIG") or None
    return cfg.load(path)


def render_main(
    args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        settings = _settings(getattr(args, "config", None))
        settings = cfg.node_settings(settings, getattr(args, "node", None))  # [[nodes]]
    except SettingsError as exc:
        print(f"vkgate: config error: {exc}", file=err)
        return 2
    backend = args.backend or settings.backend.kind
    if not has_templates(backend):  # loads only this backend (others may be heavy or broken)
        with_templates, _problems = template_backends()
        print(
            f"vkgate render: backend {backend!r} has no templates; pass --backend "
            f"{'|'.join(with_templates)} (or set backend.kind)",
            file=err,
        )
        return 2
    try:
        text = Path(args.pod).read_text() if args.pod != "-" else sys.stdin.read()
        inputs = parse_inputs(text, source=args.pod)
    except (OSError, OfflineError) as exc:
        print(f"vkgate render: {exc}", file=err)
        return 1
    extra = [args.templates_dir] if getattr(args, "templates_dir", None) else []
    renderer = renderer_for(settings, extra_dirs=extra, kinds=[backend])
    try:
        spec_renderer = SpecRenderer(
            renderer,
            backend=backend,
            settings=settings.backend.table(backend),
            node_name=settings.node.name,
        )
    except OfflineError as exc:
        print(f"vkgate render: {exc}", file=err)
        return 1
    resolved = resolve(
        inputs,
        node_name=settings.node.name,
        team=args.team or "",
        features=spec_renderer.features,
        backend=backend,
        host_ip=settings.node.internal_ip or "127.0.0.1",
        allocatable=settings.node.capacity,
        teams=settings.templates.teams,
        team_label_namespaces=settings.templates.team_label_namespaces,
        daemonsets=settings.node.daemonsets,
        can_exec=spec_renderer.can_exec,
        ignore_pod_fields=settings.node.ignore_pod_fields,
        allow_probe_host=settings.probes.allow_host,
    )
    # Everything printed from here on, stdout and stderr, goes through one mask: the pod's
    # secrets and every value of the file's Secrets, in every encoding (docs/design/secrets.md).
    masker = (
        Masker(()) if args.show_secrets else Masker.of(resolved.pod, extra=inputs.secret_values())
    )

    def say(message: str) -> None:
        print(masker.text(message), file=err)

    def explain(choice: Any) -> None:
        if args.explain:
            _print_explain(
                say,
                source=inputs.source,
                backend=backend,
                sr=spec_renderer,
                notes=resolved.notes,
                choice=choice,
                pod=inputs.pod,
                ignore=settings.node.ignore_pod_fields,
            )

    if resolved.pod is None:
        explain(None)
        for error in resolved.errors:
            say(f"vkgate render: the agent would not start this pod: {error}")
        return 1
    pod = resolved.pod
    try:
        spec, choice = render_pod(spec_renderer, pod, override=args.template or "")
    except (TranslationError, UnsupportedError) as exc:
        explain(None)
        say(f"vkgate render: {_describe_error(exc)}")
        return 1
    except TranslatorError as exc:
        say(f"vkgate render: {type(exc).__name__}: {exc}")
        return 1
    explain(choice)
    spec = masker.spec(spec)
    try:
        json.dump(spec, out, indent=2, ensure_ascii=False)
        out.write("\n")
        out.flush()
    except BrokenPipeError:  # `vkgate render pod.yaml | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _describe_error(exc: TranslatorError) -> str:
    text = str(exc)
    field = getattr(exc, "field", "")
    return f"{text} (field {field})" if field and field not in text else text


def _print_explain(
    say: Callable[[str], None],
    *,
    source: str,
    backend: str,
    sr: SpecRenderer,
    notes: list[str],
    choice: Any,
    pod: Mapping[str, Any],
    ignore: Sequence[str] = (),
) -> None:
    lines = [f"pod file: {source}", f"backend: {backend}; rendered by {sr.via}"]
    if choice is not None:
        lines.append("lookup order:")
        lines.extend(f"  {step}" for step in choice.steps)
        lines.append(f"template: {choice.name} (from {choice.origin or 'unknown'})")
    lines.append("template sources, first match wins:")
    lines.append("  - ConfigMaps labelled vkgate.io/templates=true (live agent only; none offline)")
    lines.extend(f"  - {d}" for d in sr.renderer.dirs)
    lines.extend(f"note: {n}" for n in notes)
    lines.extend(_security_lines(pod, sr.features, backend=backend))
    carried = featmod.not_carried(
        pod, sr.features, can_exec=sr.can_exec, backend=backend, ignore=ignore
    )
    if carried:
        lines.append(f"pod fields the {backend} spec does not carry:")
        lines.extend(f"  {where}: {fate}" for where, fate in carried)
    for line in lines:
        say(f"# {line}")


def _security_lines(pod: Mapping[str, Any], features: Features, *, backend: str) -> list[str]:
    """Every securityContext restriction of the pod and its fate on this backend
    (docs/backends/nomad.md, "securityContext")."""
    out: list[str] = []
    for _, reqs in scmod.pod_requests(pod.get("spec") or {}):
        for r in reqs:
            can, relaxed = (
                r.feature in features.security_context,
                r.feature in features.relaxed_security_context,
            )
            if can and not relaxed:
                fate = "enforced: the rendered spec must carry it, else the pod is refused"
            elif relaxed:
                fate = "relaxed by this node: runs unenforced where the spec does not carry it"
            else:
                fate = f"refused: the {backend} backend cannot enforce it"
            out.append(f"securityContext: {r.where}: {fate}")
    return out


def templates_check_main(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with_templates, problems = template_backends()
    backends = [args.backend] if getattr(args, "backend", None) else with_templates
    unknown = [b for b in backends if b not in with_templates]
    if unknown:
        print(
            f"vkgate templates check: backend {unknown[0]!r} has no templates "
            f"(backends with templates: {', '.join(with_templates) or 'none'})",
            file=out,
        )
        return 2
    directory = getattr(args, "dir", None)
    if directory and not Path(directory).is_dir():
        print(f"vkgate templates check: {directory}: not a directory", file=out)
        return 2
    try:
        settings = _settings(getattr(args, "config", None))
    except SettingsError as exc:
        print(f"vkgate: config error: {exc}", file=out)
        return 2
    renderer = renderer_for(settings, extra_dirs=[directory] if directory else [], kinds=backends)
    samples = load_samples()
    units = settings.units()  # [[nodes]]: a backend's table as its first node has it
    first = {u.backend.kind: u for u in reversed(units)}
    tables = {b: first.get(b, settings).backend.table(b) for b in backends}
    results = check_templates(
        renderer, backends=backends, samples=samples, settings=tables, node_name=units[0].node.name
    )
    failed = [r for r in results if r.status == "failed"]
    unsupported = [r for r in results if r.status == "unsupported"]
    ok = [r for r in results if r.status == "ok"]
    for problem in problems:
        print(f"FAIL {problem}", file=out)
    for r in failed:
        print(f"FAIL {r.template} [{r.sample}]: {r.message}", file=out)
    for b in backends:
        _print_catalogue(out, renderer, b, tables[b], first.get(b, settings))
    templates_seen = sorted({r.template for r in results})
    print(
        f"{len(templates_seen)} template(s), {len(samples)} sample pod(s): {len(ok)} ok, "
        f"{len(failed)} failed, {len(unsupported)} unsupported by the backend",
        file=out,
    )
    if not ok and not failed:
        # Nothing rendered: a check that checked nothing must not pass.
        print("FAIL no template rendered any sample pod: nothing was checked", file=out)
        return 1
    return 1 if failed or problems else 0


def _print_catalogue(
    out: TextIO, renderer: Renderer, backend: str, table: Mapping[str, Any], unit: cfg.Settings
) -> None:
    """The probe and hook fields no template carries, and their fate on this backend with this
    node's ``ignore_pod_fields`` (the kubelet runs them itself: no backend spec field does)."""
    try:
        sr = SpecRenderer(renderer, backend=backend, settings=table, node_name=unit.node.name)
    except OfflineError as exc:
        print(f"{backend}: pod fields no template carries: unknown ({exc})", file=out)
        return
    print(f"{backend}: pod fields no template carries (probes, lifecycle hooks):", file=out)
    for field, fate in featmod.catalogue(
        sr.features, can_exec=sr.can_exec, backend=backend, ignore=unit.node.ignore_pod_fields
    ):
        print(f"  {field}: {fate}", file=out)
