"""Render in worker processes with hard limits: the outer wall around the sandbox.

The sandbox (``translators.render.sandbox``) bounds what a template can build, operation by
operation, and stops a runaway loop at its deadline.  What it cannot stop from inside the agent
is one C call that holds the GIL: hashing or comparing a graph of shared tuples
(``{% set t = (t, t) %}`` thirty times, then ``{t: 1}``) is hours of CPU in one call, during
which no other thread of the process runs — not the event loop, not ``/healthz``, not the
watchdog.  Nor can it bound what an operation nobody has thought of allocates.  So a render
runs in a worker process (``translators.render.worker``), and the agent only waits on a pipe:

* **memory**: the worker's address space is capped (``RLIMIT_AS``, its size after start-up
  plus ``max_memory``); an allocation past it is a ``MemoryError`` in the render, reported
  with the template line, and the worker is replaced.
* **time**: the worker's own deadline (``RenderLimits.timeout``) stops a Python-level loop
  with the template line.  A worker that has not answered at ``timeout + grace`` is asked
  for its stacks (``SIGUSR1``: ``faulthandler`` writes them from the signal handler, no GIL
  needed), killed, and the error names the template line it was stuck on (each template's
  line map is sent by the worker as it compiles it).  ``RLIMIT_CPU`` kills a stuck worker
  whose agent is gone.
* **nothing to steal**: the worker starts with an empty environment (no ``NOMAD_TOKEN``,
  no kubeconfig path) and inherits no descriptor but its pipes.

The pool keeps ``workers`` processes started ahead of use and replaces one in the
background when it is killed, so a render waits for a spawn only when every worker has just
been killed.  A worker holds up to ``_ENVS`` template environments (the live overlay, a trial
one), each sent once, on its first use.

The worker's side runs templates, so it is only ever asked to render, never trusted beyond
what the sandbox allows (docs/design/template-safety.md, "The render worker"): the pipes carry
JSON frames, never pickle (``translators.render.wire``).  A frame that is over its bounds, not
JSON or not a message the request allows fails the render (``TranslationError``: "the render
worker sent …") and the worker is killed and replaced, as one that died.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from translators.base import TranslationError
from translators.render import wire

__all__ = ["RemoteEnv", "RenderPool", "map_line", "template_frame"]

log = logging.getLogger("translators.render.pool")

#: Environments (overlay versions) a worker keeps; the parent resends one it dropped.
_ENVS = 4
#: How long a stuck worker gets to write its stacks before it is killed.
_DUMP_WAIT = 0.5
#: Bytes of a worker's stacks the agent reads (``faulthandler`` writes ~100 lines a thread).
_DUMP_BYTES = 2**20
#: Bytes of template line maps (``compiled`` answers) one worker may make the agent keep.
_COMPILED_BYTES = 32 * 2**20


@dataclass(frozen=True, slots=True)
class RemoteEnv:
    """A template environment as a worker builds it: ``spec`` is sent once per worker and
    cached there under ``key`` (a digest of the spec)."""

    key: str
    spec: Any

    @property
    def bounds(self) -> wire.Bounds:
        """What the agent accepts in one frame of a render under this environment's limits."""
        limits = self.spec["limits"]
        return wire.Bounds.of(max_output=limits["max_output"], max_nodes=limits["max_nodes"])


class WorkerDied(Exception):
    """The worker exited (or was killed) before answering."""


class WorkerMisbehaved(Exception):
    """The worker answered what the protocol does not allow (``wire.WireError``'s reason)."""


def map_line(debug_info: str, code_line: int) -> int | None:
    """Template line of a line of the template's compiled Python (Jinja's ``debug_info``:
    ``"tpl=code&tpl=code…"``)."""
    best = None
    for pair in debug_info.split("&"):
        if "=" in pair:
            tpl, code = pair.split("=")
            if int(code) <= code_line:
                best = int(tpl)
    return best


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in ')


def template_frame(dump: str, compiled: Mapping[str, str]) -> tuple[str, int | None]:
    """(template, line) of the innermost template frame in a ``faulthandler`` dump, whose
    frames come most recent first and name a template's compiled code by the template's name;
    ``compiled`` is template name → its ``debug_info``."""
    for text in dump.splitlines():
        m = _FRAME.match(text)
        if m and m["file"] in compiled:
            return m["file"], map_line(compiled[m["file"]], int(m["line"]))
    return "", None


