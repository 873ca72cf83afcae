"""Hostile templates cannot hurt the agent: a YAML "billion laughs", alias cycles and
bracket nesting beyond the recursion limit each end as a ``TranslationError`` with a message,
quickly, before anything serialises the expanded data (docs/design/template-safety.md).
The same bombs through ``vkgate render`` (a real process: exit code, one line, peak RSS)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.template_bombs import DEEP, laughs
from translators.base import TranslationError
from translators.render.engine import Renderer

BOMBS = {
    "nomad/laughs.yaml.j2": (laughs(), "output expands to more than"),
    "nomad/deep.j2": (DEEP, "output nests deeper than 64 levels"),
    "nomad/deep.yaml.j2": (DEEP, "output nests deeper than 64 levels"),
    "nomad/closed.j2": ("[" * 5000 + "]" * 5000, "output nests deeper than 64 levels"),
    "nomad/cycle.yaml.j2": ("a: &a [1, *a]\n", "output refers to itself"),
    # 900 KB of text, 300,001 objects: the agent would hold ~25 MB for one spec
    "nomad/dense.j2": ("[" + "{}," * 300_000 + "{}]", "output has more than 200000 values"),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_bombs_are_translation_errors(name: str) -> None:
    source, message = BOMBS[name]
    renderer = Renderer(overlay={name: source}, validate=False)
    started = time.monotonic()
    with pytest.raises(TranslationError) as info:
        renderer.render(name, {})
    assert message in str(info.value)
    assert info.value.template == name
    assert time.monotonic() - started < 5.0


def test_aliases_and_nesting_within_the_bounds_still_render() -> None:
    small = laughs(levels=3, fan=3) + "x: " + "[" * 60 + "]" * 60 + "\n"
    spec = Renderer(overlay={"nomad/ok.yaml.j2": small}, validate=False).render(
        "nomad/ok.yaml.j2", {}
    )
    assert spec["l2"] == [[["lol"] * 3] * 3] * 3


def test_the_expanded_size_is_what_is_bounded() -> None:
    """Text well under the limit whose aliases expand past it is refused; the same
    data spelled out under the limit is not."""
    from translators.render.sandbox import RenderLimits

    limits = RenderLimits(max_output=3000)
    expands = laughs(levels=4, fan=4)  # 256 strings: ~2300 characters as JSON
    assert len(expands) < 200
    Renderer(overlay={"nomad/a.yaml.j2": expands}, validate=False, limits=limits).render(
        "nomad/a.yaml.j2", {}
    )
    bigger = laughs(levels=5, fan=4)  # 1024 strings
    with pytest.raises(TranslationError, match="expands to more than 3000 characters"):
        Renderer(overlay={"nomad/b.yaml.j2": bigger}, validate=False, limits=limits).render(
            "nomad/b.yaml.j2", {}
        )


POD = """apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default, uid: 5e1f0000-0000-0000-0000-000000000001}
spec:
  containers: [{name: app, image: busybox, command: [sleep, "1"]}]
"""


#: ``vkgate <args>`` that writes its own /proc/self/status to argv[1] when it exits.
_MEASURED_CLI = (
    "import atexit, runpy, sys\n"
    "out = sys.argv.pop(1)\n"
    "atexit.register(lambda: open(out, 'w').write(open('/proc/self/status').read()))\n"
    "sys.argv[0] = 'vkgate'\n"
    "runpy.run_module('gateway.cli', run_name='__main__')\n"
)


#: Through a render worker that has to be killed (tests/bombs/hash_tuples.j2).
CLI_BOMBS = {
    **BOMBS,
    "nomad/hash.j2": (
        "{% set ns = namespace(t=('x',)) %}\n"
        "{% for i in range(40) %}{% set ns.t = (ns.t, ns.t) %}{% endfor %}\n"
        "{{ {ns.t: 1}|length }}\n",
        "nomad/hash.j2:3: limit: render time limit exceeded (2 s; the render worker was killed",
    ),
}


@pytest.mark.parametrize(
    "name", ["nomad/laughs.yaml.j2", "nomad/deep.j2", "nomad/deep.yaml.j2", "nomad/hash.j2"]
)
def test_vkgate_render_answers_a_bomb_with_one_line(tmp_path: Path, name: str) -> None:
    source, message = CLI_BOMBS[name]
    (tmp_path / "nomad").mkdir()
    (tmp_path / name).write_text(source)
    (tmp_path / "pod.yaml").write_text(POD)
    started = time.monotonic()
    # The peak RSS is read from the child's own /proc/self/status (VmHWM, per address space,
    # reset at exec) at exit: wait4's ru_maxrss would include the pytest parent's RSS, which a
    # vfork'd child carries until its exec.
    hwm = tmp_path / "vmhwm"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _MEASURED_CLI,
            str(hwm),
            "render",
            str(tmp_path / "pod.yaml"),
            "--backend",
            "nomad",
            "--templates-dir",
            str(tmp_path),
            "--template",
            name,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, err
    assert out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    (kib,) = [int(ln.split()[1]) for ln in hwm.read_text().splitlines() if ln.startswith("VmHWM:")]
    peak_mb = kib / 1024
    print(f"{name}: {elapsed:.2f} s, peak RSS {peak_mb:.0f} MB")
    assert peak_mb < 150
    assert elapsed < 20
