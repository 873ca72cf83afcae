"""Machine facts and the ``docs/benchmarks.md`` writer shared by every benchmark script.

Each script owns one section of the document, fenced by HTML comments
(``<!-- bench:NAME:start -->`` … ``<!-- bench:NAME:end -->``).  ``--write-docs`` replaces only
that section, so running one benchmark never erases another's last results.  Every section
starts with the facts a reader needs to judge the numbers: date, machine, load average before
and after (this machine is shared; a loaded run is reported as such, not hidden), versions.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devstack.controlplane import ControlPlane

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "benchmarks.md"

DOC_HEADER = """# Benchmarks

Measured by the scripts in `bench/` (see `bench/README.md` for how to run them and what each
number means).  Each section below is rewritten by its own script with `--write-docs`; every
number stands next to a baseline measured in the same run, so compare ratios across machines,
not absolute times.
"""


def _first_line(argv: Sequence[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "unavailable"


def git_revision() -> str:
    rev = _first_line(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    dirty = _first_line(
        [
            "git",
            "-C",
            str(REPO),
            "status",
            "--porcelain",
            "--",
            "gateway",
            "translators",
            "templates",
        ]
    )
    return rev + (" (+ uncommitted changes)" if dirty not in ("", "unavailable") else "")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mem_total() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except (OSError, ValueError):
        pass
    return "unknown"


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def binary_version(path: Path) -> str:
    if not path.exists():
        return "not built"
    line = _first_line([str(path), "--version"])
    match = re.search(r"v?\d+\.\d+\.\d+\S*", line)
    return match.group(0) if match else line


@contextlib.contextmanager
def control_plane_session() -> Iterator[tuple[ControlPlane, Path]]:
    """A real etcd + kube-apiserver on 127.0.0.1 and a scratch directory; both go at the end."""
    from devstack.controlplane import launch_control_plane

    workdir = Path(tempfile.mkdtemp(prefix="vkgate-bench-"))
    try:
        cp = launch_control_plane()
        try:
            yield cp, workdir
        finally:
            cp.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def binary_versions(*names: str) -> str:
    """``name version`` of each devstack binary (``devstack.build``), comma-separated."""
    from devstack import build

    return ", ".join(f"{name} {binary_version(build.binary_path(name))}" for name in names)


def machine_lines(*, load_before: str, load_after: str, extra: Sequence[str] = ()) -> list[str]:
    """Bullet lines describing where and when the numbers were taken."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"- date: {now}; vkgate commit {git_revision()}",
        f"- machine: {affinity} CPUs usable (nproc) of {os.cpu_count()}, {cpu_model()}, "
        f"{mem_total()} RAM, {platform.system()} {platform.release()}",
        f"- python: {platform.python_implementation()} {sys.version.split()[0]}",
        f"- load average (1/5/15 min) before: {load_before}; after: {load_after} "
        "(the machine is shared with other work; a load above the CPU count means the numbers "
        "include waiting for a CPU)",
        *[f"- {line}" for line in extra],
    ]


def write_section(name: str, body: str, *, doc: Path = DOC) -> Path:
    """Replace (or append) the section ``name`` of ``doc`` with ``body``."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    block = f"{start}\n{body.rstrip()}\n{end}\n"
    text = doc.read_text() if doc.exists() else DOC_HEADER
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end) + r"\n?", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _m: block, text, count=1)
    else:
        text = text.rstrip() + "\n\n" + block
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    return doc


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; the first column left-aligned, the others right-aligned."""
    align = [":--"] + ["--:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def apply_sets(settings: dict[str, Any], items: Sequence[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` options onto a vkgate settings table: a dotted key, a JSON value
    (else the string)."""
    for item in items:
        key, _, raw = item.partition("=")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        *parents, leaf = key.split(".")
        node = settings
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return settings
