"""A PodController on the fake API server (``pods_fakes.FakeKube``) and the simulated backend,
on a fake clock: for tests that drive one node setting or one backend feature end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pods_fakes import FakeKube, Polled, settle, sim_context

from gateway.config import Settings
from gateway.kube.events import EventRecorder
from gateway.pods.controller import PodController
from translators.simulated import SimulatedTranslator
from vkgate_core.clock import FakeClock


class ControllerHarness:
    """``node`` settings go to ``Settings.node`` (e.g. ``daemonsets="run"``);
    ``allow_probe_host`` is ``probes.allow_host``."""

    def __init__(
        self, tmp_path: Path, *, node: str, allow_probe_host: bool = False, **node_settings: Any
    ) -> None:
        self.allow_probe_host = allow_probe_host
        self.clock = FakeClock()
        self.kube = FakeKube(self.clock)
        self.tmp_path = tmp_path
        self.node = node
        self.node_settings = node_settings
        self.sim: SimulatedTranslator | None = None
        self.ctl: PodController | None = None

    async def start(self) -> PodController:
        s = Settings()
        s.node.name = self.node
        for k, v in self.node_settings.items():
            setattr(s.node, k, v)
        s.probes.allow_host = self.allow_probe_host
        s.pods.reconcile_interval = 5.0
        self.sim = SimulatedTranslator(
            sim_context(self.clock, self.node),
            state_file=str(self.tmp_path / "sim.json"),
            start_delay=1.0,
        )
        events = EventRecorder(self.kube, host=self.node, clock=self.clock)  # type: ignore[arg-type]
        self.ctl = PodController(
            self.kube,  # type: ignore[arg-type]
            Polled(self.sim),
            events,
            s,
            clock=self.clock,
            host_ip=lambda: "127.0.0.9",
        )
        await self.ctl.start()
        await settle()
        await self.clock.advance(0)
        await settle()
        return self.ctl

    async def stop(self) -> None:
        if self.ctl is not None:
            await self.ctl.stop()
            self.ctl = None
