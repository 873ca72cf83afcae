"""PNG plots of pod-burst results: time to all Running, CPU per pod and RSS against N.

Run: ``python -m bench.plots RESULTS.json [...] --out docs/bench``.

Reads the JSON that ``python -m bench.pods_burst --json F --label L`` writes (one file per N
and configuration) and draws, per agent and label, the median over the rounds:

* ``burst_ready.png``: create → all Running (wall seconds) against N;
* ``burst_cpu.png``: agent CPU per pod over the whole burst (Events included) against N;
* ``burst_rss.png``: agent RSS with N pods Running against N.

Rows that ``python -m bench.nomad_burst --json F`` writes (``"bench": "nomad_burst"``) get
their own three plots:

* ``nomad_startup.png``: the distribution (CDF) of per-pod startup latency, vkgate and the
  Nomad floor, burst and rate runs, at 1,000 pods (the SLO's N; else the largest N);
* ``nomad_ready.png``: create → all Running against N, vkgate and the floor (bursts);
* ``nomad_requests.png``: Nomad requests per pod by endpoint, create and delete, at the
  largest N (burst).

Log-log axes: N spans 200 to 10,000.  Matplotlib runs headless (Agg).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PLOTS = {
    "burst_ready.png": ("running_wall", "create → all Running (s)", 1.0),
    "burst_cpu.png": ("cpu_per_pod_ms", "agent CPU per pod, whole burst (ms)", 1.0),
    "burst_rss.png": ("rss_running", "agent RSS with N pods Running (MiB)", 1 / 2**20),
}


def series(
    rows: Sequence[dict[str, Any]], key: str, scale: float
) -> dict[str, list[tuple[int, float]]]:
    """``{"agent (label)": [(N, median), ...]}`` sorted by N, rounds with errors left out."""
    points: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        value = r.get(key)
        error = str(r.get("error") or "")
        # a round that did not get every pod Running says nothing about any of these; one that
        # did not get them all gone still timed its creates and its RSS, not its whole CPU
        if "Running" in error or (error and key == "cpu_per_pod_ms"):
            continue
        if value is None or value != value:  # NaN
            continue
        points[_name(r)][int(r["pods"])].append(float(value) * scale)
    return {
        name: sorted((n, statistics.median(vs)) for n, vs in by_n.items())
        for name, by_n in sorted(points.items())
    }


def _name(r: dict[str, Any]) -> str:
    name = str(r["agent"])
    if r.get("mode") == "rate":
        name += f" @ {r.get('rate', 0):g}/s"
    return f"{name} ({r['label']})" if r.get("label") else name


def draw_nomad(rows: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """The three ``bench.nomad_burst`` plots (module docstring); the first round of each run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    ok = [r for r in rows if not r.get("error")]
    if not ok:
        return written
    top = max(int(r["pods"]) for r in ok)
    at_top = [r for r in ok if int(r["pods"]) == top and r.get("round", 1) == 1]
    # the startup SLO is stated for 1,000 pods: plot that N when it was measured
    slo_n = 1000 if any(int(r["pods"]) == 1000 for r in ok) else top
    at_slo = [r for r in ok if int(r["pods"]) == slo_n and r.get("round", 1) == 1]

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for r in at_slo:
        vs = sorted(float(v) for v in r.get("to_running") or [])
        if vs:
            ax.plot(vs, [(i + 1) / len(vs) for i in range(len(vs))], label=_name(r))
    ax.axvline(5.0, color="grey", linestyle=":", label="SLO p99 5 s")
    ax.set_xlabel("create request → Running, per pod (s)")
    ax.set_ylabel(f"fraction of the {slo_n} pods")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(out / "nomad_startup.png")
    fig.savefig(written[-1])
    plt.close(fig)

    bursts = [r for r in ok if r.get("mode", "burst") == "burst"]
    data = series(bursts, "running_wall", 1.0)
    if data:
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
        for name, pts in data.items():
            ax.plot([n for n, _ in pts], [v for _, v in pts], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("pods in the burst (N)")
        ax.set_ylabel("create → all Running (s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(out / "nomad_ready.png")
        fig.savefig(written[-1])
        plt.close(fig)

    bars = [r for r in at_top if r.get("mode", "burst") == "burst"]
    columns: list[tuple[str, dict[str, float]]] = []
    for phase in ("create", "delete"):
        for r in bars:
            per = {
                k: float(v)
                for k, v in (r.get(f"requests_{phase}_per_pod") or {}).items()
                if k != "total"
            }
            columns.append((f"{_name(r)}\n{phase}", per))
    if columns:
        endpoints = sorted({k for _, per in columns for k in per})
        fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(columns) + 3), 5), dpi=110)
        bottom = [0.0] * len(columns)
        colors = plt.get_cmap("tab20").colors  # type: ignore[attr-defined]
        for i, ep in enumerate(endpoints):
            heights = [per.get(ep, 0.0) for _, per in columns]
            ax.bar(
                [c for c, _ in columns],
                heights,
                bottom=bottom,
                label=ep,
                color=colors[i % len(colors)],
            )
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax.axhline(3.0, color="grey", linestyle=":", label="target ≤ 3 per pod")
        ax.set_ylabel(f"Nomad requests per pod ({top} pods)")
        ax.tick_params(axis="x", labelsize=7)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        written.append(out / "nomad_requests.png")
        fig.savefig(written[-1])
        plt.close(fig)
    return written


def draw(rows: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    nomad = [r for r in rows if r.get("bench") == "nomad_burst"]
    rows = [r for r in rows if r.get("bench") != "nomad_burst"]
    written = draw_nomad(nomad, out) if nomad else []
    for filename, (key, ylabel, scale) in PLOTS.items():
        data = series(rows, key, scale)
        if not data:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
        for name, pts in data.items():
            ax.plot([n for n, _ in pts], [v for _, v in pts], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("pods in the burst (N)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / filename
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.plots", description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", type=Path, help="JSON files from bench.pods_burst --json")
    p.add_argument("--out", type=Path, default=Path("docs/bench"))
    args = p.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for path in args.results:
        rows.extend(json.loads(path.read_text()))
    for path in draw(rows, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
