"""The e2e tier's runner (tools/e2e.py): what it runs, what it reads back, and when it fails —
a skipped test under CI, a run with no test, a test under a 100 % pass rate over repeats."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tools import e2e

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.e2e.test_pods" name="test_a" time="12.5"/>
<testcase classname="tests.e2e.test_pods" name="test_b[x]" time="3.0">
  <failure message="AssertionError: boom&#10;more">trace</failure></testcase>
<testcase classname="tests.e2e.test_node" name="test_c" time="0.1">
  <skipped message="no go"/></testcase>
<testcase classname="tests.e2e.test_node" name="test_d" time="1.0">
  <error message="fixture broke"/></testcase>
</testsuite></testsuites>
"""


def _results(tmp_path: Path, xml: str = JUNIT) -> list[e2e.Result]:
    path = tmp_path / "r.xml"
    path.write_text(xml)
    return e2e.parse_junit(path)


def test_junit_cases_become_results_with_their_outcome_and_time(tmp_path: Path) -> None:
    got = {r.nodeid: (r.outcome, r.seconds, r.message) for r in _results(tmp_path)}
    assert got == {
        "tests/e2e/test_pods.py::test_a": ("passed", 12.5, ""),
        "tests/e2e/test_pods.py::test_b[x]": ("failed", 3.0, "AssertionError: boom"),
        "tests/e2e/test_node.py::test_c": ("skipped", 0.1, "no go"),
        "tests/e2e/test_node.py::test_d": ("error", 1.0, "fixture broke"),
    }
    assert e2e.parse_junit(tmp_path / "missing.xml") == []


def test_the_parallel_part_runs_on_workers_by_file_and_the_alone_part_in_one_process() -> None:
    par = e2e.pytest_command(alone=False, workers=3, seed=7, junit=Path("j.xml"), args=["-x"])
    alone = e2e.pytest_command(alone=True, workers=3, seed=7, junit=Path("k.xml"), args=[])
    assert par[:4] == [sys.executable, "-m", "devstack.netns", "--"]
    assert par[par.index("-n") : par.index("-n") + 4] == ["-n", "3", "--dist", "loadfile"]
    assert "e2e and not alone" in par and "e2e and alone" in alone
    assert "-n" not in alone
    for cmd in (par, alone):
        assert "--randomly-seed=7" in cmd and "--randomly-dont-reset-seed" in cmd
        assert cmd[-1] == "tests/e2e"
    # test files given: they replace the whole tier
    files = e2e.pytest_command(
        alone=False, workers=0, seed=1, junit=Path("j"), args=["tests/e2e/test_pods.py", "-k", "x"]
    )
    assert files[-1] == "tests/e2e/test_pods.py" and "tests/e2e" not in files
    assert "-n" not in files


def _run(seed: int, *outcomes: tuple[str, str], codes: tuple[int, ...] = (0, 5)) -> e2e.Run:
    return e2e.Run(
        seed=seed,
        results=[e2e.Result(n, o, 1.0) for n, o in outcomes],
        exit_codes=list(codes),
    )


def test_a_clean_run_passes_and_an_empty_alone_part_is_fine() -> None:
    assert e2e.verdict([_run(1, ("a", "passed"), ("b", "passed"))], ci=True) == []


@pytest.mark.parametrize(
    ("runs", "ci", "why"),
    [
        ([_run(1, ("a", "passed"), codes=(1, 0))], False, "pytest exited [1]"),
        ([_run(1, codes=(5, 5))], False, "ran no test"),
        ([_run(1, ("a", "passed"), ("b", "skipped"))], True, "CI=true and 1 e2e test(s) skipped"),
        (
            [_run(1, ("a", "passed")), _run(2, ("a", "failed"), codes=(1, 5))],
            False,
            "1 test(s) under 100 %",
        ),
    ],
)
def test_the_runner_fails_loudly(runs: list[e2e.Run], ci: bool, why: str) -> None:
    problems = e2e.verdict(runs, ci=ci)
    assert any(why in p for p in problems), problems


def test_a_skip_outside_ci_is_reported_not_failed() -> None:
    assert e2e.verdict([_run(1, ("a", "passed"), ("b", "skipped"))], ci=False) == []


def test_pass_rates_count_each_run() -> None:
    runs = [_run(1, ("a", "passed"), ("b", "passed")), _run(2, ("a", "passed"), ("b", "error"))]
    assert e2e.pass_rates(runs) == {"a": (2, 2), "b": (1, 2)}
    assert [r.nodeid for r in e2e.slowest(runs[0].results, 1)] == ["a"]
