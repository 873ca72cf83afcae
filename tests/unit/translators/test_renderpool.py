"""Rendering in worker processes (translators/render/pool.py): the same results as in the agent,
and what the agent cannot do itself — stop one C call that holds the GIL, cap memory — without
the agent stalling, growing or losing the template line (docs/design/template-safety.md)."""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from translators.base import TranslationError
from translators.render.engine import Renderer
from translators.render.pool import RenderPool, template_frame
from translators.render.sandbox import RenderLimits

#: Hashing 2**40 shared tuples: hours inside one C call that holds the GIL.
HASH = (
    "{% set ns = namespace(t=('x',)) %}\n"
    "{% for i in range(40) %}{% set ns.t = (ns.t, ns.t) %}{% endfor %}\n"
    "{{ {ns.t: 1}|length }}\n"
)
#: 15 x 1.3 million fresh 2-character strings: 1.3 GB that the character budget does not see
#: (each item is one of its 64 Mi "characters/items" but ~60 bytes).
SPLIT = (
    "{% set s = 'ab ' * 1300000 %}{% set ns = namespace(l=[]) %}\n"
    "{% for i in range(15) %}{% set ns.l = ns.l + [s.split()] %}{% endfor %}{{ ns.l|length }}"
)
OVERLAY = {
    "t/ok.j2": '{"a": {{ x|tojson }}, "n": "{{ meta.name }}"}',
    "t/ok.yaml.j2": "a: {{ x|tojson }}\nb: [1, 2]\n",
    "t/hash.j2": HASH,
    "t/split.j2": SPLIT,
    "t/loop.j2": "{% for i in range(10000) %}\n{% for j in range(10000) %}{% endfor %}{% endfor %}",
    "t/undefined.j2": "{\n{{ nope }}\n}",
    "t/syntax.j2": "{% for %}",
    "t/inc.j2": "{\n{% include 't/hash.j2' %}\n}",
}


@pytest.fixture
def pool() -> Iterator[RenderPool]:
    pool = RenderPool(workers=2)
    yield pool
    pool.close()


