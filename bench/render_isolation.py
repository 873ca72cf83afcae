"""What rendering in worker processes costs per pod (``templates.render_workers``).

Run: ``python -m bench.render_isolation [--pods 1000] [--rounds 5] [--runs 3] [--before DIR]
[--write-docs]``.

Each mode renders ``--pods`` pods (the sample pods, in turn) through the Nomad backend's
``render_spec`` — what ``create`` sends: context, render, parse, schema validation — in a
fresh process of its own, ``--rounds`` times; the median round of each of ``--runs`` such
processes, and the median over those:

* **in the agent** — ``render_workers = 0``: the sandbox in a watchdog thread of the agent;
* **1 worker** — one render at a time through one worker process (the latency a pod sees);
* **2 workers, 2 threads** — two renders at once (the agent's default pool on 2 cores);
* **before** (``--before DIR``: this tree with ``translators/render/sandbox.py``, ``output.py`` and
  ``rendering.py`` as they were before the workers and the text measures, without
  ``textsize.py``, ``renderpool.py``, ``renderworker.py``) — the in-agent path as it was.

Per pod: wall time, the agent's CPU time, the workers' CPU time (``/proc/<pid>/stat``); and
the RSS of the agent and of each worker at the end.  The child runs as a script so ``--before``
can put another checkout first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
SETTINGS = {"address": "http://127.0.0.1:4646", "mhz_per_core": 2000}


# --------------------------------------------------------------------------- the child


def _cpu_of(pid: int) -> float:
    """utime + stime of ``pid`` in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as f:
        for text in f:
            if text.startswith("VmRSS:"):
                return int(text.split()[1]) / 1024
    return 0.0


