"""The render worker: ``python -m translators.render.worker DUMP_FD MAX_MEMORY GRACE``.

Started by ``translators.render.pool`` with an empty environment.  It reads JSON frames on
stdin and answers with JSON frames on stdout (``translators.render.wire``: a 4-byte length,
then one JSON object; values that JSON does not hold as themselves are tagged):

* ``{"kind": "env", "key", "spec", "tagged"}`` — build (and keep, up to ``pool._ENVS``) the
  template environment ``spec`` describes (``Renderer._remote``); no answer.
* ``{"kind": "run", "key", "op", "args", "tagged", "timeout"}`` — ``op`` is ``text``
  (``render_text_in``), ``render`` (text, then ``parse_in``) or ``check`` (``check_in``).
  Answers ``{"kind": "need", "key"}`` when it does not hold that environment, then, for each
  template it compiles while running, ``{"kind": "compiled", "template", "debug_info"}`` — sent
  *before* the template runs, so the parent can name the line of a render it has to kill —
  and finally ``{"kind": "ok", "value", "tagged", "retire"}`` or ``{"kind": "error", "error":
  "TranslationError", "detail", "template", "line", "field", "retire", "peak_kib"}``;
  ``retire`` asks the agent to replace the worker (it hit its memory limit, or holds more
  than half of it after a render).  An answer over the agent's bounds (``wire.Bounds``) is
  sent as an error instead, so a worker that keeps its limits is never taken for a rogue one.

Renders run on its main thread, their deadline kept by ``SIGALRM`` (``sandbox.use_alarm``).
Limits of its own: ``RLIMIT_AS`` at its size after imports plus ``MAX_MEMORY`` (and room for
two thread stacks), no core files, ``RLIMIT_CPU`` reset before each render to the CPU time
used so far plus the render's timeout and a second (a stuck worker dies even when no
parent is left to kill it), and ``faulthandler`` writing every thread's stack to ``DUMP_FD``
on ``SIGUSR1`` (the agent's question before it kills a stuck worker) and on a crash.
"""

from __future__ import annotations

import faulthandler
import math
import os
import resource
import signal
import sys
from collections import OrderedDict
from typing import IO, Any

#: Environments kept (the parent's ``pool._ENVS``).
_ENVS = 4
#: Room for the render thread's stack (and a spare), over ``MAX_MEMORY``.
_STACKS = 32 * 2**20


def _read_exact(stream: IO[bytes], n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for text in f:
            if text.startswith("VmSize:"):
                return int(text.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    """Start this render's peak RSS (VmHWM) from the current RSS: the peak an error reports,
    or the agent reads before it kills the worker, is this render's."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    """Resident bytes now (``/proc/self/statm``: one short read)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def _peak_kib() -> int:
    with open("/proc/self/status") as f:
        for text in f:
            if text.startswith("VmHWM:"):
                return int(text.split()[1])
    return 0


def main(argv: list[str]) -> int:
    dump_fd, max_memory, grace = int(argv[1]), int(argv[2]), float(argv[3])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the agent stops its workers itself
    dump = os.fdopen(dump_fd, "w")
    faulthandler.enable(file=dump, all_threads=True)  # a crash
    faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)  # the agent asks
    # The answers go to the real stdout; anything printed goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    stdin = os.fdopen(os.dup(0), "rb")

    from pathlib import Path

    from translators.base import TranslationError
    from translators.render.engine import (
        OverlayTemplate,
        check_in,
        make_env,
        parse_in,
        render_text_in,
    )
    from translators.render.sandbox import LimitedSandbox, RenderLimits, use_alarm
    from translators.render.wire import (
        HEADER,
        Bounds,
        WireError,
        decode,
        error_frame,
        frame,
        parse,
        value_frame,
    )

    use_alarm()  # renders run on this thread: no watchdog thread per render

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _vm_size() + max_memory + _STACKS
    if hard == resource.RLIM_INFINITY or limit < hard:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))

    start_rss = _rss()

    def send(data: bytes) -> None:
        out.write(data)
        out.flush()

    envs: OrderedDict[str, tuple[LimitedSandbox, RenderLimits]] = OrderedDict()

    def run(env: LimitedSandbox, limits: RenderLimits, op: str, args: tuple[Any, ...]) -> Any:
        if op == "text":
            return render_text_in(env, args[0], args[1], limits)
        if op == "render":
            return parse_in(args[0], render_text_in(env, args[0], args[1], limits), limits)
        if op == "check":
            return check_in(env, args[0], limits)
        raise ValueError(f"unknown op {op!r}")

    while True:
        header = _read_exact(stdin, HEADER.size)
        if header is None:
            return 0  # the agent closed the pipe
        (size,) = HEADER.unpack(header)
        body = _read_exact(stdin, size)
        if body is None:
            return 0
        message = parse(body)  # from the agent: trusted, but JSON all the same
        if message["kind"] == "env":
            key = message["key"]
            spec = decode(message["spec"], tagged=message["tagged"])
            limits = RenderLimits(**spec["limits"])
            overlay = {n: OverlayTemplate(src) for n, src in spec["overlay"].items()}
            env = make_env(overlay, [Path(d) for d in spec["dirs"]], limits)
            env.on_compiled = lambda name, info: send(
                frame({"kind": "compiled", "template": name, "debug_info": info})
            )
            envs[key] = (env, limits)
            while len(envs) > _ENVS:
                envs.popitem(last=False)
            continue
        key, op, timeout = message["key"], message["op"], message["timeout"]
        args = tuple(decode(message["args"], tagged=message["tagged"]))
        if key not in envs:
            send(frame({"kind": "need", "key": key}))
            continue
        envs.move_to_end(key)
        env, limits = envs[key]
        _reset_peak()
        used = resource.getrusage(resource.RUSAGE_SELF)
        cpu = math.ceil(used.ru_utime + used.ru_stime + timeout + grace) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, resource.getrlimit(resource.RLIMIT_CPU)[1]))
        name = str(args[0]) if args else ""
        try:
            value = run(env, limits, op, args)
            # Memory a render freed may stay with the process: a worker that kept more than
            # half its allowance is replaced, so a later render is not refused for an earlier
            # one's.
            retire = _rss() - start_rss > max_memory // 2
            bounds = Bounds.of(max_output=limits.max_output, max_nodes=limits.max_nodes)
            # text, or output parse_in read as JSON (not a YAML template: parse_output):
            # no tuple or number key in it that JSON would change
            from_json = op != "render" or not name.endswith((".yaml.j2", ".yml.j2"))
            send(value_frame(value, retire=retire, bounds=bounds, from_json=from_json))
        except TranslationError as exc:
            retire = isinstance(exc.__cause__, MemoryError)
            if retire:
                exc = TranslationError(
                    f"limit: render memory limit exceeded ({max_memory // 2**20} MiB)",
                    template=exc.template,
                    line=exc.line,
                    field=exc.field,
                )
            send(error_frame(exc, retire=retire, peak_kib=_peak_kib()))
        except MemoryError:
            detail = f"limit: render memory limit exceeded ({max_memory // 2**20} MiB)"
            error = TranslationError(detail, template=name)
            send(error_frame(error, retire=True, peak_kib=_peak_kib()))
        except WireError as exc:  # an answer the agent would refuse: say why instead
            error = TranslationError(f"limit: {exc}", template=name)
            send(error_frame(error, retire=False, peak_kib=0))
        except Exception as exc:  # a bug here, not the template's: say so, keep serving
            detail = f"render worker: {type(exc).__name__}: {exc}"
            send(error_frame(TranslationError(detail, template=name), retire=False, peak_kib=0))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