class Stalls(threading.Thread):
    """The longest time this process could not run a thread (the GIL held elsewhere)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.worst = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            time.sleep(0.01)
            self.worst = max(self.worst, time.monotonic() - t0 - 0.01)


def _error(renderer: Renderer, name: str, context: dict[str, Any] | None = None) -> Any:
    with pytest.raises(TranslationError) as info:
        renderer.render_text(name, context or {})
    return info.value


def test_results_and_errors_are_those_of_an_in_process_render(pool: RenderPool) -> None:
    local = Renderer(overlay=OVERLAY, validate=False)
    remote = Renderer(overlay=OVERLAY, validate=False, pool=pool)
    ctx = {"x": [1, "é", {"k": None}], "meta": {"name": "p"}}
    for name in ("t/ok.j2", "t/ok.yaml.j2"):
        assert remote.render(name, ctx) == local.render(name, ctx)
        assert remote.render_text(name, ctx) == local.render_text(name, ctx)
    for name in ("t/undefined.j2", "t/syntax.j2"):
        theirs, ours = _error(remote, name), _error(local, name)
        assert (str(theirs), theirs.template, theirs.line) == (str(ours), ours.template, ours.line)
    with pytest.raises(TranslationError, match="syntax error"):
        remote.check("t/syntax.j2")
    remote.check("t/ok.j2")
    assert pool.replaced == 0


def test_a_python_loop_stops_at_the_deadline_and_the_worker_is_kept() -> None:
    """The worker's own watchdog stops a loop (grace is long here: on a loaded machine the
    answer may take longer than the default half second, and then the kill path answers)."""
    pool = RenderPool(workers=1, grace=3.0)
    try:
        renderer = Renderer(overlay=OVERLAY, pool=pool, limits=RenderLimits(timeout=0.5))
        err = _error(renderer, "t/loop.j2")
        assert "render time limit exceeded (0.5 s)" in str(err) and err.line == 2
        assert pool.replaced == 0
    finally:
        pool.close()


@pytest.mark.parametrize(("name", "line"), [("t/hash.j2", 3), ("t/inc.j2", 3)])
def test_one_c_call_that_holds_the_gil_is_killed_with_its_line(
    pool: RenderPool, name: str, line: int
) -> None:
    """In the agent's process this hash stalls every thread for hours (the event loop, the
    watchdog); in a worker, the agent waits on a pipe and kills it at timeout + grace."""
    renderer = Renderer(overlay=OVERLAY, pool=pool, limits=RenderLimits(timeout=1.0))
    stalls = Stalls()
    stalls.start()
    started = time.monotonic()
    err = _error(renderer, name)
    took = time.monotonic() - started
    stalls.stop.set()
    assert "render time limit exceeded (1 s; the render worker was killed" in str(err)
    # the frame that was stuck: the included template's line, not the includer's
    assert (err.template, err.line) == ("t/hash.j2", line)
    # the bounds hold what matters with room for a loaded machine (a busy 2-core CI box
    # stalled a thread 0.2 s): in the agent's process the hash would stall every thread for
    # hours and the render would never end, so seconds of slack still tell the two apart
    assert took < 1.0 + pool.grace + 5.0
    assert stalls.worst < 0.5
    assert pool.replaced == 1
    assert renderer.render("t/ok.j2", {"x": 1, "meta": {"name": "p"}}, schema="")["a"] == 1


def test_memory_past_the_worker_limit_is_a_translation_error(pool: RenderPool) -> None:
    renderer = Renderer(overlay=OVERLAY, pool=pool)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    err = _error(renderer, "t/split.j2")
    assert time.monotonic() - started < 3.0
    assert f"render memory limit exceeded ({pool.max_memory // 2**20} MiB)" in str(err)
    assert (err.template, err.line) == ("t/split.j2", 2)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 * 1024  # KiB
    assert 0 < pool.last_peak_kib < (pool.max_memory + 80 * 2**20) // 1024
    assert pool.replaced == 1
    assert renderer.render_text("t/ok.j2", {"x": 2, "meta": {"name": "p"}}).startswith('{"a": 2')


class CountingExecutor(ThreadPoolExecutor):
    """The loop's default executor, counting what is handed to it."""

    submitted = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def test_renders_waiting_for_a_worker_leave_the_default_executor_free(pool: RenderPool) -> None:
    """Six slow renders on two workers: the other four wait on the renderer's own threads,
    not on the event loop's default executor (DNS lookups and the agent's other blocking
    calls run there).  Checked by what reaches the default executor, not by a clock: only the
    test's own call, which returns before any render has ended."""
    renderer = Renderer(overlay=OVERLAY, pool=pool, limits=RenderLimits(timeout=1.0))
    default = CountingExecutor(2)

    async def main() -> tuple[list[bool], list[Any]]:
        asyncio.get_running_loop().set_default_executor(default)
        renders = [renderer.arender("t/loop.j2", {}, schema="") for _ in range(6)]
        tasks = [asyncio.ensure_future(r) for r in renders]
        await asyncio.sleep(0.05)
        await asyncio.to_thread(lambda: None)
        ended_before = [t.done() for t in tasks]
        return ended_before, await asyncio.gather(*tasks, return_exceptions=True)

    ended_before, results = asyncio.run(main())
    assert default.submitted == 1
    assert ended_before == [False] * 6
    assert all(isinstance(r, TranslationError) and "time limit" in str(r) for r in results)
    renderer.close()


def test_a_worker_that_keeps_half_its_memory_is_replaced_after_a_good_render() -> None:
    """A 4 MB template stays compiled in its worker: the render succeeds, then the worker is
    replaced so a later render is not refused for memory an earlier one left behind."""
    pool = RenderPool(workers=1, max_memory=32 * 2**20)
    try:
        renderer = Renderer(
            overlay={"t/big.j2": "{% set x = 1 %}" + "y" * 4_000_000, "t/small.j2": "ok"},
            pool=pool,
        )
        assert renderer.render_text("t/small.j2", {}) == "ok"
        assert renderer.render_text("t/small.j2", {}) == "ok"
        assert pool.replaced == 0
        assert len(renderer.render_text("t/big.j2", {})) == 4_000_000
        assert pool.replaced == 1
        assert renderer.render_text("t/small.j2", {}) == "ok"
    finally:
        pool.close()


