"""App wiring: translator loading by entry point, start/stop order, stop during startup, logging."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from typing import Any

import httpx
import pytest
from node_fakes import Component, FakeApi, FakeTranslator, settle

from gateway.app import App, load_translator
from gateway.config import Settings
from gateway.errors import StartupError
from gateway.kube.client import KubeClient, KubeConfig, RetryPolicy
from gateway.logging_setup import setup_logging
from translators import plugins
from translators.simulated import SimulatedTranslator
from vkgate_core.clock import FakeClock


def make_settings() -> Settings:
    s = Settings()
    s.node.name = "vk-test"
    return s


def test_loads_configured_translator_by_entry_point():
    s = make_settings()
    s.backend.tables["simulated"] = {"start_delay": 0.1}
    t = load_translator(s)
    assert isinstance(t, SimulatedTranslator)
    assert t.node_name == "vk-test"
    assert t.start_delay == 0.1


def test_unknown_backend_is_a_clear_startup_error():
    s = make_settings()
    s.backend.kind = "nope"
    with pytest.raises(
        StartupError, match=r"backend\.kind: no backend 'nope'.*vkgate\.translators"
    ):
        load_translator(s)


def test_translator_import_failure_names_the_extra(monkeypatch: pytest.MonkeyPatch):
    class BrokenEP:
        value = "translators.zun:SPEC"

        def load(self) -> Any:
            raise ImportError("No module named 'keystoneauth1'")

    monkeypatch.setattr(plugins, "entry_points", lambda group, name: [BrokenEP()])
    plugins.load.cache_clear()
    s = make_settings()
    s.backend.kind = "zun"
    with pytest.raises(StartupError, match=r"keystoneauth1.*vkgate\[zun\]"):
        load_translator(s)
    plugins.load.cache_clear()


class Recording(FakeTranslator):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    async def start(self) -> None:
        self.log.append("translator.start")

    async def close(self) -> None:
        self.log.append("translator.close")


def make_app(api: FakeApi, log: list[str], clock: FakeClock) -> App:
    kube = KubeClient(
        KubeConfig(server="https://kube.test"),
        transport=httpx.MockTransport(api.handler),
        clock=clock,
        qps=0,
        retry=RetryPolicy(delays=()),
    )
    return App(make_settings(), kube=kube, translator=Recording(log), clock=clock)


async def test_start_and_stop_order_and_node_left_on_stop(api: FakeApi, clock: FakeClock):
    log: list[str] = []
    app = make_app(api, log, clock)
    app.pods = Component("pods", log)
    app.kubelet = Component("kubelet", log)
    task = asyncio.create_task(app.run())
    await settle()
    assert "/api/v1/nodes/vk-test" in api.objects
    assert log == ["translator.start", "pods.start", "kubelet.start"]
    app.request_stop()
    await asyncio.wait_for(task, 5)
    assert log[3:] == ["kubelet.stop", "pods.stop", "translator.close"]
    assert "/api/v1/nodes/vk-test" in api.objects  # left in place
    assert app.node._tasks == []


async def test_stop_during_startup_cancels_it(api: FakeApi, clock: FakeClock):
    api.fail("*", ".", None, times=1000)  # API server unreachable: start() keeps retrying
    log: list[str] = []
    app = make_app(api, log, clock)
    task = asyncio.create_task(app.run())
    await settle()
    app.request_stop()
    await asyncio.wait_for(task, 5)
    assert log == ["translator.start", "translator.close"]


async def test_startup_error_propagates_after_cleanup(api: FakeApi, clock: FakeClock):
    api.lease_api = False
    log: list[str] = []
    app = make_app(api, log, clock)
    with pytest.raises(StartupError):
        await asyncio.wait_for(app.run(), 5)
    assert log == ["translator.start", "translator.close"]


def test_json_logs_one_object_per_line():
    buf = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("httpx").level)
    setup_logging("info", "json", stream=buf)
    try:
        logging.getLogger("gateway.test").info("hello %s", "world", extra={"node": "vk-1"})
        logging.getLogger("httpx").info("noise")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("httpx").setLevel(saved[2])
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert rec["message"] == "hello world"
    assert rec["level"] == "info"
    assert rec["logger"] == "gateway.test"
    assert rec["node"] == "vk-1"


async def test_readiness_means_node_registered_and_backend_reachable(
    api: FakeApi, clock: FakeClock
):
    log: list[str] = []
    app = make_app(api, log, clock)
    app.pods = Component("pods", log)
    assert "waiting for the leader Lease" in (app.readiness() or "")
    translator = app.translator
    assert isinstance(translator, Recording)
    translator.down = True
    task = asyncio.create_task(app.run())
    await settle()
    assert "/api/v1/nodes/vk-test" in api.objects
    reason = app.readiness() or ""
    assert "simulated backend unreachable" in reason
    translator.down = False
    await app.node.health.check_once()
    assert app.readiness() is None
    app.request_stop()
    await asyncio.wait_for(task, 5)
