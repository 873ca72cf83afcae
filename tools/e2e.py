"""The e2e tier's runner: parallel workers, random order, the tests that must run alone after
them, one report — and, with ``--runs N``, the tier N times with each test's pass rate.

    python -m tools.e2e [--workers W] [--seed S] [--runs N] [-- PYTEST ARGS OR PATHS]

``tox -e e2e`` runs it once; ``tox -e e2e-repeat`` runs it ``VKGATE_E2E_RUNS`` times (default
3), over the whole tier or the test files given after ``--``.  Each run has two parts, both
inside ``python -m devstack.netns`` (a network and PID namespace of its own, so nothing
survives the run):

1. every e2e test not marked ``alone``, on W pytest-xdist workers (``--dist loadfile``: a
   module's tests and its module-scoped gateway stay on one worker), each worker in a network
   namespace of its own with its own clusters (tests/e2e/conftest.py);
2. the tests marked ``alone`` (they measure time or CPU), in one process.

Order: pytest-randomly shuffles modules and the tests in each, from one seed printed at the
start (``VKGATE_E2E_SEED=S`` or ``--seed`` reruns that order); the seed is not reset before
each test (``--randomly-dont-reset-seed``), so names drawn from ``random`` stay unique.

Report: worker count and seed; the slowest 30 tests of both parts; under ``CI=true`` a skipped
test is a failure (a tier must never shrink silently); with ``--runs N`` every test's pass rate,
and any test under 100 % fails the run — a flaky test is a bug to fix, never a retry
(docs/design/control-plane.md, "The e2e tier in parallel").
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Workers on the 2-core reference machine: the tier waits on servers far more than it computes
#: (measured in docs/design/control-plane.md, "The e2e tier in parallel").
DEFAULT_WORKERS = 3
#: pytest's exit status when its selection held no test.
NO_TESTS = 5


@dataclass
class Result:
    """One test's outcome in one run."""

    nodeid: str
    outcome: str  # passed | failed | error | skipped
    seconds: float
    message: str = ""


@dataclass
class Run:
    seed: int
    results: list[Result] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)
    seconds: float = 0.0


def parse_junit(path: Path) -> list[Result]:
    """The test cases of a pytest junit-xml file (its ``time`` is setup + call + teardown)."""
    if not path.exists():
        return []
    results: list[Result] = []
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        module = classname.replace(".", "/")
        nodeid = f"{module}.py::{name}" if module else name
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            child = case.find(tag)
            if child is not None:
                outcome = "failed" if tag == "failure" else tag
                message = next(iter((child.get("message") or "").splitlines()), "")[:200]
                break
        results.append(Result(nodeid, outcome, float(case.get("time") or 0.0), message))
    return results


def pytest_command(
    *, alone: bool, workers: int, seed: int, junit: Path, args: Sequence[str]
) -> list[str]:
    paths = [a for a in args if not a.startswith("-") and ("/" in a or a.endswith(".py"))]
    options = [a for a in args if a not in paths]
    selection = "e2e and alone" if alone else "e2e and not alone"
    cmd = [
        sys.executable, "-m", "devstack.netns", "--",
        sys.executable, "-m", "pytest", "-q", "-m", selection,
        "-p", "randomly", f"--randomly-seed={seed}", "--randomly-dont-reset-seed",
        "--durations=30", f"--junitxml={junit}",
    ]  # fmt: skip
    if not alone and workers > 0:
        cmd += ["-n", str(workers), "--dist", "loadfile"]
    return cmd + options + (paths or ["tests/e2e"])


def run_once(index: int, *, workers: int, seed: int, args: Sequence[str], out: Path) -> Run:
    run = Run(seed=seed)
    started = time.monotonic()
    for alone in (False, True):
        part = "alone" if alone else "parallel"
        junit = out / f"run{index}-{part}.xml"
        cmd = pytest_command(alone=alone, workers=workers, seed=seed, junit=junit, args=args)
        print(f"\n=== e2e run {index}, {part} part: {' '.join(cmd)}", flush=True)
        t0 = time.monotonic()
        code = subprocess.run(cmd, check=False).returncode
        print(f"=== e2e run {index}, {part} part: exit {code} in {time.monotonic() - t0:.0f}s")
        run.exit_codes.append(code)
        run.results += parse_junit(junit)
    run.seconds = time.monotonic() - started
    return run


def slowest(results: Sequence[Result], n: int = 30) -> list[Result]:
    return sorted(results, key=lambda r: -r.seconds)[:n]


