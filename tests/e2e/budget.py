"""Time budgets of the e2e tests: a test whose call phase passes but takes longer than its
budget fails, naming the budget — slowness shows up as a failure of one test that can be read,
not as a CI time-out (docs/design/control-plane.md, "The e2e tier in parallel").

Every test marked ``e2e`` has ``DEFAULT_BUDGET``; one that needs longer says so and why with
``@pytest.mark.budget(seconds, why)``.  tests/e2e/conftest.py registers the hook.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

#: A test's call phase may take this long unless it is marked ``budget(seconds, why)``.
DEFAULT_BUDGET = 60.0


def budget_of(item: pytest.Item) -> float:
    """The test's budget in seconds: its ``budget`` marker, else ``DEFAULT_BUDGET``."""
    mark = item.get_closest_marker("budget")
    if mark is None:
        return DEFAULT_BUDGET
    seconds = mark.args[0] if mark.args else mark.kwargs.get("seconds")
    why = mark.args[1] if len(mark.args) > 1 else mark.kwargs.get("why", "")
    if not isinstance(seconds, int | float) or seconds <= 0 or not why:
        raise pytest.UsageError(f"{item.nodeid}: budget(seconds > 0, why) needs both")
    return float(seconds)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test whose call phase passed but took longer than its budget fails, saying so: slowness
    shows up as a failure that names the test, not as a CI time-out."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if call.when != "call" or not report.passed or item.get_closest_marker("e2e") is None:
        return
    budget = budget_of(item)
    if call.duration > budget:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} passed but took {call.duration:.1f}s, over its budget of "
            f"{budget:.0f}s: make it faster, or mark it @pytest.mark.budget(seconds, why) "
            f"with the reason it needs that long"
        )