def test_overlay_changes_and_trials_reach_the_workers(pool: RenderPool) -> None:
    renderer = Renderer(overlay={"t/x.j2": "v1"}, pool=pool)
    assert renderer.render_text("t/x.j2", {}) == "v1"
    renderer.set_overlay({"t/x.j2": "v2"})
    assert renderer.render_text("t/x.j2", {}) == "v2"
    with renderer.trial({"t/x.j2": "candidate"}):
        assert renderer.render_text("t/x.j2", {}) == "candidate"
    assert renderer.render_text("t/x.j2", {}) == "v2"


def test_concurrent_renders_share_the_workers(pool: RenderPool) -> None:
    renderer = Renderer(overlay={"t/x.j2": "{{ n * 2 }}"}, pool=pool)
    results: dict[int, str] = {}

    def work(n: int) -> None:
        results[n] = renderer.render_text("t/x.j2", {"n": n})

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {n: str(n * 2) for n in range(8)}
    assert len(pool.pids()) == 2


def test_a_worker_killed_while_idle_is_replaced_without_failing_a_render(
    pool: RenderPool,
) -> None:
    renderer = Renderer(overlay={"t/x.j2": "{{ 1 + 1 }}"}, pool=pool)
    assert renderer.render_text("t/x.j2", {}) == "2"
    for pid in pool.pids():
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)
    assert renderer.render_text("t/x.j2", {}) == "2"


def test_the_worker_gets_no_secrets_from_the_agent_environment(
    pool: RenderPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOMAD_TOKEN", "s3cr3t")
    renderer = Renderer(overlay={"t/x.j2": "x"}, pool=pool)
    renderer.render_text("t/x.j2", {})
    (pid,) = pool.pids()
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read()
    assert b"s3cr3t" not in environ and b"NOMAD_TOKEN" not in environ


def test_an_unclosed_pool_stops_its_workers_when_collected() -> None:
    pool = RenderPool(workers=1)
    Renderer(overlay={"t/x.j2": "x"}, pool=pool).render_text("t/x.j2", {})
    (pid,) = pool.pids()
    del pool
    gc.collect()
    with pytest.raises(ProcessLookupError):
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.02)


_ORPHAN = """
import sys, threading
from translators.render.pool import RenderPool
from translators.render.engine import Renderer
from translators.render.sandbox import RenderLimits
pool = RenderPool(workers=1)
r = Renderer(overlay={"t/h.j2": sys.argv[1]}, pool=pool, limits=RenderLimits(timeout=0.3))
r.render_text("t/h.j2", {"n": 0})
print(pool.pids()[0], flush=True)
threading.Thread(target=r.render_text, args=("t/h.j2", {"n": 40}), daemon=True).start()
threading.Event().wait()
"""


def test_a_stuck_worker_whose_agent_is_gone_dies_of_its_cpu_limit() -> None:
    source = HASH.replace("range(40)", "range(n)")
    agent = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN, source], stdout=subprocess.PIPE, text=True
    )
    assert agent.stdout is not None
    pid = int(agent.stdout.readline())
    agent.stdout.close()
    time.sleep(0.2)  # the worker is inside the hash now
    agent.kill()
    agent.wait()
    started = time.monotonic()
    while time.monotonic() - started < 10:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        # its CPU limit is about 2 s of CPU (0.3 s timeout, start-up, a second); the machine
        # may be shared, so the wall-clock bound is loose
        pytest.fail("the orphaned worker still runs 10 s after its agent died")


def test_the_stuck_frame_is_read_from_a_faulthandler_dump() -> None:
    dump = (
        "Timeout (0:00:01.250000)!\n"
        "Thread 0x00007f (most recent call first):\n"
        '  File "/x/translators/render/filters.py", line 98 in tojson\n'
        '  File "t/inner.j2", line 14 in root\n'
        '  File "t/outer.j2", line 30 in root\n'
        '  File "/x/jinja2/environment.py", line 1371 in generate\n'
    )
    compiled = {"t/inner.j2": "1=8&2=12&3=14", "t/outer.j2": "1=20"}
    assert template_frame(dump, compiled) == ("t/inner.j2", 3)
    assert template_frame(dump, {}) == ("", None)