def child(mode: str, pods: int, rounds: int) -> dict[str, Any]:
    from gateway.templating.offline import SpecRenderer, load_samples, resolve
    from translators.render.engine import Renderer

    kwargs: dict[str, Any] = {"allowed": {"*": ["*"]}}
    workers = {"thread": 0, "one": 1, "two": 2}[mode]
    if workers:
        from translators.render.pool import RenderPool

        kwargs["pool"] = RenderPool(workers=workers)
    renderer = Renderer(**kwargs)
    if workers:
        renderer.start()
    sr = SpecRenderer(renderer, backend="nomad", settings=SETTINGS, node_name="vkgate")
    from translators.base import TranslatorError

    resolved = []
    for sample in load_samples():
        res = resolve(sample.inputs, node_name="vkgate", features=sr.features, backend="nomad")
        if res.pod is None:
            continue
        try:
            sr.render(res.pod)
        except TranslatorError:  # a kind of pod the backend refuses: nothing to time
            continue
        resolved.append(res.pod)
    batch = [resolved[i % len(resolved)] for i in range(pods)]
    started = time.monotonic()
    for pod in resolved:  # warm: compile the templates (in every worker)
        for _ in range(max(workers, 1)):
            sr.render(pod)
    first = time.monotonic() - started
    pool = kwargs.get("pool")
    pids = pool.pids() if pool is not None else []
    results = []
    for _ in range(rounds):
        cpu0, workers0 = time.process_time(), sum(_cpu_of(p) for p in pids)
        t0 = time.perf_counter()
        if mode == "two":
            half = len(batch) // 2
            threads = [
                threading.Thread(target=lambda b=b: [sr.render(p) for p in b])
                for b in (batch[:half], batch[half:])
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            for pod in batch:
                sr.render(pod)
        wall = time.perf_counter() - t0
        results.append(
            {
                "wall_us": wall / pods * 1e6,
                "agent_cpu_us": (time.process_time() - cpu0) / pods * 1e6,
                "worker_cpu_us": (sum(_cpu_of(p) for p in pids) - workers0) / pods * 1e6,
            }
        )
    median = sorted(results, key=lambda r: r["wall_us"])[len(results) // 2]
    out = {
        "mode": mode,
        **{k: round(v, 1) for k, v in median.items()},
        "rounds_wall_us": [round(r["wall_us"], 1) for r in results],
        "agent_rss_mib": round(_rss_mib(), 1),
        "worker_rss_mib": [round(_rss_mib(p), 1) for p in pids],
        "warm_s": round(first, 2),
    }
    renderer_close = getattr(renderer, "close", None)
    if renderer_close is not None:
        renderer_close()
    return out


# --------------------------------------------------------------------------- the parent


def run_child(mode: str, *, pods: int, rounds: int, pythonpath: str = "") -> dict[str, Any]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.run(
        [sys.executable, str(HERE), "--child", mode, "--pods", str(pods), "--rounds", str(rounds)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


def spawn_ms(samples: int = 5) -> float:
    """Median ms from starting a worker to its first answer (a template it has to compile)."""
    from translators.render.engine import Renderer
    from translators.render.pool import RenderPool

    times = []
    for _ in range(samples):
        pool = RenderPool(workers=1)
        renderer = Renderer(overlay={"t/x.j2": "{{ 1 }}"}, pool=pool)
        t0 = time.perf_counter()
        renderer.render_text("t/x.j2", {})
        times.append((time.perf_counter() - t0) * 1000)
        pool.close()
    return statistics.median(times)


LABELS = {
    "before": "in the agent, before (no text measures, no workers)",
    "thread": "in the agent (`render_workers = 0`)",
    "one": "1 worker, one render at a time",
    "two": "2 workers, 2 renders at a time (the default pool)",
}


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number the median over the runs; ``spread_us``: the runs' wall times."""
    out = dict(runs[0])
    for k in ("wall_us", "agent_cpu_us", "worker_cpu_us", "agent_rss_mib"):
        out[k] = statistics.median(r[k] for r in runs)
    out["worker_rss_mib"] = [
        statistics.median(r["worker_rss_mib"][i] for r in runs)
        for i in range(len(runs[0]["worker_rss_mib"]))
    ]
    out["spread_us"] = sorted(r["wall_us"] for r in runs)
    return out


def markdown(results: Sequence[dict[str, Any]], args: argparse.Namespace, extra: list[str]) -> str:
    from bench import report

    rows = []
    for r in results:
        rows.append(
            [
                LABELS[r["mode"]],
                f"{r['wall_us']:,.0f}",
                f"{r['agent_cpu_us']:,.0f}",
                f"{r['worker_cpu_us']:,.0f}" if r["mode"] in ("one", "two") else "—",
                f"{1e6 / r['wall_us']:,.0f}",
                f"{r['agent_rss_mib']:.0f}",
                " + ".join(f"{m:.0f}" for m in r["worker_rss_mib"]) or "—",
                ", ".join(f"{w:,.0f}" for w in r["spread_us"]),
            ]
        )
    table = report.table(
        [
            "mode",
            "µs per pod (wall)",
            "agent CPU µs/pod",
            "worker CPU µs/pod",
            "pods/s",
            "agent RSS MiB",
            "worker RSS MiB",
            "each run µs/pod (wall)",
        ],
        rows,
    )
    return (
        f"## Rendering in worker processes: cost per pod (`python -m bench.render_isolation "
        f"--pods {args.pods} --rounds {args.rounds} --runs {args.runs}`)\n\n"
        + "\n".join(extra)
        + "\n\n"
        + f"{args.pods} pods per round (the sample pods in turn, `nomad/job.j2` through "
        "`render_spec`: context, render, parse, schema validation); each mode in a fresh "
        f"process, its median round of {args.rounds}; the median of {args.runs} such runs "
        "(the modes interleaved run by run).  CPU time is the steadier number on a shared "
        "machine: the wall time of a render in the agent includes handing it to a watchdog "
        "thread and back, which waits for a CPU under load.\n\n" + table + "\n"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.render_isolation", description=__doc__)
    p.add_argument("--pods", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5, help="rounds per run (median)")
    p.add_argument("--runs", type=int, default=3, help="fresh processes per mode (median)")
    p.add_argument("--before", default="", help="a checkout of the code before the workers")
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.pods, args.rounds)))
        return 0
    sys.path.insert(0, str(HERE.parent.parent))
    from bench import report

    load_before = report.loadavg()
    modes = (["before"] if args.before else []) + ["thread", "one", "two"]
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for _ in range(args.runs):  # interleaved, so a burst of load hits every mode alike
        for mode in modes:
            path = args.before if mode == "before" else ""
            child_mode = "thread" if mode == "before" else mode
            r = run_child(child_mode, pods=args.pods, rounds=args.rounds, pythonpath=path)
            runs[mode].append(r | {"mode": mode})
    results = [_median_run(runs[m]) for m in modes]
    spawn = spawn_ms()
    extra = report.machine_lines(
        load_before=load_before,
        load_after=report.loadavg(),
        extra=[f"a worker's start, to its first answer: {spawn:.0f} ms (median of 5)"],
    )
    text = markdown(results, args, extra)
    print(text)
    if args.write_docs:
        report.write_section("render_isolation", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
