"""Fakes shared by the kube client tests."""

from __future__ import annotations

from vkgate_core.clock import FakeClock


class SleepRecorder(FakeClock):
    """A fake clock whose sleep returns at once but records (and adds) the time slept."""

    def __init__(self) -> None:
        super().__init__()
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self._mono += seconds
