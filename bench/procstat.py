"""Resident memory and CPU time of a process from ``/proc`` (Linux), without psutil.

A benchmark wants three numbers per process: RSS now (``VmRSS``), its high-water mark
(``VmHWM``, kept by the kernel, so a short peak between two samples is not missed) and CPU
seconds used (``utime + stime`` from ``/proc/<pid>/stat``).  CPU is reported as deltas
between phases of a run, so a long-lived process (the API server) is charged only for the
phase being measured.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProcSample:
    """One reading; None fields mean the process (or the field) was not there."""

    rss_bytes: int | None
    hwm_bytes: int | None
    cpu_seconds: float | None


def _status_kib(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` (not its children) in seconds."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the ")" closing the command name start with field 3 (state).
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (IndexError, ValueError):
        return None


def sample(pid: int | None) -> ProcSample:
    if pid is None:
        return ProcSample(None, None, None)
    return ProcSample(_status_kib(pid, "VmRSS"), _status_kib(pid, "VmHWM"), cpu_seconds(pid))


def mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f}"


def machine() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, summed over its cores
    (``/proc/stat``'s ``cpu`` line; busy is everything but ``idle`` and ``iowait``)."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return (0.0, 0.0)
    ticks = [int(v) for v in first[1:9]]  # user nice system idle iowait irq softirq steal
    total = sum(ticks)
    return ((total - ticks[3] - ticks[4]) / _TICKS, total / _TICKS)


def by_command() -> dict[str, float]:
    """CPU seconds (utime + stime) of every live process, summed by command name (``comm``):
    who used the machine during a phase, as a delta of two readings.  A process that ended
    between them is missed, which a benchmark's long-lived servers do not."""
    out: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.find("(") + 1 : stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2 :].split()
        try:
            out[comm] = out.get(comm, 0.0) + (int(fields[11]) + int(fields[12])) / _TICKS
        except (IndexError, ValueError):
            continue
    return out
