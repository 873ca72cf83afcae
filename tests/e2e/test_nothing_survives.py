"""Nothing a test run starts survives it, however it ends: ``kill -9`` of pytest, or of the
run's whole process group, leaves no process behind — a child in a session of its own (as
``devstack.process.Proc`` starts every server) and a double-forked daemon included.

The e2e tier runs under ``python -m devstack.netns``: a PID namespace whose init is the run's
own, so the kernel kills every process of the run when the init dies, and the init fails the
run when anything outlived the command (docs/design/control-plane.md, "Nothing survives a run").
Here a small pytest run is started the same way, in a process group of its own, killed, and
``/proc`` is searched for any process of its PID namespace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import unavailable
from waiting import wait_until

from devstack import netns

REPO = Path(__file__).resolve().parents[2]
#: A sleep no other test starts: how the run's own processes are told apart.
SLEEP = "3607"

INNER = f"""
import os, subprocess, time
from pathlib import Path

def test_starts_a_tree_and_hangs():
    # a child in a session of its own, as devstack.process.Proc starts every server
    subprocess.Popen(["sleep", "{SLEEP}"], start_new_session=True)
    # a daemon: double-forked, reparented away from pytest
    subprocess.run(["sh", "-c", "(setsid sleep {SLEEP} &) ; exit 0"], check=True)
    Path(os.environ["VKGATE_SURVIVE_MARKER"]).write_text(str(os.getpid()))
    time.sleep(600)
"""


def _ppid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()


def _members(pidns: str) -> dict[int, str]:
    """Every live process of the PID namespace ``pidns`` (a ``/proc/<pid>/ns/pid`` link)."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != pidns:
                continue
            stat = Path(f"/proc/{entry}/stat").read_text()
            if stat[stat.rindex(")") + 2 :].startswith("Z"):
                continue
            found[int(entry)] = _cmdline(int(entry))
        except (OSError, ValueError):
            continue
    return found


def _children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if _ppid(int(entry)) == pid:
                    kids.append(int(entry))
            except (OSError, ValueError):
                continue
    return kids


@pytest.mark.parametrize("target", ["pytest", "process group"])
def test_kill_9_of_a_run_leaves_no_process_of_it(tmp_path: Path, target: str) -> None:
    if not netns.isolated():
        unavailable("needs root and the e2e network namespace (python -m devstack.netns)")
    (tmp_path / "test_inner.py").write_text(INNER)
    marker = tmp_path / "ready"
    env = dict(os.environ, VKGATE_SURVIVE_MARKER=str(marker), PYTHONPATH=str(REPO))
    run = subprocess.Popen(
        [sys.executable, "-m", "devstack.netns", "--", sys.executable, "-m", "pytest", "-q",
         "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", "test_inner.py"],
        cwd=tmp_path, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_until("the inner run's process tree", marker.exists, timeout=60)
        # unshare(1) runs as the launcher's pid; its child is the namespace's init
        (init,) = wait_until("the run's init", lambda: _children(run.pid), timeout=10)
        pidns = os.readlink(f"/proc/{init}/ns/pid")
        assert pidns != os.readlink("/proc/self/ns/pid"), "the run has no PID namespace"
        before = _members(pidns)
        sleeps = [p for p, cmd in before.items() if cmd == f"sleep {SLEEP}"]
        assert len(sleeps) == 2, f"the inner test did not start its tree: {before}"
        if target == "pytest":
            (inner,) = [
                p for p, cmd in before.items() if "-m pytest" in cmd and "devstack.netns" not in cmd
            ]
            os.kill(inner, signal.SIGKILL)
        else:
            os.killpg(run.pid, signal.SIGKILL)
        wait_until(
            f"no process of the run left after kill -9 of its {target}",
            lambda: not _members(pidns),
            timeout=30,
            every=0.2,
        )
        out, _ = run.communicate(timeout=30)
        assert run.returncode != 0, out
        if target == "pytest":
            # the init named what outlived pytest before the kernel killed it
            assert "outlived the command" in out and f"sleep {SLEEP}" in out, out
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