def pass_rates(runs: Sequence[Run]) -> dict[str, tuple[int, int]]:
    """nodeid → (runs it passed, runs it ran in)."""
    rates: dict[str, tuple[int, int]] = {}
    for run in runs:
        for r in run.results:
            passed, ran = rates.get(r.nodeid, (0, 0))
            rates[r.nodeid] = (passed + (r.outcome == "passed"), ran + 1)
    return rates


def verdict(runs: Sequence[Run], *, ci: bool) -> list[str]:
    """Why the runs fail (empty: they pass)."""
    problems: list[str] = []
    for i, run in enumerate(runs, 1):
        bad = [c for c in run.exit_codes if c not in (0, NO_TESTS)]
        if bad:
            problems.append(f"run {i}: pytest exited {bad}")
        if not run.results:
            problems.append(f"run {i}: ran no test")
        if ci:
            skipped = [r.nodeid for r in run.results if r.outcome == "skipped"]
            if skipped:
                problems.append(
                    f"run {i}: CI=true and {len(skipped)} e2e test(s) skipped: {skipped[:5]}"
                )
    if len(runs) > 1:
        flaky = {k: v for k, v in pass_rates(runs).items() if v[0] != v[1]}
        if flaky:
            problems.append(f"{len(flaky)} test(s) under 100 %: {sorted(flaky)[:10]}")
    return problems


def report(runs: Sequence[Run], *, workers: int) -> None:
    results = [r for run in runs for r in run.results]
    print(f"\n=== e2e: {workers} worker(s), seed(s) {[run.seed for run in runs]}")
    print("=== slowest 30 tests (setup + call + teardown, both parts):")
    for r in slowest(results):
        print(f"{r.seconds:8.1f}s {r.outcome:8} {r.nodeid}")
    if len(runs) > 1:
        print(f"=== pass rate per test over {len(runs)} runs (each run in its own order):")
        rates = pass_rates(runs)
        for nodeid, (passed, ran) in sorted(rates.items(), key=lambda kv: kv[1][0] / kv[1][1]):
            print(f"{100 * passed / ran:5.0f}% ({passed}/{ran}) {nodeid}")
        perfect = sum(1 for p, n in rates.values() if p == n)
        print(f"=== {perfect} of {len(rates)} tests passed in every run")
    for i, run in enumerate(runs, 1):
        counts = {o: sum(1 for r in run.results if r.outcome == o) for o in _OUTCOMES}
        print(
            f"=== run {i} (seed {run.seed}): {run.seconds:.0f}s, "
            + ", ".join(f"{n} {o}" for o, n in counts.items())
        )


_OUTCOMES = ("passed", "failed", "error", "skipped")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("VKGATE_E2E_WORKERS", DEFAULT_WORKERS)),
        help=f"pytest-xdist workers (VKGATE_E2E_WORKERS; default {DEFAULT_WORKERS}; 0: none)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=int(os.environ.get("VKGATE_E2E_SEED") or random.randrange(1, 2**31)),
        help="the order's seed (VKGATE_E2E_SEED; default: a new one, printed)",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=int(os.environ.get("VKGATE_E2E_RUNS", "1")),
        help="run the tier this many times, each in a new order (VKGATE_E2E_RUNS)",
    )
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    args = ns.pytest_args[1:] if ns.pytest_args[:1] == ["--"] else ns.pytest_args
    if ns.runs < 1 or ns.workers < 0:
        parser.error("--runs must be >= 1 and --workers >= 0")
    print(
        f"=== e2e: {ns.workers} worker(s), seed {ns.seed}, {ns.runs} run(s) "
        f"(this order again: VKGATE_E2E_SEED={ns.seed})",
        flush=True,
    )
    # SIGTERM (tox stopping, a CI time-out) ends the runs like Ctrl-C: the report of the runs
    # that finished is still printed, and the run fails
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    runs: list[Run] = []
    stopped = False
    with tempfile.TemporaryDirectory(prefix="vkgate-e2e-") as tmp:
        try:
            for i in range(1, ns.runs + 1):
                runs.append(
                    run_once(i, workers=ns.workers, seed=ns.seed + i - 1, args=args, out=Path(tmp))
                )
        except KeyboardInterrupt:
            stopped = True
    report(runs, workers=ns.workers)
    problems = verdict(runs, ci=os.environ.get("CI", "").lower() in {"1", "true", "yes"})
    if stopped:
        problems.append(f"stopped after {len(runs)} of {ns.runs} run(s)")
    for p in problems:
        print(f"=== e2e FAILED: {p}")
    results = [r for run in runs for r in run.results]
    failed = sum(1 for r in results if r.outcome in ("failed", "error"))
    skipped = sum(1 for r in results if r.outcome == "skipped")
    print(f"e2e: {len(results) - failed - skipped} passed, {failed} failed, {skipped} skipped")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
