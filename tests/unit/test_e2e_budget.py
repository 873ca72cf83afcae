"""The e2e tier's time budgets (tests/e2e/budget.py): a test that passes over its budget fails
and says so; one within it, or over the default budget's share but marked, passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

E2E = Path(__file__).resolve().parents[1] / "e2e"

SAMPLE = """
import time
import pytest

pytestmark = pytest.mark.e2e

@pytest.mark.budget(1, "a test of the budget")
def test_over_its_budget():
    time.sleep(1.3)

@pytest.mark.budget(30, "room to spare")
def test_within_its_budget():
    time.sleep(0.05)

def test_within_the_default_budget():
    pass

@pytest.mark.budget(1, "a failure stays a failure")
def test_failing_fast():
    assert False, "its own failure"
"""


def test_a_test_over_its_budget_fails_naming_the_budget(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "budget", "-p", "no:cacheprovider",
         "-p", "no:randomly", "-p", "no:xdist", "-q", "-rf", "test_sample.py"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(E2E)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "2 failed, 2 passed" in out, out
    assert "test_over_its_budget passed but took 1." in out, out
    assert "over its budget of 1s" in out and "@pytest.mark.budget(seconds, why)" in out, out
    assert "its own failure" in out, out
