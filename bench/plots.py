"""PNG plots of pod-burst results: time to all Running, CPU per pod and RSS against N.

Run: ``python -m bench.plots RESULTS.json [...] --out docs/bench``.

Reads the JSON that ``python -m bench.pods_burst --json F --label L`` writes (one file per N
and configuration) and draws, per agent and label, the median over the rounds:

* ``burst_ready.png``: create → all Running (wall seconds) against N;
* ``burst_cpu.png``: agent CPU per pod over the whole burst (Events included) against N;
* ``burst_rss.png``: agent RSS with N pods Running against N.

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
        name = f"{r['agent']} ({r['label']})" if r.get("label") else str(r["agent"])
        points[name][int(r["pods"])].append(float(value) * scale)
    return {
        name: sorted((n, statistics.median(vs)) for n, vs in by_n.items())
        for name, by_n in sorted(points.items())
    }


def draw(rows: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []
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