class _Worker:
    """One worker process and its pipes; used by one thread at a time."""

    def __init__(self, *, max_memory: int, grace: float) -> None:
        dump_r, dump_w = os.pipe()
        os.set_blocking(dump_r, False)
        self.grace = grace
        #: Template name → line map, per environment key, as the worker compiled them.
        self.compiled: dict[str, dict[str, str]] = {}
        self._compiled_size = 0  # characters of names and maps in ``compiled``
        #: The worker asked to be replaced (it hit its memory limit, or kept half of it).
        self.retire = False
        #: Peak RSS (KiB) the worker reported or had when killed, for logs and benchmarks.
        self.peak_kib = 0
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": os.pathsep.join([_ROOT, *_python_path()]),
            "LC_ALL": "C.UTF-8",
            # one malloc arena: a thread's 64 MiB arena reservation would count in RLIMIT_AS
            "MALLOC_ARENA_MAX": "1",
        }
        if "PYTHONHASHSEED" in os.environ:
            env["PYTHONHASHSEED"] = os.environ["PYTHONHASHSEED"]
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "translators.render.worker",
                    str(dump_w),
                    str(max_memory),
                    repr(grace),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=(dump_w,),
                env=env,
                close_fds=True,
            )
        finally:
            os.close(dump_w)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in = self.proc.stdin.fileno()
        self._out = self.proc.stdout.fileno()
        self._dump = dump_r
        self._buffer = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    # -- pipes --------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError) as exc:
            raise WorkerDied from exc

    def _read(self, n: int, deadline: float) -> bytes:
        while len(self._buffer) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self._out], [], [], left)
            if not ready:
                raise TimeoutError
            chunk = os.read(self._out, 1 << 20)
            if not chunk:
                raise WorkerDied
            self._buffer += chunk
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data

    def _recv(self, deadline: float, *, op: str, bounds: wire.Bounds) -> wire.Reply:
        """The worker's next answer; ``WorkerMisbehaved`` for a frame over ``bounds`` (its
        body is not read) or one ``wire.read_reply`` refuses."""
        (size,) = wire.HEADER.unpack(self._read(wire.HEADER.size, deadline))
        if size > bounds.frame:
            raise WorkerMisbehaved(f"a frame of {size} bytes (max {bounds.frame})")
        try:
            return wire.read_reply(self._read(size, deadline), op=op, bounds=bounds)
        except wire.WireError as exc:
            raise WorkerMisbehaved(str(exc)) from None

    def _compiled(self, key: str, template: str, debug_info: str) -> None:
        """Keep a template's line map, for the environments the worker may still hold (the
        latest ``2 * _ENVS``) and up to ``_COMPILED_BYTES`` in all."""
        maps = self.compiled.pop(key, {})
        self.compiled[key] = maps  # the latest last
        self._compiled_size += len(template) + len(debug_info)
        if template in maps:
            self._compiled_size -= len(template) + len(maps[template])
        maps[template] = debug_info
        while len(self.compiled) > 2 * _ENVS:
            dropped = self.compiled.pop(next(iter(self.compiled)))
            self._compiled_size -= sum(len(n) + len(i) for n, i in dropped.items())
        if self._compiled_size > _COMPILED_BYTES:
            raise WorkerMisbehaved(f"line maps of more than {_COMPILED_BYTES} bytes")

    def _drain_dump(self) -> str:
        """What waits in the dump pipe, up to ``_DUMP_BYTES`` (a worker that keeps writing
        there cannot keep the agent reading)."""
        out = b""
        while len(out) < _DUMP_BYTES:
            try:
                chunk = os.read(self._dump, min(65536, _DUMP_BYTES - len(out)))
            except BlockingIOError:
                break
            if not chunk:
                break
            out += chunk
        return out.decode("utf-8", "replace")

    # -- one call -----------------------------------------------------------------------

    def call(self, env: RemoteEnv, op: str, request: bytes, *, timeout: float) -> Any:
        """Run ``request`` (a ``run`` frame for ``op``) in the worker; its result, or the
        ``TranslationError`` it reported.  ``WorkerMisbehaved`` for an answer the protocol
        does not allow: nothing a worker sends is more than data."""
        self._drain_dump()  # a dump written just before an answer that still came
        deadline = time.monotonic() + timeout + self.grace
        bounds = env.bounds
        self._send(request)
        needed = False
        while True:
            reply = self._recv(deadline, op=op, bounds=bounds)
            if isinstance(reply, wire.Need):
                if reply.key != env.key:
                    raise WorkerMisbehaved("a need for another environment")
                if needed:
                    raise WorkerMisbehaved("a second need for the environment it was sent")
                needed = True
                spec, tagged = wire.encode(env.spec)
                self._send(wire.frame({"kind": "env", "key": env.key, "tagged": tagged}, spec=spec))
                self._send(request)
            elif isinstance(reply, wire.Compiled):
                self._compiled(env.key, reply.template, reply.debug_info)
            elif isinstance(reply, wire.Ok):
                self.retire = reply.retire
                return reply.value
            else:
                self.retire, self.peak_kib = reply.retire, reply.peak_kib
                raise reply.error

    def stuck(self, env: RemoteEnv, template: str, limit: float) -> TranslationError:
        """Kill a worker that did not answer in time; the error names where it was stuck
        (its stacks, which ``faulthandler`` writes on ``SIGUSR1`` without needing the GIL)."""
        self.peak_kib = _peak_kib(self.pid)
        dump = ""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGUSR1)
            dump = self._await_dump(time.monotonic() + _DUMP_WAIT)
        self.kill()
        name, line = template_frame(dump + self._drain_dump(), self.compiled.get(env.key, {}))
        return TranslationError(
            f"limit: render time limit exceeded ({limit:g} s; the render worker was killed "
            "inside one operation)",
            template=name or template,
            line=line,
        )

    def _await_dump(self, deadline: float) -> str:
        """What the worker writes to the dump pipe until it has written something and then
        paused for 20 ms (or ``deadline``)."""
        out = ""
        while time.monotonic() < deadline:
            wait = 0.02 if out else deadline - time.monotonic()
            ready, _, _ = select.select([self._dump], [], [], max(wait, 0))
            if not ready:
                if out:
                    break
                continue
            chunk = self._drain_dump()
            if not chunk:
                break
            out += chunk
            if len(out) >= _DUMP_BYTES:
                break
        return out

    def misbehaved(self, template: str, why: str) -> TranslationError:
        """The error for a worker whose answer the protocol does not allow (it is killed)."""
        self.kill()
        return TranslationError(
            f"the render worker sent {why}: refused, and the worker was replaced",
            template=template,
        )

    def died(self, env: RemoteEnv, template: str) -> TranslationError:
        """The error for a worker that exited before answering (killed by the kernel, a
        CPU limit, a crash)."""
        self.kill()
        code = self.proc.returncode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        name, line = template_frame(self._drain_dump(), self.compiled.get(env.key, {}))
        return TranslationError(
            f"limit: the render worker died ({how}) while rendering",
            template=name or template,
            line=line,
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def close(self) -> None:
        self.kill()
        try:
            self._drain_dump()
        finally:
            os.close(self._dump)


def _peak_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for text in f:
                if text.startswith("VmHWM:"):
                    return int(text.split()[1])
    except OSError:
        pass
    return 0


def _close_all(workers: list[_Worker]) -> None:
    while workers:
        workers.pop().close()


#: The directory that holds the ``translators`` package: the worker imports it from there.
_ROOT = str(Path(__file__).resolve().parents[2])


def _python_path() -> list[str]:
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


class RenderPool:
    """``workers`` render processes shared by every ``Renderer`` that is given this pool.

    ``call`` blocks its thread (``Renderer.arender`` runs it off the event loop) for at most
    ``timeout + grace`` seconds, plus a spawn when no worker is left.
    """

    def __init__(
        self, *, workers: int = 2, max_memory: int = 160 * 2**20, grace: float = 0.5
    ) -> None:
        if workers < 1:
            raise ValueError("a render pool needs at least one worker")
        self.workers = workers
        self.max_memory = max_memory
        self.grace = grace
        self._idle: list[_Worker] = []
        self._count = 0  # alive or being spawned
        self._cond = threading.Condition()
        self._closed = False
        #: Workers killed or replaced so far (a stuck render, a memory limit, a crash).
        self.replaced = 0
        #: Peak RSS (KiB) of the worker during the last render that failed (for logs and
        #: benchmarks; each render starts its worker's peak afresh).
        self.last_peak_kib = 0
        # An unclosed pool stops its workers when it is collected (or at exit).
        self._finalizer = weakref.finalize(self, _close_all, self._idle)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the workers in the background (returns at once)."""
        with self._cond:
            missing = self.workers - self._count
            self._count += missing
        for _ in range(missing):
            threading.Thread(
                target=self._spawn_idle, name="vkgate-render-spawn", daemon=True
            ).start()

    def close(self) -> None:
        """Stop the idle workers now, a busy one when its render ends."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._finalizer()

    def pids(self) -> list[int]:
        """Process ids of the idle workers (for tests and measurements)."""
        with self._cond:
            return [w.pid for w in self._idle]

    def _spawn_idle(self) -> None:
        try:
            worker = _Worker(max_memory=self.max_memory, grace=self.grace)
        except Exception:
            log.exception("could not start a render worker")
            with self._cond:
                self._count -= 1
                self._cond.notify()
            return
        with self._cond:
            if self._closed:
                self._count -= 1
                worker.close()
                return
            self._idle.append(worker)
            self._cond.notify()

    def _acquire(self) -> _Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("the render pool is closed")
                while self._idle:
                    worker = self._idle.pop()
                    if worker.proc.poll() is None:
                        return worker
                    self._count -= 1  # it died while idle (killed from outside)
                    threading.Thread(target=worker.close, daemon=True).start()
                if self._count < self.workers:
                    self._count += 1
                    break
                self._cond.wait()
        try:
            return _Worker(max_memory=self.max_memory, grace=self.grace)
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _release(self, worker: _Worker, *, healthy: bool) -> None:
        if healthy:
            with self._cond:
                if not self._closed:
                    self._idle.append(worker)
                    self._cond.notify()
                    return
        worker.close()
        with self._cond:
            self._count -= 1
            self.replaced += 1 if not healthy else 0
            closed = self._closed
        if not closed and not healthy:
            self.start()  # a replacement, in the background

    # -- rendering ----------------------------------------------------------------------

    def call(
        self, env: RemoteEnv, op: str, args: tuple[Any, ...], *, template: str, timeout: float
    ) -> Any:
        """Run ``op(*args)`` in a worker against ``env``; ``TranslationError`` for any failure
        of the template (``template`` is named when the worker cannot say more), and for
        ``args`` that cannot be sent as JSON (``translators.render.wire``)."""
        try:
            payload, tagged = wire.encode(list(args))
        except wire.WireError as exc:
            raise TranslationError(
                f"the render context is not data: {exc}", template=template
            ) from None
        request = wire.frame(
            {"kind": "run", "key": env.key, "op": op, "tagged": tagged, "timeout": timeout},
            args=payload,
        )
        worker = self._acquire()
        healthy = False
        try:
            try:
                result = worker.call(env, op, request, timeout=timeout)
            except TranslationError:
                healthy = not worker.retire
                self.last_peak_kib = worker.peak_kib
                if worker.retire:
                    self._retired(worker, "hit its memory limit")
                raise
            except TimeoutError:
                error = worker.stuck(env, template, timeout)
                self._retired(worker, f"was killed at {timeout + self.grace:g} s")
                raise error from None
            except WorkerDied:
                error = worker.died(env, template)
                self._retired(worker, "died")
                raise error from None
            except WorkerMisbehaved as exc:
                error = worker.misbehaved(template, str(exc))
                self._retired(worker, f"sent {exc}")
                raise error from None
            healthy = not worker.retire
            if worker.retire:
                log.info(
                    "render worker %d holds more than half its memory; replacing it", worker.pid
                )
            return result
        finally:
            self._release(worker, healthy=healthy)

    def _retired(self, worker: _Worker, why: str) -> None:
        self.last_peak_kib = worker.peak_kib
        log.warning(
            "render worker %d %s (peak RSS %d MiB); replacing it",
            worker.pid,
            why,
            worker.peak_kib // 1024,
        )
