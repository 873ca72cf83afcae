"""Hostile templates shared by the unit and e2e tests (docs/design/template-safety.md).

The corpus is data: ``tests/bombs/*.j2``, each a template whose first lines are a Jinja
comment saying what it does (``what``), the error it must end with (``expect``, a substring),
the template line that error must name (``line``, or ``none`` when the output is at fault)
and ``needs: worker`` when only a render worker can stop it (one C call that holds the GIL,
or memory the character budget does not see).  ``measure`` renders each through the agent's
path and records what it cost; ``python -c 'from tests.template_bombs import main; main()'``
prints that as JSON lines (a separate process, so one bomb's peak RSS is not another's).
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: 200000 opening brackets: past every parser's recursion limit.
DEEP = "[" * 200_000
BOMBS_DIR = Path(__file__).resolve().parent / "bombs"


def laughs(levels: int = 9, fan: int = 9) -> str:
    """A YAML "billion laughs": ``levels`` anchors, each a list of ``fan`` aliases of the one
    before — fan**levels strings once expanded (9**9 ≈ 387 million) from ~600 bytes of text."""
    names = [f"l{i}" for i in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [{', '.join(['lol'] * fan)}]"]
    for prev, name in itertools.pairwise(names):
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * fan)}]")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Bomb:
    #: File name in tests/bombs, e.g. ``nested_tojson.j2``.
    file: str
    source: str
    what: str
    expect: str
    line: int | None
    needs_worker: bool

    def name(self, prefix: str = "nomad") -> str:
        """The template name it is rendered under."""
        return f"{prefix}/{self.file}"


_HEADER = re.compile(r"\A\{#-\n(?P<fields>.*?)\n-#\}\n", re.S)


def corpus() -> list[Bomb]:
    bombs = []
    for path in sorted(BOMBS_DIR.glob("*.j2")):
        source = path.read_text()
        m = _HEADER.match(source)
        assert m, f"{path.name}: no header comment"
        fields = dict(line.split(": ", 1) for line in m["fields"].splitlines())
        bombs.append(
            Bomb(
                file=path.name,
                source=source,
                what=fields["what"],
                expect=fields["expect"],
                line=None if fields["line"] == "none" else int(fields["line"]),
                needs_worker=fields.get("needs") == "worker",
            )
        )
    return bombs


# --------------------------------------------------------------------------- measuring


def _status(key: str) -> int:
    """This process's ``/proc/self/status`` value in KiB (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for text in f:
            if text.startswith(key + ":"):
                return int(text.split()[1])
    raise KeyError(key)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class _Stalls(threading.Thread):
    """The longest this process could not run a thread for (the event loop's view)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.worst = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            time.sleep(0.005)
            self.worst = max(self.worst, time.monotonic() - t0 - 0.005)


@dataclass
class Result:
    file: str
    error: str
    template: str
    line: int | None
    seconds: float
    #: Peak RSS growth of the rendering process (the agent), MiB.
    agent_mib: float
    #: Peak RSS of the render worker during this render, MiB (0: rendered in the agent).
    worker_mib: float
    #: Longest stall of a thread of the agent while this bomb rendered, seconds.
    stall: float
    #: The agent rendered a harmless template right after.
    still_renders: bool


def measure(*, isolation: str = "process", workers: int = 2) -> Iterator[Result]:
    """Render every bomb (``isolation="thread"``: only those that need no worker) through
    ``Renderer.render`` and measure each; yields as it goes."""
    from translators.base import TranslationError
    from translators.render.engine import Renderer
    from translators.render.pool import RenderPool

    bombs = [b for b in corpus() if isolation == "process" or not b.needs_worker]
    pool = RenderPool(workers=workers) if isolation == "process" else None
    overlay = {b.name(): b.source for b in bombs}
    overlay["nomad/fine.j2"] = '{"ok": {{ template|tojson }}}'
    renderer = Renderer(overlay=overlay, validate=False, pool=pool)
    renderer.start()
    renderer.render("nomad/fine.j2", {"template": "warm-up"})
    try:
        for bomb in bombs:
            waited = time.monotonic() + 5
            while pool is not None and len(pool.pids()) < workers and time.monotonic() < waited:
                time.sleep(0.02)  # as in the agent: every worker started, replacements too
            stalls = _Stalls()
            stalls.start()
            rss = _status("VmRSS")
            _reset_peak()
            started = time.monotonic()
            error, template, line = "", "", None
            try:
                renderer.render(bomb.name(), {"template": bomb.name()})
            except TranslationError as exc:
                error, template, line = str(exc), exc.template, exc.line
            seconds = time.monotonic() - started
            stalls.stop.set()
            stalls.join()
            growth = (_status("VmHWM") - rss) / 1024
            ok = renderer.render("nomad/fine.j2", {"template": "x"}) == {"ok": "x"}
            yield Result(
                file=bomb.file,
                error=error,
                template=template,
                line=line,
                seconds=round(seconds, 3),
                agent_mib=round(growth, 1),
                worker_mib=round(pool.last_peak_kib / 1024, 1) if pool else 0.0,
                stall=round(stalls.worst, 3),
                still_renders=ok,
            )
    finally:
        renderer.close()


def main(argv: list[str] | None = None) -> None:
    """``[thread|process]``: one JSON line per bomb on stdout."""
    args = sys.argv[1:] if argv is None else argv
    for result in measure(isolation=args[0] if args else "process"):
        print(json.dumps(asdict(result)), flush=True)


def run_measure(isolation: str) -> list[dict[str, Any]]:
    """``measure`` in a fresh process (its peak RSS its own), from a test."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-c", "from tests.template_bombs import main; main()", isolation],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return [json.loads(line) for line in proc.stdout.splitlines()]
