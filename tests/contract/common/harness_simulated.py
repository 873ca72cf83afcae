"""Contract harnesses of the two in-memory backends: ``simulated`` (built in) and ``acme`` (the
third-party test plugin, tests/plugins/vkgate-acme, which runs the simulated lifecycle).

Both run on a fake clock (``TranslatorContext.clock``) that ``settle()`` moves; a pod's outcome is the simulated backend's
annotations (translators/simulated.py).  The simulated backend keeps each node's workloads in a
state file, so a restarted translator adopts them (the file is the backend: ``workloads``
reads it); ``unreachable_file`` makes it unreachable.  An acme translator keeps its workloads
in its own memory: it cannot survive a restart, nor be unreachable.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from contract_harness import LOG_TEXT, NODE, Made, make_pod

from translators.api import (
    BackendSpec,
    Outcome,
    Renderer,
    ResolvedPod,
    SimulatedTranslator,
    Translator,
    TranslatorContext,
)
from translators.plugins import load
from vkgate_core.clock import FakeClock

#: sim-run-seconds of a container that exits; settle() moves the clock past it.
RUN_SECONDS = 1.0
STEP = 5.0


def annotations(outcome: Outcome) -> dict[str, str]:
    if outcome == "run":
        return {}
    return {
        "vkgate.io/sim-exit-code": "0" if outcome == "succeed" else "1",
        "vkgate.io/sim-run-seconds": str(RUN_SECONDS),
    }


class SimulatedHarness:
    kind = "simulated"
    node_name = NODE
    capabilities = frozenset({"notifier", "logs", "exec", "metrics"})
    survives_restart = True
    shared_by_nodes = False  # a state file per node
    log_text = LOG_TEXT

    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = FakeClock()
        self.made = Made()
        self.down_file = root / "unreachable"

    def state_file(self, node: str) -> Path:
        return self.root / f"{node}.state.json"

    async def translator(self, *, node: str = "") -> Translator:
        node = node or self.node_name
        settings = {
            "state_file": str(self.state_file(node)),
            "unreachable_file": str(self.down_file),
            "notify_interval": 0.01,
        }
        t = SimulatedTranslator(
            TranslatorContext(node_name=node, settings=settings, clock=self.clock)
        )
        return await self.made.started(t)

    def pod(self, name: str, *, outcome: Outcome = "run", node: str = "") -> ResolvedPod:
        return make_pod(name, node=node or self.node_name, annotations=annotations(outcome))

    async def settle(self) -> None:
        await self.clock.advance(STEP)

    def workloads(self, uid: str) -> int:
        count = 0
        for path in self.root.glob("*.state.json"):
            records = json.loads(path.read_text() or "{}")
            count += sum(1 for r in records.values() if r["ref"][2] == uid)
        return count

    def requests(self) -> int | None:
        return None

    @contextlib.contextmanager
    def _down(self) -> Iterator[None]:
        self.down_file.touch()
        try:
            yield
        finally:
            self.down_file.unlink()

    def unreachable(self) -> contextlib.AbstractContextManager[None] | None:
        return self._down()


class AcmeHarness:
    kind = "acme"
    node_name = NODE
    capabilities = frozenset({"notifier", "logs", "exec", "metrics"})
    survives_restart = False  # an acme translator is its own backend (in memory)
    shared_by_nodes = False
    log_text = LOG_TEXT

    def __init__(self, root: Path, spec: BackendSpec) -> None:
        self.root = root
        self.spec = spec
        self.clock = FakeClock()
        self.made = Made()

    async def translator(self, *, node: str = "") -> Translator:
        ctx = TranslatorContext(
            node_name=node or self.node_name,
            settings={"record_dir": str(self.root)},
            clock=self.clock,
            # as the agent builds it: the plugin's templates after the packaged ones
            renderer=Renderer(
                backend_dirs=[self.spec.templates_dir] if self.spec.templates_dir else []
            ),
        )
        t = self.spec.factory(ctx)  # the plugin's own factory, as `vkgate run` calls it
        return await self.made.started(t)

    def pod(self, name: str, *, outcome: Outcome = "run", node: str = "") -> ResolvedPod:
        return make_pod(name, node=node or self.node_name, annotations=annotations(outcome))

    async def settle(self) -> None:
        await self.clock.advance(STEP)

    def workloads(self, uid: str) -> int:
        """Acme's backend is each translator's memory (the simulated records)."""
        return sum(
            1
            for t in self.made.translators
            for st in t._records.values()  # type: ignore[attr-defined]
            if st.ref.uid == uid
        )

    def requests(self) -> int | None:
        return None

    def unreachable(self) -> contextlib.AbstractContextManager[None] | None:
        return None


@contextlib.asynccontextmanager
async def simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[object]:
    h = SimulatedHarness(tmp_path)
    try:
        yield h
    finally:
        await h.made.aclose()


@contextlib.asynccontextmanager
async def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[object]:
    h = AcmeHarness(tmp_path, load("acme"))
    try:
        yield h
    finally:
        await h.made.aclose()
