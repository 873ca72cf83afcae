"""Inputs synced: the one gate between start-up and the first pod sync (docs/design/startup.md).

A pod is rendered and submitted once; a submitted pod is never rendered again.  So no pod may be
synced before every source its rendering reads has finished its initial load — a pod rendered
before its team's templates or its namespace's team label arrived keeps the default template
for good.  Each such source is an ``Input`` (a name, an event set once it is loaded, and why it
is not loaded yet); a node's ``InputsGate`` holds the process-wide inputs (the template
ConfigMaps, the namespace team labels) and the node's own (its pod cache, its backend's first
list).  Three readers ask the gate, and nobody else decides:

* the pod controller starts its workers only after ``await gate.wait()`` (gateway.pods.controller);
* the Node's ``Ready`` condition is ``False`` with reason ``InputsNotSynced`` and the gate's
  ``reason()`` as its message while an input is pending (gateway.node.controller) — pods must not
  be bound to a node that would render them wrongly;
* ``/readyz`` answers 503 with the same reason (gateway.nodeunit).

The wait itself is not bounded: a pod is never rendered with an input missing.  Its report is:
once ``pods.inputs_timeout`` has passed, the reason turns into the named error
``InputsNotSynced: … not loaded after N s: …``, logged once at ERROR, and stays in the Node
condition and ``/readyz`` until the input loads (the sources keep retrying on their own).
``run()`` (started with the node) logs each input as it loads, each problem as it changes, and
wakes the subscribers (the Node status loop) on every change of ``reason()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from gateway.kube.errors import truncate
from gateway.kube.reflector import Reflector
from vkgate_core.clock import Clock

log = logging.getLogger("gateway.inputs")

#: The Node condition reason and the name of the error once the wait outlived its bound.
NOT_SYNCED = "InputsNotSynced"
#: How often ``run()`` looks at the pending inputs' problems and the bound while waiting.
POLL = 1.0


def _no_problem() -> str:
    return ""


class Input:
    """One source pod rendering reads: loaded once ``loaded`` is set (never cleared)."""

    def __init__(
        self,
        name: str,
        *,
        loaded: asyncio.Event | None = None,
        problem: Callable[[], str] = _no_problem,
    ) -> None:
        #: What it is, for people: "template ConfigMaps in vkgate-system".
        self.name = name
        self.loaded = loaded if loaded is not None else asyncio.Event()
        #: Why it is not loaded yet ("" while it is simply loading).
        self.problem = problem

    @classmethod
    def of_reflector(cls, name: str, reflector: Reflector[Any]) -> Input:
        """A list+watch cache: loaded once its first list was applied; its problem is the
        reflector's last list or watch error."""
        return cls(name, loaded=reflector.synced, problem=lambda: reflector.last_error)

    @property
    def done(self) -> bool:
        return self.loaded.is_set()

    def describe(self) -> str:
        problem = self.problem()
        return f"{self.name} ({truncate(problem)})" if problem else self.name

    def __repr__(self) -> str:
        return f"Input({self.name!r}, done={self.done})"


class InputsGate:
    """The inputs of one node's pod syncs; open once every one of them is loaded."""

    def __init__(
        self,
        inputs: Iterable[Input] = (),
        *,
        clock: Clock,
        timeout: float = 60.0,
        node: str = "",
    ) -> None:
        self.inputs: list[Input] = []
        self.clock = clock
        #: Seconds of waiting after which the wait is reported as the error ``InputsNotSynced``.
        self.timeout = timeout
        self.node = node
        #: Monotonic time the wait started (``start()``); None: not started.
        self.since: float | None = None
        #: Seconds from ``start()`` until the gate opened (None: not open yet).
        self.waited: float | None = None
        self._listeners: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None
        self.add(*inputs)

    def add(self, *inputs: Input) -> None:
        for i in inputs:
            if i not in self.inputs:
                self.inputs.append(i)

    def subscribe(self, callback: Callable[[], None]) -> None:
        """``callback()`` runs whenever ``reason()`` changes (e.g. the Node status loop's wake)."""
        self._listeners.append(callback)

    # -- what the readers ask --------------------------------------------------------------

    def pending(self) -> list[Input]:
        return [i for i in self.inputs if not i.done]

    @property
    def is_open(self) -> bool:
        return not self.pending()

    @property
    def overdue(self) -> bool:
        """True once the gate has waited ``timeout`` seconds and is still closed."""
        return (
            self.since is not None
            and not self.is_open
            and self.clock.monotonic() - self.since >= self.timeout
        )

    def reason(self) -> str | None:
        """None when open; else which inputs pod syncs wait for, and why (stable text: the Node
        condition's message, so no elapsed time in it)."""
        pending = self.pending()
        if not pending:
            return None
        what = "; ".join(i.describe() for i in pending)
        if self.overdue:
            return f"{NOT_SYNCED}: not loaded after {self.timeout:g}s: {what}"
        return f"pod syncs wait for {what}"

    async def wait(self) -> None:
        """Return once every input is loaded."""
        while pending := self.pending():
            await pending[0].loaded.wait()

    # -- the watchdog ------------------------------------------------------------------------

    async def start(self) -> None:
        self.since = self.clock.monotonic()
        self._task = asyncio.create_task(self.run(), name=f"inputs:{self.node}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _notify(self) -> None:
        for callback in self._listeners:
            callback()

    def _elapsed(self) -> float:
        return self.clock.monotonic() - (self.since if self.since is not None else 0.0)

    async def run(self) -> None:
        """Log progress and wake the subscribers until the gate opens (see the module doc)."""
        node = f"node {self.node}: " if self.node else ""
        if self.since is None:
            self.since = self.clock.monotonic()
        last = self.reason()
        if last is not None:
            log.info("%s%s", node, last)
        loaded = {i.name for i in self.inputs if i.done}
        problems: dict[str, str] = {}
        reported = False
        while pending := self.pending():
            waits = [asyncio.ensure_future(i.loaded.wait()) for i in pending]
            tick = asyncio.ensure_future(self.clock.sleep(POLL))
            try:
                await asyncio.wait([*waits, tick], return_when=asyncio.FIRST_COMPLETED)
            finally:
                for f in (*waits, tick):
                    f.cancel()
            for i in self.inputs:
                if i.done and i.name not in loaded:
                    loaded.add(i.name)
                    log.info("%s%s loaded after %.1fs", node, i.name, self._elapsed())
                elif not i.done and (problem := i.problem()) != problems.get(i.name, ""):
                    problems[i.name] = problem
                    if problem:
                        log.warning("%spod syncs wait for %s: %s", node, i.name, problem)
            if self.overdue and not reported:
                reported = True
                log.error(
                    "%s%s; pods bound to this node are held (never rendered without them) and "
                    "the Node is not Ready until they load",
                    node,
                    self.reason(),
                )
            now = self.reason()
            if now != last:
                last = now
                self._notify()
        self.waited = self._elapsed()
        log.info(
            "%sinputs synced after %.1fs (%s): pod syncs start",
            node,
            self.waited,
            ", ".join(i.name for i in self.inputs) or "none",
        )
