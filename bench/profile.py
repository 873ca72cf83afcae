"""A py-spy profile of one agent over a burst, summarised for docs/benchmarks.md.

``bench.pods_burst --profile DIR`` starts ``py-spy record --format raw`` on the vkgate agent
when the first create is sent and stops it when the trailing Events are done; this module
turns the collapsed stacks into two small tables: where the samples sit by package (self time)
and the functions with the most self time.  py-spy comes with the ``bench`` extra.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from bench import report

_FRAME = re.compile(r"(.*) \((.*?):\d+\)$")


class Recorder:
    """``py-spy record`` attached to ``pid`` until ``stop()``."""

    def __init__(self, pid: int, out: Path, *, rate: int = 100) -> None:
        # the venv's bin/ is often not on PATH
        beside = Path(sys.executable).with_name("py-spy")
        exe = shutil.which("py-spy") or (str(beside) if beside.exists() else None)
        if exe is None:
            raise RuntimeError("py-spy not found: pip install 'vkgate[bench]'")
        self.out = out
        self.proc = subprocess.Popen(
            [
                exe,
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--nonblocking",
                "-o",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _where(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    fn, path = m.groups()
    path = re.sub(r".*/site-packages/", "", path)
    path = re.sub(r".*/lib/python3\.\d+/", "stdlib/", path)
    path = re.sub(r"^.*?/(gateway|translators|vkgate_core|bench)/", r"\1/", path)
    return f"{path}:{fn}"


def _package(where: str) -> str:
    path = where.split(":", 1)[0]
    if path.startswith("stdlib/"):
        parts = path.split("/")
        return "stdlib " + (parts[1] if len(parts) > 2 else parts[1].removesuffix(".py"))
    return path.split("/", 1)[0].removesuffix(".py")


def summarize(raw: Path, *, top: int = 15) -> str:
    """Markdown: samples by package (self) and the top functions by self time."""
    own: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        own[_where(stack.split(";")[-1])] += n
    if not total:
        return "(no samples)\n"
    packages: Counter[str] = Counter()
    for where, n in own.items():
        packages[_package(where)] += n
    pct = lambda n: f"{100 * n / total:.1f} %"  # noqa: E731
    out = [f"{total} samples.", ""]
    out.append(
        report.table(
            ["package (self time)", "share"], [[p, pct(n)] for p, n in packages.most_common(top)]
        )
    )
    out += [
        "",
        report.table(
            ["function (self time)", "share"], [[f"`{w}`", pct(n)] for w, n in own.most_common(top)]
        ),
    ]
    return "\n".join(out) + "\n"
