"""The start-up gate (gateway.inputs, docs/design/startup.md): which inputs are pending and why,
``wait()``, the watchdog's log lines and wake-ups, and the bounded report ``InputsNotSynced`` —
all on a fake clock."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from gateway.inputs import NOT_SYNCED, Input, InputsGate
from gateway.kube.errors import Forbidden
from gateway.kube.reflector import Reflector
from vkgate_core.clock import FakeClock


async def settle(rounds: int = 50) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def run_for(clock: FakeClock, seconds: float, step: float = 0.5) -> None:
    for _ in range(int(seconds / step)):
        await clock.advance(step)
        await settle()


async def test_reason_names_every_pending_input_and_why_until_all_loaded() -> None:
    clock = FakeClock()
    problem = {"text": ""}
    templates = Input("template ConfigMaps in vkgate-system", problem=lambda: problem["text"])
    labels = Input("namespace team labels")
    gate = InputsGate([templates, labels], clock=clock, timeout=60)
    assert gate.reason() == (
        "pod syncs wait for template ConfigMaps in vkgate-system; namespace team labels"
    )
    problem["text"] = "list failed: 403 Forbidden"
    assert gate.reason() == (
        "pod syncs wait for template ConfigMaps in vkgate-system (list failed: 403 Forbidden); "
        "namespace team labels"
    )
    waiter = asyncio.create_task(gate.wait())
    labels.loaded.set()
    await settle()
    assert not waiter.done() and not gate.is_open
    assert gate.pending() == [templates]
    templates.loaded.set()
    await settle()
    assert waiter.done() and gate.is_open and gate.reason() is None


async def test_an_input_added_later_closes_the_gate_again_until_it_loads() -> None:
    gate = InputsGate(clock=FakeClock())
    assert gate.is_open
    cache = Input("the cache of pods bound to vk-1")
    gate.add(cache, cache)
    assert (
        gate.inputs == [cache]
        and gate.reason() == "pod syncs wait for the cache of pods bound to vk-1"
    )


async def test_the_watchdog_logs_progress_wakes_subscribers_and_names_the_error_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.inputs")
    clock = FakeClock()
    problem = {"text": ""}
    templates = Input("template ConfigMaps in vkgate-system", problem=lambda: problem["text"])
    backend = Input("the nomad backend's first list")
    gate = InputsGate([templates, backend], clock=clock, timeout=5, node="vk-1")
    wakes: list[str | None] = []
    gate.subscribe(lambda: wakes.append(gate.reason()))
    await gate.start()
    try:
        await settle()
        backend.loaded.set()
        await settle()
        assert "node vk-1: the nomad backend's first list loaded after 0.0s" in caplog.text
        assert wakes == ["pod syncs wait for template ConfigMaps in vkgate-system"]
        problem["text"] = "list failed: 403 Forbidden"
        await run_for(clock, 1.0)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert [r.getMessage() for r in warnings] == [
            "node vk-1: pod syncs wait for template ConfigMaps in vkgate-system: "
            "list failed: 403 Forbidden"
        ]
        assert not gate.overdue
        await run_for(clock, 10.0)  # past the 5 s bound: reported once, as the named error
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and errors[0].startswith(
            f"node vk-1: {NOT_SYNCED}: not loaded after 5s: template ConfigMaps in vkgate-system "
            "(list failed: 403 Forbidden)"
        )
        assert gate.overdue and (gate.reason() or "").startswith(f"{NOT_SYNCED}: ")
        assert wakes[-1] == gate.reason()
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
        assert not gate.is_open  # still waiting: never a default
        problem["text"] = ""
        templates.loaded.set()
        await run_for(clock, 1.0)
        assert wakes[-1] is None and gate.is_open and not gate.overdue
        assert gate.waited is not None and gate.waited >= 11
        assert "inputs synced after" in caplog.text and "pod syncs start" in caplog.text
        assert gate._task is not None and gate._task.done()
    finally:
        await gate.stop()


class FailingList:
    """list answers 403 until ``allowed``; the watch stays open with no event."""

    def __init__(self) -> None:
        self.allowed = False

    async def list(self, path: str, *, params: Any = None) -> dict[str, Any]:
        await asyncio.sleep(0)
        if not self.allowed:
            raise Forbidden(
                'namespaces is forbidden: User "vkgate" cannot list resource "namespaces"',
                status=403,
                reason="Forbidden",
            )
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    async def watch(self, path: str, *, params: Any = None) -> Any:
        await asyncio.Event().wait()
        yield {}


async def test_a_reflector_input_reports_its_list_error_until_the_first_list_succeeds() -> None:
    clock = FakeClock()
    kube = FailingList()
    reflector: Reflector[dict[str, Any]] = Reflector(kube, "/api/v1/namespaces", clock=clock)  # type: ignore[arg-type]
    cache = Input.of_reflector("namespace team labels", reflector)

    async def ignore(*_: Any) -> None:
        return None

    task = asyncio.create_task(reflector.run(ignore))
    try:
        await settle()
        assert not cache.done
        assert cache.problem().startswith("list failed: ") and "cannot list" in cache.problem()
        assert "(list failed: " in cache.describe()
        kube.allowed = True
        await run_for(clock, 5)
        assert cache.done and cache.problem() == "" and cache.describe() == "namespace team labels"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
