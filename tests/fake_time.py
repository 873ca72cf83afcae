"""A translator's clock (``TranslatorContext.clock``) for tests whose time something else owns:
a backend fake's own clock (Batch), a ``FakeClock`` the test moves (Nomad metrics), or a
fixed instant.  Wall time is ``now()``, monotonic time follows it, and every sleep goes to
``sleep`` — a recorder that returns at once — so no test waits on real time and each can
assert the delays the code asked for."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Awaitable, Callable

from vkgate_core.clock import FakeClock


class FakeTime:
    """``FakeTime(sleep=recorder, now=fake.now_fn)``; without ``now``: a ``FakeClock``'s."""

    def __init__(
        self,
        *,
        sleep: Callable[[float], Awaitable[None]],
        now: Callable[[], _dt.datetime] | None = None,
    ) -> None:
        self._sleep = sleep
        self._now = now if now is not None else FakeClock().now

    def now(self) -> _dt.datetime:
        return self._now()

    def monotonic(self) -> float:
        return self._now().timestamp()

    async def sleep(self, seconds: float) -> None:
        await self._sleep(seconds)
