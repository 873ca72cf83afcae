"""``wait_until``: poll a condition in an e2e test, failing with what was last seen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(what: str, fn: Callable[[], Any], timeout: float = 60.0, every: float = 0.3) -> Any:
    """Call ``fn`` until it returns something truthy (returned); AssertionError after
    ``timeout`` seconds naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
