"""One probe of one container instance, like the kubelet's prober worker
(``pkg/kubelet/prober/worker.go``).

* The result starts as the kubelet's initial value: readiness *failure* (a container with a
  readiness probe is not ready until it passes), liveness *success*, startup *unknown*.
* No attempt before ``initialDelaySeconds`` after the container started; then one attempt per
  ``periodSeconds``, each bounded by ``timeoutSeconds``.
* The result changes only after ``successThreshold`` consecutive successes or
  ``failureThreshold`` consecutive failures; every failed attempt is reported (the Unhealthy
  Event; the Event recorder aggregates repeats as the kubelet's does).
* A liveness or startup failure that reached its threshold puts the worker on hold: the
  container is restarted, and its next instance gets new workers.
* Readiness and liveness wait until the container is *started* (its startup probe passed, or
  it has none): ``gate`` says when.

Time is the agent's ``Clock``, so every rule above is tested with a fake clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gateway.probes.handlers import Result, Runner, Target
from gateway.probes.spec import Kind, ProbeSpec
from vkgate_core.clock import Clock

log = logging.getLogger("gateway.probes")

#: (worker, thresholded result) — called when the result changes.
OnResult = Callable[["Worker", bool], Awaitable[None]]
#: (worker, failed attempt) — called on every failed attempt.
OnFailure = Callable[["Worker", Result], Awaitable[None]]


class Worker:
    def __init__(
        self,
        spec: ProbeSpec,
        target: Target,
        *,
        run: Runner,
        clock: Clock,
        on_result: OnResult,
        on_failure: OnFailure,
        delay: float,
        gate: Callable[[], bool] = lambda: True,
    ) -> None:
        """``delay``: seconds until the first attempt (what is left of initialDelaySeconds)."""
        self.spec = spec
        self.target = target
        self._run = run
        self._clock = clock
        self._on_result = on_result
        self._on_failure = on_failure
        self._delay = delay
        self._gate = gate
        #: The thresholded result: None = unknown (startup, before its verdict).
        self.result: bool | None = {Kind.READINESS: False, Kind.LIVENESS: True}.get(spec.kind)
        self._last: bool | None = None
        self._run_length = 0
        self.on_hold = False
        self.attempts = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(
            self._loop(),
            name=f"probe-{self.spec.kind}-{self.target.ref.key}/{self.target.container}",
        )

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _loop(self) -> None:
        await self._clock.sleep(self._delay)
        while not self.on_hold:
            if self._gate():
                try:
                    await self.attempt()
                except asyncio.CancelledError:
                    raise
                except Exception:  # a bug in one probe must not stop the others
                    log.exception("probe %s of %s failed", self.spec.kind, self.target.container)
            if self.on_hold or (self.spec.kind is Kind.STARTUP and self.result):
                return  # a startup probe that passed is done; a failed one waits for a restart
            await self._clock.sleep(self.spec.period)

    async def attempt(self) -> None:
        """One attempt, and what follows from it."""
        spec = self.spec
        self.attempts += 1
        res = await self._run(spec.handler, spec.action, self.target, spec.timeout)
        if not res.ok:
            await self._on_failure(self, res)
        if res.ok == self._last:
            self._run_length += 1
        else:
            self._last, self._run_length = res.ok, 1
        threshold = spec.success_threshold if res.ok else spec.failure_threshold
        if self._run_length < threshold or res.ok == self.result:
            return
        self.result = res.ok
        if not res.ok and spec.kind is not Kind.READINESS:
            self.on_hold = True  # restarted: the next instance of the container gets new workers
        await self._on_result(self, res.ok)
