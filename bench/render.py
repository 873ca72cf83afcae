"""Template rendering and status mapping throughput, offline (no servers).

Run: ``python -m bench.render [--number 50] [--repeat 5] [--budget 2] [--write-docs]``.

What is timed, per packaged entry template x sample pod (``templates/samples``):

* **render_spec** — the backend translator's ``render_spec`` (``gateway.templating.offline.SpecRenderer``):
  exactly what ``create`` sends, i.e. context building, the sandboxed Jinja render (in its
  watchdog thread), JSON parsing, schema validation and the backend's own post-processing;
* **template** — the ``Renderer.render`` calls ``render_spec`` makes (``translators.render.engine``),
  replayed with the very context the backend built: the Jinja + parse + validate share;
* **baseline** — ``json.dumps`` of the very dict ``render_spec`` returned: the cost of merely
  serializing the request body, which any implementation pays.  The ratio render/baseline is
  the number to compare across machines.

And for every golden status case (``tests/golden/status/cases``): ``gateway.pods.status.rules``
``from_workload`` plus the ``status_patch`` diff against the pod's current status (what the pod
controller does per backend change), against ``json.dumps`` of the resulting status.

Timing is timeit-style: ``repeat`` batches of ``number`` calls, the three measurements of a
case interleaved batch by batch (so a burst of load hits all three alike), the median batch
reported.  Each case stops early after ``budget`` seconds (at least one batch), so the run is
bounded whatever the machine.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime as _dt
import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import report
from gateway.pods.status import rules as st
from gateway.templating.offline import SpecRenderer, load_samples, resolve
from translators.base import (
    PodRef,
    Renderable,
    ResolvedPod,
    TranslationError,
    UnsupportedError,
    WorkloadState,
)
from translators.render.engine import Renderer, backend_of, is_entry_template

NODE = "vkgate"
STATUS_CASES = report.REPO / "tests" / "golden" / "status" / "cases"
#: Offline backend settings (no backend is contacted; addresses are never dialled).
SETTINGS: dict[str, dict[str, Any]] = {
    # both packaged drivers: every packaged template renders (docs/design/nomad.md, "Policy on
    # the rendered job")
    "nomad": {
        "address": "http://127.0.0.1:4646",
        "mhz_per_core": 2000,
        "drivers": ["docker", "raw_exec"],
    },
    "zun": {
        "auth_url": "http://127.0.0.1:5000/v3",
        "username": "demo",
        "password": "demo-password",
        "project_name": "demo",
        "user_domain_name": "Default",
    },
    "batch": {
        "endpoint": "https://acct.example.invalid",
        "account_name": "acct",
        "account_key": base64.b64encode(b"not-a-real-key").decode(),
        "pool_id": "pool-1",
    },
}


# --------------------------------------------------------------------------- timing


def timed(
    fns: Sequence[Callable[[], object]], *, number: int, repeat: int, budget: float
) -> list[float]:
    """Median seconds per call of each of ``fns``, interleaved batch by batch."""
    batches: list[list[float]] = [[] for _ in fns]
    deadline = time.perf_counter() + budget
    for _ in range(max(1, repeat)):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(max(1, number)):
                fn()
            batches[i].append((time.perf_counter() - start) / max(1, number))
        if time.perf_counter() > deadline:
            break
    return [statistics.median(b) for b in batches]


# --------------------------------------------------------------------------- templates


@dataclass(frozen=True)
class RenderRow:
    template: str
    sample: str
    via: str
    #: seconds per call; None when the backend refuses that kind of pod
    spec_s: float | None
    template_s: float | None
    json_s: float | None
    spec_bytes: int = 0
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.spec_s is None or not self.json_s:
            return None
        return self.spec_s / self.json_s


def _spec_renderers() -> dict[str, SpecRenderer]:
    renderer = Renderer(allowed={"*": ["*"]})  # every packaged template: rendering, not lookup
    return {
        backend: SpecRenderer(renderer, backend=backend, settings=settings, node_name=NODE)
        for backend, settings in SETTINGS.items()
    }


def _entry_templates(renderer: Renderer) -> list[str]:
    names = [
        n
        for n in renderer.list_templates()
        if is_entry_template(n) and not n.startswith("teams/") and backend_of(n) in SETTINGS
    ]
    env = renderer.current_env
    return [
        n
        for n in names
        if env.loader is None or "vkgate:partial" not in env.loader.get_source(env, n)[0]
    ]


def _captured_renders(
    sr: SpecRenderer, pod: ResolvedPod
) -> list[tuple[str, Mapping[str, Any], dict[str, Any]]]:
    """The ``Renderer.render`` calls ``render_spec`` makes for ``pod`` (template, context)."""
    renderer = sr.renderer
    calls: list[tuple[str, Mapping[str, Any], dict[str, Any]]] = []
    original = renderer.render

    def capture(template: str, context: Mapping[str, Any], **kw: Any) -> Any:
        calls.append((template, context, kw))
        return original(template, context, **kw)

    renderer.render = capture  # type: ignore[method-assign]
    try:
        sr.render(pod)
    finally:
        del renderer.render
    return calls


def bench_templates(
    *, number: int, repeat: int, budget: float, templates: Sequence[str] | None = None
) -> list[RenderRow]:
    srs = _spec_renderers()
    renderer = next(iter(srs.values())).renderer
    rows: list[RenderRow] = []
    for name in templates or _entry_templates(renderer):
        backend = backend_of(name)
        sr = srs[backend]
        for sample in load_samples():
            resolved = resolve(sample.inputs, node_name=NODE, features=sr.features, backend=backend)
            if resolved.pod is None:  # the agent refuses this pod for this backend
                note = "refused: " + "; ".join(resolved.errors)
                rows.append(RenderRow(name, sample.name, sr.via, None, None, None, note=note))
                continue
            pod: ResolvedPod = dataclasses.replace(resolved.pod, template=name)
            try:
                spec = sr.render(pod)
            except UnsupportedError as exc:
                rows.append(RenderRow(name, sample.name, sr.via, None, None, None, note=exc.reason))
                continue
            except TranslationError as exc:  # e.g. raw_exec and a container without a command
                note = f"TranslationError: {exc.field}"
                rows.append(RenderRow(name, sample.name, sr.via, None, None, None, note=note))
                continue
            fns: list[Callable[[], object]] = [
                lambda sr=sr, pod=pod: sr.render(pod),
                lambda spec=spec: json.dumps(spec),
            ]
            note = ""
            calls = _captured_renders(sr, pod)
            if calls:
                # the template with the context the backend built: the Jinja share of the work
                fns.append(lambda calls=calls: [renderer.render(t, c, **kw) for t, c, kw in calls])
            else:
                note = "render_spec did not call Renderer.render"
            times = timed(fns, number=number, repeat=repeat, budget=budget)
            rows.append(
                RenderRow(
                    name,
                    sample.name,
                    "render_spec" if isinstance(sr.translator, Renderable) else sr.via,
                    times[0],
                    times[2] if len(times) > 2 else None,
                    times[1],
                    len(json.dumps(spec)),
                    note,
                )
            )
    return rows


# --------------------------------------------------------------------------- status mapping


def _workload(d: dict[str, Any], pod: dict[str, Any]) -> WorkloadState:
    meta = pod["metadata"]
    return WorkloadState.from_json(d, PodRef(meta["namespace"], meta["name"], meta["uid"]))


@dataclass(frozen=True)
class StatusRow:
    case: str
    map_s: float
    json_s: float

    @property
    def ratio(self) -> float:
        return self.map_s / self.json_s if self.json_s else float("nan")


def bench_status(
    *, number: int, repeat: int, budget: float, folder: Path = STATUS_CASES
) -> list[StatusRow]:
    rows: list[StatusRow] = []
    for path in sorted(folder.glob("*.json")):
        case = json.loads(path.read_text())
        pod = case["pod"]
        state = _workload(case["state"], pod)
        now = _dt.datetime.fromisoformat(case["now"].replace("Z", "+00:00"))
        assert now is not None
        uid = pod["metadata"]["uid"]

        def mapping(
            pod: dict[str, Any] = pod,
            state: WorkloadState = state,
            now: _dt.datetime = now,
            case: dict[str, Any] = case,
            uid: str = uid,
        ) -> object:
            new = st.from_workload(
                pod, state, now=now, host_ip=case["host_ip"], backend=case["backend"]
            )
            return st.status_patch(pod.get("status"), new, uid)

        status = st.from_workload(
            pod, state, now=now, host_ip=case["host_ip"], backend=case["backend"]
        )
        map_s, json_s = timed(
            [mapping, lambda status=status: json.dumps(status)],
            number=number,
            repeat=repeat,
            budget=budget,
        )
        rows.append(StatusRow(path.stem, map_s, json_s))
    return rows


# --------------------------------------------------------------------------- report


def _us(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e6:,.0f}"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}x"


def markdown(
    render_rows: Sequence[RenderRow],
    status_rows: Sequence[StatusRow],
    *,
    args: argparse.Namespace,
    load_before: str,
    load_after: str,
    seconds: float,
) -> str:
    out = ["## Template rendering and status mapping (`python -m bench.render`)", ""]
    out += report.machine_lines(
        load_before=load_before,
        load_after=load_after,
        extra=[
            f"settings: {args.number} calls x {args.repeat} batches per case (median batch), "
            f"≤ {args.budget:g} s per case; the whole run took {seconds:.0f} s"
        ],
    )
    out += [
        "",
        "### Per template (median over the sample pods it renders)",
        "",
        "µs per call. *render_spec* is what `create` sends (context, sandboxed render in its "
        "watchdog thread, parse, schema validation, backend post-processing); *template* is "
        "`Renderer.render` alone; *json.dumps* is the baseline: serializing the same dict.",
        "",
    ]
    by_template: dict[str, list[RenderRow]] = {}
    for row in render_rows:
        by_template.setdefault(row.template, []).append(row)
    summary = []
    for name, rows in by_template.items():
        ok = [r for r in rows if r.spec_s is not None]
        if not ok:
            summary.append([f"`{name}`", 0, "n/a", "n/a", "n/a", "n/a", "n/a"])
            continue
        spec = statistics.median(r.spec_s for r in ok if r.spec_s is not None)
        tpls = [r.template_s for r in ok if r.template_s is not None]
        js = statistics.median(r.json_s for r in ok if r.json_s is not None)
        summary.append(
            [
                f"`{name}`",
                f"{len(ok)}/{len(rows)}",
                _us(spec),
                _us(statistics.median(tpls) if tpls else None),
                f"{js * 1e6:,.1f}",
                _x(spec / js if js else None),
                f"{1 / spec:,.0f}",
            ]
        )
    out.append(
        report.table(
            [
                "template",
                "samples rendered",
                "render_spec µs",
                "template µs",
                "json.dumps µs",
                "render_spec / json.dumps",
                "renders/s (one core)",
            ],
            summary,
        )
    )
    refused = [r for r in render_rows if r.spec_s is None]
    if refused:
        out += [
            "",
            "Not rendered (the backend refuses that kind of pod, by design): "
            + ", ".join(f"`{r.template}` x {r.sample} ({r.note})" for r in refused)
            + ".",
        ]
    out += ["", "<details><summary>Every template x sample</summary>", ""]
    out.append(
        report.table(
            [
                "template",
                "sample",
                "render_spec µs",
                "template µs",
                "json.dumps µs",
                "ratio",
                "spec bytes",
            ],
            [
                [
                    f"`{r.template}`",
                    r.sample,
                    _us(r.spec_s),
                    _us(r.template_s),
                    "n/a" if r.json_s is None else f"{r.json_s * 1e6:,.1f}",
                    _x(r.ratio),
                    r.spec_bytes or "n/a",
                ]
                for r in render_rows
            ],
        )
    )
    out += ["", "</details>", ""]
    out += [
        "### Status mapping (`gateway.pods.status.rules`, golden cases)",
        "",
        "`from_workload` + `status_patch` against the pod's current status (one backend change "
        "as the pod controller handles it) vs `json.dumps` of the resulting status.",
        "",
    ]
    out.append(
        report.table(
            ["case", "map + diff µs", "json.dumps µs", "ratio", "mappings/s (one core)"],
            [
                [
                    r.case,
                    f"{r.map_s * 1e6:,.1f}",
                    f"{r.json_s * 1e6:,.1f}",
                    f"{r.ratio:,.1f}x",
                    f"{1 / r.map_s:,.0f}",
                ]
                for r in status_rows
            ],
        )
    )
    if status_rows:
        med = statistics.median(r.map_s for r in status_rows)
        out += [
            "",
            f"Median over the cases: {med * 1e6:,.1f} µs per mapping, about {1 / med:,.0f} "
            "status decisions per second on one core.",
        ]
    return "\n".join(out) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.render", description=__doc__.split("\n")[0])
    p.add_argument("--number", type=int, default=50, help="calls per batch (1..10000)")
    p.add_argument("--repeat", type=int, default=5, help="batches per case (1..50)")
    p.add_argument("--budget", type=float, default=2.0, help="max seconds per case (0.01..60)")
    p.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    p.add_argument("--doc", type=Path, default=report.DOC, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not (1 <= args.number <= 10000 and 1 <= args.repeat <= 50 and 0.01 <= args.budget <= 60):
        p.error("--number 1..10000, --repeat 1..50, --budget 0.01..60")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = report.loadavg()
    started = time.monotonic()
    kw = {"number": args.number, "repeat": args.repeat, "budget": args.budget}
    render_rows = bench_templates(**kw)
    status_rows = bench_status(**kw)
    text = markdown(
        render_rows,
        status_rows,
        args=args,
        load_before=load_before,
        load_after=report.loadavg(),
        seconds=time.monotonic() - started,
    )
    sys.stdout.write(text)
    if args.write_docs:
        path = report.write_section("render", text, doc=args.doc)
        print(f"\nwrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
